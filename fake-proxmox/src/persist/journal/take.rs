//! What a record holds, taken out of the world under the lock as owned copies of the entries
//! that changed, so that serialising it (`encode`) happens after the lock is released: the
//! requests waiting on the lock pay for copying the change, not for writing it as JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use fake_proxmox_world::lxc::model::Ct;
use fake_proxmox_world::nodes::model::Node;
use fake_proxmox_world::qemu::model::Vm;
use fake_proxmox_world::storage::volumes::Volume;
use fake_proxmox_world::tasks::model::Task;
use fake_proxmox_world::tracked::{Changes, Tracked};

use super::record::Maps;
use crate::clock::ClockMode;
use crate::faults::Faults;
use crate::scenario::Scenario;
use crate::server::inner::Inner;
use crate::world::work::Work;
use crate::world::{Site, World};

/// The entries of one map to set (or, `full`, the whole map) and the keys to remove: the
/// same JSON as `record::DeltaOwned` reads.
#[derive(Serialize)]
pub(super) struct Delta<K: Ord, V> {
    pub(super) full: bool,
    pub(super) set: BTreeMap<K, V>,
    pub(super) del: Vec<K>,
}

impl<K: Ord + Clone, V: Clone> Delta<K, V> {
    /// Copies of the entries `changes` names (of every entry when all changed).
    fn of(changes: &Changes<K>, map: &BTreeMap<K, V>) -> Self {
        if changes.all {
            return Delta {
                full: true,
                set: map.clone(),
                del: Vec::new(),
            };
        }
        let mut d = Delta {
            full: false,
            set: BTreeMap::new(),
            del: Vec::new(),
        };
        for k in &changes.keys {
            match map.get(k) {
                Some(v) => {
                    d.set.insert(k.clone(), v.clone());
                }
                None => d.del.push(k.clone()),
            }
        }
        d
    }
}

/// A node that changed: a copy of it without its volumes, and per storage the volumes
/// that changed (all of them when the node's map changed as a whole).
pub(super) struct NodeTaken {
    pub(super) name: String,
    pub(super) node: Node,
    pub(super) volumes: Vec<(String, Delta<String, Volume>)>,
}

pub(super) struct NodesTaken {
    /// The nodes listed are all there are.
    pub(super) full: bool,
    pub(super) set: Vec<NodeTaken>,
    pub(super) del: Vec<String>,
}

/// One site's part of a record.
pub(super) struct SiteTaken {
    /// A copy of the site without its big maps: its small parts (access, firewall, …).
    pub(super) small: Site,
    pub(super) nodes: NodesTaken,
    pub(super) vms: Delta<u32, Vm>,
    pub(super) cts: Delta<u32, Ct>,
    pub(super) next_task: u64,
    pub(super) tasks: Delta<u64, Task<Work>>,
}

/// A record as taken under the lock, to serialise outside it.
pub struct Taken {
    pub(super) seq: u64,
    pub(super) saved_at: f64,
    pub(super) clock: ClockMode,
    pub(super) faults: Faults,
    /// Only when it changed since the last record (a reset or a new scenario).
    pub(super) scenario: Option<Scenario>,
    pub(super) sites: Vec<SiteTaken>,
    pub(super) next_snapshot: u64,
    pub(super) snapshot_ids: Vec<String>,
    /// The control-plane snapshots taken (or replaced) since the last record.
    pub(super) new_snapshots: Vec<(String, World)>,
}

/// Copy what changed in `inner` since the last record, and forget it there. `scenario`: the
/// scenario as the disk has it.
pub(super) fn take(inner: &mut Inner, seq: u64, scenario: &Scenario) -> Taken {
    let sites = inner.world.sites.iter_mut().map(take_site).collect();
    // Snapshots are taken whole and never changed; an import replaces them all.
    let snaps = inner.snapshots.take_changes();
    let new_snapshots = inner
        .snapshots
        .iter()
        .filter(|(k, _)| snaps.all || snaps.keys.contains(*k))
        .map(|(k, w)| (k.clone(), w.clone()))
        .collect();
    Taken {
        seq,
        saved_at: inner.clock.now(),
        clock: inner.clock.mode(),
        faults: inner.faults.clone(),
        scenario: (inner.world.scenario != *scenario).then(|| inner.world.scenario.clone()),
        sites,
        next_snapshot: inner.next_snapshot,
        snapshot_ids: inner.snapshots.keys().cloned().collect(),
        new_snapshots,
    }
}

fn take_site(site: &mut Site) -> SiteTaken {
    // The small parts are copied with the big maps out of the site (moved, not copied).
    let mut maps = Maps::take(site);
    let small = site.clone();
    let nodes = take_nodes(&mut maps.nodes);
    let vms = Delta::of(&maps.vms.take_changes(), &maps.vms);
    let cts = Delta::of(&maps.cts.take_changes(), &maps.cts);
    let tasks_changed = maps.tasks.take_changes();
    let (next_task, task_map) = maps.tasks.parts();
    let tasks = Delta::of(&tasks_changed, task_map);
    maps.put_back(site);
    SiteTaken {
        small,
        nodes,
        vms,
        cts,
        next_task,
        tasks,
    }
}

/// Copies of the nodes that changed, each without its volumes, and of the volumes that
/// changed on them; the nodes' and volumes' changes forgotten.
fn take_nodes(nodes: &mut Tracked<String, Node>) -> NodesTaken {
    let changes = nodes.take_changes();
    let names: Vec<String> = if changes.all {
        nodes.keys().cloned().collect()
    } else {
        changes.keys.iter().cloned().collect()
    };
    let mut out = NodesTaken {
        full: changes.all,
        set: Vec::new(),
        del: Vec::new(),
    };
    for name in names {
        // `get_mut` counts the node as changed again: forgotten below.
        let Some(node) = nodes.get_mut(&name) else {
            out.del.push(name);
            continue;
        };
        let mut volumes = Vec::new();
        let mut held = Vec::new();
        for (sname, st) in node.storages.iter_mut() {
            let ch = st.volumes.take_changes();
            let d = if changes.all {
                Delta::of(
                    &Changes {
                        all: true,
                        keys: Default::default(),
                    },
                    &st.volumes,
                )
            } else {
                Delta::of(&ch, &st.volumes)
            };
            volumes.push((sname.clone(), d));
            // Out of the node while it is copied: a storage may hold thousands of volumes.
            held.push(std::mem::take(&mut st.volumes));
        }
        let copy = node.clone();
        for (st, vols) in node.storages.values_mut().zip(held) {
            st.volumes = vols;
        }
        out.set.push(NodeTaken {
            name,
            node: copy,
            volumes,
        });
    }
    nodes.take_changes();
    out
}
