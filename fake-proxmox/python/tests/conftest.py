"""Shared helpers. The fixtures `fake_proxmox` and `fake_proxmox_session` are not defined
here: they come from the installed wheel's pytest11 entry point."""

import time

import pytest
from proxmoxer import ProxmoxAPI

pytest_plugins = ["pytester"]

NODE = "ml110-01"  # site-1's node in the embedded default scenario


def connect(pve, auth):
    """proxmoxer on the fake's first site, by API token or by password (a ticket)."""
    if auth == "token":
        return ProxmoxAPI(
            pve.host,
            port=pve.port,
            user=pve.token_user,
            token_name=pve.token_name,
            token_value=pve.token_secret,
            verify_ssl=pve.cert_path,
        )
    return ProxmoxAPI(
        pve.host, port=pve.port, user=pve.user, password=pve.password, verify_ssl=pve.cert_path
    )


def wait_task(node, upid, timeout=60.0):
    """Polls a UPID until it stops; returns its final status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = node.tasks(upid).status.get()
        if st["status"] == "stopped":
            return st
        time.sleep(0.1)
    pytest.fail(f"task {upid} still running after {timeout} s")


def vm_ids(node):
    return sorted(int(v["vmid"]) for v in node.qemu.get())


def state_vms(pve):
    """(vmid, node, power) of every VM the fake's state has, on any site."""
    return sorted(
        (v["vmid"], v["node"], v["power"]) for s in pve.control.state()["sites"] for v in s["vms"]
    )
