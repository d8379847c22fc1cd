//! Shared server state: the world under one lock, with the clock, faults and journal.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::{Clock, ClockMode};
use crate::faults::Faults;
use crate::journal::Journal;
use crate::scenario::{Backend, Scenario};
use crate::world::{Runners, World};

/// What the lock guards: everything a request may read or change.
pub struct Inner {
    /// The simulated clock every task and timestamp reads.
    pub clock: Clock,
    /// The sites, nodes, storages, guests and tasks.
    pub world: World,
    /// The fault rules the control plane set.
    pub faults: Faults,
    /// The requests answered, newest last.
    pub journal: Journal,
    /// Saved worlds by snapshot id (`/_fake/snapshot`), to restore; tracked
    /// (`fake_proxmox_world::tracked`): the state dir journals the snapshots taken.
    pub snapshots: fake_proxmox_world::tracked::Tracked<String, World>,
    /// The number the next snapshot id gets.
    pub next_snapshot: u64,
    /// Counts the changes to the state, for the state file (`persist::writer`): requests
    /// that may change it bump it, and so does completing tasks.
    pub dirty: u64,
    /// What this world may take (`server::limits`).
    pub limits: crate::server::limits::Limits,
}

impl Inner {
    /// The scenario's world, new, on a new clock.
    pub fn fresh(
        scenario: &Scenario,
        clock: ClockMode,
        default: Runners,
        other: Option<(Backend, Runners)>,
    ) -> Inner {
        let clock = Clock::new(clock);
        let world = World::from_scenario_with(scenario, clock.now(), default, other);
        Inner {
            clock,
            world,
            faults: Faults::new(scenario.seed),
            journal: Journal::default(),
            snapshots: Default::default(),
            next_snapshot: 1,
            dirty: 0,
            limits: crate::server::limits::Limits::default(),
        }
    }

    /// Apply `limits` (the journal and task lists shrink to them at once).
    pub fn set_limits(&mut self, limits: crate::server::limits::Limits) {
        self.limits = limits;
        self.journal.set_max(limits.max_journal);
        self.trim_tasks();
    }

    /// Forget the oldest finished tasks of every site past `max_tasks`.
    fn trim_tasks(&mut self) {
        let max = self.limits.max_tasks;
        for s in &mut self.world.sites {
            s.tasks.trim(max);
        }
    }

    /// Bring the world up to the clock's present and return that time.
    pub fn now(&mut self) -> f64 {
        let now = self.clock.now();
        let running = |w: &World| {
            w.sites
                .iter()
                .map(|s| s.tasks.running_count())
                .sum::<usize>()
        };
        let before = running(&self.world);
        self.world.tick(now);
        if running(&self.world) != before {
            self.dirty += 1;
        }
        self.trim_tasks();
        now
    }
}

/// The state of one fake (or tenant), shared by its listeners and background tasks.
pub struct Shared {
    /// The state, under one lock.
    pub inner: Mutex<Inner>,
    /// Failed authentications wait before their 401, as PVE's do.
    pub auth_failure_delay: bool,
    /// Set with a state dir: answers wait until the state they saw is durable.
    pub persist: Option<Arc<crate::persist::writer::Persister>>,
}

/// How the listeners hold the shared state.
pub type SharedRef = Arc<Shared>;

impl Shared {
    /// A new state from `scenario`'s world on a new clock, without a state dir; `default` runs
    /// the guests of the sites of the default backend, `other` those of another backend.
    pub fn new(
        scenario: &Scenario,
        clock: ClockMode,
        auth_failure_delay: bool,
        default: Runners,
        other: Option<(Backend, Runners)>,
    ) -> SharedRef {
        Arc::new(Shared {
            inner: Mutex::new(Inner::fresh(scenario, clock, default, other)),
            auth_failure_delay,
            persist: None,
        })
    }
}

impl Shared {
    /// The shared state around a ready `inner` (a state read back), with its persister.
    pub fn from_inner(
        inner: Inner,
        auth_failure_delay: bool,
        persist: Option<Arc<crate::persist::writer::Persister>>,
    ) -> SharedRef {
        Arc::new(Shared {
            inner: Mutex::new(inner),
            auth_failure_delay,
            persist,
        })
    }
}

/// The axum state of one site's listener.
#[derive(Clone)]
pub struct SiteCtx {
    /// The fake's state.
    pub shared: SharedRef,
    /// Shared, not owned: the context is cloned for every request.
    pub site: Arc<str>,
    /// The certificate the listener serves (self-signed: its own root), which the fake's
    /// nodes hand out where PVE hands out `/etc/pve/pve-root-ca.pem`. `None` for an app
    /// made without one (`server::app`).
    pub ca_pem: Option<Arc<str>>,
}
