"""A client for the fake's ``/_fake/`` control plane (the verbs of the Rust ``ControlClient``).

Standard library only: JSON over ``urllib`` to one site's listener, trusting the fake's own
certificate. Every method raises :class:`ControlError` when the control plane refuses.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Union

ClockSpec = Union[str, float, int, Dict[str, Any]]


class ControlError(Exception):
    """The control plane answered an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"control plane answered {status}: {message}")
        self.status = status
        self.message = message


def clock_json(clock: ClockSpec) -> Dict[str, Any]:
    """``"real"``, ``"stepped"``, ``"scaled:N"`` or a number N (scaled) as the API's JSON."""
    if isinstance(clock, dict):
        return dict(clock)
    if isinstance(clock, (int, float)) and not isinstance(clock, bool):
        return {"mode": "scaled", "factor": float(clock)}
    if clock in ("real", "stepped"):
        return {"mode": clock}
    if isinstance(clock, str) and clock.startswith("scaled:"):
        try:
            factor = float(clock[len("scaled:") :])
        except ValueError:
            factor = 0.0
        if factor > 0:
            return {"mode": "scaled", "factor": factor}
    raise ValueError(f"invalid clock {clock!r}: use 'real', 'scaled:N' (N > 0) or 'stepped'")


def clock_arg(clock: ClockSpec) -> str:
    """The same clock as ``fake-proxmox serve --clock`` takes it."""
    j = clock_json(clock)
    return f"scaled:{j['factor']}" if j["mode"] == "scaled" else j["mode"]


class ControlClient:
    """``base_url`` is a site URL (``https://127.0.0.1:PORT``); ``cert_path`` the fake's
    ``cert.pem`` to trust (``None`` for plain HTTP); ``token`` the control plane's token
    (the server's ``--control-token``, or a tenant's ``control_token``), sent as
    ``Authorization: Bearer …``; ``None`` for an open control plane."""

    def __init__(
        self,
        base_url: str,
        cert_path: Optional[str] = None,
        timeout: float = 30.0,
        token: Optional[str] = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token = token
        self._ssl: Optional[ssl.SSLContext] = None
        if cert_path is not None:
            ctx = ssl.create_default_context(cafile=os.fspath(cert_path))
            # The fake's certificate is its own root; Python 3.13's strict mode would want
            # CA extensions on it.
            ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
            self._ssl = ctx

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Optional[Dict[str, str]] = None,
        raw: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        url = f"{self.base_url}/_fake{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if raw is not None:
            data = raw.encode()
            headers["Content-Type"] = "application/yaml"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(
                req, timeout=timeout or self.timeout, context=self._ssl
            ) as resp:
                text = resp.read().decode()
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                message = json.loads(text).get("error") or text
            except (ValueError, AttributeError):
                message = text or e.reason
            raise ControlError(e.code, str(message)) from None
        except (urllib.error.URLError, OSError) as e:
            raise ControlError(0, f"{method} {url}: {e}") from None
        if "json" not in ctype:
            return text
        return json.loads(text) if text else None

    # -- health, scenario, snapshots ------------------------------------------------------

    def health(self, timeout: Optional[float] = None) -> bool:
        return bool(self._call("GET", "/health", timeout=timeout).get("ok"))

    def reset(self) -> None:
        """Back to the loaded scenario; faults and journal cleared (the clock mode stays)."""
        self._call("POST", "/reset", {})

    def scenario(self) -> str:
        """The loaded scenario as YAML."""
        return self._call("GET", "/scenario")

    def load_scenario(self, yaml_text: str) -> None:
        """Replace the world with this scenario (same site names); faults, journal cleared."""
        self._call("POST", "/scenario", raw=yaml_text)

    def snapshot(self) -> str:
        return self._call("POST", "/snapshot", {})["id"]

    def restore(self, snapshot_id: str) -> None:
        self._call("POST", f"/restore/{_seg(snapshot_id)}", {})

    # -- the clock ------------------------------------------------------------------------

    def clock(self) -> Dict[str, Any]:
        """``{"clock": {"mode": ...}, "now": <simulated UNIX time>}``."""
        return self._call("GET", "/clock")

    def set_clock(self, clock: ClockSpec) -> None:
        self._call("PUT", "/clock", clock_json(clock))

    def advance_clock(self, seconds: float) -> float:
        """Move the simulated clock on; returns the new simulated time."""
        return self._call("POST", "/clock/advance", {"seconds": seconds})["now"]

    # -- faults -----------------------------------------------------------------------------

    def add_fault(self, **rule: Any) -> int:
        """A fault rule: ``method``, ``path_pattern`` (glob below ``/api2/json``), ``node``,
        ``site``, ``probability``, ``count``, ``skip``, and what it does: ``status`` +
        ``message``, ``latency_ms``, ``answer_latency_ms``, ``stop_clock``. Returns its id."""
        return self._call("POST", "/faults", rule)["id"]

    def faults(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/faults")

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    def fail_next_task(self, node: str, task_type: str, exitstatus: str) -> None:
        """The next task of ``task_type`` (``qmcreate``, ``qmstart``...) on ``node`` fails."""
        self._call(
            "POST",
            f"/nodes/{_seg(node)}/fail-next-task",
            {"task_type": task_type, "exitstatus": exitstatus},
        )

    # -- nodes, storage, guests -------------------------------------------------------------

    def set_node_online(self, node: str, online: bool) -> None:
        self._call("PUT", f"/nodes/{_seg(node)}/online", {"online": online})

    def node_fault(self, node: str, fault: Dict[str, Any]) -> List[Dict[str, Any]]:
        """A node's link on a bridge down or up; the running NICs it reached."""
        return self._call("POST", f"/nodes/{_seg(node)}/fault", fault)["reached"]

    def set_storage_full(self, node: str, storage: str, full: bool) -> None:
        self._call("PUT", f"/nodes/{_seg(node)}/storage/{_seg(storage)}/full", {"full": full})

    def set_storage_capacity(self, node: str, storage: str, total_bytes: int) -> None:
        self._call(
            "PUT",
            f"/nodes/{_seg(node)}/storage/{_seg(storage)}/capacity",
            {"total_bytes": total_bytes},
        )

    def upload_volume(self, node: str, storage: str, volname: str, size_bytes: int) -> str:
        """Place a volume (e.g. ``iso/x.img``) on a storage; returns its volid."""
        return self._call(
            "POST",
            f"/nodes/{_seg(node)}/storage/{_seg(storage)}/volumes",
            {"volname": volname, "size_bytes": size_bytes},
        )["volid"]

    def place_file(self, node: str, storage: str, volname: str, file: str) -> str:
        """Place a copy of a local file as a volume (real disks); returns its volid."""
        return self._call(
            "POST",
            f"/nodes/{_seg(node)}/storage/{_seg(storage)}/volumes",
            {"volname": volname, "file": os.fspath(file)},
        )["volid"]

    def delete_volume(self, node: str, storage: str, volid: str) -> None:
        self._call(
            "DELETE",
            f"/nodes/{_seg(node)}/storage/{_seg(storage)}/volumes",
            query={"volume": volid},
        )

    def guest_access(self, node: str, vmid: int, user: str, key: str) -> Dict[str, Any]:
        """How to reach a lab-backend VM's guest: address, ssh command line, serial log."""
        return self._call(
            "GET",
            f"/nodes/{_seg(node)}/qemu/{int(vmid)}/guest",
            query={"user": user, "key": os.fspath(key)},
        )

    def ct_access(self, node: str, vmid: int, user: str, key: str) -> Dict[str, Any]:
        """How to reach a lab-backend container: address, ssh command line, console log."""
        return self._call(
            "GET",
            f"/nodes/{_seg(node)}/lxc/{int(vmid)}/guest",
            query={"user": user, "key": os.fspath(key)},
        )

    def guest_fault(self, node: str, vmid: int, fault: Dict[str, Any]) -> None:
        self._call("POST", f"/nodes/{_seg(node)}/qemu/{int(vmid)}/fault", fault)

    def guest_setup(self, node: str, vmid: int, setup: Dict[str, Any]) -> Dict[str, Any]:
        """Script a simulated guest (command results, files); its state after."""
        return self._call("POST", f"/nodes/{_seg(node)}/qemu/{int(vmid)}/agent", setup)

    def guest_state(self, node: str, vmid: int) -> Dict[str, Any]:
        return self._call("GET", f"/nodes/{_seg(node)}/qemu/{int(vmid)}/agent")

    # -- tenants: more isolated worlds in this server ---------------------------------------

    def create_tenant(
        self,
        scenario: Optional[str] = None,
        certificate: Optional[str] = None,
        idle_timeout_secs: Optional[int] = None,
        name: Optional[str] = None,
        clock: Optional[ClockSpec] = None,
        pve_version: Optional[str] = None,
    ) -> Dict[str, Any]:
        """A fresh world of its own (sites on their own ports, own state, journal, faults
        and clock) from ``scenario`` (YAML; default: the server's). ``certificate`` is
        ``"shared"`` (the server's, the default) or ``"own"``. Answers the tenant: ``id``,
        ``control_token`` (its control plane's own token: see :meth:`tenant_control`), and
        per site in ``sites`` its ``url``, ``port``, ``fingerprint``, ``users``,
        ``tokens``. ``pve_version`` (``"7.4"``, ``"8.4"``, ``"9.1"``): the release every
        site of the tenant runs, whatever the scenario says."""
        body: Dict[str, Any] = {}
        if scenario is not None:
            body["scenario"] = scenario
        if certificate is not None:
            body["certificate"] = certificate
        if idle_timeout_secs is not None:
            body["idle_timeout_secs"] = idle_timeout_secs
        if name is not None:
            body["name"] = name
        if clock is not None:
            body["clock"] = clock_json(clock)
        if pve_version is not None:
            body["pve_version"] = pve_version
        return self._call("POST", "/tenants", body=body)

    def tenant_control(
        self, tenant: Dict[str, Any], site: Optional[str] = None, cert_path: Optional[str] = None
    ) -> "ControlClient":
        """A client of ``tenant``'s own control plane (its first site unless ``site`` names
        one), with the tenant's token. ``cert_path``: the certificate to trust (default: this
        client's, right for a tenant with the server's shared certificate)."""
        sites = tenant["sites"]
        s = next((x for x in sites if x["name"] == site), None) if site else sites[0]
        if s is None:
            raise ValueError(f"tenant {tenant['id']} has no site {site!r}")
        ctl = ControlClient(s["url"], cert_path, self.timeout, tenant.get("control_token"))
        if cert_path is None:
            ctl._ssl = self._ssl
        return ctl

    def tenants(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/tenants")

    def tenant(self, tenant_id: str) -> Dict[str, Any]:
        return self._call("GET", f"/tenants/{urllib.parse.quote(tenant_id, safe='')}")

    def delete_tenant(self, tenant_id: str) -> None:
        """Stops its listeners and drops its world; answers once its ports are closed."""
        self._call("DELETE", f"/tenants/{urllib.parse.quote(tenant_id, safe='')}")

    # -- what happened ----------------------------------------------------------------------

    def journal(self) -> List[Dict[str, Any]]:
        """Every API request so far: ``seq``, ``time``, ``site``, ``method``, ``path`` (below
        ``/api2/json``), ``params`` (secrets redacted), ``auth`` (``{"kind": ...}``),
        ``status``, ``status_text``, ``node``, ``received_at`` (wall clock) and
        ``duration_ms`` (how long the answer took, fault latency included)."""
        return self._call("GET", "/journal")

    def clear_journal(self) -> None:
        self._call("DELETE", "/journal")

    def state(self) -> Dict[str, Any]:
        """Sites with their nodes, storages, volumes, VMs and tasks."""
        return self._call("GET", "/state")


def _seg(s: Any) -> str:
    return urllib.parse.quote(str(s), safe="")
