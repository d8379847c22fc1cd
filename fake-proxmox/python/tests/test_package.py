"""The installed package: where it runs the server from, how server() starts and stops it,
and the pytest plugin's fixtures (session server, resets, markers)."""

import os
import socket
import sysconfig
import time
from pathlib import Path

import pytest

import fake_proxmox
from fake_proxmox import ServerError


def gone(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_package_and_its_executable_come_from_the_installed_wheel():
    scripts = Path(sysconfig.get_path("scripts"))
    assert "FAKE_PROXMOX_BIN" not in os.environ
    assert Path(fake_proxmox.find_executable()) == scripts / "fake-proxmox"
    purelib = Path(sysconfig.get_path("purelib"))
    assert Path(fake_proxmox.__file__).parent == purelib / "fake_proxmox"
    assert fake_proxmox.__version__ != "0+unknown"


def test_server_gives_the_credentials_certificate_and_control_of_its_first_site():
    with fake_proxmox.server() as pve:
        assert (pve.site, pve.host) == ("site-1", "127.0.0.1")
        assert sorted(pve.sites) == ["site-1", "site-2"]
        assert pve.url == f"https://127.0.0.1:{pve.port}"
        assert pve.token_id == "root@pam!harness"
        assert (pve.token_user, pve.token_name) == ("root@pam", "harness")
        assert pve.token_secret and pve.password and pve.user == "root@pam"
        assert Path(pve.cert_path).read_text().startswith("-----BEGIN CERTIFICATE-----")
        assert len(pve.fingerprint.split(":")) == 32
        assert pve.control.health()
        assert pve.control.state()["sites"][0]["name"] == "site-1"


def test_server_stops_its_process_when_the_body_raises():
    with pytest.raises(RuntimeError, match="boom"):
        with fake_proxmox.server(clock="scaled:5") as pve:
            pid, port = pve.pid, pve.port
            assert pve.control.clock()["clock"] == {"mode": "scaled", "factor": 5.0}
            raise RuntimeError("boom")
    assert gone(pid), f"fake-proxmox {pid} still runs"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_server_that_cannot_start_raises_with_its_stderr(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nsites:\n  - name: s\n    no_such_field: 1\n")
    with pytest.raises(ServerError) as err:
        with fake_proxmox.server(scenario=bad):
            pytest.fail("the body must not run")
    assert "exited with status" in str(err.value)
    assert "no_such_field" in err.value.stderr
    assert "no_such_field" in str(err.value)


def test_a_scenario_dict_is_served_with_its_own_credentials():
    scenario = {
        "seed": 7,
        "sites": [
            {
                "name": "lab",
                "users": [{"userid": "ops@pve", "password": "s3cret-pw"}],
                "tokens": [{"tokenid": "ops@pve!ci", "secret": "tok-secret", "privsep": False}],
                "acls": [{"path": "/", "ugid": "ops@pve", "role": "Administrator"}],
                "nodes": [{"name": "n1", "cores": 2, "threads": 2, "memory_bytes": 4 << 30}],
            }
        ],
    }
    with fake_proxmox.server(scenario=scenario) as pve:
        assert (pve.site, list(pve.sites)) == ("lab", ["lab"])
        assert (pve.token_id, pve.token_secret) == ("ops@pve!ci", "tok-secret")
        assert (pve.user, pve.password) == ("ops@pve", "s3cret-pw")
        from conftest import connect

        for auth in ("token", "password"):
            assert [n["node"] for n in connect(pve, auth).nodes.get()] == ["n1"]


def test_fake_proxmox_is_the_session_server_and_the_marker_gives_a_private_one(
    fake_proxmox, fake_proxmox_session
):
    assert fake_proxmox is fake_proxmox_session


@pytest.mark.fake_proxmox(clock="scaled:3")
def test_a_marked_test_gets_its_own_server(fake_proxmox, fake_proxmox_session):
    assert fake_proxmox is not fake_proxmox_session
    assert fake_proxmox.pid != fake_proxmox_session.pid
    assert fake_proxmox.control.clock()["clock"] == {"mode": "scaled", "factor": 3.0}


INNER = '''
import pytest
import yaml
from proxmoxer import ProxmoxAPI

SEEN = {}

def api(pve):
    return ProxmoxAPI(pve.host, port=pve.port, user=pve.token_user, token_name=pve.token_name,
                      token_value=pve.token_secret, verify_ssl=pve.cert_path)

def test_1_leaves_a_vm_a_fault_and_a_stepped_clock(fake_proxmox):
    pve = fake_proxmox
    SEEN["pid"] = pve.pid
    node = api(pve).nodes("ml110-01")
    node.qemu.create(vmid=777, memory=256, scsi0="local-lvm:1")
    pve.control.add_fault(method="GET", path_pattern="/version", status=500, message="x")
    pve.control.set_clock("stepped")
    assert [v["vmid"] for v in pve.control.state()["sites"][0]["vms"]] == [777]
    scenario = yaml.safe_load(pve.control.scenario())
    scenario["sites"][0]["nodes"][0]["online"] = False
    pve.control.load_scenario(yaml.safe_dump(scenario))
    assert pve.control.state()["sites"][0]["nodes"][0]["online"] is False

def test_2_finds_the_scenario_as_loaded(fake_proxmox):
    pve = fake_proxmox
    assert pve.pid == SEEN["pid"], "the same session server"
    site = pve.control.state()["sites"][0]
    assert site["vms"] == [] and site["nodes"][0]["online"] is True
    assert pve.control.faults() == []
    assert pve.control.journal() == []
    assert pve.control.clock()["clock"] == {"mode": "real"}
    assert api(pve).version.get()["release"]
    assert [e["path"] for e in pve.control.journal()] == ["/version"]

def test_3_the_session_fixture_is_not_reset(fake_proxmox_session):
    assert [e["path"] for e in fake_proxmox_session.control.journal()] == ["/version"]
'''


def test_the_entry_point_plugin_resets_the_session_server_between_tests(pytester):
    """A fresh pytest process with no conftest: the fixtures come from the entry point."""
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3)
