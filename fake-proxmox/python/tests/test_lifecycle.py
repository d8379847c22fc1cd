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
