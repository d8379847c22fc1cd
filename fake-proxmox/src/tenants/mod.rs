//! Tenants: many isolated fakes in one server. `POST /_fake/tenants` on the host server starts
//! a whole new world (its own listeners on ephemeral ports of the host's bind address, its own
//! state, clock, journal, faults and snapshots) from the server's scenario or a given one;
//! `DELETE` stops its listeners and drops its world; a tenant with no request on its listeners
//! for longer than its idle limit is reaped. One server can so serve a CI fleet, one world per
//! job.
//!
//! This module keeps the registry; the server builds the worlds (`server::tenant_host`)
//! behind [`TenantWorld`], so this module does not depend on the server.
//!
//! Limits: tenants live in memory only (a `--state-dir` keeps the host's world, never a
//! tenant's); they run on the simulated backend and simulated disks whatever the host runs; a
//! tenant cannot create tenants.

pub mod model;
pub mod routes;

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use rand::Rng;

use crate::clock::ClockMode;
use crate::control::ControlToken;
use crate::scenario::{Backend, Scenario};
pub use model::{
    CertChoice, TenantError, TenantInfo, TenantRequest, TenantSite, TenantToken, TenantUser,
};

/// How often the reaper looks for idle tenants: a tenant goes at most this long after its limit.
const REAP_EVERY: Duration = Duration::from_millis(500);
/// How many deleted-by-the-reaper ids are remembered, to tell their users why they are gone.
const REMEMBER_REAPED: usize = 1024;
const MAX_NAME: usize = 128;

/// The host server's limits on tenants.
#[derive(Clone, Copy, Debug)]
pub struct TenantLimits {
    /// Live tenants at most; more are refused with 429.
    pub max: usize,
    /// The idle limit of a tenant that asks for none.
    pub idle_timeout: Duration,
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            max: 256,
            idle_timeout: Duration::from_secs(1800),
        }
    }
}

/// The last request on a tenant's listeners, and how many are being answered.
pub struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new(epoch: Instant) -> Self {
        Activity {
            epoch,
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn stamp(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// A request begins; it is active until the guard drops (a request held by a fault's
    /// latency for longer than the idle limit does not get its tenant reaped).
    pub fn begin(self: &Arc<Self>) -> ActivityGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.stamp();
        ActivityGuard(self.clone())
    }

    fn last(&self) -> Duration {
        Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// How long nothing has happened; `None` while a request is being answered.
    fn idle(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        Some(self.epoch.elapsed().saturating_sub(self.last()))
    }
}

/// Marks one request on a tenant's listeners as in flight (from [`Activity::begin`]); while
/// any guard lives the tenant is not idle, and dropping it stamps the time of last activity.
pub struct ActivityGuard(Arc<Activity>);

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.0.stamp();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the server needs to start a tenant's world.
pub struct WorldSpec {
    /// The checked scenario: the request's or the server's, with the requested PVE release
    /// already applied to every site; it has at least one site and none on the lab backend.
    pub scenario: Scenario,
    /// Whether the world's listeners reuse the server's certificate or make their own.
    pub certificate: CertChoice,
    /// The world's clock: the request's mode, else the server's.
    pub clock: ClockMode,
    /// Every request on the world's listeners stamps it.
    pub activity: Arc<Activity>,
    /// The token its control plane requires: its own, never the server's.
    pub control_token: ControlToken,
}

/// A tenant's running world, as the server started it.
pub trait TenantWorld: Send + Sync {
    /// Its sites: listeners, fingerprints, credentials.
    fn sites(&self) -> Vec<TenantSite>;
    /// Stop its listeners (done when the future is) and drop it.
    fn stop(self: Box<Self>) -> BoxFuture<'static, ()>;
    /// Its state, weakly: gone once everything of the world is freed.
    fn probe(&self) -> WorldProbe;
}

/// Starts a tenant's world (the server's builder behind it).
pub type Spawn = Box<dyn Fn(WorldSpec) -> Result<Box<dyn TenantWorld>, TenantError> + Send + Sync>;

/// Whether a world's state is still in memory (for tests of deletion).
#[derive(Clone)]
pub struct WorldProbe(pub Weak<dyn Any + Send + Sync>);

impl WorldProbe {
    /// True while anything still holds the world's state; false once it is freed.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

struct Entry {
    name: Option<String>,
    certificate: CertChoice,
    idle_timeout: Duration,
    created_unix: f64,
    activity: Arc<Activity>,
    control_token: ControlToken,
    sites: Vec<TenantSite>,
    world: Box<dyn TenantWorld>,
}

impl Entry {
    fn info(&self, id: &str) -> TenantInfo {
        TenantInfo {
            id: id.to_string(),
            name: self.name.clone(),
            certificate: self.certificate,
            idle_timeout_secs: self.idle_timeout.as_secs(),
            created: self.created_unix,
            last_active: self.created_unix + self.activity.last().as_secs_f64(),
            control_token: self.control_token.as_str().to_string(),
            sites: self.sites.clone(),
        }
    }
}

#[derive(Default)]
struct Registry {
    live: BTreeMap<String, Entry>,
    /// Slots taken by tenants being started (the limit counts them).
    starting: usize,
    closed: bool,
    /// Ids the reaper deleted, with the limit they passed, newest last.
    reaped: VecDeque<(String, u64)>,
}

/// The host server's tenants.
pub struct Tenants {
    spawn: Spawn,
    default_scenario: Scenario,
    default_clock: ClockMode,
    limits: TenantLimits,
    reg: Mutex<Registry>,
    reaper: AtomicBool,
}

impl Tenants {
    /// Tenants made by `spawn`; those that ask for nothing else get `scenario` and `clock`.
    pub fn new(
        spawn: Spawn,
        scenario: Scenario,
        clock: ClockMode,
        limits: TenantLimits,
    ) -> Arc<Tenants> {
        Arc::new(Tenants {
            spawn,
            default_scenario: scenario,
            default_clock: clock,
            limits,
            reg: Mutex::new(Registry::default()),
            reaper: AtomicBool::new(false),
        })
    }

    /// The limits the host server was started with (`--max-tenants`,
    /// `--tenant-idle-timeout`).
    pub fn limits(&self) -> TenantLimits {
        self.limits
    }

    /// Check a request and make the world's spec of it.
    fn spec(&self, req: TenantRequest) -> Result<(WorldSpec, Duration), TenantError> {
        let bad = |m: String| TenantError::BadRequest(m);
        let mut scenario = match &req.scenario {
            Some(yaml) => Scenario::from_yaml_str(yaml).map_err(|e| bad(e.to_string()))?,
            None => self.default_scenario.clone(),
        };
        if let Some(v) = req.pve_version {
            for site in &mut scenario.sites {
                site.version = v;
            }
        }
        if scenario.sites.is_empty() {
            return Err(bad("the scenario has no sites".into()));
        }
        if let Some(s) = scenario
            .sites
            .iter()
            .find(|s| s.uses_backend(Backend::Lab, Backend::Simulated))
        {
            return Err(bad(format!(
                "site '{}' asks for the lab backend; tenants run on the simulated backend only",
                s.name
            )));
        }
        let idle = match req.idle_timeout_secs {
            None => self.limits.idle_timeout,
            Some(0) => return Err(bad("idle_timeout_secs must be at least 1".into())),
            Some(s) => Duration::from_secs(s),
        };
        if let Some(ClockMode::Scaled { factor }) = req.clock
            && !(factor.is_finite() && factor > 0.0)
        {
            return Err(bad("a scaled clock needs a factor > 0".into()));
        }
        if let Some(n) = &req.name
            && (n.chars().count() > MAX_NAME || n.chars().any(char::is_control))
        {
            return Err(bad(format!(
                "name must be at most {MAX_NAME} characters, none of them control characters"
            )));
        }
        let spec = WorldSpec {
            scenario,
            certificate: req.certificate.unwrap_or_default(),
            clock: req.clock.unwrap_or(self.default_clock),
            activity: Arc::new(Activity::new(Instant::now())),
            control_token: ControlToken::generate(),
        };
        Ok((spec, idle))
    }

    /// Start a tenant (within the server's tokio runtime). Refused when the request is
    /// invalid (400), the limit is reached (429), or the server is shutting down (503).
    pub async fn create(self: &Arc<Self>, req: TenantRequest) -> Result<TenantInfo, TenantError> {
        let name = req.name.clone();
        let (spec, idle_timeout) = self.spec(req)?;
        {
            let mut reg = self.reg.lock();
            if reg.closed {
                return Err(TenantError::Closed);
            }
            if reg.live.len() + reg.starting >= self.limits.max {
                return Err(TenantError::Limit(self.limits.max));
            }
            reg.starting += 1;
        }
        let certificate = spec.certificate;
        let activity = spec.activity.clone();
        let control_token = spec.control_token.clone();
        let started = (self.spawn)(spec);
        let mut reg = self.reg.lock();
        reg.starting -= 1;
        let world = started?;
        if reg.closed {
            drop(reg);
            tokio::spawn(world.stop());
            return Err(TenantError::Closed);
        }
        let mut id = new_id();
        while reg.live.contains_key(&id) {
            id = new_id();
        }
        let entry = Entry {
            name,
            certificate,
            idle_timeout,
            created_unix: unix_now(),
            activity,
            control_token,
            sites: world.sites(),
            world,
        };
        let info = entry.info(&id);
        reg.live.insert(id, entry);
        drop(reg);
        self.start_reaper();
        Ok(info)
    }

    /// Every live tenant, ordered by id (tenants still being started are not listed).
    pub fn list(&self) -> Vec<TenantInfo> {
        let reg = self.reg.lock();
        reg.live.iter().map(|(id, e)| e.info(id)).collect()
    }

    /// The live tenant `id`; [`TenantError::Reaped`] if the reaper deleted it recently,
    /// else [`TenantError::NotFound`].
    pub fn get(&self, id: &str) -> Result<TenantInfo, TenantError> {
        let reg = self.reg.lock();
        match reg.live.get(id) {
            Some(e) => Ok(e.info(id)),
            None => Err(gone(&reg, id)),
        }
    }

    /// The tenant's world, weakly (tests check that a deleted one is freed).
    pub fn probe(&self, id: &str) -> Option<WorldProbe> {
        self.reg.lock().live.get(id).map(|e| e.world.probe())
    }

    /// Stop the tenant's listeners (they refuse connections once this returns) and drop
    /// its world.
    pub async fn delete(&self, id: &str) -> Result<(), TenantError> {
        let entry = {
            let mut reg = self.reg.lock();
            match reg.live.remove(id) {
                Some(e) => e,
                None => return Err(gone(&reg, id)),
            }
        };
        entry.world.stop().await;
        Ok(())
    }

    /// Delete every tenant idle past its limit; their ids.
    pub async fn reap_idle(&self) -> Vec<String> {
        let idle: Vec<(String, Entry)> = {
            let mut reg = self.reg.lock();
            let ids: Vec<String> = reg
                .live
                .iter()
                .filter(|(_, e)| e.activity.idle().is_some_and(|d| d > e.idle_timeout))
                .map(|(id, _)| id.clone())
                .collect();
            let mut out = Vec::new();
            for id in ids {
                if let Some(e) = reg.live.remove(&id) {
                    reg.reaped.push_back((id.clone(), e.idle_timeout.as_secs()));
                    out.push((id, e));
                }
            }
            while reg.reaped.len() > REMEMBER_REAPED {
                reg.reaped.pop_front();
            }
            out
        };
        let mut ids = Vec::new();
        for (id, e) in idle {
            tracing::info!(tenant = %id, "reaped: idle past its limit");
            e.world.stop().await;
            ids.push(id);
        }
        ids
    }

    /// Stop every tenant and refuse new ones (the host server stops).
    pub async fn shutdown(&self) {
        let all: Vec<Entry> = {
            let mut reg = self.reg.lock();
            reg.closed = true;
            std::mem::take(&mut reg.live).into_values().collect()
        };
        futures::future::join_all(all.into_iter().map(|e| e.world.stop())).await;
    }

    /// The reaper runs from the first tenant on, until the server's tenants are dropped or
    /// shut down.
    fn start_reaper(self: &Arc<Self>) {
        if self.reaper.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REAP_EVERY).await;
                let Some(tenants) = weak.upgrade() else {
                    return;
                };
                if tenants.reg.lock().closed {
                    return;
                }
                tenants.reap_idle().await;
            }
        });
    }
}

/// Why `id` is not live: reaped (and after how long), or unknown.
fn gone(reg: &Registry, id: &str) -> TenantError {
    match reg.reaped.iter().rev().find(|(r, _)| r == id) {
        Some((_, secs)) => TenantError::Reaped {
            id: id.to_string(),
            secs: *secs,
        },
        None => TenantError::NotFound(id.to_string()),
    }
}

fn new_id() -> String {
    format!("t{:016x}", rand::rng().random::<u64>())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The users and tokens of a scenario site, as a tenant's answer lists them.
pub fn credentials(site: &crate::scenario::SiteSpec) -> (Vec<TenantUser>, Vec<TenantToken>) {
    let users = site
        .users
        .iter()
        .map(|u| TenantUser {
            userid: u.userid.clone(),
            password: u.password.clone(),
        })
        .collect();
    let tokens = site
        .tokens
        .iter()
        .map(|t| TenantToken {
            tokenid: t.tokenid.clone(),
            secret: t.secret.clone(),
        })
        .collect();
    (users, tokens)
}
