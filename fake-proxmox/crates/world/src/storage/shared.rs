//! Shared storages (`shared: true`: NFS, CIFS, CephFS, RBD, …) as PVE's cluster-wide
//! `storage.cfg` has them: on every node of the site, with one set of volumes.
//!
//! Each node keeps its own record of a storage (and, with real disks, its own files); for a
//! shared one the site keeps the records equal: whatever changed one node's volumes (a
//! request, a task's end, the control plane) is copied to the others right after, and so
//! are the control plane's capacity and `full` settings.

use std::collections::BTreeMap;

use crate::scenario::{SiteSpec, StorageSpec};
use crate::storage::volumes::Volumes;
use crate::world::Site;

/// Each node's storages as the site has them: its own, and every shared storage of the
/// site — as first declared, with the volumes of all its declarations (first one wins).
pub fn node_storages(site: &SiteSpec) -> BTreeMap<String, Vec<StorageSpec>> {
    let mut shared: BTreeMap<String, StorageSpec> = BTreeMap::new();
    for s in site
        .nodes
        .iter()
        .flat_map(|n| &n.storages)
        .filter(|s| s.shared)
    {
        match shared.get_mut(&s.name) {
            None => {
                shared.insert(s.name.clone(), s.clone());
            }
            Some(first) => {
                for v in &s.volumes {
                    if !first.volumes.iter().any(|x| x.volname == v.volname) {
                        first.volumes.push(v.clone());
                    }
                }
            }
        }
    }
    site.nodes
        .iter()
        .map(|n| {
            let mut list: Vec<StorageSpec> =
                n.storages.iter().filter(|s| !s.shared).cloned().collect();
            list.extend(shared.values().cloned());
            (n.name.clone(), list)
        })
        .collect()
}

impl Site {
    /// A shared storage's capacity and `full` flag as `node`'s copy has them, on every node.
    pub fn share_settings(&mut self, node: &str, sid: &str) {
        let Some((full, total)) = self
            .node(node)
            .and_then(|n| n.storages.get(sid))
            .filter(|s| s.shared)
            .map(|s| (s.full, s.total))
        else {
            return;
        };
        for s in self
            .nodes
            .values_mut()
            .flat_map(|n| n.storages.values_mut())
        {
            if s.shared && s.name == sid {
                s.full = full;
                s.total = total;
            }
        }
    }

    /// Copy every shared storage's changed volumes to its other nodes.
    pub fn share_storages(&mut self) {
        // Read before the walk: a write during it (there is none: the site is borrowed
        // mutably) would count as unseen.
        let writes = crate::storage::volumes::writes();
        if self.shared_at_writes == Some(writes) {
            return;
        }
        self.shared_at_writes = Some(writes);
        let mut changed: BTreeMap<String, Volumes> = BTreeMap::new();
        for s in self.nodes.values().flat_map(|n| n.storages.values()) {
            if s.shared && s.volumes.changed() && !changed.contains_key(&s.name) {
                changed.insert(s.name.clone(), s.volumes.clone());
            }
        }
        if changed.is_empty() {
            return;
        }
        for s in self
            .nodes
            .values_mut()
            .flat_map(|n| n.storages.values_mut())
        {
            if let Some(v) = changed.get(&s.name).filter(|_| s.shared) {
                s.volumes = v.clone();
                s.volumes.shared();
            }
        }
    }
}
