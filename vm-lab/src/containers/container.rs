//! One running container and its verbs, all blocking and bounded.

use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::cgroup;
use super::iface::{self, ContainerIface};
use super::spec::ContainerSpec;
use crate::error::{Error, Result};
use crate::guests::net::{self, NsProcess};
use crate::machine::ExecOutput;
use crate::namespace;

/// PATH of commands run with [`Container::exec`].
const EXEC_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Console lines attached to errors.
const CONSOLE_TAIL: usize = 30;

/// A container started by `GuestHost::start_container`: its init runs in its
/// own mount, UTS, IPC, PID and network namespaces inside the host's lab namespace.
/// Dropping the last handle kills it.
#[derive(Debug)]
pub struct Container {
    pub(super) spec: ContainerSpec,
    pub(super) dir: PathBuf,
    pub(super) console_log: PathBuf,
    pub(super) lab_init_pid: u32,
    /// `unshare`, whose child is the container's init.
    pub(super) proc_: Mutex<NsProcess>,
    pub(super) init_pid: u32,
    pub(super) host_veths: Vec<String>,
    pub(super) cgroup: Option<PathBuf>,
    /// What it counts against the host's memory budget (MiB).
    pub(super) budget_mib: u64,
    pub(super) started: Instant,
}

impl Container {
    /// The container's name, from its spec.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The spec it was started from.
    pub fn spec(&self) -> &ContainerSpec {
        &self.spec
    }

    /// Host PID of the container's init.
    pub fn pid(&self) -> u32 {
        self.init_pid
    }

    /// The host end of each NIC's veth pair (`veth{seq}i{n}`), in the spec's order.
    pub fn host_veths(&self) -> &[String] {
        &self.host_veths
    }

    /// The container's directory in the host's run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True while init runs (checked without blocking).
    pub fn is_running(&self) -> bool {
        namespace::alive(self.init_pid) && self.proc_.lock().is_ok_and(|mut p| p.running())
    }

    /// What LXC does for `lxc-stop` without `-k`: SIGPWR to init, then wait up to `timeout`
    /// for it to exit. `Ok(true)`: it exited (or was not running); `Ok(false)`: still running
    /// (the caller may [`Container::kill`]).
    pub fn shutdown(&self, timeout: Duration) -> Result<bool> {
        if !self.is_running() {
            return Ok(true);
        }
        signal::kill(self.nix_pid()?, Signal::SIGPWR)
            .map_err(|e| Error::Lab(format!("container {}: SIGPWR to init: {e}", self.name())))?;
        Ok(self.wait_exit(timeout))
    }

    /// Wait until init has ended; false when it still runs after `timeout`.
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_running() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL init: the kernel kills the whole PID namespace with it.
    pub fn kill(&self) {
        if namespace::alive(self.init_pid)
            && let Ok(pid) = self.nix_pid()
        {
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
        if let Ok(mut p) = self.proc_.lock() {
            p.kill();
        }
    }

    /// Memory in use: the cgroup's `memory.current`, else the sum of its processes' resident
    /// memory; `None` once it has stopped.
    pub fn memory_used_bytes(&self) -> Option<u64> {
        if !self.is_running() {
            return None;
        }
        match &self.cgroup {
            Some(dir) => cgroup::memory_current(dir),
            None => resident_bytes_of_namespace(self.init_pid),
        }
    }

    /// True only when the cgroup's `memory.max` was written for this container.
    pub fn memory_limit_enforced(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Every interface in the container's network namespace with its MAC and addresses
    /// (`ip -j addr`, run inside it).
    pub fn interfaces(&self) -> Result<Vec<ContainerIface>> {
        self.ensure_running()?;
        let out = Command::new("nsenter")
            .args([
                "--target",
                &self.init_pid.to_string(),
                "--user",
                "--net",
                "--preserve-credentials",
                "--",
                "ip",
                "-j",
                "addr",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::tool("ip", format!("cannot run (iproute2): {e}")))?;
        if !out.status.success() {
            return Err(Error::tool(
                "ip",
                format!(
                    "in container {}: {}: {}",
                    self.name(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
        iface::parse_ip_json(&String::from_utf8_lossy(&out.stdout))
            .map_err(|e| Error::tool("ip", e))
    }

    /// The IPv4 addresses of the container's NICs (not the loopback's), as
    /// [`Container::interfaces`] reports them.
    pub fn ipv4_addrs(&self) -> Result<Vec<std::net::Ipv4Addr>> {
        Ok(self
            .interfaces()?
            .into_iter()
            .filter(|i| i.name != "lo")
            .flat_map(|i| i.addrs)
            .filter_map(|(a, _)| match a {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            })
            .collect())
    }

    /// Run `argv` inside the container (all its namespaces, its root, as root, PATH set to
    /// the usual directories), killed after `timeout` (then [`Error::Timeout`]).
    pub fn exec(&self, argv: &[&str], timeout: Duration) -> Result<ExecOutput> {
        if argv.is_empty() {
            return Err(Error::Spec(format!(
                "container {}: exec needs a command",
                self.name()
            )));
        }
        self.ensure_running()?;
        let mut cmd = Command::new("nsenter");
        cmd.args([
            "--target",
            &self.init_pid.to_string(),
            "--user",
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--root",
            "--wd",
            "--preserve-credentials",
            "--",
        ])
        .args(argv)
        .env_clear()
        .env("PATH", EXEC_PATH)
        .env("HOME", "/root")
        .env("LANG", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| Error::tool("nsenter", format!("cannot run (util-linux): {e}")))?;
        let pgid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(timeout) {
            Ok(r) => r.map_err(|e| Error::tool("nsenter", e.to_string()))?,
            Err(_) => {
                if let Ok(p) = i32::try_from(pgid) {
                    let _ = signal::killpg(Pid::from_raw(p), Signal::SIGKILL);
                }
                return Err(Error::Timeout {
                    node: self.name().to_string(),
                    what: format!("`{}` to finish", argv.join(" ")),
                    after: timeout,
                    serial: self.console_tail(CONSOLE_TAIL),
                });
            }
        };
        use std::os::unix::process::ExitStatusExt;
        let code = out
            .status
            .code()
            .or_else(|| out.status.signal().map(|s| 128 + s))
            .unwrap_or(-1);
        Ok(ExecOutput {
            code: i64::from(code),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Set the host end of NIC `index` up or down (PVE's `link_down`): no frame passes while
    /// it is down, and the container sees its carrier go.
    pub fn set_link(&self, index: usize, up: bool) -> Result<()> {
        let veth = self
            .host_veths
            .get(index)
            .ok_or_else(|| Error::Spec(format!("container {} has no NIC {index}", self.name())))?;
        self.ensure_running()?;
        net::run_ip(
            self.lab_init_pid,
            &[format!(
                "link set {veth} {}",
                if up { "up" } else { "down" }
            )],
        )
    }

    /// The file init's stdout and stderr go to.
    pub fn console_log(&self) -> &Path {
        &self.console_log
    }

    /// The whole console log so far.
    pub fn console_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.console_log).unwrap_or_default()).into_owned()
    }

    /// The last `n` lines of the console log.
    pub fn console_tail(&self, n: usize) -> String {
        let text = self.console_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Wait until the console log contains `marker`; false on timeout or when init ends.
    pub fn wait_console(&self, marker: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.console_text().contains(marker) {
                return true;
            }
            if Instant::now() >= deadline || !self.is_running() {
                return self.console_text().contains(marker);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Time since it was started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    fn nix_pid(&self) -> Result<Pid> {
        i32::try_from(self.init_pid)
            .map(Pid::from_raw)
            .map_err(|_| Error::Lab(format!("container {}: bad pid", self.name())))
    }

    fn ensure_running(&self) -> Result<()> {
        if self.is_running() {
            Ok(())
        } else {
            Err(Error::Lab(format!(
                "container {} is not running; last console lines:\n{}",
                self.name(),
                self.console_tail(CONSOLE_TAIL)
            )))
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The resident memory of every process in the PID namespace whose init is `init_pid`.
fn resident_bytes_of_namespace(init_pid: u32) -> Option<u64> {
    let ns = std::fs::read_link(format!("/proc/{init_pid}/ns/pid")).ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u64::try_from(p).ok())
        .unwrap_or(4096);
    let mut total = 0u64;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .as_ref()
            != Some(&ns)
        {
            continue;
        }
        let resident = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .nth(1)
                    .and_then(|r| r.parse::<u64>().ok())
            })
            .unwrap_or(0);
        total += resident * page;
    }
    Some(total)
}
