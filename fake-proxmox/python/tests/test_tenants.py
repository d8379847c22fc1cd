"""Tenants from Python: a world of its own on its own port, reached with proxmoxer, invisible
to the server's own sites, gone once deleted."""

import pytest
from proxmoxer import ProxmoxAPI

from conftest import NODE, connect, vm_ids, wait_task
from fake_proxmox.control import ControlClient, ControlError


def test_a_tenant_is_a_world_of_its_own_until_deleted(fake_proxmox):
    pve = fake_proxmox
    tenant = pve.control.create_tenant(name="ci-job-7")
    site = next(s for s in tenant["sites"] if s["name"] == "site-1")
    assert site["port"] != pve.port
    # The shared certificate: the server's cert.pem verifies the tenant too.
    token = next(t for t in site["tokens"] if t["tokenid"] == "root@pam!harness")
    user, name = token["tokenid"].split("!")
    api = ProxmoxAPI(
        "127.0.0.1",
        port=site["port"],
        user=user,
        token_name=name,
        token_value=token["secret"],
        verify_ssl=pve.cert_path,
    )
    node = api.nodes(NODE)
    st = wait_task(node, node.qemu.create(vmid=4300, memory=512))
    assert st["exitstatus"] == "OK", st
    assert 4300 in vm_ids(node)

    # The server's own site never saw it.
    assert 4300 not in vm_ids(connect(pve, "token").nodes(NODE))
    assert [t["id"] for t in pve.control.tenants()] == [tenant["id"]]
    assert pve.control.tenant(tenant["id"])["name"] == "ci-job-7"

    # The tenant's own control plane reaches its own world only, and makes no tenants.
    own = ControlClient(site["url"], cert_path=pve.cert_path, token=tenant["control_token"])
    assert own.token == pve.control.tenant_control(tenant, "site-1").token
    assert any(v["vmid"] == 4300 for s in own.state()["sites"] for v in s["vms"])
    with pytest.raises(ControlError) as refused:
        own.create_tenant()
    assert refused.value.status == 403

    pve.control.delete_tenant(tenant["id"])
    with pytest.raises(ControlError) as gone:
        pve.control.tenant(tenant["id"])
    assert gone.value.status == 404
    with pytest.raises(Exception):
        node.qemu.get()


def test_a_bad_tenant_request_is_refused_with_its_reason(fake_proxmox):
    with pytest.raises(ControlError) as bad:
        fake_proxmox.control.create_tenant(certificate="borrowed")
    assert bad.value.status == 400
    assert "borrowed" in bad.value.message


def test_a_tenant_runs_the_pve_release_it_asks_for(fake_proxmox):
    pve = fake_proxmox
    tenant = pve.control.create_tenant(pve_version="7.4")
    try:
        site = next(s for s in tenant["sites"] if s["name"] == "site-1")
        token = next(t for t in site["tokens"] if t["tokenid"] == "root@pam!harness")
        user, name = token["tokenid"].split("!")
        api = ProxmoxAPI(
            "127.0.0.1",
            port=site["port"],
            user=user,
            token_name=name,
            token_value=token["secret"],
            verify_ssl=pve.cert_path,
        )
        assert api.version.get()["version"] == "7.4-16"
    finally:
        pve.control.delete_tenant(tenant["id"])
