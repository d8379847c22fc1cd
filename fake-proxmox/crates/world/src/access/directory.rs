//! What PVE keeps in `user.cfg` and `domains.cfg` beside users and tokens: groups, pools
//! and authentication realms.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A user group of `user.cfg`: its comment and its member user ids.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Group {
    /// Free-text comment, if set.
    pub comment: Option<String>,
    /// Member user ids (`user@realm`).
    pub members: BTreeSet<String>,
}

/// A resource pool: its VMs and storages (a VM is in at most one pool).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PoolConfig {
    /// Free-text comment, if set.
    pub comment: Option<String>,
    /// VM and container ids in the pool.
    pub vms: BTreeSet<u32>,
    /// Storage ids in the pool.
    pub storage: BTreeSet<String>,
}

/// An authentication realm of `domains.cfg`: its type and its options as given.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Realm {
    /// Realm type: `pam`, `pve`, `ldap`, `ad` or `openid`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Every other option as it was set (`comment`, `default`, `server1`, ...), keyed by its PVE
    /// name.
    pub options: BTreeMap<String, Value>,
}

/// The comments PVE gives the two realms every cluster has.
pub const PAM_COMMENT: &str = "Linux PAM standard authentication";
/// The default comment of the built-in `pve` realm (PVE's own user database).
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

    /// A string option of the realm, if it is set and a string.
    pub fn option_str(&self, key: &str) -> Option<&str> {
        self.options.get(key).and_then(Value::as_str)
    }
}
