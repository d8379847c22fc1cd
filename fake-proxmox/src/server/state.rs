//! Shared server state: the world under one lock, with the clock, faults and journal.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::{Clock, ClockMode};
use crate::faults::Faults;
use crate::journal::Journal;
use crate::scenario::{Backend, Scenario};
use crate::world::{Runners, World};

pub struct Inner {
    pub clock: Clock,
    pub world: World,
    pub faults: Faults,
    pub journal: Journal,
    pub snapshots: BTreeMap<String, World>,
    pub next_snapshot: u64,
}

impl Inner {
    /// Bring the world up to the clock's present and return that time.
    pub fn now(&mut self) -> f64 {
        let now = self.clock.now();
        self.world.tick(now);
        now
    }
}

pub struct Shared {
    pub inner: Mutex<Inner>,
    pub auth_failure_delay: bool,
}

pub type SharedRef = Arc<Shared>;

impl Shared {
    pub fn new(
        scenario: &Scenario,
        clock: ClockMode,
        auth_failure_delay: bool,
        default: Runners,
        other: Option<(Backend, Runners)>,
    ) -> SharedRef {
        let clock = Clock::new(clock);
        let world = World::from_scenario_with(scenario, clock.now(), default, other);
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                clock,
                world,
                faults: Faults::new(scenario.seed),
                journal: Journal::default(),
                snapshots: BTreeMap::new(),
                next_snapshot: 1,
            }),
            auth_failure_delay,
        })
    }
}

/// The axum state of one site's listener.
#[derive(Clone)]
pub struct SiteCtx {
    pub shared: SharedRef,
    pub site: String,
}
