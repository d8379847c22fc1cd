"""A stateful fake Proxmox VE API server for Python tests.

    import fake_proxmox
    with fake_proxmox.server(clock="scaled:20") as pve:
        ProxmoxAPI(pve.host, port=pve.port, user=pve.token_user, token_name=pve.token_name,
                   token_value=pve.token_secret, verify_ssl=pve.cert_path)
        pve.control.add_fault(path_pattern="/nodes/*/qemu", method="POST", status=500)

The ``fake-proxmox`` executable comes with this package (``$FAKE_PROXMOX_BIN`` overrides
it). Installing the package also registers the pytest fixtures ``fake_proxmox`` and
``fake_proxmox_session`` (see ``fake_proxmox.pytest_plugin``).
"""

from importlib.metadata import PackageNotFoundError, version

from .control import ControlClient, ControlError
from .server import Server, ServerError, Site, find_executable, server

try:
    __version__ = version("fake-proxmox")
except PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ControlClient",
    "ControlError",
    "Server",
    "ServerError",
    "Site",
    "find_executable",
    "server",
]
