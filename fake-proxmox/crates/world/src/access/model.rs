//! Users, API tokens, tickets, CSRF tokens, roles and ACLs — no HTTP types.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use super::directory::{Group, PoolConfig, Realm};
pub use super::roles::{ALL_PRIVS, PrivSet};

/// Ticket lifetime and clock-skew grace (`AccessControl.pm:58-59`).
const TICKET_LIFETIME: f64 = 7200.0;
const TICKET_GRACE: f64 = 300.0;

/// The privileges of a built-in role (custom roles are the site's: [`Access::role`]).
pub fn role_privs(role: &str) -> Option<&'static PrivSet> {
    super::roles::builtin(role)
}

/// A user of `user.cfg`: id, password and account settings.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct User {
    /// `user@realm`.
    pub userid: String,
    /// The password, kept in clear (the fake has no shadow file); login compares it as is.
    pub password: String,
    /// Disabled users cannot log in nor use their tokens.
    pub enable: bool,
    /// Seconds since the epoch; 0: never.
    #[serde(default)]
    pub expire: u64,
    /// Given name, if set.
    #[serde(default)]
    pub firstname: Option<String>,
    /// Family name, if set.
    #[serde(default)]
    pub lastname: Option<String>,
    /// E-mail address, if set.
    #[serde(default)]
    pub email: Option<String>,
    /// Free-text comment, if set.
    #[serde(default)]
    pub comment: Option<String>,
    /// The user's `keys` setting (TFA keys of old PVE), stored and returned only.
    #[serde(default)]
    pub keys: Option<String>,
}

impl User {
    /// A user as `POST /access/users` or a scenario makes it: enabled, nothing else set.
    pub fn new(userid: &str, password: &str, enable: bool) -> User {
        User {
            userid: userid.to_string(),
            password: password.to_string(),
            enable,
            expire: 0,
            firstname: None,
            lastname: None,
            email: None,
            comment: None,
            keys: None,
        }
    }
}

/// An API token of a user (`user@realm!name`).
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Token {
    /// Full token id, `user@realm!name`.
    pub tokenid: String,
    /// The secret clients send after `=`; UUID-shaped when made through the API, which shows
    /// it once.
    pub secret: String,
    /// Privilege separation: when set, the token holds only what its own ACLs grant, within the
    /// user's privileges; when not, it holds the user's privileges.
    pub privsep: bool,
    /// Free-text comment, if set.
    pub comment: Option<String>,
    /// Expiry in seconds since the epoch; 0: never.
    pub expire: u64,
}

/// One ACL entry: a role granted to a user, group or token on a path.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Acl {
    /// Object path (`/`, `/vms/100`, `/storage/local`, `/pool/p`...).
    pub path: String,
    /// Who gets the role: `user@realm`, `@group` or `user@realm!token`.
    pub ugid: String,
    /// Role name.
    pub role: String,
    /// Whether the role also applies to paths below `path`.
    pub propagate: bool,
}

/// Who a request runs as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Identity {
    /// The authenticated user (`user@realm`); for a token, the token's owner.
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

/// The access-control state of the cluster: users, tokens, groups, roles, ACLs, realms, pools and
/// the ticket-signing key.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Access {
    /// Users by user id.
    pub users: BTreeMap<String, User>,
    /// API tokens by full token id.
    pub tokens: BTreeMap<String, Token>,
    /// One entry per (path, user/`@group`/token, role), as PVE's ACL tree holds them.
    pub acls: Vec<Acl>,
    key: [u8; 32],
    // Added after state format 1 was first written: absent in older state files.
    /// Groups by group id.
    #[serde(default)]
    pub groups: BTreeMap<String, Group>,
    /// The roles made through the API (the built-in ones are `roles::BUILTIN`).
    #[serde(default)]
    pub roles: BTreeMap<String, BTreeSet<String>>,
    /// Authentication realms by realm id (`pam` and `pve` always among them).
    #[serde(default = "Realm::builtin_realms")]
    pub realms: BTreeMap<String, Realm>,
    /// Resource pools by pool id.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolConfig>,
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
            groups: BTreeMap::new(),
            roles: BTreeMap::new(),
            realms: Realm::builtin_realms(),
            pools: BTreeMap::new(),
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

    /// A CSRF prevention token for `userid` issued at `now` (seconds): `<HEX time>:<signature>`.
    pub fn make_csrf(&self, userid: &str, now: f64) -> String {
        let ts = format!("{:08X}", now as u64);
        format!("{ts}:{}", self.sign(&format!("{ts}:{userid}")))
    }

    /// `check_user_enabled`: the user exists, is enabled and its `expire` (if set) has not
    /// passed. PVE asks this on every request, not only at login.
    pub fn user_enabled(&self, userid: &str, now: f64) -> bool {
        self.users
            .get(userid)
            .is_some_and(|u| u.enable && (u.expire == 0 || u.expire as f64 >= now))
    }

    /// The user a ticket belongs to, if it is ours, unexpired and the user still enabled
    /// and not expired (`auth_handler`: `verify_ticket`, then `check_user_enabled`).
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
        self.user_enabled(&user, now).then_some(user)
    }

    /// Whether `token` is a CSRF prevention token this cluster issued for `userid` and it is
    /// neither expired nor from the future beyond the clock-skew grace.
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

    /// Check `USER@REALM!TOKEN=SECRET` (split at the last `=`) as `verify_token` does: the
    /// user enabled and not expired, the token there and not expired, the secret right.
    pub fn verify_token(&self, value: &str, now: f64) -> Option<Identity> {
        let (tokenid, secret) = value.rsplit_once('=')?;
        let (user, _) = tokenid.trim().split_once('!')?;
        if !self.user_enabled(user, now) {
            return None;
        }
        let tok = self.tokens.get(tokenid.trim())?;
        if tok.expire != 0 && (tok.expire as f64) < now {
            return None;
        }
        if tok.secret != secret.trim() {
            return None;
        }
        Some(Identity {
            userid: user.to_string(),
            tokenid: Some(tok.tokenid.clone()),
        })
    }

    /// `PVE::AccessControl::remove_vm_access`: a destroyed VM's ACL subtree (`/vms/{vmid}`
    /// and anything under it) and its pool membership go from `user.cfg`.
    pub fn remove_vm_access(&mut self, vmid: u32) {
        let path = format!("/vms/{vmid}");
        self.acls.retain(|a| {
            let n = normalize_path(&a.path);
            n != path && !n.starts_with(&format!("{path}/"))
        });
        for pool in self.pools.values_mut() {
            pool.vms.remove(&vmid);
        }
    }

    /// `PVE::AccessControl::add_vm_to_pool`: a VM made with `pool=` joins it once it
    /// exists, if the pool is still there. `user.cfg` maps a VM to one pool, so a listing
    /// left elsewhere (a state written before destroy cleaned up) goes.
    pub fn add_vm_to_pool(&mut self, vmid: u32, pool: &str) {
        if !self.pools.contains_key(pool) {
            return;
        }
        for (name, cfg) in self.pools.iter_mut() {
            if name == pool {
                cfg.vms.insert(vmid);
            } else {
                cfg.vms.remove(&vmid);
            }
        }
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

    /// A new token secret, UUID-shaped and derived from `seed` and the cluster key (deterministic
    /// for a seed).
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

/// `normalize_path`: no doubled or trailing slashes, a leading one.
pub fn normalize_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    format!("/{}", parts.join("/"))
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
            .verify_token("root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a", 0.0)
            .unwrap();
        assert_eq!(id.tokenid.as_deref(), Some("root@pam!harness"));
        assert!(a.verify_token("root@pam!harness=wrong", 0.0).is_none());
        assert!(a.verify_token("nobody", 0.0).is_none());
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
