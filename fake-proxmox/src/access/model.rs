//! Users, API tokens, tickets, CSRF tokens, roles and ACLs — no HTTP types.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Ticket lifetime and clock-skew grace (`AccessControl.pm:58-59`).
const TICKET_LIFETIME: f64 = 7200.0;
const TICKET_GRACE: f64 = 300.0;

pub const ALL_PRIVS: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Group.Allocate",
    "Mapping.Audit",
    "Mapping.Modify",
    "Mapping.Use",
    "Permissions.Modify",
    "Pool.Allocate",
    "Pool.Audit",
    "Realm.Allocate",
    "Realm.AllocateUser",
    "SDN.Allocate",
    "SDN.Audit",
    "SDN.Use",
    "Sys.AccessNetwork",
    "Sys.Audit",
    "Sys.Console",
    "Sys.Incoming",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Syslog",
    "User.Modify",
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Replicate",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
];

const VM_ADMIN: &[&str] = &[
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
];

const AUDITOR: &[&str] = &[
    "Datastore.Audit",
    "Mapping.Audit",
    "Pool.Audit",
    "SDN.Audit",
    "Sys.Audit",
    "VM.Audit",
    "VM.GuestAgent.Audit",
];

const VM_USER: &[&str] = &[
    "VM.Audit",
    "VM.Backup",
    "VM.Config.CDROM",
    "VM.Config.Cloudinit",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.PowerMgmt",
];

const DATASTORE_USER: &[&str] = &["Datastore.AllocateSpace", "Datastore.Audit"];

/// Privileges of a built-in role.
pub fn role_privs(role: &str) -> Option<&'static [&'static str]> {
    Some(match role {
        "Administrator" => ALL_PRIVS,
        "PVEVMAdmin" => VM_ADMIN,
        "PVEAuditor" => AUDITOR,
        "PVEVMUser" => VM_USER,
        "PVEDatastoreUser" => DATASTORE_USER,
        "NoAccess" => &[],
        _ => return None,
    })
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct User {
    pub userid: String,
    pub password: String,
    pub enable: bool,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Token {
    pub tokenid: String,
    pub secret: String,
    pub privsep: bool,
    pub comment: Option<String>,
    pub expire: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Acl {
    pub path: String,
    pub ugid: String,
    pub role: String,
    pub propagate: bool,
}

/// Who a request runs as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Identity {
    pub userid: String,
    /// Full token id (`user@realm!name`) when authenticated by API token.
    pub tokenid: Option<String>,
}

impl Identity {
    /// The task owner string (`user@realm` or `user@realm!token`).
    pub fn task_user(&self) -> String {
        self.tokenid.clone().unwrap_or_else(|| self.userid.clone())
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Access {
    pub users: BTreeMap<String, User>,
    pub tokens: BTreeMap<String, Token>,
    pub acls: Vec<Acl>,
    key: [u8; 32],
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let ih = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(ih);
    outer.finalize().into()
}

impl Access {
    /// No users, tokens or ACLs yet; `key` signs tickets and CSRF tokens.
    pub fn new(key: [u8; 32]) -> Access {
        Access {
            users: BTreeMap::new(),
            tokens: BTreeMap::new(),
            acls: Vec::new(),
            key,
        }
    }

    /// Username normalisation of `/access/ticket`: `realm` fills in a missing `@realm`.
    pub fn login(&self, username: &str, password: &str, realm: Option<&str>) -> Option<String> {
        let userid = if username.contains('@') {
            username.to_string()
        } else {
            format!("{username}@{}", realm.unwrap_or("pam"))
        };
        let u = self.users.get(&userid)?;
        (u.enable && u.password == password).then_some(userid)
    }

    pub(crate) fn sign(&self, data: &str) -> String {
        STANDARD_NO_PAD.encode(hmac_sha256(&self.key, data.as_bytes()))
    }

    /// `PVE:<user>:<HEX time>::<signature>`
    pub fn make_ticket(&self, userid: &str, now: f64) -> String {
        let plain = format!("PVE:{}:{:08X}", userid.replace(':', "%3A"), now as u64);
        format!("{plain}::{}", self.sign(&plain))
    }

    pub fn make_csrf(&self, userid: &str, now: f64) -> String {
        let ts = format!("{:08X}", now as u64);
        format!("{ts}:{}", self.sign(&format!("{ts}:{userid}")))
    }

    /// The user a ticket belongs to, if it is ours, unexpired and the user still enabled.
    pub fn verify_ticket(&self, ticket: &str, now: f64) -> Option<String> {
        let (plain, sig) = ticket.split_once("::")?;
        if self.sign(plain) != sig {
            return None;
        }
        let rest = plain.strip_prefix("PVE:")?;
        let (user, ts) = rest.rsplit_once(':')?;
        if ts.len() != 8 {
            return None;
        }
        let ts = u64::from_str_radix(ts, 16).ok()? as f64;
        let age = now - ts;
        if !(-TICKET_GRACE..=TICKET_LIFETIME).contains(&age) {
            return None;
        }
        let user = user.replace("%3A", ":");
        self.users.get(&user).filter(|u| u.enable)?;
        Some(user)
    }

    pub fn verify_csrf(&self, token: &str, userid: &str, now: f64) -> bool {
        let Some((ts, sig)) = token.split_once(':') else {
            return false;
        };
        let Ok(t) = u64::from_str_radix(ts, 16) else {
            return false;
        };
        let age = now - t as f64;
        ts.len() == 8
            && (-TICKET_GRACE..=TICKET_LIFETIME).contains(&age)
            && self.sign(&format!("{ts}:{userid}")) == sig
    }

    /// Check `USER@REALM!TOKEN=SECRET` (split at the last `=`).
    pub fn verify_token(&self, value: &str) -> Option<Identity> {
        let (tokenid, secret) = value.rsplit_once('=')?;
        let tok = self.tokens.get(tokenid.trim())?;
        if tok.secret != secret.trim() {
            return None;
        }
        let (user, _) = tokenid.split_once('!')?;
        self.users.get(user).filter(|u| u.enable)?;
        Some(Identity {
            userid: user.to_string(),
            tokenid: Some(tok.tokenid.clone()),
        })
    }

    fn ugid_privs(&self, ugid: &str, path: &str) -> BTreeSet<&'static str> {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut best: Option<BTreeSet<&'static str>> = None;
        for depth in 0..=comps.len() {
            let prefix = format!("/{}", comps[..depth].join("/"));
            let exact = depth == comps.len();
            let roles: Vec<&Acl> = self
                .acls
                .iter()
                .filter(|a| {
                    a.ugid == ugid
                        && a.path.trim_end_matches('/') == prefix.trim_end_matches('/')
                        && (exact || a.propagate)
                })
                .collect();
            if !roles.is_empty() {
                let mut set = BTreeSet::new();
                for a in roles {
                    set.extend(role_privs(&a.role).unwrap_or(&[]).iter().copied());
                }
                best = Some(set);
            }
        }
        best.unwrap_or_default()
    }

    /// Effective privileges of an identity on an ACL path.
    pub fn privs(&self, who: &Identity, path: &str) -> BTreeSet<&'static str> {
        let user_privs: BTreeSet<&'static str> = if who.userid == "root@pam" {
            ALL_PRIVS.iter().copied().collect()
        } else {
            self.ugid_privs(&who.userid, path)
        };
        match &who.tokenid {
            Some(t) if self.tokens.get(t).is_some_and(|t| t.privsep) => {
                let tok = self.ugid_privs(t, path);
                user_privs.intersection(&tok).copied().collect()
            }
            _ => user_privs,
        }
    }

    pub fn has(&self, who: &Identity, path: &str, privilege: &str) -> bool {
        // root@pam holds everything; skip the ACL walk on this hot path (listings check
        // one privilege per VM and storage).
        if self.holds_everything(who) {
            return ALL_PRIVS.contains(&privilege);
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
                .is_some_and(|t| self.tokens.get(t).is_some_and(|t| t.privsep))
    }

    /// Paths a permissions listing covers: the root, the usual top levels and every ACL path.
    pub fn known_paths(&self) -> BTreeSet<String> {
        let mut s: BTreeSet<String> = [
            "/", "/vms", "/storage", "/nodes", "/access", "/sdn", "/pool",
        ]
        .iter()
        .map(|p| p.to_string())
        .collect();
        s.extend(self.acls.iter().map(|a| a.path.clone()));
        s
    }

    pub fn new_token_secret(&self, seed: &str) -> String {
        let h = hex::encode(hmac_sha256(&self.key, seed.as_bytes()));
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::scenario::{AclSpec, Scenario, TokenSpec, UserSpec};

    fn access() -> Access {
        let mut spec = Scenario::embedded_default().sites[0].clone();
        spec.users.push(UserSpec {
            userid: "deploy@pve".into(),
            password: "pw".into(),
            enable: true,
        });
        spec.tokens.push(TokenSpec {
            tokenid: "deploy@pve!ci".into(),
            secret: "s3cret".into(),
            privsep: true,
        });
        spec.acls.push(AclSpec {
            path: "/vms".into(),
            ugid: "deploy@pve".into(),
            role: "PVEVMAdmin".into(),
            propagate: true,
        });
        spec.acls.push(AclSpec {
            path: "/".into(),
            ugid: "deploy@pve!ci".into(),
            role: "PVEAuditor".into(),
            propagate: true,
        });
        crate::world::build::access_from_spec(&spec, [7; 32])
    }

    #[test]
    fn tickets_verify_and_expire() {
        let a = access();
        let t = a.make_ticket("root@pam", 1000.0);
        assert!(t.starts_with("PVE:root@pam:000003E8::"));
        assert_eq!(a.verify_ticket(&t, 1100.0).as_deref(), Some("root@pam"));
        assert_eq!(a.verify_ticket(&t, 1000.0 + 7201.0), None);
        assert_eq!(a.verify_ticket(&t.replace("root", "r00t"), 1100.0), None);
        let c = a.make_csrf("root@pam", 1000.0);
        assert!(a.verify_csrf(&c, "root@pam", 1010.0));
        assert!(!a.verify_csrf(&c, "deploy@pve", 1010.0));
    }

    #[test]
    fn token_split_at_last_equals() {
        let a = access();
        let id = a
            .verify_token("root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a")
            .unwrap();
        assert_eq!(id.tokenid.as_deref(), Some("root@pam!harness"));
        assert!(a.verify_token("root@pam!harness=wrong").is_none());
        assert!(a.verify_token("nobody").is_none());
    }

    #[test]
    fn acl_propagation_and_privsep() {
        let a = access();
        let user = Identity {
            userid: "deploy@pve".into(),
            tokenid: None,
        };
        assert!(a.has(&user, "/vms/100", "VM.Allocate"));
        assert!(!a.has(&user, "/storage/local-lvm", "Datastore.AllocateSpace"));
        let tok = Identity {
            userid: "deploy@pve".into(),
            tokenid: Some("deploy@pve!ci".into()),
        };
        // privsep: user privs ∩ token privs → audit only.
        assert!(a.has(&tok, "/vms/100", "VM.Audit"));
        assert!(!a.has(&tok, "/vms/100", "VM.Allocate"));
        let root = Identity {
            userid: "root@pam".into(),
            tokenid: Some("root@pam!harness".into()),
        };
        assert!(a.has(&root, "/vms/100", "VM.Allocate"));
    }
}
