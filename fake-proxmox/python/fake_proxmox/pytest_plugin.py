"""pytest fixtures, registered through the ``pytest11`` entry point (installing the wheel is
enough):

``fake_proxmox``
    A running fake for one test. By default the session's server, reset before the test
    (world rebuilt from the scenario, faults and journal cleared, clock mode restored), so
    tests cannot see each other's VMs. A test marked
    ``@pytest.mark.fake_proxmox(scenario=..., clock=..., ...)`` gets a server of its own,
    started for it and stopped after it (the marker takes :func:`fake_proxmox.server`'s
    arguments).

``fake_proxmox_session``
    The session's server itself, started once and never reset by the plugin: for
    session-scoped fixtures, or tests that build on what earlier ones left.

ini options (``pytest.ini``/``pyproject.toml``): ``fake_proxmox_scenario`` (a YAML path;
default the embedded scenario) and ``fake_proxmox_clock`` (default ``real``) for the
session's server; ``fake_proxmox_control_token`` requires a token on its control plane
(``auto``: a random one; default ``$FAKE_PROXMOX_CONTROL_TOKEN``, else open); the fixture's
``control`` carries it; ``fake_proxmox_pve_version`` (``7.4``, ``8.4``, ``9.1``) makes every
site of the session's server run that PVE release.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from .server import Server, find_executable, server


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "fake_proxmox_scenario",
        "scenario YAML of the session's fake-proxmox (default: the embedded scenario)",
        default="",
    )
    parser.addini(
        "fake_proxmox_clock",
        "clock of the session's fake-proxmox: real, scaled:N or stepped",
        default="real",
    )
    parser.addini(
        "fake_proxmox_pve_version",
        "PVE release every site of the session's fake-proxmox runs: 7.4, 8.4 or 9.1 "
        "(default: the scenario's)",
        default="",
    )
    parser.addini(
        "fake_proxmox_control_token",
        "control-plane token of the session's fake-proxmox (auto: a random one; "
        "default: $FAKE_PROXMOX_CONTROL_TOKEN, else open)",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fake_proxmox(scenario=None, clock='real', **options): give the test's fake_proxmox "
        "fixture a server of its own, started with these arguments",
    )


def pytest_report_header(config: pytest.Config) -> str:
    try:
        return f"fake-proxmox: {find_executable()}"
    except Exception as e:  # the fixtures will say it again, with the reason, when used
        return f"fake-proxmox: not found ({e})"


@pytest.fixture(scope="session")
def fake_proxmox_session(pytestconfig: pytest.Config) -> Iterator[Server]:
    """One fake-proxmox for the whole session, not reset between tests."""
    scenario = pytestconfig.getini("fake_proxmox_scenario") or None
    if scenario is not None:
        scenario = str(pytestconfig.rootpath / scenario)
    token = pytestconfig.getini("fake_proxmox_control_token") or None
    with server(
        scenario=scenario,
        clock=pytestconfig.getini("fake_proxmox_clock"),
        control_token=token,
        pve_version=pytestconfig.getini("fake_proxmox_pve_version") or None,
    ) as pve:
        yield pve


@pytest.fixture
def fake_proxmox(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A fake-proxmox for this test: the session's, reset first, or (with the
    ``fake_proxmox`` marker) one of its own."""
    marker = request.node.get_closest_marker("fake_proxmox")
    if marker is not None:
        with server(*marker.args, **marker.kwargs) as pve:
            yield pve
        return
    pve: Server = request.getfixturevalue("fake_proxmox_session")
    pve.reset()
    yield pve
