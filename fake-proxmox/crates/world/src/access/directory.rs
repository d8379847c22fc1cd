//! What PVE keeps in `user.cfg` and `domains.cfg` beside users and tokens: groups, pools
//! and authentication realms.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Group {
    pub comment: Option<String>,
    pub members: BTreeSet<String>,
}

/// A resource pool: its VMs and storages (a VM is in at most one pool).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PoolConfig {
    pub comment: Option<String>,
    pub vms: BTreeSet<u32>,
    pub storage: BTreeSet<String>,
}

/// An authentication realm of `domains.cfg`: its type and its options as given.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Realm {
    #[serde(rename = "type")]
    pub kind: String,
    pub options: BTreeMap<String, Value>,
}

/// The comments PVE gives the two realms every cluster has.
pub const PAM_COMMENT: &str = "Linux PAM standard authentication";
pub const PVE_COMMENT: &str = "Proxmox VE authentication server";

impl Realm {
    /// `pam` and `pve`, which PVE adds back whenever `domains.cfg` lacks them.
    pub fn builtin_realms() -> BTreeMap<String, Realm> {
        let mut m = BTreeMap::new();
        Realm::ensure_builtin(&mut m);
        m
    }

    /// Put `pam` and `pve` (with their default comments) back where they are missing.
    pub fn ensure_builtin(realms: &mut BTreeMap<String, Realm>) {
        for (name, comment) in [("pam", PAM_COMMENT), ("pve", PVE_COMMENT)] {
            let r = realms.entry(name.to_string()).or_insert_with(|| Realm {
                kind: name.to_string(),
                options: BTreeMap::new(),
            });
            r.kind = name.to_string();
            r.options
                .entry("comment".into())
                .or_insert_with(|| Value::from(comment));
        }
    }

    pub fn option_str(&self, key: &str) -> Option<&str> {
        self.options.get(key).and_then(Value::as_str)
    }
}
