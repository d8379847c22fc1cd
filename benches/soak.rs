//! Soak benchmark (issue 33): one fake-proxmox server shared by many tenants for a bounded
//! time, with random faults, to show that a shared fake survives a CI fleet. Run:
//! `cargo bench --bench soak` (`SOAK_TENANTS`, default 50; `SOAK_SECS`, default 60;
//! `SOAK_SEED`, default from the clock, printed; `SOAK_ROLLOUT`, `seed`, `fixed` or `both`,
//! the default).
//!
//! The server runs in a child process (this binary re-executed with `--serve-fake`, built as
//! `serve --control-token` builds it, the token taken from `FAKE_PROXMOX_CONTROL_TOKEN`), so
//! its memory and descriptor figures are its own. `SOAK_TENANTS` workers each loop until the
//! time is up: create a tenant (with the server's token) → a rollout against it (the deployer
//! on the embedded manifests, as `rehearse` runs it) while faults drawn from a seeded RNG are
//! injected through the tenant's own control token → destroy what the rollout made → read the
//! tenant's journal → delete the tenant. Each cycle draws the seed rollout as written or the
//! fixed one (see [`Which`]: the seed's alone never gets past the deployer's checks, so it
//! sends GETs only). The faults are the kinds the control API offers for a tenant's simulated
//! world: request rules (`/_fake/faults`: an error status, latency before or after the
//! handler), `fail-next-task`, and windows in which a node is offline, a storage full, a
//! node's bridge link down or the clock stopped. (Guest faults need the lab backend; tenants
//! run the simulated one, where they answer 409.)
//!
//! The time is cut into [`ROUNDS`] rounds; after each, every tenant is deleted and the
//! server's resident memory read. Prints `name: value unit` lines: API requests served (the
//! tenants' journals), panics of the server (its stderr; and whether it still runs), its 5xx
//! answers by who asked for them, resident memory (at start, after each round, peak) and open
//! descriptors (at start, peak, at the end). Exits non-zero when the server panicked or died,
//! answered a 5xx no fault asked for, kept a tenant past the run, holds more memory after the
//! last round than after the first plus [`RSS_TOLERANCE_KIB`], or more descriptors at the end
//! than at its start; and when a rollout's destroy left a VM no fault asked to keep (a fault
//! armed for a `qmstop` or `qmdestroy` task does): that one is the deployer's.
//!
//! A 5xx is asked for when it carries the soak's fault message (a `/_fake/faults` rule), is
//! the `595 No route to host` of a node the soak took offline, is one the same rollout gets
//! without faults (taken from a fault-free cycle of each rollout first, and printed), or is
//! one of PVE's refusals a fault leads to ([`pve_refusal`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::BufRead as _;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    ChildFake, SERVE_FAKE, fake_builder, options, point_at, serve_fake, shared, status_kib,
};
use fake_proxmox::exec::NodeFault;
use fake_proxmox::{ClockMode, ControlClient, ControlToken, FaultRule, JournalEntry, TenantInfo};
use parking_lot::Mutex;
use provision_harness::deploy::{Deployer, Outcome};
use provision_harness::rehearse::{RehearseOptions, Rollout, fixed_rollout, seed_rollout};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom as _;
use rand::{Rng as _, SeedableRng as _};

/// How much more resident memory the server may hold after the last round than after the
/// first (every tenant deleted both times). Not the size at start: glibc keeps freed memory
/// for reuse rather than handing it back, so after a round the resident size stays near that
/// round's peak (see the tenants figures in docs/src/benchmarks.md); the first round is the
/// same work at the same concurrency, and what later rounds add on top of it is what they
/// leaked plus the allocator's noise. That noise, from rounds whose peaks differ (how many
/// fixed rollouts happen to run at once), was -3.9 to +2.4 MiB in the runs of
/// docs/src/benchmarks.md; 8 MiB is above it and still catches a leak of about 5 KiB per
/// tenant cycle in a 120 s run at 50 tenants (some 1,500 cycles after the first round).
const RSS_TOLERANCE_KIB: u64 = 8 * 1024;

/// The message of every fault rule the soak adds: what marks a 5xx as asked for.
const FAULT_MARK: &str = "soak fault";

/// The soak's time is cut into this many rounds; after each, every tenant is deleted and the
/// server's memory read.
const ROUNDS: u32 = 4;

/// The run's knobs, from the environment.
#[derive(Clone, Copy)]
struct Config {
    tenants: usize,
    secs: u64,
    seed: u64,
    /// Which rollouts the cycles run (`SOAK_ROLLOUT`: `seed`, `fixed`, or `both`, the
    /// default, drawn per cycle).
    rollouts: &'static [Which],
}

impl Config {
    fn from_env() -> Config {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        let seed = var("SOAK_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        Config {
            tenants: var("SOAK_TENANTS").map_or(50, |n| n.max(1) as usize),
            secs: var("SOAK_SECS").unwrap_or(60),
            seed,
            rollouts: match std::env::var("SOAK_ROLLOUT").as_deref() {
                Ok("seed") => &[Which::Seed],
                Ok("fixed") => &[Which::Fixed],
                _ => &[Which::Seed, Which::Fixed],
            },
        }
    }
}

/// The rollout of a cycle. The seed's as written sends GETs only: the deployer's
/// pre-flight checks refuse every VM before anything is created, so task, storage, link and
/// clock faults never bite. The fixed one (the seed with its problems fixed, on its own
/// scenario) creates, starts and waits for every VM's address, and its destroy deletes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Which {
    Seed,
    Fixed,
}

impl Which {
    fn rollout(self) -> Rollout {
        match self {
            Which::Seed => seed_rollout(None).unwrap(),
            Which::Fixed => fixed_rollout().unwrap(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Which::Seed => "seed",
            Which::Fixed => "fixed",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Faults

const NODES: &[&str] = &["ml110-01", "r630-01"];
const STORAGES: &[&str] = &["local", "local-lvm"];
const TASK_TYPES: &[&str] = &[
    "qmcreate",
    "qmstart",
    "qmconfig",
    "qmclone",
    "qmdestroy",
    "qmstop",
    "download",
    "imgcopy",
];
/// Paths the deployer uses, and all of them.
const PATHS: &[&str] = &[
    "/**",
    "/access/ticket",
    "/version",
    "/cluster/resources",
    "/cluster/nextid",
    "/nodes/*/status",
    "/nodes/*/network",
    "/nodes/*/storage",
    "/nodes/*/storage/*/content",
    "/nodes/*/storage/*/download-url",
    "/nodes/*/qemu",
    "/nodes/*/qemu/*/config",
    "/nodes/*/qemu/*/status/**",
    "/nodes/*/qemu/*/agent/**",
    "/nodes/*/qemu/*",
    "/nodes/*/tasks/*/status",
];

/// One fault of an iteration.
#[derive(Clone, Debug)]
enum Fault {
    /// A `/_fake/faults` rule, added before the rollout.
    Rule(&'static str, FaultRule),
    /// `fail-next-task` on a node, armed before the rollout.
    FailNextTask { node: String, task_type: String },
    /// Something wrong from `at` after the rollout starts, for `lasts`, then put right.
    Window {
        at: Duration,
        lasts: Duration,
        what: Window,
    },
}

#[derive(Clone, Debug)]
enum Window {
    NodeOffline(String),
    StorageFull(String, String),
    LinkDown(String),
    ClockStopped,
}

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::Rule(k, _) => k,
            Fault::FailNextTask { .. } => "fail_next_task",
            Fault::Window { what, .. } => match what {
                Window::NodeOffline(_) => "node_offline",
                Window::StorageFull(..) => "storage_full",
                Window::LinkDown(_) => "link_down",
                Window::ClockStopped => "clock_stopped",
            },
        }
    }
}

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from.choose(rng).copied().unwrap()
}

/// A rule on a random path (and sometimes method), firing with a random probability, a
/// bounded number of times, sometimes after letting a few matching requests through.
fn rule(rng: &mut StdRng) -> FaultRule {
    FaultRule {
        method: rng
            .random_bool(0.3)
            .then(|| pick(rng, &["GET", "POST", "PUT", "DELETE"]).to_string()),
        path_pattern: Some(pick(rng, PATHS).to_string()),
        probability: Some(rng.random_range(0.05..=1.0)),
        count: Some(rng.random_range(1..=8)),
        skip: rng.random_bool(0.3).then(|| rng.random_range(1..=20)),
        message: Some(format!("{FAULT_MARK}: injected")),
        ..FaultRule::default()
    }
}

/// One to four faults, drawn from `rng`.
fn draw_faults(rng: &mut StdRng) -> Vec<Fault> {
    let n = rng.random_range(1..=4);
    (0..n)
        .map(|_| {
            let window = |rng: &mut StdRng, what| Fault::Window {
                at: Duration::from_millis(rng.random_range(0..1000)),
                lasts: Duration::from_millis(rng.random_range(20..800)),
                what,
            };
            match rng.random_range(0..9) {
                0 => Fault::Rule(
                    "rule_5xx",
                    FaultRule {
                        status: Some(*[500, 502, 503, 595, 596].choose(rng).unwrap()),
                        ..rule(rng)
                    },
                ),
                1 => Fault::Rule(
                    "rule_4xx",
                    FaultRule {
                        status: Some(*[400, 401, 403, 404].choose(rng).unwrap()),
                        ..rule(rng)
                    },
                ),
                2 => Fault::Rule(
                    "rule_latency",
                    FaultRule {
                        latency_ms: Some(rng.random_range(1..300)),
                        ..rule(rng)
                    },
                ),
                3 => Fault::Rule(
                    "rule_answer_latency",
                    FaultRule {
                        answer_latency_ms: Some(rng.random_range(1..300)),
                        ..rule(rng)
                    },
                ),
                4 => Fault::FailNextTask {
                    node: pick(rng, NODES).to_string(),
                    task_type: pick(rng, TASK_TYPES).to_string(),
                },
                5 => {
                    let node = pick(rng, NODES).to_string();
                    window(rng, Window::NodeOffline(node))
                }
                6 => {
                    let (node, storage) = (pick(rng, NODES), pick(rng, STORAGES));
                    window(rng, Window::StorageFull(node.into(), storage.into()))
                }
                7 => {
                    let node = pick(rng, NODES).to_string();
                    window(rng, Window::LinkDown(node))
                }
                _ => window(rng, Window::ClockStopped),
            }
        })
        .collect()
}

/// Do (`on`) or undo a window's fault through the tenant's control plane.
async fn set_window(
    ctl: &ControlClient,
    what: &Window,
    on: bool,
    clock: f64,
) -> Result<(), String> {
    let r = match what {
        Window::NodeOffline(node) => ctl.set_node_online(node, !on).await,
        Window::StorageFull(node, storage) => ctl.set_storage_full(node, storage, on).await,
        Window::LinkDown(node) => {
            let bridge = "vmbr0".to_string();
            let f = match on {
                true => NodeFault::LinkDown { bridge },
                false => NodeFault::LinkUp { bridge },
            };
            ctl.node_fault(node, &f).await.map(|_| ())
        }
        Window::ClockStopped => {
            let mode = match on {
                true => ClockMode::Stepped,
                false => ClockMode::Scaled { factor: clock },
            };
            ctl.set_clock(mode).await
        }
    };
    r.map_err(|e| format!("{what:?} {}: {e}", if on { "on" } else { "off" }))
}

// ---------------------------------------------------------------------------------------
// What the server answered

/// A 5xx as it is compared with the fault-free run's: method, path, status, reason, with
/// every number made `N` (VMIDs, UPIDs, sizes differ from run to run).
fn signature(e: &JournalEntry) -> String {
    let mut s = format!("{} {} {} {}", e.method, e.path, e.status, e.status_text);
    let mut out = String::with_capacity(s.len());
    let mut in_num = false;
    for c in s.drain(..) {
        if c.is_ascii_digit() || (in_num && c.is_ascii_hexdigit()) {
            if !in_num {
                out.push('N');
            }
            in_num = true;
        } else {
            in_num = false;
            out.push(c);
        }
    }
    out
}

/// A 500 PVE gives a request that a fault led the deployer to send: PVE's own refusal (a
/// `die` in its handler) of what the request asks in the world as it then is. A VM whose
/// create failed or was cleaned up has no config (the deployer checks after a create whose
/// end it did not see); a VM whose create still runs is locked (a delete after a task poll
/// that failed); a running VM is not deleted (the cleanup after a failure that could not read
/// the VM's status, its node offline, so did not stop it first). The fault-free rollouts do
/// not take these paths.
fn pve_refusal(e: &JournalEntry) -> bool {
    let t = e.status_text.as_str();
    e.status == 500
        && ((t.starts_with("Configuration file 'nodes/") && t.ends_with("' does not exist"))
            || t.starts_with("VM is locked (")
            || (e.method == "DELETE" && t.ends_with(" is running - destroy failed")))
}

/// What the soak counted; the workers' add up.
#[derive(Default)]
struct Totals {
    tenant_cycles: u64,
    cycles_by: BTreeMap<&'static str, u64>,
    api_requests: u64,
    journal_dropped: u64,
    control_requests: u64,
    faults: BTreeMap<&'static str, u64>,
    fivexx: u64,
    /// The asked-for 5xx by why they were asked for.
    fivexx_by: BTreeMap<&'static str, u64>,
    unexpected: u64,
    unexpected_samples: Vec<String>,
    vms_left: u64,
    vms_left_asked: u64,
    vms_left_samples: Vec<String>,
    harness_errors: Vec<String>,
    rollout_ms: Vec<u64>,
}

impl Totals {
    fn add(&mut self, o: Totals) {
        self.tenant_cycles += o.tenant_cycles;
        for (k, v) in o.cycles_by {
            *self.cycles_by.entry(k).or_default() += v;
        }
        self.api_requests += o.api_requests;
        self.journal_dropped += o.journal_dropped;
        self.control_requests += o.control_requests;
        for (k, v) in o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.fivexx += o.fivexx;
        for (k, v) in o.fivexx_by {
            *self.fivexx_by.entry(k).or_default() += v;
        }
        self.unexpected += o.unexpected;
        self.unexpected_samples.extend(o.unexpected_samples);
        self.unexpected_samples.truncate(20);
        self.vms_left += o.vms_left;
        self.vms_left_asked += o.vms_left_asked;
        self.vms_left_samples.extend(o.vms_left_samples);
        self.vms_left_samples.truncate(10);
        self.harness_errors.extend(o.harness_errors);
        self.rollout_ms.extend(o.rollout_ms);
    }

    /// Count one tenant's cycle: its faults, requests, and 5xx by who asked for them.
    fn count(&mut self, c: &Cycle, faults: &[Fault], own: &BTreeSet<String>) {
        self.tenant_cycles += 1;
        *self.cycles_by.entry(c.which.label()).or_default() += 1;
        // A task failure armed for the destroy's stop or delete leaves its VM, as asked.
        let asked = faults.iter().any(|f| {
            matches!(f, Fault::FailNextTask { task_type, .. }
                if task_type == "qmdestroy" || task_type == "qmstop")
        });
        if asked {
            self.vms_left_asked += c.vms_left;
        } else {
            self.vms_left += c.vms_left;
            if let Some(why) = &c.left_why
                && self.vms_left_samples.len() < 10
            {
                self.vms_left_samples.push(why.clone());
            }
        }
        self.rollout_ms.push(c.rollout_ms);
        self.control_requests += c.control_requests;
        for f in faults {
            *self.faults.entry(f.kind()).or_default() += 1;
        }
        let offline: BTreeSet<&str> = faults
            .iter()
            .filter_map(|f| match f {
                Fault::Window {
                    what: Window::NodeOffline(n),
                    ..
                } => Some(n.as_str()),
                _ => None,
            })
            .collect();
        let last = c.journal.last().map_or(0, |e| e.seq);
        let first = c.journal.first().map_or(1, |e| e.seq);
        self.api_requests += last;
        self.journal_dropped += first.saturating_sub(1);
        for e in c.journal.iter().filter(|e| e.status >= 500) {
            self.fivexx += 1;
            let offline_node = e.status == 595
                && e.status_text == "No route to host"
                && e.node.as_deref().is_some_and(|n| offline.contains(n));
            let why = if e.status_text.starts_with(FAULT_MARK) {
                Some("fault_rule")
            } else if offline_node {
                Some("node_offline")
            } else if own.contains(&signature(e)) {
                Some("as_without_faults")
            } else if pve_refusal(e) {
                Some("pve_refusal")
            } else {
                None
            };
            if let Some(why) = why {
                *self.fivexx_by.entry(why).or_default() += 1;
            } else {
                self.unexpected += 1;
                if self.unexpected_samples.len() < 20 {
                    let kinds: Vec<&str> = faults.iter().map(Fault::kind).collect();
                    self.unexpected_samples.push(format!(
                        "{} {} -> {} {} ({} rollout, faults: {kinds:?})",
                        e.method,
                        e.path,
                        e.status,
                        e.status_text,
                        c.which.label()
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// One tenant's cycle

/// What a worker needs: the server's control plane, the deployer's options, the seed.
struct Soak {
    host: ControlClient,
    opts: RehearseOptions,
    seed: u64,
    /// Signatures of the 5xx each rollout gets without faults.
    own_5xx: BTreeMap<Which, BTreeSet<String>>,
}

/// What one tenant's cycle left to count.
struct Cycle {
    which: Which,
    journal: Vec<JournalEntry>,
    /// VMs the tenant still had after the destroy, and what was wrong then.
    vms_left: u64,
    left_why: Option<String>,
    rollout_ms: u64,
    control_requests: u64,
}

impl Soak {
    /// Create a tenant, roll the seed out against it under `faults`, destroy, read the
    /// journal, delete the tenant.
    async fn cycle(&self, name: &str, which: Which, faults: &[Fault]) -> Result<Cycle, String> {
        // The rollout's snippets shares, where the deployer writes the userData, per cycle.
        let shares = tempfile::tempdir().map_err(|e| format!("{name}: shares: {e}"))?;
        let (rollout, req) = shared(which.rollout(), shares.path());
        let req = req.name(name);
        let tenant: TenantInfo = self
            .host
            .create_tenant(&req)
            .await
            .map_err(|e| format!("{name}: create: {e}"))?;
        let result = self.run_in(&tenant, rollout, which, faults).await;
        let deleted = self.host.delete_tenant(&tenant.id).await;
        let mut cycle = result.map_err(|e| format!("{name}: {e}"))?;
        deleted.map_err(|e| format!("{name}: delete: {e}"))?;
        cycle.control_requests += 2;
        Ok(cycle)
    }

    async fn run_in(
        &self,
        tenant: &TenantInfo,
        rollout: Rollout,
        which: Which,
        faults: &[Fault],
    ) -> Result<Cycle, String> {
        let ctl = tenant.sites[0].control();
        let calls = AtomicU64::new(0);
        for f in faults {
            calls.fetch_add(1, Ordering::Relaxed);
            match f {
                Fault::Rule(_, rule) => ctl.add_fault(rule.clone()).await.map(|_| ()),
                Fault::FailNextTask { node, task_type } => {
                    let why = format!("{FAULT_MARK}: task failed");
                    ctl.fail_next_task(node, task_type, &why).await
                }
                Fault::Window { .. } => Ok(()),
            }
            .map_err(|e| format!("adding {f:?}: {e}"))?;
        }
        let mut provider = rollout.provider;
        point_at(&mut provider, tenant);
        let mut deploy = self.opts.deploy.clone();
        deploy.concurrency = self.opts.concurrency;
        let deployer = Deployer::new(provider, deploy).map_err(|e| e.to_string())?;
        let clock = self.opts.clock_factor;
        let windows = faults.iter().filter_map(|f| match f {
            Fault::Window { at, lasts, what } => Some(async {
                tokio::time::sleep(*at).await;
                calls.fetch_add(2, Ordering::Relaxed);
                set_window(&ctl, what, true, clock).await?;
                tokio::time::sleep(*lasts).await;
                set_window(&ctl, what, false, clock).await
            }),
            _ => None,
        });
        let started = Instant::now();
        let (result, windows) = tokio::join!(
            deployer.deploy(&rollout.manifests),
            futures::future::join_all(windows)
        );
        let rollout_ms = started.elapsed().as_millis() as u64;
        result.map_err(|e| format!("deploy: {e}"))?;
        windows.into_iter().collect::<Result<Vec<()>, String>>()?;
        // Destroy without request faults (an armed task failure may still fire).
        ctl.clear_faults()
            .await
            .map_err(|e| format!("clearing faults: {e}"))?;
        let destroyed = deployer
            .destroy(&rollout.manifests)
            .await
            .map_err(|e| format!("destroy: {e}"))?;
        let state = ctl.state().await.map_err(|e| format!("state: {e}"))?;
        let vms_left = state["sites"].as_array().map_or(0, |sites| {
            sites
                .iter()
                .map(|s| s["vms"].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        }) as u64;
        let journal = ctl.journal().await.map_err(|e| format!("journal: {e}"))?;
        let left_why = (vms_left > 0).then(|| {
            let vms: Vec<String> = state["sites"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["vms"].as_array().cloned().unwrap_or_default())
                .map(|v| format!("{} {} lock {}", v["vmid"], v["power"], v["lock"]))
                .collect();
            let failed: Vec<String> = destroyed
                .vms
                .iter()
                .filter(|v| v.outcome == Outcome::Failed)
                .map(|v| {
                    let why = v.conditions.last().map(|c| c.message.clone());
                    format!("{}: {}", v.name, why.unwrap_or_default())
                })
                .collect();
            let kinds: Vec<String> = faults.iter().map(|f| format!("{f:?}")).collect();
            format!("left {vms:?}; destroy failed {failed:?}; faults {kinds:?}")
        });
        Ok(Cycle {
            which,
            journal,
            vms_left,
            left_why,
            rollout_ms,
            control_requests: calls.load(Ordering::Relaxed) + 3,
        })
    }

    /// Cycles of worker `w` until `until`, faults drawn from its own RNG (cycle `i` of worker
    /// `w` draws the same faults for the same seed).
    async fn worker(&self, w: usize, first: u64, until: Instant, from: &[Which]) -> Totals {
        let mut t = Totals::default();
        let mut i = first;
        while Instant::now() < until {
            let mut rng = StdRng::seed_from_u64(
                self.seed ^ (w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i,
            );
            let which = *from.choose(&mut rng).unwrap();
            let faults = draw_faults(&mut rng);
            let name = format!("soak-{}-{w}-{i}", which.label());
            match self.cycle(&name, which, &faults).await {
                Ok(c) => t.count(&c, &faults, &self.own_5xx[&which]),
                Err(e) => {
                    t.harness_errors.push(e);
                    break;
                }
            }
            i += 1;
        }
        t
    }

    /// Every worker at once.
    async fn round(
        self: &Arc<Self>,
        workers: usize,
        first: u64,
        until: Instant,
        from: &'static [Which],
    ) -> Totals {
        let runs = (0..workers).map(|w| {
            let me = self.clone();
            tokio::spawn(async move { me.worker(w, first, until, from).await })
        });
        let mut total = Totals::default();
        for r in futures::future::join_all(runs).await {
            total.add(r.unwrap());
        }
        total
    }
}

// ---------------------------------------------------------------------------------------
// The server's side: stderr, memory, descriptors

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The child's stderr, passed through with a prefix; panics counted.
struct StderrWatch {
    panics: Arc<AtomicUsize>,
    tail: Arc<Mutex<VecDeque<String>>>,
    thread: std::thread::JoinHandle<()>,
}

impl StderrWatch {
    fn start(stderr: std::process::ChildStderr) -> StderrWatch {
        let panics = Arc::new(AtomicUsize::new(0));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (p, tl) = (panics.clone(), tail.clone());
        let thread = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[fake] {line}");
                if line.contains("panicked at") {
                    p.fetch_add(1, Ordering::Relaxed);
                }
                let mut tl = tl.lock();
                if tl.len() == 40 {
                    tl.pop_front();
                }
                tl.push_back(line);
            }
        });
        StderrWatch {
            panics,
            tail,
            thread,
        }
    }
}

/// Samples the child's open descriptors every 100 ms for their peak (the kernel keeps the
/// peak of resident memory itself, `VmHWM`).
struct FdSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl FdSampler {
    fn start(pid: u32) -> FdSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(open_fds(pid)));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(open_fds(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        FdSampler { stop, peak, thread }
    }

    fn finish(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.peak.load(Ordering::Relaxed)
    }
}

/// Wait (at most 10 s) until the child holds no more than `want` descriptors: connections a
/// client just closed take a moment to be closed on the server's side too.
fn settled_fds(pid: u32, want: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let n = open_fds(pid);
        if n <= want || Instant::now() >= until {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn main() -> ExitCode {
    let cfg = Config::from_env();
    let opts = options();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SERVE_FAKE) {
        let token = std::env::var("FAKE_PROXMOX_CONTROL_TOKEN").unwrap();
        let builder = fake_builder(opts.clock_factor)
            .max_tenants(cfg.tenants + 1)
            .control_token(ControlToken::new(&token).unwrap());
        serve_fake(std::path::Path::new(&args[2]), builder);
        return ExitCode::SUCCESS;
    }
    println!("soak_seed: {} (SOAK_SEED to run it again)", cfg.seed);
    println!("soak_tenants: {}", cfg.tenants);
    println!("soak_secs: {} s", cfg.secs);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let token = ControlToken::generate();
    let mut fake = ChildFake::start(|cmd| {
        cmd.env("FAKE_PROXMOX_CONTROL_TOKEN", token.as_str())
            .stderr(Stdio::piped());
    });
    let watch = StderrWatch::start(fake.child.stderr.take().unwrap());
    let pid = fake.pid();
    let rss_start = status_kib(pid, "VmRSS:");
    let fds_start = open_fds(pid);
    println!("server_rss_start: {} MiB", mib(rss_start));
    println!("server_fds_start: {fds_start}");
    let fds = FdSampler::start(pid);
    let host = || ControlClient::new(&fake.url, Some(&fake.cert_pem)).with_token(token.as_str());

    // Each rollout without faults: the 5xx PVE gives it.
    let soak = Soak {
        host: host(),
        opts,
        seed: cfg.seed,
        own_5xx: BTreeMap::new(),
    };
    let mut own_5xx = BTreeMap::new();
    for &which in cfg.rollouts {
        let name = format!("soak-{}-reference", which.label());
        let reference = rt.block_on(soak.cycle(&name, which, &[])).unwrap();
        let own: BTreeSet<String> = reference
            .journal
            .iter()
            .filter(|e| e.status >= 500)
            .map(signature)
            .collect();
        println!(
            "{}_reference: {} api requests, {} vms left after destroy, {} kinds of 5xx without faults",
            which.label(),
            reference.journal.last().map_or(0, |e| e.seq),
            reference.vms_left,
            own.len()
        );
        for s in &own {
            println!("  {}_own_5xx: {s}", which.label());
        }
        own_5xx.insert(which, own);
    }
    let soak = Arc::new(Soak { own_5xx, ..soak });
    // Rounds: every worker cycles until the round's share of the time is up, then every
    // tenant is deleted and the memory read. The first round is the baseline.
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut rss_rounds = Vec::new();
    for k in 0..ROUNDS {
        let until = started + Duration::from_secs(cfg.secs) * (k + 1) / ROUNDS;
        let first = u64::from(k) << 32;
        totals.add(rt.block_on(soak.round(cfg.tenants, first, until, cfg.rollouts)));
        let rss = status_kib(pid, "VmRSS:");
        println!(
            "server_rss_after_round_{}: {} MiB ({} tenant cycles so far, every tenant deleted)",
            k + 1,
            mib(rss),
            totals.tenant_cycles
        );
        rss_rounds.push((rss, totals.tenant_cycles));
        if !totals.harness_errors.is_empty() {
            break;
        }
    }
    let (rss_baseline, baseline_cycles) = rss_rounds[0];
    let soak_wall = started.elapsed();
    let left = rt
        .block_on(soak.host.tenants())
        .map(|t| t.len())
        .map_err(|e| e.to_string());
    drop(soak);
    drop(rt);
    let alive = matches!(fake.child.try_wait(), Ok(None));
    std::thread::sleep(Duration::from_millis(500));
    let fds_end = settled_fds(pid, fds_start);
    let fds_peak = fds.finish();
    let rss_end = status_kib(pid, "VmRSS:");
    let rss_peak = status_kib(pid, "VmHWM:");
    let status = fake.stop();
    watch.thread.join().unwrap();
    let panics = watch.panics.load(Ordering::Relaxed);

    let mut times = totals.rollout_ms.clone();
    times.sort_unstable();
    let pct = |p: usize| times.get(times.len() * p / 100).copied().unwrap_or(0);
    println!("soak_wall: {:.1} s", soak_wall.as_secs_f64());
    println!("tenant_cycles: {}", totals.tenant_cycles);
    for (k, v) in &totals.cycles_by {
        println!("  {k}_rollout_cycles: {v}");
    }
    println!("api_requests_served: {}", totals.api_requests);
    println!(
        "api_requests_per_s: {:.0}",
        totals.api_requests as f64 / soak_wall.as_secs_f64().max(0.001)
    );
    println!("control_requests: {}", totals.control_requests);
    println!("rollout_p50: {} ms", pct(50));
    println!("rollout_max: {} ms", times.last().copied().unwrap_or(0));
    let injected: u64 = totals.faults.values().sum();
    println!("faults_injected: {injected}");
    for (k, v) in &totals.faults {
        println!("  faults_{k}: {v}");
    }
    println!("server_panics: {panics}");
    println!("server_alive_at_end: {alive}");
    println!("server_exit: {status}");
    println!("responses_5xx: {}", totals.fivexx);
    for (k, v) in &totals.fivexx_by {
        println!("  5xx_{k}: {v}");
    }
    println!("5xx_unexpected: {}", totals.unexpected);
    for s in &totals.unexpected_samples {
        println!("  unexpected: {s}");
    }
    if totals.journal_dropped > 0 {
        println!("journal_entries_dropped: {}", totals.journal_dropped);
    }
    println!(
        "vms_left_after_destroy: {} (and {} whose stop or delete task a fault failed)",
        totals.vms_left, totals.vms_left_asked
    );
    for s in &totals.vms_left_samples {
        println!("  vms_left: {s}");
    }
    println!("tenants_left: {left:?}");
    println!("server_rss_peak: {} MiB", mib(rss_peak));
    println!("server_rss_end: {} MiB", mib(rss_end));
    println!(
        "server_rss_end_over_baseline: {} MiB (tolerance {} MiB; baseline: after round 1)",
        mib(rss_end.saturating_sub(rss_baseline)),
        mib(RSS_TOLERANCE_KIB)
    );
    let later = totals.tenant_cycles.saturating_sub(baseline_cycles).max(1);
    println!(
        "server_rss_growth_per_tenant_cycle: {} bytes (after round 1)",
        rss_end.saturating_sub(rss_baseline) * 1024 / later
    );
    println!("server_fds_peak: {fds_peak}");
    println!("server_fds_end: {fds_end}");

    let mut failed = Vec::new();
    if panics > 0 {
        failed.push(format!("{panics} panics"));
    }
    if !alive || !status.success() {
        failed.push(format!(
            "the server died or failed (alive {alive}, {status})"
        ));
    }
    if totals.unexpected > 0 {
        failed.push(format!("{} unexpected 5xx", totals.unexpected));
    }
    if totals.vms_left > 0 {
        failed.push(format!(
            "{} VMs outlived their rollout's destroy",
            totals.vms_left
        ));
    }
    if left != Ok(0) {
        failed.push(format!("tenants left: {left:?}"));
    }
    if rss_end > rss_baseline + RSS_TOLERANCE_KIB {
        failed.push("resident memory not back to the baseline".into());
    }
    if fds_end > fds_start {
        failed.push(format!("{} descriptors leaked", fds_end - fds_start));
    }
    for e in totals.harness_errors.iter().take(10) {
        println!("  harness_error: {e}");
    }
    if !totals.harness_errors.is_empty() {
        failed.push(format!("{} harness errors", totals.harness_errors.len()));
    }
    if failed.is_empty() {
        println!("soak_verdict: pass");
        ExitCode::SUCCESS
    } else {
        println!("soak_verdict: FAIL ({})", failed.join("; "));
        for l in watch.tail.lock().iter() {
            println!("  server_stderr: {l}");
        }
        ExitCode::FAILURE
    }
}
