//! The access family's decisions on roles and ACLs (`/access/roles`, `/access/acl`), with
//! PVE's checks and texts (`API2/Role.pm`, `API2/ACL.pm`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;

use crate::access::model::Acl;
use crate::access::model::normalize_path;
use crate::access::roles::{self, known_priv};
use crate::access::users::{bad_groupid, check_param, plain_id};
use crate::request::Request;
use crate::schema::formats::split_list;
use crate::wire::PveError;
use crate::world::Site;

/// `AccessControl::check_path`: the paths an ACL may be set on.
static ACL_PATH: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let a = r"[[:alnum:]\.\-_]+";
    let pool = r"[A-Za-z0-9\.\-_]+(?:/[A-Za-z0-9\.\-_]+){0,2}";
    let alts = [
        "/".to_string(),
        "/access".into(),
        "/access/groups".into(),
        format!("/access/groups/{a}"),
        "/access/realm".into(),
        format!("/access/realm/{a}"),
        "/nodes".into(),
        format!("/nodes/{a}"),
        "/pool".into(),
        format!("/pool/{pool}"),
        "/sdn".into(),
        "/sdn/controllers".into(),
        r"/sdn/controllers/[[:alnum:]_\-]+".into(),
        "/sdn/dns".into(),
        "/sdn/dns/[[:alnum:]]+".into(),
        "/sdn/fabrics".into(),
        "/sdn/fabrics/[[:alnum:]]+".into(),
        "/sdn/ipams".into(),
        "/sdn/ipams/[[:alnum:]]+".into(),
        "/sdn/prefix-lists".into(),
        "/sdn/prefix-lists/[[:alnum:]]+".into(),
        "/sdn/route-maps".into(),
        "/sdn/route-maps/[[:alnum:]]+".into(),
        "/sdn/zones".into(),
        format!("/sdn/zones/{a}"),
        format!("/sdn/zones/{a}/{a}"),
        format!("/sdn/zones/{a}/{a}/[1-9][0-9]{{0,3}}"),
        "/storage".into(),
        format!("/storage/{a}"),
        "/vms".into(),
        "/vms/[1-9][0-9]{2,}".into(),
        "/mapping".into(),
        format!("/mapping/{a}"),
        format!("/mapping/{a}/{a}"),
    ];
    Regex::new(&format!("^(?:{})$", alts.join("|"))).ok()
});

static PATH_CHARS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[[:alnum:]\.\-_/]+$").ok());

static TOKENID: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^([^\s:/]+)@([A-Za-z][A-Za-z0-9\.\-_]+)!([A-Za-z][A-Za-z0-9\.\-_]+)$").ok()
});

fn bad_roleid(r: &str) -> Option<String> {
    (!plain_id(r)).then(|| format!("role name '{r}' contains invalid characters"))
}

fn bad_priv(p: &str) -> Option<String> {
    known_priv(p)
        .is_none()
        .then(|| format!("invalid privilege '{p}'"))
}

fn bad_tokenid(t: &str) -> Option<String> {
    let ok = TOKENID.as_ref().is_some_and(|r| r.is_match(t));
    (!ok).then(|| format!("value '{t}' does not look like a valid token ID"))
}

/// One role as `GET /access/roles` lists it.
pub struct RoleInfo {
    /// Role name (`Administrator`, `PVEAuditor`, or one made through the API).
    pub roleid: String,
    /// The privileges the role grants.
    pub privs: BTreeSet<&'static str>,
    /// Whether the role is built in (`special` = 1): built-in roles cannot be changed or deleted.
    pub special: bool,
}

/// What an ACL entry is for, as `GET /access/acl` names it.
pub fn acl_type(ugid: &str) -> &'static str {
    if ugid.starts_with('@') {
        "group"
    } else if ugid.contains('!') {
        "token"
    } else {
        "user"
    }
}

impl Site {
    /// `GET /access/roles`: built-in and custom roles.
    pub fn list_roles(&self) -> Vec<RoleInfo> {
        let names: BTreeSet<&String> = roles::BUILTIN
            .keys()
            .chain(self.access.roles.keys())
            .collect();
        names
            .into_iter()
            .map(|r| RoleInfo {
                roleid: r.clone(),
                privs: self.access.role(r).unwrap_or_default(),
                special: roles::is_special(r),
            })
            .collect()
    }

    /// `GET /access/roles/{roleid}`
    pub fn read_role(&self, req: &Request) -> Result<BTreeSet<&'static str>, PveError> {
        check_param(&req.p, "roleid", false, bad_roleid)?;
        let r = req.p.req_str("roleid")?;
        self.access
            .role(&r)
            .ok_or_else(|| PveError::die(format!("role '{r}' does not exist")))
    }

    /// `POST /access/roles`: not in PVE's `PVE…` namespace.
    pub fn create_role(&mut self, req: &Request) -> Result<(), PveError> {
        check_param(&req.p, "roleid", false, bad_roleid)?;
        check_param(&req.p, "privs", true, bad_priv)?;
        self.require(&req.who, "/access", "Sys.Modify")?;
        let r = req.p.req_str("roleid")?;
        if r.to_ascii_uppercase().starts_with("PVE") {
            return Err(PveError::param(
                "roleid",
                "cannot use role ID starting with the (case-insensitive) 'PVE' namespace",
            ));
        }
        if self.access.role_exists(&r) {
            return Err(PveError::die(format!(
                "create role failed: role '{r}' already exists"
            )));
        }
        let privs = req.p.str("privs").unwrap_or_default();
        let set = split_list(&privs).map(str::to_string).collect();
        self.access.roles.insert(r, set);
        Ok(())
    }

    /// `PUT /access/roles/{roleid}`: `privs` replaces the role's unless `append`.
    pub fn update_role(&mut self, req: &Request) -> Result<(), PveError> {
        check_param(&req.p, "roleid", false, bad_roleid)?;
        check_param(&req.p, "privs", true, bad_priv)?;
        self.require(&req.who, "/access", "Sys.Modify")?;
        let r = req.p.req_str("roleid")?;
        if roles::is_special(&r) {
            return Err(PveError::die(format!(
                "auto-generated role '{r}' cannot be modified"
            )));
        }
        let append = req.p.flag("append");
        let privs = req.p.str("privs").unwrap_or_default();
        let set = self.access.roles.get_mut(&r).ok_or_else(|| {
            PveError::die(format!("update role failed: role '{r}' does not exist"))
        })?;
        if !append {
            set.clear();
        }
        set.extend(split_list(&privs).map(str::to_string));
        Ok(())
    }

    /// `DELETE /access/roles/{roleid}`: ACL entries naming it lapse (PVE drops them when
    /// it next reads `user.cfg`).
    pub fn delete_role(&mut self, req: &Request) -> Result<(), PveError> {
        check_param(&req.p, "roleid", false, bad_roleid)?;
        self.require(&req.who, "/access", "Sys.Modify")?;
        let r = req.p.req_str("roleid")?;
        if roles::is_special(&r) {
            return Err(PveError::die(format!(
                "auto-generated role '{r}' cannot be deleted"
            )));
        }
        if self.access.roles.remove(&r).is_none() {
            return Err(PveError::die(format!(
                "delete role failed: role '{r}' does not exist"
            )));
        }
        self.access.acls.retain(|a| a.role != r);
        Ok(())
    }

    /// `GET /access/acl`: the entries on paths where the caller may modify permissions (all
    /// of them with `Sys.Audit` on `/access`), in the order of PVE's ACL tree walk.
    pub fn list_acl(&self, req: &Request) -> Vec<&Acl> {
        let audit = self.access.has(&req.who, "/access", "Sys.Audit");
        let mut out: Vec<&Acl> = self
            .access
            .acls
            .iter()
            .filter(|a| self.access.role_exists(&a.role))
            .filter(|a| audit || self.access.may_modify_perms(&req.who, &a.path))
            .collect();
        let type_rank = |a: &Acl| match acl_type(&a.ugid) {
            "user" => 0,
            "group" => 1,
            _ => 2,
        };
        out.sort_by(|a, b| {
            let pa = normalize_path(&a.path);
            let pb = normalize_path(&b.path);
            let ca: Vec<&str> = pa.split('/').filter(|c| !c.is_empty()).collect();
            let cb: Vec<&str> = pb.split('/').filter(|c| !c.is_empty()).collect();
            ca.cmp(&cb)
                .then(type_rank(a).cmp(&type_rank(b)))
                .then(a.ugid.cmp(&b.ugid))
                .then(a.role.cmp(&b.role))
        });
        out
    }

    /// `PUT /access/acl`: grant (or with `delete` revoke) each role to each user, group and
    /// token on the path. Without `Permissions.Modify` on the path, only roles whose
    /// privileges the caller holds there (propagated, when granting with propagation).
    pub fn update_acl(&mut self, req: &Request) -> Result<(), PveError> {
        let p = &req.p;
        check_param(p, "roles", true, bad_roleid)?;
        check_param(p, "groups", true, bad_groupid)?;
        check_param(p, "tokens", true, bad_tokenid)?;
        let raw_path = p.req_str("path")?;
        if !self.access.may_modify_perms(&req.who, &raw_path) {
            let mut privs = vec!["Permissions.Modify"];
            let n = normalize_path(&raw_path);
            for (prefix, pr) in [
                ("/storage/", "Datastore.Allocate"),
                ("/vms/", "VM.Allocate"),
                ("/pool/", "Pool.Allocate"),
            ] {
                if n.starts_with(prefix) {
                    privs.push(pr);
                }
            }
            return Err(PveError::perm(Some(format!(
                "{raw_path}, {}",
                privs.join("|")
            ))));
        }
        let given = |k: &str| p.str(k).filter(|v| !v.is_empty() && v != "0");
        if given("users").is_none() && given("groups").is_none() && given("tokens").is_none() {
            let msg = "either 'users', 'groups' or 'tokens' is required.";
            let errors: BTreeMap<String, String> = ["users", "groups", "tokens"]
                .iter()
                .map(|k| (k.to_string(), msg.to_string()))
                .collect();
            return Err(PveError::params(errors));
        }
        let delete = p.flag("delete");
        let invalid = || PveError::param("path", format!("invalid ACL path '{raw_path}'"));
        let path = normalize_path(&raw_path);
        if !PATH_CHARS.as_ref().is_some_and(|r| r.is_match(&path)) {
            return Err(invalid());
        }
        if !delete && !ACL_PATH.as_ref().is_some_and(|r| r.is_match(&path)) {
            return Err(invalid());
        }
        let propagate = p.bool("propagate").unwrap_or(true);
        let failed = |e: String| PveError::die(format!("ACL update failed: {e}"));
        let mine = self.access.privs(&req.who, &path);
        let may_modify = mine.contains("Permissions.Modify");
        let mut acls = self.access.acls.clone();
        let roles_param = p.str("roles").unwrap_or_default();
        let (groups, users, tokens) = (
            p.str("groups").unwrap_or_default(),
            p.str("users").unwrap_or_default(),
            p.str("tokens").unwrap_or_default(),
        );
        for role in split_list(&roles_param) {
            let Some(role_privs) = self.access.role(role) else {
                return Err(failed(format!("role '{role}' does not exist")));
            };
            if !may_modify {
                self.check_grantable(req, &path, role, &role_privs, propagate && !delete)?;
            }
            let mut ugids = Vec::new();
            for g in split_list(&groups) {
                if !self.access.groups.contains_key(g) {
                    return Err(failed(format!("group '{g}' does not exist")));
                }
                ugids.push(format!("@{g}"));
            }
            for u in split_list(&users) {
                if !self.access.users.contains_key(u) {
                    return Err(failed(format!("user '{u}' does not exist")));
                }
                ugids.push(u.to_string());
            }
            for t in split_list(&tokens) {
                let (user, name) = t.split_once('!').unwrap_or((t, ""));
                if !self.access.users.contains_key(user) {
                    return Err(failed(format!("no such user ('{user}')")));
                }
                if !self.access.tokens.contains_key(t) {
                    return Err(failed(format!("no such token '{name}' for user '{user}'")));
                }
                ugids.push(t.to_string());
            }
            for ugid in ugids {
                let same =
                    |a: &Acl| normalize_path(&a.path) == path && a.ugid == ugid && a.role == role;
                acls.retain(|a| !same(a));
                if !delete {
                    acls.push(Acl {
                        path: path.clone(),
                        ugid,
                        role: role.to_string(),
                        propagate,
                    });
                }
            }
        }
        self.access.acls = acls;
        Ok(())
    }

    /// Without `Permissions.Modify`: a role may be handed out (or taken back) only if the
    /// caller holds all its privileges on the path — propagated, to grant it propagated.
    fn check_grantable(
        &self,
        req: &Request,
        path: &str,
        role: &str,
        role_privs: &BTreeSet<&'static str>,
        propagated: bool,
    ) -> Result<(), PveError> {
        let verb = if req.p.flag("delete") {
            "remove"
        } else {
            "add"
        };
        let mine = self.access.privs(&req.who, path);
        if role_privs.iter().any(|p| !mine.contains(p)) {
            return Err(PveError::param(
                "role",
                format!(
                    "Cannot {verb} role '{role}' - requires 'Permissions.Modify' or superset of privileges."
                ),
            ));
        }
        if propagated {
            // The privileges held on the path through a propagating entry: those the
            // caller still holds one level further down.
            let below = self.access.privs(&req.who, &format!("{path}/x"));
            if role_privs.iter().any(|p| !below.contains(p)) {
                return Err(PveError::param(
                    "role",
                    format!(
                        "Cannot {verb} role '{role}' with propagation - requires 'Permissions.Modify' or propagated superset of privileges."
                    ),
                ));
            }
        }
        if role == "NoAccess" {
            return Err(PveError::param(
                "role",
                format!("Cannot {verb} role '{role}' - requires 'Permissions.Modify'"),
            ));
        }
        Ok(())
    }
}
