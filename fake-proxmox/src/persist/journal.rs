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

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use fake_proxmox_world::lxc::model::Ct;
use fake_proxmox_world::nodes::model::Node;
use fake_proxmox_world::qemu::model::Vm;
use fake_proxmox_world::storage::volumes::{Volume, Volumes};
use fake_proxmox_world::tasks::model::Task;
use fake_proxmox_world::tracked::{Changes, Tracked};

use super::file::{FILE, PersistError, write_atomic};
use super::{StateOwned, WorldOwned, WorldRef};
use crate::clock::ClockMode;
use crate::faults::Faults;
use crate::scenario::Scenario;
use crate::server::inner::Inner;
use crate::world::Site;
use crate::world::work::{TaskStore, Work};

/// The journal's name in the state dir.
pub const JOURNAL: &str = "journal.jsonl";

/// Below this size the journal is never folded into a snapshot (a small world would
/// otherwise be rewritten every few changes).
const MIN_JOURNAL_BYTES: u64 = 4 << 20;

/// The journal is folded once it holds this many times the snapshot's bytes: a change then
/// costs at most a 1/FOLD_FACTOR share of a snapshot per byte, and a restart reads at most
/// this many snapshots' worth of records.
const FOLD_FACTOR: u64 = 4;

/// The entries of one map to set (or, `full`, the whole map) and the keys to remove.
#[derive(Serialize)]
struct DeltaRef<'a, K, V> {
    full: bool,
    set: BTreeMap<&'a K, &'a V>,
    del: Vec<&'a K>,
}

fn delta_all<K: Ord, V>(map: &BTreeMap<K, V>) -> DeltaRef<'_, K, V> {
    DeltaRef {
        full: true,
        set: map.iter().collect(),
        del: Vec::new(),
    }
}

fn delta<'a, K: Ord, V>(changes: &'a Changes<K>, map: &'a BTreeMap<K, V>) -> DeltaRef<'a, K, V> {
    if changes.all {
        return delta_all(map);
    }
    let mut d = DeltaRef {
        full: false,
        set: BTreeMap::new(),
        del: Vec::new(),
    };
    for k in &changes.keys {
        match map.get_key_value(k) {
            Some((k, v)) => {
                d.set.insert(k, v);
            }
            None => d.del.push(k),
        }
    }
    d
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaOwned<K: Ord, V> {
    full: bool,
    set: BTreeMap<K, V>,
    del: Vec<K>,
}

impl<K: Ord, V> DeltaOwned<K, V> {
    fn apply(self, map: &mut BTreeMap<K, V>) {
        if self.full {
            map.clear();
        }
        for k in &self.del {
            map.remove(k);
        }
        map.extend(self.set);
    }
}

/// The nodes set (each with its storages' volumes taken out, and of those only the ones
/// set or removed) and the nodes removed; `full`: the nodes listed are all there are.
#[derive(Serialize)]
struct NodesRef<'a> {
    full: bool,
    set: BTreeMap<&'a String, NodeRef<'a>>,
    del: Vec<&'a String>,
}

#[derive(Serialize)]
struct NodeRef<'a> {
    node: &'a Node,
    volumes: BTreeMap<&'a String, DeltaRef<'a, String, Volume>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesOwned {
    full: bool,
    set: BTreeMap<String, NodeOwned>,
    del: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeOwned {
    node: Node,
    volumes: BTreeMap<String, DeltaOwned<String, Volume>>,
}

impl NodesOwned {
    fn apply(self, nodes: &mut BTreeMap<String, Node>) {
        let mut old = if self.full {
            std::mem::take(nodes)
        } else {
            BTreeMap::new()
        };
        for k in &self.del {
            nodes.remove(k);
        }
        for (name, set) in self.set {
            let mut was = nodes.remove(&name).or_else(|| old.remove(&name));
            let mut node = set.node;
            let mut deltas = set.volumes;
            for (sname, storage) in &mut node.storages {
                let mut vols = was
                    .as_mut()
                    .and_then(|w| w.storages.get_mut(sname))
                    .map(|s| std::mem::take(&mut s.volumes).into_map())
                    .unwrap_or_default();
                if let Some(d) = deltas.remove(sname) {
                    d.apply(&mut vols);
                }
                storage.volumes = Volumes::from_map(vols);
            }
            nodes.insert(name, node);
        }
    }
}

/// A node's storages' volumes, taken out of the node while its record is written.
struct NodeVolumes {
    node: String,
    full: bool,
    storages: Vec<(String, Volumes, Changes<String>)>,
}

/// Take the volumes out of the nodes `changes` names (every node when all changed).
fn take_volumes(nodes: &mut Tracked<String, Node>, changes: &Changes<String>) -> Vec<NodeVolumes> {
    let names: Vec<String> = if changes.all {
        nodes.keys().cloned().collect()
    } else {
        changes.keys.iter().cloned().collect()
    };
    let mut out = Vec::new();
    for name in names {
        // `get_mut` counts the node as changed again; the caller forgets that afterwards.
        let Some(node) = nodes.get_mut(&name) else {
            continue;
        };
        let storages = node
            .storages
            .iter_mut()
            .map(|(sname, st)| {
                let mut vols = std::mem::take(&mut st.volumes);
                let ch = vols.take_changes();
                (sname.clone(), vols, ch)
            })
            .collect();
        out.push(NodeVolumes {
            node: name,
            full: changes.all,
            storages,
        });
    }
    out
}

fn put_volumes_back(nodes: &mut Tracked<String, Node>, taken: Vec<NodeVolumes>) {
    for nv in taken {
        let Some(node) = nodes.get_mut(&nv.node) else {
            continue;
        };
        for (sname, vols, _) in nv.storages {
            if let Some(st) = node.storages.get_mut(&sname) {
                st.volumes = vols;
            }
        }
    }
    nodes.take_changes();
}

fn nodes_delta<'a>(
    nodes: &'a BTreeMap<String, Node>,
    changes: &'a Changes<String>,
    taken: &'a [NodeVolumes],
) -> NodesRef<'a> {
    let mut d = NodesRef {
        full: changes.all,
        set: BTreeMap::new(),
        del: Vec::new(),
    };
    if !changes.all {
        d.del = changes
            .keys
            .iter()
            .filter(|k| !nodes.contains_key(*k))
            .collect();
    }
    for nv in taken {
        let Some((name, node)) = nodes.get_key_value(&nv.node) else {
            continue;
        };
        let volumes = nv
            .storages
            .iter()
            .map(|(sname, vols, ch)| {
                let d = if nv.full {
                    delta_all(vols)
                } else {
                    delta(ch, vols)
                };
                (sname, d)
            })
            .collect();
        d.set.insert(name, NodeRef { node, volumes });
    }
    d
}

#[derive(Serialize)]
struct SiteRef<'a> {
    /// The site with its big maps taken out (they serialise empty).
    site: &'a Site,
    nodes: NodesRef<'a>,
    vms: DeltaRef<'a, u32, Vm>,
    cts: DeltaRef<'a, u32, Ct>,
    next_task: u64,
    tasks: DeltaRef<'a, u64, Task<Work>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteOwned {
    site: Site,
    nodes: NodesOwned,
    vms: DeltaOwned<u32, Vm>,
    cts: DeltaOwned<u32, Ct>,
    next_task: u64,
    tasks: DeltaOwned<u64, Task<Work>>,
}

#[derive(Serialize)]
struct RecordRef<'a> {
    seq: u64,
    saved_at: f64,
    clock: ClockMode,
    faults: &'a Faults,
    /// Only when it changed (a reset or a new scenario).
    #[serde(skip_serializing_if = "Option::is_none")]
    scenario: Option<&'a Scenario>,
    sites: Vec<SiteRef<'a>>,
    next_snapshot: u64,
    /// Every control-plane snapshot there is; the ones taken (or replaced) since, in full.
    snapshot_ids: Vec<&'a str>,
    new_snapshots: BTreeMap<&'a str, WorldRef<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordOwned {
    seq: u64,
    saved_at: f64,
    clock: ClockMode,
    faults: Faults,
    #[serde(default)]
    scenario: Option<Scenario>,
    sites: Vec<SiteOwned>,
    next_snapshot: u64,
    snapshot_ids: Vec<String>,
    new_snapshots: BTreeMap<String, WorldOwned>,
}

/// A site's big maps, taken out of it (and put back) around writing its small parts.
struct Maps {
    nodes: Tracked<String, Node>,
    vms: Tracked<u32, Vm>,
    cts: Tracked<u32, Ct>,
    tasks: TaskStore,
}

impl Maps {
    fn take(site: &mut Site) -> Maps {
        Maps {
            nodes: std::mem::take(&mut site.nodes),
            vms: std::mem::take(&mut site.vms),
            cts: std::mem::take(&mut site.cts),
            tasks: std::mem::take(&mut site.tasks),
        }
    }

    fn put_back(self, site: &mut Site) {
        site.nodes = self.nodes;
        site.vms = self.vms;
        site.cts = self.cts;
        site.tasks = self.tasks;
    }
}

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

/// When a request that changed the state is answered, against what it survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateSync {
    /// Once its record is written to the journal file (`write(2)`): it survives the process
    /// dying any way (SIGKILL, a panic, the OOM killer), since the kernel holds the bytes.
    /// The file is fdatasynced within [`SYNC_EVERY`] after, so a power loss or kernel crash
    /// loses at most that much. The default: the harness's fake dies as a process, not as a
    /// machine, and one client no longer waits on the disk's sync latency for each change.
    #[default]
    Write,
    /// Once its record is fdatasynced: it survives a power loss too, at the cost of one
    /// sync (0.7–8 ms on the CI disk) for every request that waits alone.
    Data,
}

impl std::str::FromStr for StateSync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "write" => Ok(StateSync::Write),
            "data" => Ok(StateSync::Data),
            other => Err(format!("'{other}': expected write or data")),
        }
    }
}

/// How often [`StateSync::Write`]'s syncer fdatasyncs the journal when records were appended.
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The background fdatasync of [`StateSync::Write`]: a thread with its own handle of the
/// journal file, syncing it after appends; it syncs once more and ends with the journal.
#[derive(Debug)]
struct Syncer {
    appended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    closing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::Thread,
}

impl Syncer {
    fn spawn(file: std::fs::File) -> std::io::Result<Syncer> {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let appended = Arc::new(AtomicBool::new(false));
        let closing = Arc::new(AtomicBool::new(false));
        let (a, c) = (appended.clone(), closing.clone());
        let handle = std::thread::Builder::new()
            .name("fake-proxmox-sync".into())
            .spawn(move || {
                loop {
                    let last = c.load(Ordering::Acquire);
                    if a.swap(false, Ordering::AcqRel)
                        && let Err(e) = file.sync_data()
                    {
                        tracing::error!("syncing the state journal: {e}");
                    }
                    if last {
                        return;
                    }
                    std::thread::park_timeout(SYNC_EVERY);
                }
            })?;
        Ok(Syncer {
            appended,
            closing,
            thread: handle.thread().clone(),
        })
    }

    fn note_append(&self) {
        self.appended
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        self.thread.unpark();
    }
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

/// A site as replay keeps it: its small parts, and its big maps as plain maps.
struct SiteParts {
    site: Site,
    nodes: BTreeMap<String, Node>,
    vms: BTreeMap<u32, Vm>,
    cts: BTreeMap<u32, Ct>,
    next_task: u64,
    tasks: BTreeMap<u64, Task<Work>>,
}

impl SiteParts {
    fn split(mut site: Site) -> SiteParts {
        let Maps {
            nodes,
            vms,
            cts,
            tasks,
        } = Maps::take(&mut site);
        let (next_task, tasks) = tasks.into_parts();
        SiteParts {
            site,
            nodes: nodes.into_inner(),
            vms: vms.into_inner(),
            cts: cts.into_inner(),
            next_task,
            tasks,
        }
    }

    fn join(self) -> Result<Site, String> {
        let mut site = self.site;
        site.nodes = self.nodes.into();
        site.vms = self.vms.into();
        site.cts = self.cts.into();
        site.tasks = TaskStore::from_parts(self.next_task, self.tasks)
            .map_err(|e| format!("site {}: {e}", site.name))?;
        Ok(site)
    }
}

/// The records of a journal file after `after`, in order: each line one record; a last
/// line that does not read (cut short by a crash) is dropped. The number of the last record.
pub(super) fn replay(
    state: &mut StateOwned,
    bytes: &[u8],
    after: u64,
) -> Result<u64, PersistError> {
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // The piece after the last newline: empty, or a record whose write did not finish.
    let tail = lines.pop().unwrap_or_default();
    let mut last = after;
    let mut sites: Option<Vec<SiteParts>> = None;
    let n = lines.len();
    for (i, line) in lines.iter().enumerate() {
        let rec: RecordOwned = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(_) if i + 1 == n && tail.is_empty() => break,
            Err(e) => {
                return Err(PersistError::Invalid(format!(
                    "{JOURNAL} line {}: {e}",
                    i + 1
                )));
            }
        };
        if rec.seq <= after {
            continue;
        }
        if rec.seq != last + 1 {
            return Err(PersistError::Invalid(format!(
                "{JOURNAL} line {}: record {} follows record {last}",
                i + 1,
                rec.seq
            )));
        }
        last = rec.seq;
        let parts = sites.get_or_insert_with(|| {
            std::mem::take(&mut state.world.sites)
                .into_iter()
                .map(SiteParts::split)
                .collect()
        });
        apply(state, parts, rec);
    }
    if let Some(parts) = sites {
        state.world.sites = parts
            .into_iter()
            .map(SiteParts::join)
            .collect::<Result<_, _>>()
            .map_err(PersistError::Invalid)?;
    }
    Ok(last)
}

fn apply(state: &mut StateOwned, parts: &mut Vec<SiteParts>, rec: RecordOwned) {
    let mut old: BTreeMap<String, SiteParts> = std::mem::take(parts)
        .into_iter()
        .map(|p| (p.site.name.clone(), p))
        .collect();
    for s in rec.sites {
        let mut p = old.remove(&s.site.name).unwrap_or_else(|| SiteParts {
            site: s.site.clone(),
            nodes: BTreeMap::new(),
            vms: BTreeMap::new(),
            cts: BTreeMap::new(),
            next_task: 0,
            tasks: BTreeMap::new(),
        });
        p.site = s.site;
        s.nodes.apply(&mut p.nodes);
        s.vms.apply(&mut p.vms);
        s.cts.apply(&mut p.cts);
        s.tasks.apply(&mut p.tasks);
        p.next_task = s.next_task;
        parts.push(p);
    }
    state.saved_at = rec.saved_at;
    state.clock = rec.clock;
    state.faults = rec.faults;
    if let Some(sc) = rec.scenario {
        state.world.scenario = sc;
    }
    state.next_snapshot = rec.next_snapshot;
    let keep: BTreeSet<String> = rec.snapshot_ids.into_iter().collect();
    state.snapshots.retain(|k, _| keep.contains(k));
    state.snapshots.extend(rec.new_snapshots);
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
