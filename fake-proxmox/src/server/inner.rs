//! What the server's lock guards: the world with its clock, faults, journal and snapshots.
//! Below the shared state and the state dir's writer, which both hold it.

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
