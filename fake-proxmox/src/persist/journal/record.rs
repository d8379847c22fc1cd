//! A journal record as read back: per site its small parts (whole, or the fields that
//! changed) and the changed entries of its big maps (see `encode` for how it is written).

use std::collections::BTreeMap;

use serde::Deserialize;

use fake_proxmox_world::lxc::model::Ct;
use fake_proxmox_world::nodes::model::Node;
use fake_proxmox_world::qemu::model::Vm;
use fake_proxmox_world::storage::volumes::{Volume, Volumes};
use fake_proxmox_world::tasks::model::Task;
use fake_proxmox_world::tracked::Tracked;

use crate::clock::ClockMode;
use crate::faults::Faults;
use crate::persist::WorldOwned;
use crate::scenario::Scenario;
use crate::world::Site;
use crate::world::work::{TaskStore, Work};

/// The entries of one map to set (or, `full`, the whole map) and the keys to remove.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeltaOwned<K: Ord, V> {
    pub(super) full: bool,
    pub(super) set: BTreeMap<K, V>,
    pub(super) del: Vec<K>,
}

impl<K: Ord, V> DeltaOwned<K, V> {
    pub(super) fn apply(self, map: &mut BTreeMap<K, V>) {
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
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NodesOwned {
    pub(super) full: bool,
    pub(super) set: BTreeMap<String, NodeOwned>,
    pub(super) del: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NodeOwned {
    /// `None`: the node as it was, only its volumes changed.
    #[serde(default)]
    pub(super) node: Option<Node>,
    pub(super) volumes: BTreeMap<String, DeltaOwned<String, Volume>>,
}

impl NodesOwned {
    /// Apply on `nodes`; an error when a node said to be unchanged is not there.
    pub(super) fn apply(self, nodes: &mut BTreeMap<String, Node>) -> Result<(), String> {
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
            let mut node = match set.node {
                Some(node) => node,
                None => was
                    .take()
                    .ok_or_else(|| format!("node {name} is said unchanged but is not there"))?,
            };
            let mut deltas = set.volumes;
            for (sname, storage) in &mut node.storages {
                // The volumes the node had: in the old copy, or (unchanged node) in itself.
                let held = match was.as_mut().and_then(|w| w.storages.get_mut(sname)) {
                    Some(s) => &mut s.volumes,
                    None => &mut storage.volumes,
                };
                let mut vols = std::mem::take(held).into_map();
                if let Some(d) = deltas.remove(sname) {
                    d.apply(&mut vols);
                }
                storage.volumes = Volumes::from_map(vols);
            }
            nodes.insert(name, node);
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SiteOwned {
    /// The site's small parts as JSON: all of them, or with `patch` its `name` and the
    /// fields that changed since the last record.
    pub(super) site: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub(super) patch: bool,
    pub(super) nodes: NodesOwned,
    pub(super) vms: DeltaOwned<u32, Vm>,
    pub(super) cts: DeltaOwned<u32, Ct>,
    pub(super) next_task: u64,
    pub(super) tasks: DeltaOwned<u64, Task<Work>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecordOwned {
    pub(super) seq: u64,
    pub(super) saved_at: f64,
    pub(super) clock: ClockMode,
    pub(super) faults: Faults,
    #[serde(default)]
    pub(super) scenario: Option<Scenario>,
    pub(super) sites: Vec<SiteOwned>,
    pub(super) next_snapshot: u64,
    pub(super) snapshot_ids: Vec<String>,
    pub(super) new_snapshots: BTreeMap<String, WorldOwned>,
}

/// A site's big maps, taken out of it (and put back) around copying its small parts.
pub(super) struct Maps {
    pub(super) nodes: Tracked<String, Node>,
    pub(super) vms: Tracked<u32, Vm>,
    pub(super) cts: Tracked<u32, Ct>,
    pub(super) tasks: TaskStore,
}

impl Maps {
    pub(super) fn take(site: &mut Site) -> Maps {
        Maps {
            nodes: std::mem::take(&mut site.nodes),
            vms: std::mem::take(&mut site.vms),
            cts: std::mem::take(&mut site.cts),
            tasks: std::mem::take(&mut site.tasks),
        }
    }

    pub(super) fn put_back(self, site: &mut Site) {
        site.nodes = self.nodes;
        site.vms = self.vms;
        site.cts = self.cts;
        site.tasks = self.tasks;
    }
}
