//! Effective privileges, evaluated as PVE evaluates them (`AccessControl::roles` and
//! `RPCEnvironment::permissions`): down the path from `/`, the roles that apply at a level
//! (the ACL's own path, or a propagating entry above it) replace those of the levels above;
//! at each level a token's or user's own entries win over the user's groups'; `NoAccess`
//! wins over everything. A VM or storage in a pool also gets the roles held on
//! `/pool/{pool}` (not propagated further, and never over `NoAccess`). A token with
//! privilege separation holds only what both it and its user hold.

use std::collections::BTreeMap;

use super::model::{Access, Identity, PrivSet, normalize_path};
use super::roles;

/// Role → whether it propagates.
type Roles = BTreeMap<String, bool>;

impl Access {
    /// The privileges of a role, built-in or made through the API.
    pub fn role(&self, role: &str) -> Option<PrivSet> {
        if let Some(p) = roles::builtin(role) {
            return Some(p.clone());
        }
        let custom = self.roles.get(role)?;
        Some(custom.iter().filter_map(|p| roles::known_priv(p)).collect())
    }

    /// Whether `role` exists: built in or made through the API.
    pub fn role_exists(&self, role: &str) -> bool {
        roles::is_special(role) || self.roles.contains_key(role)
    }

    /// PVE's `roles()` for a user or a token id on `path` (pools aside).
    fn roles_on(&self, ugid: &str, path: &str) -> Roles {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut roles = Roles::new();
        for depth in 0..=comps.len() {
            let level = format!("/{}", comps[..depth].join("/"));
            let last = depth == comps.len();
            let applies =
                |a: &&super::model::Acl| (last || a.propagate) && normalize_path(&a.path) == level;
            let own: Roles = self
                .acls
                .iter()
                .filter(|a| a.ugid == ugid)
                .filter(applies)
                .map(|a| (a.role.clone(), a.propagate))
                .collect();
            if !own.is_empty() {
                roles = own;
                continue;
            }
            let from_groups: Roles = self
                .acls
                .iter()
                .filter(|a| {
                    a.ugid.strip_prefix('@').is_some_and(|g| {
                        self.groups.get(g).is_some_and(|g| g.members.contains(ugid))
                    })
                })
                .filter(applies)
                .map(|a| (a.role.clone(), a.propagate))
                .collect();
            if !from_groups.is_empty() {
                roles = from_groups;
            }
        }
        match roles.get("NoAccess") {
            Some(p) => Roles::from([("NoAccess".to_string(), *p)]),
            None => roles,
        }
    }

    /// The roles `ugid` holds on the pools that have `path` (`/vms/{vmid}`, `/storage/{id}`)
    /// as a member.
    fn pool_roles(&self, ugid: &str, path: &str) -> Roles {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let member = |p: &super::model::PoolConfig| match comps.as_slice() {
            ["vms", id] => id.parse::<u32>().is_ok_and(|v| p.vms.contains(&v)),
            ["storage", id] => p.storage.contains(*id),
            _ => false,
        };
        let mut out = Roles::new();
        for (name, pool) in &self.pools {
            if member(pool) {
                for role in self.roles_on(ugid, &format!("/pool/{name}")).into_keys() {
                    out.insert(role, true);
                }
            }
        }
        out
    }

    /// The privileges of a user or token id's own ACL entries (and its pools') on `path`.
    fn compiled(&self, ugid: &str, path: &str) -> PrivSet {
        let mut roles = self.roles_on(ugid, path);
        let pooled = self.pool_roles(ugid, path);
        if !pooled.is_empty() && !roles.contains_key("NoAccess") {
            if pooled.contains_key("NoAccess") {
                roles = Roles::from([("NoAccess".to_string(), false)]);
            } else {
                for role in pooled.into_keys() {
                    roles.entry(role).or_insert(false);
                }
            }
        }
        roles
            .keys()
            .filter_map(|r| self.role(r))
            .flatten()
            .collect()
    }

    fn user_privs(&self, userid: &str, path: &str) -> PrivSet {
        if userid == "root@pam" {
            ALL.clone()
        } else {
            self.compiled(userid, path)
        }
    }

    /// Effective privileges of an identity on an ACL path.
    pub fn privs(&self, who: &Identity, path: &str) -> PrivSet {
        let path = normalize_path(path);
        match &who.tokenid {
            None => self.user_privs(&who.userid, &path),
            Some(t) => match self.tokens.get(t) {
                None => PrivSet::new(),
                Some(tok) if !tok.privsep => self.user_privs(&who.userid, &path),
                Some(_) => {
                    let user = self.user_privs(&who.userid, &path);
                    let own = self.compiled(t, &path);
                    user.intersection(&own).copied().collect()
                }
            },
        }
    }

    /// Whether `who` holds `privilege` on `path` (ACL inheritance, groups and token
    /// privilege separation applied; `root@pam` holds everything).
    pub fn has(&self, who: &Identity, path: &str, privilege: &str) -> bool {
        // root@pam holds everything; skip the ACL walk on this hot path (listings check
        // one privilege per VM and storage).
        if self.holds_everything(who) {
            return roles::known_priv(privilege).is_some();
        }
        self.privs(who, path).contains(privilege)
    }

    /// `root@pam`, or one of its tokens without privilege separation: every privilege on
    /// every path, so listings need not check each entry.
    pub fn holds_everything(&self, who: &Identity) -> bool {
        who.userid == "root@pam"
            && !who
                .tokenid
                .as_ref()
                .is_some_and(|t| self.tokens.get(t).is_none_or(|t| t.privsep))
    }

    /// Whether `who` holds any of `privs` on `path` (PVE's `check_any`).
    pub fn has_any(&self, who: &Identity, path: &str, privs: &[&str]) -> bool {
        privs.iter().any(|p| self.has(who, path, p))
    }

    /// `check_perm_modify`: `Permissions.Modify`, or on a VM, storage or pool the privilege
    /// that allocates it.
    pub fn may_modify_perms(&self, who: &Identity, path: &str) -> bool {
        let path = normalize_path(path);
        let mut privs = vec!["Permissions.Modify"];
        if path.starts_with("/storage/") {
            privs.push("Datastore.Allocate");
        } else if path.starts_with("/vms/") {
            privs.push("VM.Allocate");
        } else if path.starts_with("/pool/") {
            privs.push("Pool.Allocate");
        }
        self.has_any(who, &path, &privs)
    }

    /// The groups `userid` is a member of.
    pub fn groups_of(&self, userid: &str) -> Vec<&str> {
        self.groups
            .iter()
            .filter(|(_, g)| g.members.contains(userid))
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

static ALL: std::sync::LazyLock<PrivSet> =
    std::sync::LazyLock::new(|| roles::ALL_PRIVS.iter().copied().collect());

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::access::model::{Acl, Group, PoolConfig, Token, User};

    fn acl(path: &str, ugid: &str, role: &str, propagate: bool) -> Acl {
        Acl {
            path: path.into(),
            ugid: ugid.into(),
            role: role.into(),
            propagate,
        }
    }

    fn who(userid: &str, tokenid: Option<&str>) -> Identity {
        Identity {
            userid: userid.into(),
            tokenid: tokenid.map(str::to_string),
        }
    }

    fn access() -> Access {
        let mut a = Access::new([1; 32]);
        a.users
            .insert("u@pve".into(), User::new("u@pve", "pw", true));
        let group = Group {
            comment: None,
            members: ["u@pve".to_string()].into(),
        };
        a.groups.insert("g".into(), group);
        a
    }

    #[test]
    fn a_users_own_entry_beats_its_groups_at_the_same_level() {
        let mut a = access();
        a.acls.push(acl("/vms", "@g", "PVEVMAdmin", true));
        let u = who("u@pve", None);
        assert!(a.has(&u, "/vms/100", "VM.Allocate"), "through the group");
        a.acls.push(acl("/vms/", "u@pve", "PVEAuditor", true));
        assert!(
            !a.has(&u, "/vms/100", "VM.Allocate"),
            "the user's own entry wins"
        );
        assert!(a.has(&u, "/vms/100", "VM.Audit"));
        // Deeper levels replace what came from above; NoAccess wins at its level.
        a.acls.push(acl("/vms/100", "@g", "NoAccess", false));
        assert!(!a.has(&u, "/vms/100", "VM.Audit"));
        assert!(a.has(&u, "/vms/101", "VM.Audit"));
    }

    #[test]
    fn pool_roles_reach_members_but_not_over_no_access() {
        let mut a = access();
        let pool = PoolConfig {
            comment: None,
            vms: [100].into(),
            storage: ["local".to_string()].into(),
        };
        a.pools.insert("web".into(), pool);
        a.acls.push(acl("/pool/web", "u@pve", "PVEAdmin", true));
        let u = who("u@pve", None);
        assert!(a.has(&u, "/vms/100", "VM.Allocate"));
        assert!(a.has(&u, "/storage/local", "Datastore.Allocate"));
        assert!(!a.has(&u, "/vms/101", "VM.Allocate"));
        a.acls.push(acl("/vms/100", "u@pve", "NoAccess", false));
        assert!(!a.has(&u, "/vms/100", "VM.Audit"));
    }

    #[test]
    fn tokens_with_privsep_intersect_and_without_inherit() {
        let mut a = access();
        for (name, privsep) in [("sep", true), ("full", false)] {
            let id = format!("u@pve!{name}");
            let t = Token {
                tokenid: id.clone(),
                secret: "s".into(),
                privsep,
                comment: None,
                expire: 0,
            };
            a.tokens.insert(id, t);
        }
        a.acls.push(acl("/", "u@pve", "PVEVMUser", true));
        a.acls.push(acl("/", "u@pve!sep", "PVEVMAdmin", true));
        let sep = who("u@pve", Some("u@pve!sep"));
        let full = who("u@pve", Some("u@pve!full"));
        assert!(a.has(&sep, "/vms/1", "VM.PowerMgmt"));
        assert!(!a.has(&sep, "/vms/1", "VM.Allocate"));
        assert_eq!(
            a.privs(&full, "/vms/1"),
            a.privs(&who("u@pve", None), "/vms/1")
        );
        assert_eq!(normalize_path("//vms//100/"), "/vms/100");
        assert_eq!(normalize_path(""), "/");
    }
}
