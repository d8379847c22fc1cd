//! A journal record as written (borrowing the world) and as read back (owned): per site its
//! small parts whole and the changed entries of its big maps.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use fake_proxmox_world::lxc::model::Ct;
use fake_proxmox_world::nodes::model::Node;
use fake_proxmox_world::qemu::model::Vm;
use fake_proxmox_world::storage::volumes::{Volume, Volumes};
use fake_proxmox_world::tasks::model::Task;
use fake_proxmox_world::tracked::{Changes, Tracked};

use crate::clock::ClockMode;
use crate::faults::Faults;
use crate::persist::{WorldOwned, WorldRef};
use crate::scenario::Scenario;
use crate::world::Site;
use crate::world::work::{TaskStore, Work};
/// The entries of one map to set (or, `full`, the whole map) and the keys to remove.
#[derive(Serialize)]
pub(super) struct DeltaRef<'a, K, V> {
    pub(super) full: bool,
    pub(super) set: BTreeMap<&'a K, &'a V>,
    pub(super) del: Vec<&'a K>,
}

pub(super) fn delta_all<K: Ord, V>(map: &BTreeMap<K, V>) -> DeltaRef<'_, K, V> {
    DeltaRef {
        full: true,
        set: map.iter().collect(),
        del: Vec::new(),
    }
}

pub(super) fn delta<'a, K: Ord, V>(
    changes: &'a Changes<K>,
    map: &'a BTreeMap<K, V>,
) -> DeltaRef<'a, K, V> {
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
#[derive(Serialize)]
pub(super) struct NodesRef<'a> {
    pub(super) full: bool,
    pub(super) set: BTreeMap<&'a String, NodeRef<'a>>,
    pub(super) del: Vec<&'a String>,
}

#[derive(Serialize)]
pub(super) struct NodeRef<'a> {
    pub(super) node: &'a Node,
    pub(super) volumes: BTreeMap<&'a String, DeltaRef<'a, String, Volume>>,
}

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
    pub(super) node: Node,
    pub(super) volumes: BTreeMap<String, DeltaOwned<String, Volume>>,
}

impl NodesOwned {
    pub(super) fn apply(self, nodes: &mut BTreeMap<String, Node>) {
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
pub(super) struct NodeVolumes {
    pub(super) node: String,
    pub(super) full: bool,
    pub(super) storages: Vec<(String, Volumes, Changes<String>)>,
}

/// Take the volumes out of the nodes `changes` names (every node when all changed).
pub(super) fn take_volumes(
    nodes: &mut Tracked<String, Node>,
    changes: &Changes<String>,
) -> Vec<NodeVolumes> {
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

pub(super) fn put_volumes_back(nodes: &mut Tracked<String, Node>, taken: Vec<NodeVolumes>) {
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

pub(super) fn nodes_delta<'a>(
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
pub(super) struct SiteRef<'a> {
    /// The site with its big maps taken out (they serialise empty).
    pub(super) site: &'a Site,
    pub(super) nodes: NodesRef<'a>,
    pub(super) vms: DeltaRef<'a, u32, Vm>,
    pub(super) cts: DeltaRef<'a, u32, Ct>,
    pub(super) next_task: u64,
    pub(super) tasks: DeltaRef<'a, u64, Task<Work>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SiteOwned {
    pub(super) site: Site,
    pub(super) nodes: NodesOwned,
    pub(super) vms: DeltaOwned<u32, Vm>,
    pub(super) cts: DeltaOwned<u32, Ct>,
    pub(super) next_task: u64,
    pub(super) tasks: DeltaOwned<u64, Task<Work>>,
}

#[derive(Serialize)]
pub(super) struct RecordRef<'a> {
    pub(super) seq: u64,
    pub(super) saved_at: f64,
    pub(super) clock: ClockMode,
    pub(super) faults: &'a Faults,
    /// Only when it changed (a reset or a new scenario).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) scenario: Option<&'a Scenario>,
    pub(super) sites: Vec<SiteRef<'a>>,
    pub(super) next_snapshot: u64,
    /// Every control-plane snapshot there is; the ones taken (or replaced) since, in full.
    pub(super) snapshot_ids: Vec<&'a str>,
    pub(super) new_snapshots: BTreeMap<&'a str, WorldRef<'a>>,
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

/// A site's big maps, taken out of it (and put back) around writing its small parts.
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
