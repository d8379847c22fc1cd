//! State that outlives the process.
//!
//! With a state dir, the whole durable state — the world (sites with their nodes, storages
//! and volumes, VMs, tasks, users, tokens, groups, roles, ACLs, realms and pools, firewall,
//! guest state), the faults, the clock and the control plane's snapshots — lives in
//! `STATE_DIR/state.json`, one JSON document with a `format` name and a `version`. The same
//! document is what `GET /_fake/state/export` returns and `POST /_fake/state/import` takes.
//!
//! Crash safety (see `writer` and `journal`): every request that may have changed the state
//! (any method but GET/HEAD, and a GET that completed tasks) is answered only after a state at
//! least that new is written: a journal record appended (and, with
//! [`journal::StateSync::Data`], fdatasynced), or now and then a whole snapshot written to a
//! temp file, fsynced, renamed over the old one, and the directory fsynced. One writer thread
//! writes for all requests waiting, so concurrent requests share a write (group commit).
//!
//! Not kept: the request journal (a log for test assertions, not part of the world, and
//! the largest thing to rewrite on every request) and the runtime handles (executors, disk
//! backends, lab processes), which the server that loads a state attaches again.

pub mod journal;
pub mod writer;

mod file;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::clock::ClockMode;
use crate::faults::Faults;
use crate::scenario::{Backend, Scenario};
use crate::server::inner::Inner;
use crate::world::{Runners, Site, World};

pub use file::{FILE, FORMAT, PersistError, VERSION, write_atomic};

#[derive(Serialize)]
struct WorldRef<'a> {
    scenario: &'a Scenario,
    sites: &'a [Site],
}

#[derive(Deserialize)]
struct WorldOwned {
    scenario: Scenario,
    sites: Vec<Site>,
}

#[derive(Serialize)]
struct StateRef<'a> {
    format: &'static str,
    version: u64,
    /// The simulated time the state was taken at.
    saved_at: f64,
    clock: ClockMode,
    world: WorldRef<'a>,
    faults: &'a Faults,
    snapshots: BTreeMap<&'a str, WorldRef<'a>>,
    next_snapshot: u64,
    /// In the state dir's file: the last journal record the state includes.
    #[serde(skip_serializing_if = "Option::is_none")]
    journal_seq: Option<u64>,
}

/// Read first, alone, so a file of another format or version is named as such rather than
/// failing on whatever field changed.
#[derive(Deserialize)]
struct Header {
    format: Option<String>,
    version: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateOwned {
    #[allow(dead_code)]
    format: String,
    #[allow(dead_code)]
    version: u64,
    saved_at: f64,
    clock: ClockMode,
    world: WorldOwned,
    faults: Faults,
    snapshots: BTreeMap<String, WorldOwned>,
    next_snapshot: u64,
    #[serde(default)]
    journal_seq: Option<u64>,
}

/// A state file read and checked, not yet attached to runners.
pub struct State {
    /// The simulated UNIX time the state was written at.
    pub saved_at: f64,
    /// The clock the state was written with, which a restart keeps.
    pub clock: ClockMode,
    scenario: Scenario,
    sites: Vec<Site>,
    faults: Faults,
    snapshots: BTreeMap<String, WorldOwned>,
    next_snapshot: u64,
    /// The last journal record read back (0 without a journal).
    pub journal_seq: u64,
}

/// The state as one JSON document (what the export returns). The caller holds the lock.
pub fn encode(inner: &Inner) -> Vec<u8> {
    encode_doc(inner, None)
}

/// The state as the state dir's snapshot: `encode`'s document naming the last journal
/// record it includes.
pub fn encode_file(inner: &Inner, journal_seq: u64) -> Vec<u8> {
    encode_doc(inner, Some(journal_seq))
}

fn encode_doc(inner: &Inner, journal_seq: Option<u64>) -> Vec<u8> {
    encode_parts(
        inner.clock.now(),
        inner.clock.mode(),
        &inner.world,
        &inner.faults,
        &inner.snapshots,
        inner.next_snapshot,
        journal_seq,
    )
}

fn encode_parts(
    saved_at: f64,
    clock: ClockMode,
    world: &World,
    faults: &Faults,
    snapshots: &BTreeMap<String, World>,
    next_snapshot: u64,
    journal_seq: Option<u64>,
) -> Vec<u8> {
    let doc = StateRef {
        format: FORMAT,
        version: VERSION,
        saved_at,
        clock,
        world: WorldRef {
            scenario: &world.scenario,
            sites: &world.sites,
        },
        faults,
        snapshots: snapshots
            .iter()
            .map(|(k, w)| {
                let r = WorldRef {
                    scenario: &w.scenario,
                    sites: &w.sites,
                };
                (k.as_str(), r)
            })
            .collect(),
        next_snapshot,
        journal_seq,
    };
    // Every type in the state serialises to JSON without error (string keys, finite
    // figures); an empty document would fail to read back rather than pass for a state.
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// The durable state copied out of the server's state (under its lock), to serialise after
/// the lock is released: copying a world costs a fraction of writing it as JSON.
pub struct Copied {
    saved_at: f64,
    clock: ClockMode,
    world: World,
    faults: Faults,
    snapshots: BTreeMap<String, World>,
    next_snapshot: u64,
}

impl Copied {
    /// A copy of what `inner` holds (the caller holds the lock).
    pub fn of(inner: &Inner) -> Copied {
        Copied {
            saved_at: inner.clock.now(),
            clock: inner.clock.mode(),
            world: inner.world.clone(),
            faults: inner.faults.clone(),
            snapshots: (*inner.snapshots).clone(),
            next_snapshot: inner.next_snapshot,
        }
    }

    /// As [`encode_file`] of the state copied.
    pub fn encode_file(&self, journal_seq: u64) -> Vec<u8> {
        encode_parts(
            self.saved_at,
            self.clock,
            &self.world,
            &self.faults,
            &self.snapshots,
            self.next_snapshot,
            Some(journal_seq),
        )
    }
}

/// Read a state document; a file of another format or version, or one that does not hold
/// a consistent world, is an error naming what is wrong.
pub fn decode(bytes: &[u8]) -> Result<State, PersistError> {
    checked(parse(bytes)?)
}

/// A state document read, not yet checked.
fn parse(bytes: &[u8]) -> Result<StateOwned, PersistError> {
    let header: Header = serde_json::from_slice(bytes)
        .map_err(|e| PersistError::NotState(format!("not a JSON object ({e})")))?;
    match header.format.as_deref() {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(PersistError::NotState(format!(
                "format is '{other}', expected '{FORMAT}'"
            )));
        }
        None => return Err(PersistError::NotState("no 'format' field".into())),
    }
    match header.version {
        Some(VERSION) => {}
        Some(found) => return Err(PersistError::Version { found }),
        None => return Err(PersistError::NotState("no 'version' field".into())),
    }
    serde_json::from_slice(bytes).map_err(|e| PersistError::Invalid(e.to_string()))
}

/// A state document checked for consistency.
fn checked(s: StateOwned) -> Result<State, PersistError> {
    if !s.saved_at.is_finite() {
        return Err(PersistError::Invalid("saved_at is not a number".into()));
    }
    check_world(&s.world).map_err(PersistError::Invalid)?;
    for (id, w) in &s.snapshots {
        check_world(w).map_err(|e| PersistError::Invalid(format!("snapshot {id}: {e}")))?;
    }
    Ok(State {
        saved_at: s.saved_at,
        clock: s.clock,
        scenario: s.world.scenario,
        sites: s.world.sites,
        faults: s.faults,
        snapshots: s.snapshots,
        next_snapshot: s.next_snapshot,
        journal_seq: s.journal_seq.unwrap_or(0),
    })
}

/// The references the model relies on: sites as the scenario lists them, VMs on nodes of
/// their site, VM ids matching their keys.
fn check_world(w: &WorldOwned) -> Result<(), String> {
    let want: Vec<&str> = w.scenario.sites.iter().map(|s| s.name.as_str()).collect();
    let have: Vec<&str> = w.sites.iter().map(|s| s.name.as_str()).collect();
    if want != have {
        return Err(format!(
            "sites {have:?} are not the scenario's sites {want:?}"
        ));
    }
    for site in &w.sites {
        for (vmid, vm) in &site.vms {
            if vm.vmid != *vmid {
                return Err(format!(
                    "site {}: VM {vmid} says it is {}",
                    site.name, vm.vmid
                ));
            }
            if !site.nodes.contains_key(&vm.node) {
                return Err(format!(
                    "site {}: VM {vmid} is on node '{}', which the site does not have",
                    site.name, vm.node
                ));
            }
        }
    }
    Ok(())
}

impl State {
    /// The scenario the state's world was built from.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Put the state into `inner` (the journal stays), run by the given runners; the clock
    /// resumes at the state's time (wall time if that is later and the clock is real).
    pub fn install(self, inner: &mut Inner, default: Runners, other: Option<(Backend, Runners)>) {
        let attach = |scenario: Scenario, sites: Vec<Site>| {
            World::reattached(scenario, sites, default.clone(), other.clone())
        };
        inner.clock = crate::clock::Clock::resume(self.clock, self.saved_at);
        inner.world = attach(self.scenario, self.sites);
        inner.faults = self.faults;
        inner.snapshots = self
            .snapshots
            .into_iter()
            .map(|(k, w)| (k, attach(w.scenario, w.sites)))
            .collect();
        inner.next_snapshot = self.next_snapshot;
    }
}

/// A server's shared state made from a state read back (an empty journal).
pub fn restored_inner(state: State, default: Runners, other: Option<(Backend, Runners)>) -> Inner {
    let empty = Scenario {
        seed: 0,
        sites: Vec::new(),
    };
    let mut inner = Inner {
        clock: crate::clock::Clock::new(state.clock),
        world: World::reattached(empty, Vec::new(), default.clone(), other.clone()),
        faults: Faults::new(0),
        journal: crate::journal::Journal::default(),
        snapshots: Default::default(),
        next_snapshot: 1,
        dirty: 0,
        limits: crate::server::limits::Limits::default(),
    };
    state.install(&mut inner, default, other);
    inner
}

/// After a restart: the tasks that were running when the old process died stop as PVE
/// shows a task whose worker died (see `Site::interrupt_running`), at the state's time.
pub fn interrupt_running(inner: &mut Inner, at: f64) -> usize {
    let mut n = 0;
    for site in &mut inner.world.sites {
        n += site.interrupt_running(at);
    }
    n
}

/// The state of `dir`, if it holds one: the state file, then the journal's records after
/// it (see `journal`).
pub fn load(dir: &Path) -> Result<Option<State>, PersistError> {
    let Some(bytes) = read_if_there(&dir.join(FILE))? else {
        return Ok(None);
    };
    let mut state = parse(&bytes)?;
    let after = state.journal_seq.unwrap_or(0);
    let last = match read_if_there(&dir.join(journal::JOURNAL))? {
        Some(j) => journal::replay::replay(&mut state, &j, after)?,
        None => after,
    };
    state.journal_seq = Some(last);
    checked(state).map(Some)
}

fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PersistError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}
