//! Real Linux containers on a [`GuestHost`], beside its QEMU guests and on the same segments.
//!
//! A container is a process tree in its own mount, UTS, IPC, PID and network namespaces,
//! nested in the host's lab namespace (whose user namespace gives the capabilities over them,
//! no root needed): the rootfs directory as its root (`pivot_root`), `/proc`, `/sys`, a `/dev`
//! of bind-mounted host device nodes and a devpts, the spec's bind mounts, one veth pair per
//! NIC (the host end `veth{seq}i{n}` enslaved to the segment's bridge, the container end made
//! in the container under its name and MAC), and the rootfs's own `/sbin/init` as PID 1.
//!
//! How it starts: a static busybox runs `launcher.sh` as the container's first process (made
//! by `unshare` inside the lab's namespaces); it mounts what the container sees, then waits
//! on a fifo until the driver has made the veth pairs (their peers need the container's
//! network namespace to exist), brings the NICs up, switches root and execs `/sbin/init`.
//! Init's stdout and stderr are the console log.
//!
//! Nothing outlives the host: every container process lives inside the lab's PID namespace
//! (its init dying kills them all, and a container's init dying kills the container's), every
//! mount inside the container's own mount namespace, and the veths die with its network
//! namespace. Memory: a cgroup v2 limit where the machine lets one be set (see
//! [`Container::memory_limit_enforced`]); either way the spec's memory, capped like a guest's,
//! counts against the host's budget.

mod cgroup;
mod container;
mod iface;
mod launch;
pub(crate) mod registry;
mod spec;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

pub use container::Container;
pub use iface::ContainerIface;
pub use spec::{BindMount, ContainerNic, ContainerSpec};

use crate::error::{Error, Result};
use crate::guests::net::{self, NsProcess};
use crate::guests::{BridgeSpec, GuestHost, SegmentKind};
use crate::namespace;
use cgroup::CgroupBase;
use registry::{delete_veths, remove_cgroup};

/// Bound on the launcher reaching `/sbin/init` once started.
const START_TIMEOUT: Duration = Duration::from_secs(15);
static MEMORY_WARNING: Once = Once::new();

impl GuestHost {
    /// Start the container: new mount, UTS, IPC, PID and net namespaces inside the lab's user
    /// namespace, the rootfs as its root, `/proc`, `/sys`, `/dev` (bind-mounted host device
    /// nodes `null`, `zero`, `full`, `random`, `urandom`, `tty`; a devpts), the bind mounts, one
    /// veth per NIC (host end enslaved to the bridge, container end renamed to `nic.name` with
    /// the MAC), then exec the rootfs's `/sbin/init`.
    ///
    /// Returns once init runs and the NICs are in place; does not wait for an address.
    /// Refuses ([`Error::Spec`] or [`Error::Lab`], saying why): the rootfs missing or without
    /// `/sbin/init`, a mount source missing, a name already running, memory beyond the host's
    /// budget (the same budget as guests).
    pub fn start_container(&self, spec: ContainerSpec) -> Result<Arc<Container>> {
        spec.validate()?;
        if self.segment_kind() == SegmentKind::Multicast && !spec.nics.is_empty() {
            return Err(Error::Lab(format!(
                "container {}: this host's segments are multicast sockets (no bridges can be made here), which a container's veth cannot join",
                spec.name
            )));
        }
        let rootfs = spec
            .rootfs
            .canonicalize()
            .map_err(|e| Error::io(&spec.rootfs, e))?;
        let budget_mib = spec.memory_mib.min(self.memory_cap_mib());
        let seq = {
            let mut st = self.lock_state()?;
            if st.containers.starting.contains_key(&spec.name) {
                return Err(Error::Lab(format!(
                    "container {} is already being started",
                    spec.name
                )));
            }
            if let Some(old) = st.containers.containers.get(&spec.name) {
                if old.is_running() {
                    return Err(Error::Lab(format!(
                        "container {} is already running",
                        spec.name
                    )));
                }
                if let Some(old) = st.containers.containers.remove(&spec.name) {
                    self.clean_up(&old);
                }
            }
            let used = st.memory_in_use_mib();
            let budget = self.memory_budget_mib();
            if used + budget_mib > budget {
                return Err(Error::Lab(format!(
                    "cannot start container {}: it needs {budget_mib} MiB but only {} MiB of the lab's {budget} MiB memory budget are free",
                    spec.name,
                    budget.saturating_sub(used),
                )));
            }
            st.containers.starting.insert(spec.name.clone(), budget_mib);
            st.next_seq += 1;
            st.next_seq
        };
        let name = spec.name.clone();
        let started = self.start_registered(spec, &rootfs, seq, budget_mib);
        let mut st = self.lock_state()?;
        st.containers.starting.remove(&name);
        let c = Arc::new(started?);
        st.containers.containers.insert(name, c.clone());
        Ok(c)
    }

    fn start_registered(
        &self,
        spec: ContainerSpec,
        rootfs: &Path,
        seq: u32,
        budget_mib: u64,
    ) -> Result<Container> {
        let known: Vec<String> = self.bridges().into_iter().map(|b| b.name).collect();
        for nic in &spec.nics {
            if !known.contains(&nic.bridge) {
                self.ensure_bridge(&BridgeSpec::new(&nic.bridge))?;
            }
        }
        let dir = self.run_dir().join(&spec.name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let console_log = spec
            .console_log
            .clone()
            .unwrap_or_else(|| dir.join("console.log"));
        if let Some(parent) = console_log.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let console = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&console_log)
            .map_err(|e| Error::io(&console_log, e))?;
        let go = dir.join("go");
        nix::unistd::mkfifo(&go, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .map_err(|e| Error::io(&go, e.into()))?;
        let status = dir.join("status");
        let busybox = self.busybox()?;
        let argv = launch::launcher_argv(&busybox, &spec, rootfs, &go, &status);
        let lab = self.ns_init_pid();
        let mut proc_ = NsProcess::spawn(lab, "unshare", &argv, Stdio::from(console))?;
        let Some(init_pid) = namespace::first_child(proc_.pid, Duration::from_secs(5)) else {
            proc_.kill();
            return Err(Error::Lab(format!(
                "container {}: its init did not appear; console:\n{}",
                spec.name,
                tail(&console_log)
            )));
        };
        let cgroup = self.container_cgroup(&spec, init_pid);
        let host_veths: Vec<String> = (0..spec.nics.len())
            .map(|i| launch::veth_name(seq, i))
            .collect();
        let made = net::run_ip(lab, &launch::veth_commands(seq, &spec.nics, init_pid))
            .and_then(|()| release(&go, &mut proc_, &spec.name))
            .and_then(|()| wait_init(&status, &mut proc_, &spec.name, &console_log));
        let c = Container {
            spec,
            dir,
            console_log,
            lab_init_pid: lab,
            proc_: Mutex::new(proc_),
            init_pid,
            host_veths,
            cgroup,
            budget_mib,
            started: Instant::now(),
        };
        match made {
            Ok(()) => {
                tracing::info!(
                    "container {} started (init pid {}, veths {:?}, memory limit {})",
                    c.name(),
                    c.init_pid,
                    c.host_veths,
                    if c.memory_limit_enforced() {
                        "enforced"
                    } else {
                        "not enforced"
                    }
                );
                Ok(c)
            }
            Err(e) => {
                self.clean_up(&c);
                Err(e)
            }
        }
    }

    /// A started container (running or ended) by name.
    pub fn container(&self, name: &str) -> Option<Arc<Container>> {
        self.lock_state()
            .ok()
            .and_then(|s| s.containers.containers.get(name).cloned())
    }

    /// Names of the containers the host knows (running or ended).
    pub fn container_names(&self) -> Vec<String> {
        self.lock_state()
            .map(|s| s.containers.containers.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Kill the container if it runs, remove its veths, its run directory and its cgroup, and
    /// forget it. The rootfs is the caller's and stays. Unknown names are not an error.
    pub fn remove_container(&self, name: &str) -> Result<()> {
        let c = self.lock_state()?.containers.containers.remove(name);
        if let Some(c) = c {
            self.clean_up(&c);
        }
        Ok(())
    }

    /// Kill `c` and take away what it had on the host (not its rootfs).
    fn clean_up(&self, c: &Container) {
        c.kill();
        if !c.wait_exit(Duration::from_secs(5)) {
            tracing::warn!(
                "container {}: init {} outlived SIGKILL",
                c.name(),
                c.init_pid
            );
        }
        delete_veths(self.ns_init_pid(), &c.host_veths);
        remove_cgroup(c.cgroup.as_deref());
        let _ = std::fs::remove_dir_all(&c.dir);
    }

    /// The container's cgroup with its limits, with init in it; `None` where limits cannot be
    /// set (said once per process).
    fn container_cgroup(&self, spec: &ContainerSpec, init_pid: u32) -> Option<PathBuf> {
        let tag = self
            .run_dir()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| std::process::id().to_string());
        let made = {
            let mut st = self.lock_state().ok()?;
            let base = st.containers.cgroups.get_or_insert_with(|| {
                CgroupBase::probe(&tag)
                    .map_err(|why| {
                        MEMORY_WARNING.call_once(|| {
                            tracing::warn!("container memory limits are not enforced here: {why}")
                        })
                    })
                    .ok()
            });
            base.as_ref()?
                .create(&spec.name, spec.memory_mib, spec.swap_mib)
        };
        match made.and_then(|dir| cgroup::join(&dir, init_pid).map(|()| dir)) {
            Ok(dir) => Some(dir),
            Err(why) => {
                tracing::warn!("container {}: memory limit not enforced: {why}", spec.name);
                None
            }
        }
    }
}

/// Tell the launcher the NICs are in: open the fifo (once it listens) and write `go`.
fn release(go: &Path, proc_: &mut NsProcess, name: &str) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match std::fs::File::options()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(go)
        {
            Ok(mut f) => return f.write_all(b"go\n").map_err(|e| Error::io(go, e)),
            Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => {}
            Err(e) => return Err(Error::io(go, e)),
        }
        if let Some(status) = proc_.exit_status() {
            return Err(Error::Lab(format!(
                "container {name}: its launcher exited ({status}) before its NICs were handed over"
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::Lab(format!(
                "container {name}: its launcher did not get ready within {START_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until the launcher says it execs `/sbin/init`; its exit first is an error with the
/// console's last lines.
fn wait_init(status: &Path, proc_: &mut NsProcess, name: &str, console: &Path) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if std::fs::read_to_string(status).is_ok_and(|s| s.trim() == "exec") {
            return Ok(());
        }
        if let Some(st) = proc_.exit_status() {
            return Err(Error::Lab(format!(
                "container {name}: its launcher exited ({st}) before /sbin/init ran; console:\n{}",
                tail(console)
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::Lab(format!(
                "container {name}: /sbin/init did not start within {START_TIMEOUT:?}; console:\n{}",
                tail(console)
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn tail(console: &Path) -> String {
    let text = String::from_utf8_lossy(&std::fs::read(console).unwrap_or_default()).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
