//! The sections of a guest's config file besides the current config, the same for every
//! guest kind (qemu-server and pve-container write them alike): `[PENDING]` and one
//! `[snapname]` per snapshot. What a kind does with them (hotplug, rollback) is the kind's.

use std::collections::BTreeMap;

use serde::Serialize;

type Config = BTreeMap<String, String>;

/// Pending values and pending deletions (written `delete: a,!b`; `!` marks a forced one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Pending {
    /// Pending values by key, as text.
    pub set: Config,
    /// Key → forced (`delete` with `force=1`: a disk is freed, not kept as `unusedN`).
    pub delete: BTreeMap<String, bool>,
}

impl Pending {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.delete.is_empty()
    }

    /// The section's lines as PVE writes them: keys sorted, `delete` among them.
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut all = self.set.clone();
        if !self.delete.is_empty() {
            let d: Vec<String> = self
                .delete
                .iter()
                .map(|(k, force)| if *force { format!("!{k}") } else { k.clone() })
                .collect();
            all.insert("delete".into(), d.join(","));
        }
        all.into_iter().collect()
    }
}

/// A request's changes after parameter checks, in PVE's processing order.
#[derive(Debug, Default)]
pub struct Change {
    /// Keys to delete, in order.
    pub deletes: Vec<String>,
    /// `force=1`: deleted disks are freed, not kept as `unusedN`.
    pub force: bool,
    /// Keys and their new values, in order.
    pub sets: Vec<(String, String)>,
}

/// One `[snapname]` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The VM's config when the snapshot was taken (its `parent` included).
    pub config: BTreeMap<String, String>,
    /// When the snapshot was taken, seconds since the epoch.
    pub snaptime: u64,
    /// The snapshot's description, if any.
    pub description: Option<String>,
    /// `STORAGE:vm-VMID-state-NAME` when RAM was saved.
    pub vmstate: Option<String>,
    /// `prepare` while being taken, `delete` while being removed.
    pub snapstate: Option<String>,
}

impl Snapshot {
    /// The section's lines, sorted as PVE writes keys.
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut all = self.config.clone();
        if let Some(d) = &self.description {
            all.insert("description".into(), d.clone());
        }
        all.insert("snaptime".into(), self.snaptime.to_string());
        if let Some(v) = &self.vmstate {
            all.insert("vmstate".into(), v.clone());
        }
        if let Some(s) = &self.snapstate {
            all.insert("snapstate".into(), s.clone());
        }
        all.into_iter().collect()
    }
}
