"""A VM's whole life through proxmoxer, with an API token and with a password (ticket)."""

import pytest

from conftest import NODE, connect, state_vms, vm_ids, wait_task

VMID = 4100


@pytest.mark.parametrize("auth", ["token", "password"])
def test_create_start_stop_delete_a_vm(fake_proxmox, auth):
    pve = fake_proxmox
    node = connect(pve, auth).nodes(NODE)
    assert VMID not in vm_ids(node)

    st = wait_task(
        node,
        node.qemu.create(
            vmid=VMID,
            name=f"py-{auth}",
            memory=512,
            cores=1,
            scsi0="local-lvm:4",
            net0="virtio,bridge=vmbr0",
        ),
    )
    assert (st["type"], st["exitstatus"]) == ("qmcreate", "OK"), st
    assert VMID in vm_ids(node)
    assert node.qemu(VMID).config.get()["name"] == f"py-{auth}"

    vm = node.qemu(VMID)
    assert wait_task(node, vm.status.start.post())["exitstatus"] == "OK"
    assert vm.status.current.get()["status"] == "running"
    assert state_vms(pve) == [(VMID, NODE, "running")]

    assert wait_task(node, vm.status.stop.post())["exitstatus"] == "OK"
    assert vm.status.current.get()["status"] == "stopped"

    assert wait_task(node, vm.delete(purge=1))["exitstatus"] == "OK"
    assert VMID not in vm_ids(node)
    assert state_vms(pve) == []

    # Every request was made with the credentials proxmoxer was given.
    journal = pve.control.journal()
    api_calls = [e for e in journal if e["path"] != "/access/ticket"]
    if auth == "token":
        want = {"kind": "ApiToken", "tokenid": pve.token_id}
    else:
        want = {"kind": "Ticket", "userid": pve.user}
        logins = [e for e in journal if e["path"] == "/access/ticket"]
        assert [(e["method"], e["status"]) for e in logins] == [("POST", 200)]
    assert api_calls and all(e["auth"] == want for e in api_calls), api_calls


def test_a_wrong_password_is_refused(fake_proxmox):
    pve = fake_proxmox
    with pytest.raises(Exception, match="401"):
        from proxmoxer import ProxmoxAPI

        ProxmoxAPI(
            pve.host, port=pve.port, user=pve.user, password="wrong", verify_ssl=pve.cert_path
        )
    assert [(e["path"], e["status"]) for e in pve.control.journal()] == [("/access/ticket", 401)]


CTID = 4200
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


@pytest.mark.parametrize("auth", ["token", "password"])
def test_create_start_snapshot_stop_delete_a_container(fake_proxmox, auth):
    pve = fake_proxmox
    node = connect(pve, auth).nodes(NODE)
    assert CTID not in [int(c["vmid"]) for c in node.lxc.get()]

    st = wait_task(
        node,
        node.lxc.create(
            vmid=CTID,
            hostname=f"ct-{auth}",
            ostemplate=TEMPLATE,
            rootfs="local-lvm:4",
            memory=256,
            net0="name=eth0,bridge=vmbr0,ip=dhcp",
            password="container-pw",
        ),
    )
    assert (st["type"], st["exitstatus"]) == ("vzcreate", "OK"), st
    ct = node.lxc(CTID)
    config = ct.config.get()
    assert config["hostname"] == f"ct-{auth}"
    assert config["rootfs"] == f"local-lvm:vm-{CTID}-disk-0,size=4G"
    assert config["unprivileged"] == 1

    assert wait_task(node, ct.status.start.post())["type"] == "vzstart"
    assert ct.status.current.get()["status"] == "running"
    eth0 = [i for i in ct.interfaces.get() if i["name"] == "eth0"]
    assert eth0 and eth0[0]["inet"].startswith("192.168.11."), eth0

    snap = wait_task(node, ct.snapshot.post(snapname="before"))
    assert (snap["type"], snap["exitstatus"]) == ("vzsnapshot", "OK"), snap
    assert [s["name"] for s in ct.snapshot.get()] == ["before", "current"]

    # A running container is not destroyed; stopped, it goes with its volume.
    with pytest.raises(Exception, match="container is running"):
        ct.delete()
    assert wait_task(node, ct.status.stop.post())["type"] == "vzstop"
    assert wait_task(node, ct.delete(purge=1))["exitstatus"] == "OK"
    assert CTID not in [int(c["vmid"]) for c in node.lxc.get()]
    volumes = [v["volid"] for v in node.storage("local-lvm").content.get()]
    assert not [v for v in volumes if f"-{CTID}-" in v], volumes
