"""pve.control: faults make requests fail as they say, the journal shows the requests, the
clock can be stepped."""

import pytest
from proxmoxer.core import ResourceException

from conftest import NODE, connect, wait_task

VMID = 4200


def make_vm(node, vmid=VMID):
    st = wait_task(
        node, node.qemu.create(vmid=vmid, memory=512, scsi0="local-lvm:4", net0="virtio,bridge=vmbr0")
    )
    assert st["exitstatus"] == "OK", st


def test_an_injected_fault_fails_the_request_as_it_says_then_stops(fake_proxmox):
    pve = fake_proxmox
    node = connect(pve, "token").nodes(NODE)
    make_vm(node)
    fault_id = pve.control.add_fault(
        method="POST",
        path_pattern="/nodes/*/qemu/*/status/start",
        status=503,
        message="injected: the node is busy",
        count=1,
    )
    assert [f["id"] for f in pve.control.faults()] == [fault_id]

    with pytest.raises(ResourceException) as err:
        node.qemu(VMID).status.start.post()
    assert err.value.status_code == 503
    assert "injected: the node is busy" in str(err.value)
    assert node.qemu(VMID).status.current.get()["status"] == "stopped"

    # count=1: the next start goes through.
    assert wait_task(node, node.qemu(VMID).status.start.post())["exitstatus"] == "OK"
    starts = [
        e["status"]
        for e in pve.control.journal()
        if e["method"] == "POST" and e["path"] == f"/nodes/{NODE}/qemu/{VMID}/status/start"
    ]
    assert starts == [503, 200]


def test_a_task_armed_to_fail_ends_with_that_exit_status(fake_proxmox):
    pve = fake_proxmox
    node = connect(pve, "password").nodes(NODE)
    make_vm(node)
    pve.control.fail_next_task(NODE, "qmstart", "start failed: injected")
    st = wait_task(node, node.qemu(VMID).status.start.post())
    assert st["exitstatus"] == "start failed: injected"
    assert node.qemu(VMID).status.current.get()["status"] == "stopped"


def test_a_refused_control_call_raises_control_error(fake_proxmox):
    from fake_proxmox import ControlError

    with pytest.raises(ControlError) as err:
        fake_proxmox.control.set_node_online("no-such-node", False)
    assert err.value.status == 404
    assert "no-such-node" in err.value.message
    with pytest.raises(ControlError) as err:
        fake_proxmox.control.add_fault(method="GET")  # does nothing: refused
    assert err.value.status == 400


def test_the_journal_shows_the_requests_in_order_with_secrets_redacted(fake_proxmox):
    pve = fake_proxmox
    api = connect(pve, "password")
    api.version.get()
    api.nodes(NODE).qemu.get()
    journal = pve.control.journal()
    assert [(e["method"], e["path"], e["status"]) for e in journal] == [
        ("POST", "/access/ticket", 200),
        ("GET", "/version", 200),
        ("GET", f"/nodes/{NODE}/qemu", 200),
    ]
    assert [e["seq"] for e in journal] == sorted(e["seq"] for e in journal)
    assert journal[0]["params"]["username"] == pve.user
    assert pve.password not in str(journal[0]["params"])
    assert journal[2]["node"] == NODE and journal[2]["site"] == pve.site
    pve.control.clear_journal()
    assert pve.control.journal() == []


@pytest.mark.fake_proxmox(clock="stepped")
def test_a_stepped_clock_holds_tasks_until_it_is_advanced(fake_proxmox):
    pve = fake_proxmox
    assert pve.control.clock()["clock"] == {"mode": "stepped"}
    node = connect(pve, "token").nodes(NODE)
    upid = node.qemu.create(vmid=VMID, memory=512, scsi0="local-lvm:4")
    assert node.tasks(upid).status.get()["status"] == "running"
    before = pve.control.clock()["now"]
    assert pve.control.advance_clock(600) >= before + 600
    st = node.tasks(upid).status.get()
    assert (st["status"], st["exitstatus"]) == ("stopped", "OK")


def test_snapshot_and_restore_bring_back_the_world(fake_proxmox):
    pve = fake_proxmox
    node = connect(pve, "token").nodes(NODE)
    snap = pve.control.snapshot()
    make_vm(node)
    assert VMID in [int(v["vmid"]) for v in node.qemu.get()]
    pve.control.restore(snap)
    assert VMID not in [int(v["vmid"]) for v in node.qemu.get()]


def test_a_control_token_guards_the_control_plane_and_pve_control_carries_it(monkeypatch):
    import fake_proxmox
    from fake_proxmox.control import ControlClient, ControlError

    monkeypatch.delenv("FAKE_PROXMOX_CONTROL_TOKEN", raising=False)
    with fake_proxmox.server(control_token="auto") as pve:
        assert pve.control_token and len(pve.control_token) == 64
        assert pve.control.journal() == []
        bare = ControlClient(pve.url, pve.cert_path)
        with pytest.raises(ControlError) as refused:
            bare.journal()
        assert refused.value.status == 401
        assert "Bearer" in refused.value.message
        with pytest.raises(ControlError) as wrong:
            ControlClient(pve.url, pve.cert_path, token="nope").reset()
        assert wrong.value.status == 401
        assert "wrong control token" in wrong.value.message

    # From the environment (a CI secret), as the fixture's server takes it too.
    monkeypatch.setenv("FAKE_PROXMOX_CONTROL_TOKEN", "from-the-env")
    with fake_proxmox.server() as pve:
        assert pve.control_token == "from-the-env"
        pve.control.reset()
        with pytest.raises(ControlError):
            ControlClient(pve.url, pve.cert_path).reset()
