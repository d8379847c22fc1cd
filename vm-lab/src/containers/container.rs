//! One running container and its verbs, all blocking and bounded.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::spec::ContainerSpec;
use crate::error::{Error, Result};
use crate::guests::net::NsProcess;
use crate::machine::ExecOutput;

/// A container started by [`crate::guests::GuestHost::start_container`]: its init runs in its
/// own mount, UTS, IPC, PID and network namespaces inside the host's lab namespace.
#[derive(Debug)]
#[allow(dead_code)] // the skeleton: the fields are used by the implementation
pub struct Container {
    pub(super) spec: ContainerSpec,
    pub(super) dir: PathBuf,
    pub(super) console_log: PathBuf,
    pub(super) lab_init_pid: u32,
    pub(super) proc_: Mutex<NsProcess>,
    pub(super) init_pid: u32,
    pub(super) host_veths: Vec<String>,
    pub(super) cgroup: Option<PathBuf>,
    pub(super) started: Instant,
}

/// One interface inside a container, as `ip -j addr` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerIface {
    /// Its name, e.g. `eth0` or `lo`.
    pub name: String,
    /// Its MAC in lower case (`None` for interfaces without one).
    pub mac: Option<String>,
    /// Its addresses with their prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
}

fn not_yet() -> Error {
    Error::Lab("not implemented yet".into())
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

    /// True while init runs (checked without blocking).
    pub fn is_running(&self) -> bool {
        false
    }

    /// What LXC does for `lxc-stop` without `-k`: SIGPWR to init, then wait up to `timeout`
    /// for it to exit. `Ok(true)`: it exited; `Ok(false)`: still running (the caller may
    /// [`Container::kill`]).
    pub fn shutdown(&self, _timeout: Duration) -> Result<bool> {
        Err(not_yet())
    }

    /// SIGKILL init: the kernel kills the whole PID namespace with it.
    pub fn kill(&self) {}

    /// Memory in use: the cgroup's `memory.current`, else the sum of its processes' RSS;
    /// `None` once it has stopped.
    pub fn memory_used_bytes(&self) -> Option<u64> {
        None
    }

    /// True only when the cgroup's `memory.max` was written for this container.
    pub fn memory_limit_enforced(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Every interface in the container's network namespace with its MAC and addresses
    /// (`ip -j addr`, run inside it).
    pub fn interfaces(&self) -> Result<Vec<ContainerIface>> {
        Err(not_yet())
    }

    /// Run `argv` inside the container (all its namespaces, its root, as root), killed after
    /// `timeout` (then [`Error::Timeout`]).
    pub fn exec(&self, _argv: &[&str], _timeout: Duration) -> Result<ExecOutput> {
        Err(not_yet())
    }

    /// The file init's stdout and stderr go to.
    pub fn console_log(&self) -> &Path {
        &self.console_log
    }

    /// Time since it was started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}
