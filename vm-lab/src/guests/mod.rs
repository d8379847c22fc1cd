//! A guest host: real QEMU guests described the way a hypervisor's VM config describes them
//! (see [`GuestSpec`]), not as lab nodes. A [`GuestHost`] owns one lab namespace (user + net +
//! PID, see [`crate::namespace`]) and everything in it:
//!
//! - **Segments.** Each bridge name is one private L2: a Linux bridge inside the namespace, one
//!   tap per NIC (`tap{seq}i{n}`), the namespace's own addresses on the bridge (so SSH to a
//!   guest's address works from inside), and a busybox `udhcpd` where the bridge has a DHCP pool
//!   ([`BridgeSpec`], [`GuestHost::ensure_bridge`]).
//! - **Guests.** [`GuestHost::launch`] builds the argv ([`argv`], pure), makes the taps and starts
//!   QEMU inside the namespace; [`Guest`] has the verbs (QMP, agent, serial log, kill), each
//!   blocking and bounded by a few seconds, for synchronous callers.
//! - **Memory.** QEMU gets `min(spec.memory_mib, memory_cap_mib)`; the sum over running guests
//!   stays within a budget (default: what the machine had available when the host was made,
//!   minus 512 MiB). A launch beyond it fails with a message saying so.
//! - **Nothing outlives the host.** Every process runs in the namespace's PID namespace, so
//!   dropping the host, or the driver dying even by SIGKILL, takes every guest and DHCP server
//!   down with the namespace's init.
//!
//! Blocking: nothing here needs a tokio runtime (the accelerator probe runs its own on a
//! separate thread), so it can be called from inside one, under a lock.

pub mod argv;
pub mod control;
mod guest;
pub mod net;
pub mod spec;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

pub use guest::{AGENT_TIMEOUT, Guest, QMP_TIMEOUT, RunState};
pub use spec::{
    BridgeSpec, DhcpPool, DirectBoot, DiskBus, DiskFormat, GuestDisk, GuestNic, GuestSpec, Machine,
    Media, NicModel, ScsiController,
};

use crate::accel::{self, Accel};
use crate::error::{Error, Result};
use crate::machine::ExecOutput;
use crate::namespace::Namespace;
use crate::spec::AccelChoice;
use argv::{GuestPaths, LaunchArgs, NicBackend};
use net::NsProcess;

/// How often the agent watcher pings a guest's agent.
const AGENT_WATCH_EVERY: Duration = Duration::from_secs(1);

/// Options of a [`GuestHost`].
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Parent of the host's run directory (default: [`crate::lab::default_run_root`]).
    pub run_root: Option<PathBuf>,
    /// vm-lab's cache (accelerator probe verdict, busybox for DHCP); default
    /// [`crate::image::default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    pub accel: AccelChoice,
    /// A kernel for the KVM probe boot; default: the newest netboot kernel in the cache. With
    /// none, `Auto` means TCG.
    pub probe_kernel: Option<PathBuf>,
    /// The most memory one guest's QEMU gets, whatever its spec asks.
    pub memory_cap_mib: u64,
    /// The most memory all running guests get together; default: available memory when the
    /// host is made, minus 512 MiB.
    pub memory_budget_mib: Option<u64>,
    /// A static busybox for `udhcpd`; default: from vm-lab's package cache.
    pub busybox: Option<PathBuf>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            run_root: None,
            cache_dir: None,
            accel: AccelChoice::Auto,
            probe_kernel: None,
            memory_cap_mib: 2048,
            memory_budget_mib: None,
            busybox: None,
        }
    }
}

#[derive(Debug)]
struct Bridge {
    spec: BridgeSpec,
    dhcp: Option<NsProcess>,
}

#[derive(Debug, Default)]
struct State {
    bridges: BTreeMap<String, Bridge>,
    guests: BTreeMap<String, Arc<Guest>>,
    next_seq: u32,
}

/// Owns a namespace and the guests and segments in it. Dropping it ends them all.
#[derive(Debug)]
pub struct GuestHost {
    ns: Mutex<Namespace>,
    init_pid: u32,
    run_dir: PathBuf,
    cache: PathBuf,
    accel: Accel,
    opts: HostOptions,
    budget_mib: u64,
    state: Mutex<State>,
    /// Set on drop: the agent watchers stop.
    closing: Arc<AtomicBool>,
}

impl GuestHost {
    /// Make the namespace and the run directory, and settle the accelerator.
    pub fn new(opts: HostOptions) -> Result<GuestHost> {
        let cache = opts
            .cache_dir
            .clone()
            .unwrap_or_else(crate::image::default_cache_dir);
        let accel = resolve_accel(opts.accel, opts.probe_kernel.clone(), &cache)?;
        let root = opts
            .run_root
            .clone()
            .unwrap_or_else(crate::lab::default_run_root);
        let run_dir = root.join(format!(
            "guests-{}-{:06x}",
            std::process::id(),
            rand::random::<u32>() & 0xff_ffff
        ));
        std::fs::create_dir_all(&run_dir).map_err(|e| Error::io(&run_dir, e))?;
        let ns = match Namespace::create() {
            Ok(ns) => ns,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&run_dir);
                return Err(e);
            }
        };
        let budget_mib = opts
            .memory_budget_mib
            .unwrap_or_else(|| available_mib().saturating_sub(512));
        tracing::info!(
            "guest host in {}: accel {}, memory cap {} MiB, budget {} MiB",
            run_dir.display(),
            accel.name(),
            opts.memory_cap_mib,
            budget_mib
        );
        Ok(GuestHost {
            init_pid: ns.init_pid(),
            ns: Mutex::new(ns),
            run_dir,
            cache,
            accel,
            opts,
            budget_mib,
            state: Mutex::new(State::default()),
            closing: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn accel(&self) -> Accel {
        self.accel
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Host PID of the namespace's init (`nsenter --target` takes it).
    pub fn ns_init_pid(&self) -> u32 {
        self.init_pid
    }

    /// Host PID of the process holding the namespace.
    pub fn holder_pid(&self) -> u32 {
        self.ns.lock().map(|n| n.holder_pid()).unwrap_or(0)
    }

    pub fn memory_cap_mib(&self) -> u64 {
        self.opts.memory_cap_mib
    }

    pub fn memory_budget_mib(&self) -> u64 {
        self.budget_mib
    }

    /// Make the segment if it is new, add the addresses it lacks, and run (or widen) its DHCP
    /// server. Asking again with what it has changes nothing.
    pub fn ensure_bridge(&self, want: &BridgeSpec) -> Result<()> {
        if !net::valid_ifname(&want.name) {
            return Err(Error::Spec(format!(
                "bridge {:?}: not a valid interface name (1-15 letters, digits, '-', '_', '.')",
                want.name
            )));
        }
        let mut st = self.lock_state()?;
        let (new, have) = match st.bridges.get(&want.name) {
            Some(b) => (false, b.spec.clone()),
            None => (true, BridgeSpec::new(&want.name)),
        };
        let merged = net::merge_bridge(&have, want);
        let add: Vec<(Ipv4Addr, u8)> = merged
            .addresses
            .iter()
            .filter(|a| !have.addresses.contains(a))
            .copied()
            .collect();
        net::run_ip(self.init_pid, &net::bridge_commands(&want.name, new, &add))?;
        let entry = st.bridges.entry(want.name.clone()).or_insert(Bridge {
            spec: have.clone(),
            dhcp: None,
        });
        let pool_changed = merged.dhcp != entry.spec.dhcp;
        entry.spec = merged;
        if let (true, Some(pool)) = (pool_changed, entry.spec.dhcp) {
            if let Some(mut old) = entry.dhcp.take() {
                old.kill();
            }
            entry.dhcp = Some(self.start_dhcp(&want.name, &pool, &entry.spec.addresses)?);
        }
        Ok(())
    }

    /// The segments and what they hold.
    pub fn bridges(&self) -> Vec<BridgeSpec> {
        self.state
            .lock()
            .map(|s| s.bridges.values().map(|b| b.spec.clone()).collect())
            .unwrap_or_default()
    }

    fn start_dhcp(
        &self,
        bridge: &str,
        pool: &DhcpPool,
        addrs: &[(Ipv4Addr, u8)],
    ) -> Result<NsProcess> {
        let busybox = match &self.opts.busybox {
            Some(b) => b.clone(),
            None => net::busybox(&self.cache)?,
        };
        let dir = self.run_dir.join("dhcp");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let conf = dir.join(format!("{bridge}.conf"));
        let prefix = net::prefix_for(addrs, pool.start);
        std::fs::write(&conf, net::udhcpd_conf(bridge, pool, prefix, &dir))
            .map_err(|e| Error::io(&conf, e))?;
        let _ = std::fs::write(dir.join(format!("{bridge}.leases")), b"");
        let log = dir.join(format!("{bridge}.log"));
        let log_file = std::fs::File::create(&log).map_err(|e| Error::io(&log, e))?;
        let mut p = NsProcess::spawn(
            self.init_pid,
            &busybox.display().to_string(),
            &["udhcpd".into(), "-f".into(), conf.display().to_string()],
            Stdio::from(log_file),
        )?;
        // udhcpd refuses a bad config or interface at once.
        std::thread::sleep(Duration::from_millis(150));
        if let Some(status) = p.exit_status() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(Error::tool(
                "udhcpd",
                format!("on {bridge} exited ({status}): {}", text.trim()),
            ));
        }
        tracing::info!("dhcp on {bridge}: {}-{}", pool.start, pool.end);
        Ok(p)
    }

    /// Launch a guest: its segments' taps, then QEMU inside the namespace. Returns once QEMU's
    /// monitor answers (links set as the spec says); does not wait for the guest to boot.
    pub fn launch(&self, spec: GuestSpec) -> Result<Arc<Guest>> {
        spec.validate()?;
        let memory_mib = spec.memory_mib.min(self.opts.memory_cap_mib);
        let (seq, paths) = {
            let mut st = self.lock_state()?;
            if let Some(old) = st.guests.get(&spec.name) {
                if old.is_running() {
                    return Err(Error::Lab(format!(
                        "guest {} is already running",
                        spec.name
                    )));
                }
                self.drop_guest(&mut st, &spec.name);
            }
            let used: u64 = st
                .guests
                .values()
                .filter(|g| g.is_running())
                .map(|g| g.memory_mib)
                .sum();
            if used + memory_mib > self.budget_mib {
                return Err(Error::Lab(format!(
                    "cannot start guest {}: it needs {memory_mib} MiB but only {} MiB of the lab's {} MiB memory budget are free",
                    spec.name,
                    self.budget_mib.saturating_sub(used),
                    self.budget_mib
                )));
            }
            st.next_seq += 1;
            let dir = self.run_dir.join(&spec.name);
            (
                st.next_seq,
                GuestPaths::new(&dir, spec.serial_log.as_deref()),
            )
        };
        check_files(&spec)?;
        for b in spec.nics.iter().filter_map(|n| n.bridge.as_deref()) {
            let known = self.lock_state()?.bridges.contains_key(b);
            if !known {
                self.ensure_bridge(&BridgeSpec::new(b))?;
            }
        }
        let (taps, backends) = self.make_taps(seq, &spec)?;
        match self.start_qemu(spec, memory_mib, paths, taps.clone(), &backends) {
            Ok(g) => {
                let g = Arc::new(g);
                self.lock_state()?
                    .guests
                    .insert(g.name().to_string(), g.clone());
                if g.spec.agent {
                    spawn_agent_watch(Arc::downgrade(&g), self.closing.clone());
                }
                Ok(g)
            }
            Err(e) => {
                self.delete_taps(&taps);
                Err(e)
            }
        }
    }

    fn make_taps(&self, seq: u32, spec: &GuestSpec) -> Result<(Vec<String>, Vec<NicBackend>)> {
        let mut taps = Vec::new();
        let mut backends = Vec::new();
        let mut cmds = Vec::new();
        for nic in &spec.nics {
            match &nic.bridge {
                Some(b) => {
                    let tap = net::tap_name(seq, nic.index);
                    cmds.extend(net::tap_commands(&tap, b));
                    taps.push(tap.clone());
                    backends.push(NicBackend::Tap { ifname: tap });
                }
                None => {
                    taps.push(String::new());
                    backends.push(NicBackend::User);
                }
            }
        }
        // A tap left from a guest of an earlier run of this name is gone with its host.
        net::run_ip(self.init_pid, &cmds)
            .map_err(|e| Error::Lab(format!("guest {}: cannot make its taps: {e}", spec.name)))?;
        Ok((taps, backends))
    }

    fn delete_taps(&self, taps: &[String]) {
        let cmds: Vec<String> = taps
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| format!("link del {t}"))
            .collect();
        if let Err(e) = net::run_ip(self.init_pid, &cmds) {
            tracing::debug!("deleting taps: {e}");
        }
    }

    fn start_qemu(
        &self,
        spec: GuestSpec,
        memory_mib: u64,
        paths: GuestPaths,
        taps: Vec<String>,
        backends: &[NicBackend],
    ) -> Result<Guest> {
        std::fs::create_dir_all(&paths.dir).map_err(|e| Error::io(&paths.dir, e))?;
        for s in [&paths.qmp, &paths.qga, &paths.serial_sock] {
            let _ = std::fs::remove_file(s);
        }
        let argv = argv::guest_argv(&LaunchArgs {
            spec: &spec,
            accel: self.accel,
            memory_mib,
            paths: &paths,
            backends,
        })?;
        let line = serde_json::to_string_pretty(&argv).map_err(|e| Error::Lab(e.to_string()))?;
        let argv_file = paths.dir.join("argv.json");
        std::fs::write(&argv_file, line).map_err(|e| Error::io(&argv_file, e))?;
        let stderr =
            std::fs::File::create(&paths.stderr).map_err(|e| Error::io(&paths.stderr, e))?;
        let proc_ = NsProcess::spawn(
            self.init_pid,
            "qemu-system-x86_64",
            &argv,
            Stdio::from(stderr),
        )?;
        let guest = Guest {
            spec,
            paths,
            memory_mib,
            taps,
            argv,
            proc_: Mutex::new(proc_),
            agent: Mutex::new(None),
            qmp_lock: Mutex::new(()),
            agent_seen: AtomicBool::new(false),
            started: Instant::now(),
        };
        wait_monitor(&guest)?;
        for nic in guest.spec.nics.iter().filter(|n| !n.link_up) {
            guest.set_link(nic.index, false)?;
        }
        tracing::info!("guest {} started (pid {})", guest.name(), guest.pid());
        Ok(guest)
    }

    /// A launched guest (running or ended) by name.
    pub fn guest(&self, name: &str) -> Option<Arc<Guest>> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.guests.get(name).cloned())
    }

    /// Names of the guests the host knows (running or ended).
    pub fn guest_names(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.guests.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Kill a guest and forget it: its QEMU, its taps and its run directory go.
    pub fn remove(&self, name: &str) -> Result<()> {
        let mut st = self.lock_state()?;
        self.drop_guest(&mut st, name);
        Ok(())
    }

    fn drop_guest(&self, st: &mut State, name: &str) {
        if let Some(g) = st.guests.remove(name) {
            g.kill();
            self.delete_taps(&g.taps);
            let _ = std::fs::remove_dir_all(&g.paths.dir);
        }
    }

    /// A system `ssh` command reaching `user@addr` (a guest's address on a segment) from inside
    /// the namespace, with `key`. `remote` becomes the remote command.
    pub fn ssh_command(
        &self,
        key: &Path,
        user: &str,
        addr: Ipv4Addr,
        remote: &[&str],
    ) -> std::process::Command {
        let mut c = std::process::Command::new("nsenter");
        c.args(net::ssh_argv(self.init_pid, key, user, addr, remote));
        c
    }

    /// Run `command` over SSH and collect its output, killing the client after `timeout`.
    pub fn ssh(
        &self,
        key: &Path,
        user: &str,
        addr: Ipv4Addr,
        command: &str,
        timeout: Duration,
    ) -> Result<ExecOutput> {
        let mut cmd = self.ssh_command(key, user, addr, &[command]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().map_err(|e| Error::tool("ssh", e.to_string()))?;
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(timeout) {
            Ok(r) => r.map_err(|e| Error::tool("ssh", e.to_string()))?,
            Err(_) => {
                if let Ok(p) = i32::try_from(pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                return Err(Error::Timeout {
                    node: addr.to_string(),
                    what: format!("ssh `{command}`"),
                    after: timeout,
                    serial: String::new(),
                });
            }
        };
        Ok(ExecOutput {
            code: i64::from(out.status.code().unwrap_or(-1)),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Kill every guest and DHCP server, end the namespace, remove the run directory.
    pub fn shutdown(&self) {
        self.closing.store(true, Ordering::Relaxed);
        if let Ok(mut st) = self.state.lock() {
            for g in st.guests.values() {
                g.kill();
            }
            st.guests.clear();
            st.bridges.clear();
        }
        if let Ok(mut ns) = self.ns.lock() {
            ns.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }

    fn lock_state(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| Error::Lab("guest host state lock poisoned".into()))
    }
}

impl Drop for GuestHost {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Every image file a guest names must exist before QEMU is asked to open it.
fn check_files(spec: &GuestSpec) -> Result<()> {
    for d in &spec.disks {
        if let Some(p) = &d.path
            && !p.exists()
        {
            return Err(Error::Lab(format!(
                "guest {}: {}: {} does not exist",
                spec.name,
                d.id(),
                p.display()
            )));
        }
    }
    if let Some(b) = &spec.direct_boot {
        for p in [&b.kernel, &b.initrd] {
            if !p.exists() {
                return Err(Error::Lab(format!(
                    "guest {}: {} does not exist",
                    spec.name,
                    p.display()
                )));
            }
        }
    }
    Ok(())
}

/// Wait until QEMU's monitor takes connections; QEMU exiting first is an error with its stderr.
fn wait_monitor(g: &Guest) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if !g.is_running() {
            return Err(g.exited());
        }
        if g.paths.qmp.exists() && g.status().is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let e = g.exited();
            g.kill();
            return Err(Error::Lab(format!(
                "guest {}: QEMU's monitor did not answer within 10 s: {e}",
                g.name()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Keep `agent_seen` fresh: ping the agent every second while the guest runs.
fn spawn_agent_watch(guest: Weak<Guest>, closing: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("agent-watch".into())
        .spawn(move || {
            loop {
                if closing.load(Ordering::Relaxed) {
                    return;
                }
                let Some(g) = guest.upgrade() else { return };
                if !g.is_running() {
                    g.forget_agent();
                    return;
                }
                let t = Instant::now();
                let _ = g.agent_ping(Duration::from_secs(1));
                drop(g);
                std::thread::sleep(AGENT_WATCH_EVERY.saturating_sub(t.elapsed()));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the agent watcher: {e}");
    }
}

/// MemAvailable from /proc/meminfo, in MiB (0 when unreadable).
fn available_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// Settle the accelerator without the caller's runtime: the probe runs on its own thread.
fn resolve_accel(choice: AccelChoice, kernel: Option<PathBuf>, cache: &Path) -> Result<Accel> {
    if choice == AccelChoice::Tcg {
        return Ok(Accel::Tcg);
    }
    let kernel = kernel.or_else(|| newest_cached_kernel(cache));
    let Some(kernel) = kernel else {
        return match choice {
            AccelChoice::Kvm => Err(Error::Accel(
                "KVM was asked for but there is no kernel to probe it with".into(),
            )),
            _ => {
                tracing::info!("accel: tcg (no kernel in the cache to probe KVM with)");
                Ok(Accel::Tcg)
            }
        };
    };
    let cache = cache.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Accel(format!("probe runtime: {e}")))?;
        rt.block_on(accel::resolve(choice, &kernel, &cache))
    })
    .join()
    .map_err(|_| Error::Accel("the probe thread panicked".into()))?
}

fn newest_cached_kernel(cache: &Path) -> Option<PathBuf> {
    std::fs::read_dir(cache.join("images"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("vmlinuz"))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}
