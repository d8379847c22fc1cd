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
mod segments;
pub mod spec;
mod ssh;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

pub use guest::{AGENT_TIMEOUT, Guest, QMP_TIMEOUT, RunState};
pub use segments::{SegmentKind, mcast_address};
pub use spec::{
    BridgeSpec, DhcpPool, DirectBoot, DiskBus, DiskFormat, ErrorAction, GuestDisk, GuestNic,
    GuestSpec, Machine, Media, NicModel, ScsiController,
};

use crate::accel::{self, Accel};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::spec::AccelChoice;
use argv::{GuestPaths, LaunchArgs, NicBackend};
use net::NsProcess;

/// How often the agent watcher pings a guest's agent.
const AGENT_WATCH_EVERY: Duration = Duration::from_secs(1);
/// Bound on a watcher ping before the agent first answered.
const AGENT_FIRST_PING_TIMEOUT: Duration = Duration::from_millis(300);

/// Options of a [`GuestHost`].
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Parent of the host's run directory (default: [`crate::lab::default_run_root`]).
    pub run_root: Option<PathBuf>,
    /// vm-lab's cache (accelerator probe verdict, busybox for DHCP); default
    /// [`crate::image::default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// Which accelerator the guests run under; `Auto` probes KVM first.
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
    /// Make every segment a multicast socket even where taps work (the fallback otherwise
    /// taken only when taps cannot be made).
    pub force_multicast: bool,
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
            force_multicast: false,
        }
    }
}

#[derive(Debug)]
struct Bridge {
    spec: BridgeSpec,
    dhcp: Option<NsProcess>,
    /// The segment's group and port when it is a multicast socket.
    mcast: Option<(Ipv4Addr, u16)>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    bridges: BTreeMap<String, Bridge>,
    guests: BTreeMap<String, Arc<Guest>>,
    /// The containers beside the guests (see the `containers` module).
    pub(crate) containers: crate::containers::registry::Registry,
    /// Numbers guests' taps and containers' veths: unique on the host.
    pub(crate) next_seq: u32,
}

impl State {
    /// Memory (MiB) counted against the budget: running guests and running or starting
    /// containers.
    pub(crate) fn memory_in_use_mib(&self) -> u64 {
        let guests: u64 = self
            .guests
            .values()
            .filter(|g| g.is_running())
            .map(|g| g.memory_mib)
            .sum();
        guests + self.containers.memory_in_use_mib()
    }
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
    segment_kind: SegmentKind,
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
        let segment_kind = if opts.force_multicast {
            SegmentKind::Multicast
        } else {
            match segments::taps_work(ns.init_pid()) {
                Ok(()) => SegmentKind::Bridge,
                Err(e) => {
                    tracing::warn!(
                        "no taps in the namespace ({e}): segments are multicast sockets"
                    );
                    SegmentKind::Multicast
                }
            }
        };
        let budget_mib = opts
            .memory_budget_mib
            .unwrap_or_else(|| available_mib().saturating_sub(512));
        tracing::info!(
            "guest host in {}: accel {}, segments {:?}, memory cap {} MiB, budget {} MiB",
            run_dir.display(),
            accel.name(),
            segment_kind,
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
            segment_kind,
            state: Mutex::new(State::default()),
            closing: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The accelerator every guest of this host runs under, as resolved when it was made.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// The host's run directory: one directory per guest (named after it) and `dhcp` for the
    /// segments' DHCP servers.
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

    /// The most memory (MiB) one guest's QEMU gets, whatever its spec asks.
    pub fn memory_cap_mib(&self) -> u64 {
        self.opts.memory_cap_mib
    }

    /// The most memory (MiB) all running guests get together; a launch past it is refused.
    pub fn memory_budget_mib(&self) -> u64 {
        self.budget_mib
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
            let used = st.memory_in_use_mib();
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
        let (taps, backends) = self.nic_backends(seq, &spec)?;
        match self.start_qemu(spec, memory_mib, paths, taps.clone(), &backends) {
            Ok(g) => {
                let g = Arc::new(g);
                self.lock_state()?
                    .guests
                    .insert(g.name().to_string(), g.clone());
                spawn_watch(Arc::downgrade(&g), self.closing.clone());
                Ok(g)
            }
            Err(e) => {
                self.delete_taps(&taps);
                Err(e)
            }
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
        let serial_offset = std::fs::metadata(&paths.serial_log).map_or(0, |m| m.len());
        let proc_ = NsProcess::spawn(
            self.init_pid,
            "qemu-system-x86_64",
            &argv,
            Stdio::from(stderr),
        )?;
        // When each console line arrived, in the guest's run dir (the thread ends with QEMU).
        drop(crate::serial_stamps::spawn(
            paths.serial_log.clone(),
            paths.dir.join(crate::qemu_args::SERIAL_TIMES),
            serial_offset,
            proc_.pid,
        ));
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
            run_state: Mutex::new(None),
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

    /// Kill every container, guest and DHCP server, end the namespace, remove the run directory.
    pub fn shutdown(&self) {
        self.closing.store(true, Ordering::Relaxed);
        if let Ok(mut st) = self.state.lock() {
            st.containers.kill_all(self.init_pid);
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

    /// The static busybox the host runs its helpers with (`udhcpd`, containers' launcher).
    pub(crate) fn busybox(&self) -> Result<PathBuf> {
        match &self.opts.busybox {
            Some(b) => Ok(b.clone()),
            None => net::busybox(&self.cache),
        }
    }

    pub(crate) fn lock_state(&self) -> Result<std::sync::MutexGuard<'_, State>> {
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

/// Keep `agent_seen` (when the guest has an agent) and the run state fresh: every second
/// while the guest runs, so readers never wait on the guest.
fn spawn_watch(guest: Weak<Guest>, closing: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("guest-watch".into())
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
                g.poll_run_state();
                // Until the agent first answers, look five times as often with a shorter
                // bound: callers wait on that first answer (a booting guest's agent is
                // silent, and each silent ping costs its whole timeout).
                let every = if g.spec.agent && !g.agent_answering() {
                    let _ = g.agent_ping(AGENT_FIRST_PING_TIMEOUT);
                    AGENT_WATCH_EVERY / 5
                } else {
                    if g.spec.agent {
                        let _ = g.agent_ping(Duration::from_secs(1));
                    }
                    AGENT_WATCH_EVERY
                };
                drop(g);
                std::thread::sleep(every.saturating_sub(t.elapsed()));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the guest watcher: {e}");
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
