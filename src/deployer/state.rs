//! The rollout's state: a snapshot file plus a journal beside it, so a run killed at any moment
//! leaves either the previous or the next state of each record, never half of one.
//!
//! - `state.json` is the snapshot: one JSON document, written atomically (temp file + rename). It
//!   carries the generation it holds.
//! - `state.json.journal` holds one JSON line per changed record, appended and flushed on every
//!   `persist`. Rewriting the whole snapshot on every change made a 10,000-VM rollout spend more
//!   CPU on its state than on its API calls; a line per change keeps `persist` proportional to
//!   what changed.
//! - `checkpoint` (at the end of every run, and whenever the journal outgrows the snapshot) folds
//!   the journal into a new snapshot and empties it. Readers that open the state replay the
//!   journal's lines newer than the snapshot; a torn last line (a kill mid-write) is dropped.
//!
//! The record that matters for resuming is written *before* the create call: the VMID about to be
//! used. A resumed run looks for that VMID (and for the name) before creating anything.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

pub const STATE_VERSION: u32 = 1;

/// How far a VM got. Ordered: a later stage implies the earlier ones happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    #[default]
    Pending,
    /// The VMID is chosen and the create call may have been sent.
    Creating,
    /// The create task finished OK (disk imported).
    Created,
    /// Disk resized, cloud-init in place.
    Configured,
    Started,
    /// Running, monitored.
    Ready,
    Failed,
    Destroyed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// "True" or "False", as Kubernetes conditions.
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(kind: &str, ok: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_string(),
            status: if ok { "True" } else { "False" }.to_string(),
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    /// A VM or a container; absent (a VM) in state files written before containers.
    #[serde(default, skip_serializing_if = "is_vm")]
    pub kind: crate::deployer::guest::GuestKind,
    pub name: String,
    pub site: String,
    pub node: String,
    #[serde(default)]
    pub manifest: String,
    #[serde(default)]
    pub vmid: Option<u32>,
    #[serde(default)]
    pub stage: Stage,
    /// This rollout created the VM (so it may delete it on failure or `destroy`).
    #[serde(default)]
    pub created_here: bool,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub error: Option<ErrorRecord>,
}

fn is_vm(k: &crate::deployer::guest::GuestKind) -> bool {
    *k == crate::deployer::guest::GuestKind::Vm
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub reason: String,
    pub message: String,
    pub retryable: bool,
}

impl VmRecord {
    /// Replaces the condition of the same type.
    pub fn set_condition(&mut self, c: Condition) {
        self.conditions.retain(|x| x.kind != c.kind);
        self.conditions.push(c);
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    pub version: u32,
    /// The last change this snapshot holds; journal lines up to it are already in it.
    #[serde(default)]
    pub generation: u64,
    /// Keyed `site/name`.
    pub vms: BTreeMap<String, VmRecord>,
}

/// One journal line: a record's new value, or its removal.
#[derive(Debug, Serialize, Deserialize)]
struct JournalLine {
    #[serde(rename = "g")]
    generation: u64,
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    record: Option<VmRecord>,
}

/// The journal of the snapshot at `path`.
pub fn journal_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".journal");
    path.with_file_name(name)
}

pub fn key(site: &str, name: &str) -> String {
    format!("{site}/{name}")
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state file {path} is not a provision-harness state: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

struct Inner {
    state: StateFile,
    /// Bumped on every change.
    generation: u64,
    /// Keys changed since their last journal line.
    dirty: BTreeSet<String>,
}

/// What the single writer keeps between calls.
struct Writer {
    /// The generation on disk (snapshot or journal).
    written: u64,
    /// Lines in the journal since the last checkpoint.
    journal_lines: usize,
}

/// Shared, persisted state. Writers coalesce: a `persist` that finds its change already on disk
/// (written by a concurrent caller) returns without writing again.
#[derive(Clone)]
pub struct StateStore {
    path: Option<PathBuf>,
    inner: Arc<std::sync::Mutex<Inner>>,
    writer: Arc<Mutex<Writer>>,
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, detail: impl Into<String>) -> StateError {
    StateError::Corrupt {
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

/// The snapshot at `path` with its journal replayed, and how many journal lines there were.
fn load(path: &Path) -> Result<(StateFile, usize), StateError> {
    let mut state = if path.exists() {
        let text = std::fs::read_to_string(path).map_err(io_error(path))?;
        let s: StateFile = serde_json::from_str(&text).map_err(|e| corrupt(path, e.to_string()))?;
        if s.version != STATE_VERSION {
            return Err(corrupt(
                path,
                format!("version {} (expected {STATE_VERSION})", s.version),
            ));
        }
        s
    } else {
        StateFile {
            version: STATE_VERSION,
            generation: 0,
            vms: BTreeMap::new(),
        }
    };
    let journal = journal_path(path);
    let text = match std::fs::read_to_string(&journal) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((state, 0)),
        Err(e) => return Err(io_error(&journal)(e)),
    };
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let complete = text.ends_with('\n');
    let base = state.generation;
    for (i, line) in lines.iter().enumerate() {
        let last = i + 1 == lines.len();
        let entry: JournalLine = match serde_json::from_str(line) {
            Ok(e) => e,
            // Only the last line can be torn: the run was killed while appending it, and the
            // change it carried was never reported as saved.
            Err(_) if last && !complete => break,
            Err(e) => {
                return Err(corrupt(&journal, format!("line {}: {e}", i + 1)));
            }
        };
        if entry.generation <= base {
            continue;
        }
        state.generation = state.generation.max(entry.generation);
        match entry.record {
            Some(r) => {
                state.vms.insert(entry.key, r);
            }
            None => {
                state.vms.remove(&entry.key);
            }
        }
    }
    Ok((state, lines.len()))
}

impl StateStore {
    /// Opens (or starts) the state at `path`; `None` keeps state in memory only.
    pub fn open(path: Option<&Path>) -> Result<Self, StateError> {
        let (state, journal_lines) = match path {
            Some(p) => load(p)?,
            None => (
                StateFile {
                    version: STATE_VERSION,
                    generation: 0,
                    vms: BTreeMap::new(),
                },
                0,
            ),
        };
        let generation = state.generation;
        Ok(Self {
            path: path.map(Path::to_path_buf),
            inner: Arc::new(std::sync::Mutex::new(Inner {
                state,
                generation,
                dirty: BTreeSet::new(),
            })),
            writer: Arc::new(Mutex::new(Writer {
                written: generation,
                journal_lines,
            })),
        })
    }

    /// The state at `path` as a reader sees it (snapshot plus journal), without opening it for
    /// writing.
    pub fn read(path: &Path) -> Result<StateFile, StateError> {
        load(path).map(|(s, _)| s)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated (each update is one
        // insert), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<VmRecord> {
        self.lock().state.vms.get(key).cloned()
    }

    pub fn snapshot(&self) -> StateFile {
        self.lock().state.clone()
    }

    /// Changes one record in memory (creating it from `init` if absent).
    pub fn update(
        &self,
        key: &str,
        init: impl FnOnce() -> VmRecord,
        f: impl FnOnce(&mut VmRecord),
    ) {
        let mut g = self.lock();
        let rec = g.state.vms.entry(key.to_string()).or_insert_with(init);
        f(rec);
        g.generation += 1;
        g.dirty.insert(key.to_string());
    }

    pub fn remove(&self, key: &str) {
        let mut g = self.lock();
        g.state.vms.remove(key);
        g.generation += 1;
        g.dirty.insert(key.to_string());
    }

    /// Makes every change made so far durable: one journal line per changed record, or a new
    /// snapshot once the journal has grown past the snapshot's size.
    pub async fn persist(&self) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let wanted = self.lock().generation;
        let mut w = self.writer.lock().await;
        if w.written >= wanted {
            return Ok(());
        }
        let records = self.lock().state.vms.len();
        if w.journal_lines > JOURNAL_MIN.max(2 * records) {
            return self.write_snapshot(path, &mut w).await;
        }
        let (text, generation, keys) = {
            let mut g = self.lock();
            let generation = g.generation;
            let keys = std::mem::take(&mut g.dirty);
            let mut text = Vec::new();
            for key in &keys {
                let line = JournalLine {
                    generation,
                    key: key.clone(),
                    record: g.state.vms.get(key).cloned(),
                };
                serde_json::to_writer(&mut text, &line)
                    .map_err(|e| corrupt(path, e.to_string()))?;
                text.push(b'\n');
            }
            (text, generation, keys)
        };
        let journal = journal_path(path);
        let done = {
            let journal = journal.clone();
            tokio::task::spawn_blocking(move || append_synced(&journal, &text)).await
        };
        match done
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r)
        {
            Ok(()) => {
                w.written = generation;
                w.journal_lines += keys.len();
                Ok(())
            }
            Err(e) => {
                // Not on disk: the next persist writes these records again.
                self.lock().dirty.extend(keys);
                Err(io_error(&journal)(e))
            }
        }
    }

    /// Makes every change durable in the snapshot alone and empties the journal: what a run
    /// does when it ends, so the state file it leaves is the whole state.
    pub async fn checkpoint(&self) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut w = self.writer.lock().await;
        let journal_exists = journal_path(path).exists();
        if w.written >= self.lock().generation && !journal_exists && path.exists() {
            return Ok(());
        }
        self.write_snapshot(path, &mut w).await
    }

    /// A new snapshot of everything in memory, then an empty journal. A kill between the two
    /// leaves journal lines the snapshot already holds; readers skip them by generation.
    async fn write_snapshot(&self, path: &Path, w: &mut Writer) -> Result<(), StateError> {
        let (text, generation, keys) = {
            let mut g = self.lock();
            g.state.generation = g.generation;
            let text =
                serde_json::to_vec_pretty(&g.state).map_err(|e| corrupt(path, e.to_string()))?;
            (text, g.generation, std::mem::take(&mut g.dirty))
        };
        let target = path.to_path_buf();
        let journal = journal_path(path);
        let done = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            write_atomic(&target, &text)?;
            match std::fs::remove_file(&journal) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        match done {
            Ok(()) => {
                w.written = generation;
                w.journal_lines = 0;
                Ok(())
            }
            Err(e) => {
                self.lock().dirty.extend(keys);
                Err(io_error(path)(e))
            }
        }
    }
}

/// Below this many journal lines a checkpoint is never worth its full rewrite.
const JOURNAL_MIN: usize = 1024;

/// Appends `bytes` to the file at `path` (created if absent) and flushes them to disk.
fn append_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_data()
}

/// Write to a sibling temp file, flush it to disk, then rename over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn persists_and_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        s.update(&key("site-1", "a"), VmRecord::default, |r| {
            r.name = "a".into();
            r.vmid = Some(100);
            r.stage = Stage::Creating;
        });
        s.persist().await.expect("persist");
        s.checkpoint().await.expect("checkpoint");
        let again = StateStore::open(Some(&path)).expect("reopen");
        let r = again.get("site-1/a").expect("record");
        assert_eq!((r.vmid, r.stage), (Some(100), Stage::Creating));
        // Only the snapshot is left in the directory: the temp file was renamed and the journal
        // folded in.
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    fn record(vmid: u32, stage: Stage) -> impl FnOnce(&mut VmRecord) {
        move |r| {
            r.vmid = Some(vmid);
            r.stage = stage;
        }
    }

    #[tokio::test]
    async fn a_persist_appends_to_the_journal_and_a_reader_replays_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        s.update("site-1/a", VmRecord::default, record(100, Stage::Creating));
        s.persist().await.expect("persist");
        s.update("site-1/a", VmRecord::default, record(100, Stage::Created));
        s.update("site-1/b", VmRecord::default, record(101, Stage::Creating));
        s.persist().await.expect("persist");
        // A killed run leaves no snapshot, only the journal: three lines, one per change set.
        assert!(!path.exists());
        let text = std::fs::read_to_string(journal_path(&path)).expect("journal");
        assert_eq!(text.lines().count(), 3, "{text}");
        let seen = StateStore::read(&path).expect("read");
        assert_eq!(seen.vms["site-1/a"].stage, Stage::Created);
        assert_eq!(seen.vms["site-1/b"].vmid, Some(101));
        // A removal is journaled too.
        s.remove("site-1/b");
        s.persist().await.expect("persist");
        let seen = StateStore::read(&path).expect("read");
        assert!(!seen.vms.contains_key("site-1/b"));
    }

    #[tokio::test]
    async fn a_checkpoint_leaves_the_whole_state_in_the_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        s.update("site-1/a", VmRecord::default, record(100, Stage::Ready));
        s.persist().await.expect("persist");
        s.checkpoint().await.expect("checkpoint");
        assert!(!journal_path(&path).exists());
        let text = std::fs::read_to_string(&path).expect("snapshot");
        let plain: StateFile = serde_json::from_str(&text).expect("json");
        assert_eq!(plain.vms["site-1/a"].stage, Stage::Ready);
        // Reopened, changed and journaled again: the new lines win over the snapshot.
        let again = StateStore::open(Some(&path)).expect("reopen");
        again.update("site-1/a", VmRecord::default, |r| {
            r.stage = Stage::Destroyed
        });
        again.persist().await.expect("persist");
        let seen = StateStore::read(&path).expect("read");
        assert_eq!(seen.vms["site-1/a"].stage, Stage::Destroyed);
    }

    #[tokio::test]
    async fn journal_lines_the_snapshot_already_holds_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        s.update("site-1/a", VmRecord::default, record(100, Stage::Creating));
        s.persist().await.expect("persist");
        let stale = std::fs::read(journal_path(&path)).expect("journal");
        s.update("site-1/a", VmRecord::default, record(100, Stage::Ready));
        s.checkpoint().await.expect("checkpoint");
        // Killed between the snapshot's rename and the journal's removal.
        std::fs::write(journal_path(&path), stale).expect("write");
        let seen = StateStore::read(&path).expect("read");
        assert_eq!(seen.vms["site-1/a"].stage, Stage::Ready);
    }

    #[tokio::test]
    async fn a_torn_last_line_is_dropped_and_a_torn_middle_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        s.update("site-1/a", VmRecord::default, record(100, Stage::Creating));
        s.persist().await.expect("persist");
        let good = std::fs::read_to_string(journal_path(&path)).expect("journal");
        std::fs::write(
            journal_path(&path),
            format!("{good}{{\"g\":9,\"key\":\"site-1/b"),
        )
        .expect("write");
        let seen = StateStore::read(&path).expect("a torn tail is a kill mid-append");
        assert_eq!(seen.vms.len(), 1);
        assert_eq!(seen.vms["site-1/a"].vmid, Some(100));
        std::fs::write(journal_path(&path), format!("{{not json\n{good}")).expect("write");
        assert!(matches!(
            StateStore::open(Some(&path)),
            Err(StateError::Corrupt { .. })
        ));
    }

    #[tokio::test]
    async fn a_long_journal_is_folded_into_the_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        for i in 0..=(JOURNAL_MIN as u32 + 1) {
            s.update("site-1/a", VmRecord::default, record(i, Stage::Creating));
            s.persist().await.expect("persist");
        }
        let lines = std::fs::read_to_string(journal_path(&path))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        assert!(lines < JOURNAL_MIN, "{lines} journal lines");
        assert!(path.exists(), "the journal was folded into a snapshot");
        let seen = StateStore::read(&path).expect("read");
        assert_eq!(seen.vms["site-1/a"].vmid, Some(JOURNAL_MIN as u32 + 1));
    }

    #[test]
    fn corrupt_state_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{not json").expect("write");
        assert!(matches!(
            StateStore::open(Some(&path)),
            Err(StateError::Corrupt { .. })
        ));
    }
}
