//! The journal of changes beside the state file: what a write costs is the change, not the
//! world.
//!
//! `state.json` is a snapshot, as of journal record `journal_seq`; `journal.jsonl` holds one
//! JSON record per line after it. A record carries, for every site, the site's small parts in
//! full (access, firewall, guest setup, random state, …) and, of its big maps — nodes (with
//! their storages and volumes), VMs, containers and tasks — only the entries set or removed
//! since the last record (the world's maps track that, `fake_proxmox_world::tracked`); besides,
//! the clock, the faults, the scenario and the control plane's snapshots taken since. A
//! record is appended before the requests it covers are answered, and fdatasynced before
//! them too with [`StateSync::Data`] (else within [`SYNC_EVERY`]). When the
//! journal has grown past a few times the snapshot's size, a new snapshot is written
//! (atomically, as before) and the journal emptied: a change costs its own size plus,
//! amortised, a constant share of a snapshot.
//!
//! Reading back: the snapshot, then every record numbered after it in order. A last line cut
//! short (the process died while appending) is dropped: its requests were never answered.
//! A bad line with good ones after it is corruption, and an error.

mod record;
pub mod replay;
mod sync;

use std::io::Write;
use std::path::{Path, PathBuf};

use super::WorldRef;
use super::file::{FILE, PersistError, write_atomic};
use crate::scenario::Scenario;
use crate::server::inner::Inner;
use fake_proxmox_world::tracked::Changes;
use record::{
    Maps, NodeVolumes, RecordRef, SiteRef, delta, nodes_delta, put_volumes_back, take_volumes,
};
use sync::Syncer;
pub use sync::{SYNC_EVERY, StateSync};

/// The journal's name in the state dir.
pub const JOURNAL: &str = "journal.jsonl";

/// Below this size the journal is never folded into a snapshot (a small world would
/// otherwise be rewritten every few changes).
const MIN_JOURNAL_BYTES: u64 = 4 << 20;

/// The journal is folded once it holds this many times the snapshot's bytes: a change then
/// costs at most a 1/FOLD_FACTOR share of a snapshot per byte, and a restart reads at most
/// this many snapshots' worth of records.
const FOLD_FACTOR: u64 = 4;

/// What the writer owes the disk next, made under the lock and written outside it.
pub enum Pending {
    /// A record to append.
    Record(Vec<u8>),
    /// A whole state, to replace `state.json` with (the journal emptied after).
    Snapshot(Vec<u8>),
}

/// The journal as the writer keeps it: the open file and what was written to it.
pub struct Journal {
    dir: PathBuf,
    file: std::fs::File,
    /// Bytes in the journal file.
    len: u64,
    /// The number of the last record made (written or owed).
    seq: u64,
    /// The size of the last snapshot: the journal is folded once it outgrows it.
    snapshot_len: u64,
    /// The scenario on disk (records repeat it only when it changed).
    scenario: Scenario,
    /// A write failed (what it drained is not on disk), or the journal outgrew the
    /// snapshot: the next write is a snapshot.
    fold: bool,
    /// When an appended record reaches the disk itself (see [`StateSync`]).
    sync: StateSync,
    /// With [`StateSync::Write`]: the thread that fdatasyncs what was appended since.
    syncer: Option<Syncer>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .field("seq", &self.seq)
            .finish()
    }
}

fn io(p: &Path) -> impl FnOnce(std::io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: p.to_path_buf(),
        source,
    }
}

/// Forget what every tracked map of the world has changed: a snapshot covers it.
fn forget_changes(inner: &mut Inner) {
    inner.snapshots.take_changes();
    for site in &mut inner.world.sites {
        for node in site.nodes.values_mut() {
            for st in node.storages.values_mut() {
                st.volumes.take_changes();
            }
        }
        site.nodes.take_changes();
        site.vms.take_changes();
        site.cts.take_changes();
        site.tasks.take_changes();
    }
}

impl Journal {
    /// Start journalling in `dir`: `inner` written as the snapshot, as of record `seq` (the
    /// last one read back), and the journal emptied. Done before anything is served.
    pub fn start(dir: &Path, inner: &mut Inner, seq: u64) -> Result<Journal, PersistError> {
        let bytes = super::encode_file(inner, seq);
        forget_changes(inner);
        write_atomic(dir, FILE, &bytes)?;
        let path = dir.join(JOURNAL);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        file.set_len(0).map_err(io(&path))?;
        file.sync_all().map_err(io(&path))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            file,
            len: 0,
            seq,
            snapshot_len: bytes.len() as u64,
            scenario: inner.world.scenario.clone(),
            fold: false,
            sync: StateSync::Data,
            syncer: None,
        })
    }

    /// Answer after a record is written, or only after it is synced (default of a journal
    /// made by `start`: [`StateSync::Data`]).
    pub fn with_sync(mut self, sync: StateSync) -> Result<Journal, PersistError> {
        let path = self.dir.join(JOURNAL);
        self.syncer = match sync {
            StateSync::Data => None,
            StateSync::Write => Some(
                self.file
                    .try_clone()
                    .and_then(Syncer::spawn)
                    .map_err(io(&path))?,
            ),
        };
        self.sync = sync;
        Ok(self)
    }

    /// What to write for the state `inner` holds now (under the lock): a record of what
    /// changed, or a snapshot when one is due.
    pub fn take(&mut self, inner: &mut Inner) -> Pending {
        if self.fold || self.len > (FOLD_FACTOR * self.snapshot_len).max(MIN_JOURNAL_BYTES) {
            self.fold = true;
            self.scenario = inner.world.scenario.clone();
            let bytes = super::encode_file(inner, self.seq);
            forget_changes(inner);
            return Pending::Snapshot(bytes);
        }
        self.seq += 1;
        let bytes = self.record(inner);
        Pending::Record(bytes)
    }

    fn record(&mut self, inner: &mut Inner) -> Vec<u8> {
        type Taken = (
            Maps,
            Changes<String>,
            Vec<NodeVolumes>,
            [Changes<u32>; 2],
            Changes<u64>,
        );
        let mut taken: Vec<Taken> = Vec::new();
        for site in &mut inner.world.sites {
            let mut maps = Maps::take(site);
            let nodes = maps.nodes.take_changes();
            let volumes = take_volumes(&mut maps.nodes, &nodes);
            let vms = maps.vms.take_changes();
            let cts = maps.cts.take_changes();
            let tasks = maps.tasks.take_changes();
            taken.push((maps, nodes, volumes, [vms, cts], tasks));
        }
        // Snapshots are taken whole and never changed; an import replaces them all.
        let snaps = inner.snapshots.take_changes();
        let new: Vec<&str> = inner
            .snapshots
            .keys()
            .filter(|k| snaps.all || snaps.keys.contains(*k))
            .map(String::as_str)
            .collect();
        let bytes = {
            let sites = inner
                .world
                .sites
                .iter()
                .zip(&taken)
                .map(|(site, (maps, nodes, volumes, [vms, cts], tasks))| {
                    let (next_task, task_map) = maps.tasks.parts();
                    SiteRef {
                        site,
                        nodes: nodes_delta(&maps.nodes, nodes, volumes),
                        vms: delta(vms, &maps.vms),
                        cts: delta(cts, &maps.cts),
                        next_task,
                        tasks: delta(tasks, task_map),
                    }
                })
                .collect();
            let rec = RecordRef {
                seq: self.seq,
                saved_at: inner.clock.now(),
                clock: inner.clock.mode(),
                faults: &inner.faults,
                scenario: (inner.world.scenario != self.scenario).then_some(&inner.world.scenario),
                sites,
                next_snapshot: inner.next_snapshot,
                snapshot_ids: inner.snapshots.keys().map(String::as_str).collect(),
                new_snapshots: new
                    .iter()
                    .filter_map(|k| {
                        let w = inner.snapshots.get(*k)?;
                        Some((
                            *k,
                            WorldRef {
                                scenario: &w.scenario,
                                sites: &w.sites,
                            },
                        ))
                    })
                    .collect(),
            };
            // As `encode`: every part serialises to JSON without error.
            serde_json::to_vec(&rec).unwrap_or_default()
        };
        if inner.world.scenario != self.scenario {
            self.scenario = inner.world.scenario.clone();
        }
        for (site, (mut maps, _, volumes, ..)) in inner.world.sites.iter_mut().zip(taken) {
            put_volumes_back(&mut maps.nodes, volumes);
            maps.put_back(site);
        }
        bytes
    }

    /// Write what `take` made (outside the lock). After a failure the next write is a
    /// snapshot: what the failed one drained from the world is nowhere else.
    pub fn write(&mut self, pending: Pending) -> Result<(), PersistError> {
        let r = match pending {
            Pending::Record(mut bytes) => {
                bytes.push(b'\n');
                self.append(&bytes)
            }
            Pending::Snapshot(bytes) => self.snapshot(&bytes),
        };
        if r.is_err() {
            self.fold = true;
        }
        r
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), PersistError> {
        let path = self.dir.join(JOURNAL);
        self.len += bytes.len() as u64;
        self.file.write_all(bytes).map_err(io(&path))?;
        match (&self.syncer, self.sync) {
            (Some(syncer), StateSync::Write) => {
                syncer.note_append();
                Ok(())
            }
            _ => self.file.sync_data().map_err(io(&path)),
        }
    }

    fn snapshot(&mut self, bytes: &[u8]) -> Result<(), PersistError> {
        write_atomic(&self.dir, FILE, bytes)?;
        // The records are in the snapshot now (it names the last one): a crash before the
        // journal is emptied leaves records the reader skips.
        let path = self.dir.join(JOURNAL);
        self.file.set_len(0).map_err(io(&path))?;
        self.file.sync_all().map_err(io(&path))?;
        self.len = 0;
        self.snapshot_len = bytes.len() as u64;
        self.fold = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
