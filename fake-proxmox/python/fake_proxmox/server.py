"""Runs ``fake-proxmox serve`` as a child process and hands out what a client needs."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

import yaml

from .control import ClockSpec, ControlClient, ControlError, clock_arg

ENV_BIN = "FAKE_PROXMOX_BIN"
ENV_CONTROL_TOKEN = "FAKE_PROXMOX_CONTROL_TOKEN"
EXE = "fake-proxmox" + (".exe" if os.name == "nt" else "")

Scenario = Union[None, str, "os.PathLike[str]", Dict[str, Any]]


class ServerError(RuntimeError):
    """The server could not be found, did not start, or stopped early; ``stderr`` is what it
    printed."""

    def __init__(self, message: str, stderr: str = ""):
        text = message + (f"\n--- fake-proxmox stderr ---\n{stderr.rstrip()}" if stderr else "")
        super().__init__(text)
        self.stderr = stderr


def find_executable() -> str:
    """``$FAKE_PROXMOX_BIN``, else the ``fake-proxmox`` installed with this package (the
    scripts dir of its environment), else one on ``PATH``."""
    env = os.environ.get(ENV_BIN)
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise ServerError(f"{ENV_BIN}={env} is not an executable file")
        return env
    dirs = [sysconfig.get_path("scripts")]
    with contextlib.suppress(KeyError):
        dirs.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    dirs.append(os.path.dirname(sys.executable))
    for d in dirs:
        p = os.path.join(d, EXE) if d else ""
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    found = shutil.which(EXE)
    if found:
        return found
    raise ServerError(
        f"no {EXE} executable beside this package (looked in {dirs}) nor on PATH; "
        f"reinstall the fake-proxmox wheel or set {ENV_BIN}"
    )


@dataclass(frozen=True)
class Site:
    """One site's listener."""

    name: str
    url: str

    @property
    def host(self) -> str:
        return self.url.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


class Server:
    """A running ``fake-proxmox serve``; use :func:`server` to get one.

    ``host``/``port``/``url`` are those of ``site`` (the scenario's first site unless named);
    ``sites`` has them all. ``token_id``/``token_secret`` are the site's first API token,
    ``user``/``password`` the user that token belongs to (else the first user); ``cert_path``
    is the fake's certificate (pass it as proxmoxer's ``verify_ssl``), ``fingerprint`` its
    SHA-256 fingerprint, ``control`` the ``/_fake/`` client of that site.
    """

    def __init__(
        self,
        scenario: Scenario = None,
        clock: ClockSpec = "real",
        site: Optional[str] = None,
        plain_http: bool = False,
        auth_failure_delay: bool = False,
        startup_timeout: float = 60.0,
        executable: Optional[str] = None,
        extra_args: Optional[List[str]] = None,
        control_token: Optional[str] = None,
        pve_version: Optional[str] = None,
    ):
        self.clock = clock_arg(clock)
        self._pve_version = pve_version
        self._scenario = scenario
        self._site = site
        self._plain_http = plain_http
        self._auth_failure_delay = auth_failure_delay
        self._startup_timeout = startup_timeout
        self._extra_args = list(extra_args or [])
        if control_token is None:
            control_token = os.environ.get(ENV_CONTROL_TOKEN) or None
        if control_token == "auto":
            control_token = secrets.token_hex(32)
        #: The control plane's token (``None``: open, as without ``--control-token``).
        self.control_token: Optional[str] = control_token
        self.executable = executable or find_executable()
        self._proc: Optional[subprocess.Popen] = None
        self._dir: Optional[str] = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> "Server":
        if self._proc is not None:
            raise ServerError("already started")
        self._dir = tempfile.mkdtemp(prefix="fake-proxmox-")
        try:
            self._launch()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        assert self._dir is not None
        work = Path(self._dir)
        state_dir = work / "state"
        scenario_path, doc = self._scenario_file(work)
        cmd = [self.executable, "serve", "--state-dir", str(state_dir), "--clock", self.clock]
        if scenario_path is not None:
            cmd += ["--scenario", str(scenario_path)]
        if self._pve_version is not None:
            cmd += ["--pve-version", self._pve_version]
        if self._plain_http:
            cmd.append("--plain-http")
        if not self._auth_failure_delay:
            cmd.append("--no-auth-delay")
        cmd += self._extra_args
        self._stdout_path = work / "stdout.log"
        self._stderr_path = work / "stderr.log"
        # The token goes through the environment: it stays out of `ps`.
        env = {k: v for k, v in os.environ.items() if k != ENV_CONTROL_TOKEN}
        if self.control_token is not None:
            env[ENV_CONTROL_TOKEN] = self.control_token
        with open(self._stdout_path, "wb") as out, open(self._stderr_path, "wb") as err:
            self._proc = subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        self.pid = self._proc.pid
        names = [s.get("name") for s in doc.get("sites") or []]
        self.sites = self._wait_ready(state_dir, len(names))
        self.site = self._site or next(iter(self.sites))
        if self.site not in self.sites:
            raise ServerError(f"no site {self.site!r}; the scenario has {list(self.sites)}")
        self._credentials(doc, self.site)
        url = self.sites[self.site].url
        self.url = url
        self.host = self.sites[self.site].host
        self.port = self.sites[self.site].port
        self.fingerprint = (state_dir / "fingerprint").read_text().strip()
        self.cert_path = None if self._plain_http else str(state_dir / "cert.pem")
        self.control = ControlClient(url, self.cert_path, token=self.control_token)
        self._initial_scenario = self.control.scenario()

    def _scenario_file(self, work: Path):
        """The ``--scenario`` path (None: the embedded default) and the parsed scenario."""
        sc = self._scenario
        if sc is None:
            out = subprocess.run(
                [self.executable, "scenario", "dump"], capture_output=True, text=True
            )
            if out.returncode != 0:
                raise ServerError(f"{self.executable} scenario dump failed", out.stderr)
            return None, yaml.safe_load(out.stdout)
        if isinstance(sc, dict):
            path = work / "scenario.yaml"
            path.write_text(yaml.safe_dump(sc, sort_keys=False))
            return path, sc
        path = Path(os.fspath(sc)).resolve()
        return path, yaml.safe_load(path.read_text())

    def _wait_ready(self, state_dir: Path, n_sites: int) -> Dict[str, Site]:
        """Until the site URL file lists every site and the control plane answers."""
        deadline = time.monotonic() + self._startup_timeout
        sites_file = state_dir / "sites"
        while True:
            rc = self._proc.poll() if self._proc else None
            if rc is not None:
                raise ServerError(
                    f"fake-proxmox exited with status {rc} before it was ready", self.stderr()
                )
            sites: Dict[str, Site] = {}
            if sites_file.exists() and (state_dir / "fingerprint").exists():
                for line in sites_file.read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2:
                        sites[parts[0]] = Site(parts[0], parts[1])
            if sites and len(sites) >= n_sites:
                probe = ControlClient(
                    next(iter(sites.values())).url,
                    None if self._plain_http else str(state_dir / "cert.pem"),
                )
                try:
                    if probe.health(timeout=2):
                        return sites
                except ControlError:
                    pass
            if time.monotonic() > deadline:
                raise ServerError(
                    f"fake-proxmox was not ready after {self._startup_timeout} s", self.stderr()
                )
            time.sleep(0.05)

    def _credentials(self, doc: Dict[str, Any], site: str) -> None:
        spec = next((s for s in doc.get("sites") or [] if s.get("name") == site), {})
        tokens = spec.get("tokens") or []
        users = [u for u in spec.get("users") or [] if u.get("enable", True)]
        self.token_id: Optional[str] = tokens[0]["tokenid"] if tokens else None
        self.token_secret: Optional[str] = tokens[0]["secret"] if tokens else None
        owner = self.token_id.split("!", 1)[0] if self.token_id else None
        user = next((u for u in users if u.get("userid") == owner), users[0] if users else None)
        self.user: Optional[str] = user["userid"] if user else owner
        self.password: Optional[str] = user["password"] if user else None

    @property
    def token_user(self) -> Optional[str]:
        """The token's ``user@realm`` (proxmoxer's ``user`` with token auth)."""
        return self.token_id.split("!", 1)[0] if self.token_id else None

    @property
    def token_name(self) -> Optional[str]:
        """The token's name after ``!`` (proxmoxer's ``token_name``)."""
        return self.token_id.split("!", 1)[1] if self.token_id and "!" in self.token_id else None

    def reset(self) -> None:
        """Back to the scenario this server started with (also after ``load_scenario``):
        world rebuilt, faults and journal cleared, and the clock mode it started with."""
        self.control.load_scenario(self._initial_scenario)
        self.control.set_clock(self.clock)

    def stderr(self) -> str:
        """What the server has printed on stderr so far."""
        try:
            return Path(self._stderr_path).read_text(errors="replace")
        except (AttributeError, OSError):
            return ""

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server (by its pid), kill it if it lingers; remove its temp dir."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "Server":
        return self.start() if self._proc is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = getattr(self, "url", "not started")
        return f"<fake_proxmox.Server {where} pid={getattr(self, 'pid', None)}>"


@contextlib.contextmanager
def server(
    scenario: Scenario = None,
    clock: ClockSpec = "real",
    **options: Any,
) -> Iterator[Server]:
    """``with fake_proxmox.server(scenario=..., clock=...) as pve:`` — a running fake for the
    body, stopped after it (also when it raises).

    ``scenario``: a YAML file's path, a dict in the scenario's shape, or None for the embedded
    default. ``clock``: ``"real"``, ``"scaled:N"``, ``N`` or ``"stepped"``. Other options:
    ``site``, ``plain_http``, ``auth_failure_delay`` (default off), ``startup_timeout``,
    ``executable``, ``extra_args``, ``control_token`` (require this token on the control
    plane; ``"auto"`` makes a random one; default ``$FAKE_PROXMOX_CONTROL_TOKEN``, else
    open; ``pve.control`` carries it), ``pve_version`` (``"7.4"``, ``"8.4"``, ``"9.1"``:
    every site runs that PVE release, whatever the scenario says).
    """
    srv = Server(scenario=scenario, clock=clock, **options)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _die_with_parent() -> None:
    """In the child: SIGTERM when the process that started it dies (Linux), so a killed test
    run does not leave servers behind."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
