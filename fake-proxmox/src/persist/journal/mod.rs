//! The journal of changes beside the state file: what a write costs is the change, not the
//! world.
//!
//! `state.json` is a snapshot, as of journal record `journal_seq`; `journal.jsonl` holds one
//! JSON record per line after it. A record carries, for every site, the fields of the site's
//! small parts (access, firewall, guest setup, random state, …) that differ from what the
//! last record said (all of them in the first record after a snapshot) and, of its big maps
//! — nodes (with their storages and volumes), VMs, containers and tasks — only the entries
//! set or removed since the last record (the world's maps track that,
//! `fake_proxmox_world::tracked`), a node whose only change is its volumes without itself;
//! besides, the clock, the faults, the scenario when it changed and the control plane's
//! snapshots taken since (`encode` has the layout). A record is appended before the
//! requests it covers are answered, and fdatasynced before them too with
//! [`StateSync::Data`] (else within [`SYNC_EVERY`]). When the journal has grown past a few
//! times the snapshot's size, a new snapshot is written (atomically, as before) and the
//! journal emptied: a change costs its own size plus, amortised, a constant share of a
//! snapshot.
//!
//! Under the server's lock the writer only copies what changed (`take`: the changed
//! entries, each site's small parts without its big maps); serialising and comparing
//! happen after the lock is released, so requests wait on a copy, not on JSON.
//!
//! Reading back: the snapshot, then every record numbered after it in order. A last line cut
//! short (the process died while appending) is dropped: its requests were never answered.
//! A bad line with good ones after it is corruption, and an error.

mod encode;
mod fields;
mod record;
pub mod replay;
mod sync;
mod take;

use std::io::Write;
use std::path::{Path, PathBuf};

use super::file::{FILE, PersistError, write_atomic};
use crate::scenario::Scenario;
use crate::server::inner::Inner;
use encode::Written;
use sync::Syncer;
pub use sync::{SYNC_EVERY, StateSync};
pub use take::Taken;

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
    /// A record to append: what changed, copied out of the world, serialised by `write`.
    Record(Box<Taken>),
    /// A whole state, copied, to replace `state.json` with (the journal emptied after): the
    /// state and the last record it includes.
    Snapshot(Box<super::Copied>, u64),
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
    /// What the records since the last snapshot said (a record repeats none of it).
    written: Written,
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
            written: Written::default(),
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

    /// What to write for the state `inner` holds now (under the lock): a copy of what
    /// changed, or a snapshot when one is due.
    pub fn take(&mut self, inner: &mut Inner) -> Pending {
        if self.fold || self.len > (FOLD_FACTOR * self.snapshot_len).max(MIN_JOURNAL_BYTES) {
            self.fold = true;
            self.scenario = inner.world.scenario.clone();
            let copy = super::Copied::of(inner);
            forget_changes(inner);
            // The records after the snapshot compare with it, not with older records.
            self.written.clear();
            return Pending::Snapshot(Box::new(copy), self.seq);
        }
        self.seq += 1;
        let taken = take::take(inner, self.seq, &self.scenario);
        if let Some(sc) = &taken.scenario {
            self.scenario = sc.clone();
        }
        Pending::Record(Box::new(taken))
    }

    /// The record's line (without its newline).
    fn encode(&mut self, taken: Taken) -> Result<Vec<u8>, PersistError> {
        self.written
            .encode(taken)
            .map_err(|e| PersistError::Invalid(format!("writing a journal record: {e}")))
    }

    /// Write what `take` made (outside the lock). After a failure the next write is a
    /// snapshot: what the failed one drained from the world is nowhere else.
    pub fn write(&mut self, pending: Pending) -> Result<(), PersistError> {
        let r = match pending {
            Pending::Record(taken) => self.encode(*taken).and_then(|mut bytes| {
                bytes.push(b'\n');
                self.append(&bytes)
            }),
            Pending::Snapshot(copy, seq) => self.snapshot(&copy.encode_file(seq)),
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
