//! The access family's decisions on users and groups (`/access/users`, `/access/groups`):
//! who may see or change which, and PVE's checks and texts (`API2/User.pm`,
//! `API2/Group.pm`). Changes are all-or-nothing, as PVE writes `user.cfg` only at the end.

use regex::Regex;
use std::sync::LazyLock;

use crate::access::model::{Group, User};
use crate::request::Request;
use crate::schema::formats::split_list;
use crate::wire::{Params, PveError};
use crate::world::Site;

static ID: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9.\-_]+$").ok());

/// Names of groups and roles: PVE's `verify_groupname`/`verify_rolename` character set.
pub fn plain_id(v: &str) -> bool {
    ID.as_ref().is_some_and(|r| r.is_match(v))
}

/// A parameter in one of the formats PVE checks in code and the schema module leaves
/// unchecked: `check` returns PVE's `die` text for a bad item; each list item is checked.
pub fn check_param(
    p: &Params,
    key: &str,
    list: bool,
    check: impl Fn(&str) -> Option<String>,
) -> Result<(), PveError> {
    let Some(v) = p.str(key) else { return Ok(()) };
    let bad = if list {
        split_list(&v).find_map(&check)
    } else {
        check(&v)
    };
    match bad {
        Some(msg) => Err(PveError::param(key, format!("invalid format - {msg}\n"))),
        None => Ok(()),
    }
}

/// PVE's error text when a group id contains characters PVE refuses; `None` when it is valid.
pub fn bad_groupid(g: &str) -> Option<String> {
    (!plain_id(g)).then(|| format!("group name '{g}' contains invalid characters"))
}

/// How `userid-group` treats the `groups` parameter (PVE's `groups_param`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum GroupsParam {
    None,
    Create,
    Update,
}

/// `Some(s)` unless empty: PVE stores only values that are true in Perl.
fn truthy(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty() && s != "0")
}

impl Site {
    /// `no such user ('…')` unless the user exists.
    pub fn user_exists(&self, userid: &str) -> Result<&User, PveError> {
        self.access
            .users
            .get(userid)
            .ok_or_else(|| PveError::die(format!("no such user ('{userid}')")))
    }

    /// PVE's `userid-group` check: any of `privs` on `/access/groups`, or on groups the
    /// user (and, when given, each new group) belongs to.
    fn userid_group(
        &self,
        req: &Request,
        userid: &str,
        privs: &[&str],
        groups_param: GroupsParam,
    ) -> Result<(), PveError> {
        let existing = groups_param != GroupsParam::Create;
        if existing {
            self.user_exists(userid)?;
        }
        let who = &req.who;
        if self.access.has_any(who, "/access/groups", privs) {
            return Ok(());
        }
        let allowed: Vec<&String> = self
            .access
            .groups
            .keys()
            .filter(|g| {
                self.access
                    .has_any(who, &format!("/access/groups/{g}"), privs)
            })
            .collect();
        let joined = privs.join("|");
        if groups_param != GroupsParam::None {
            let asked = req.p.str("groups").unwrap_or_default();
            let asked: Vec<&str> = split_list(&asked).collect();
            if asked.is_empty() {
                return Err(PveError::perm(Some(format!("/access/groups, {joined}"))));
            }
            if let Some(g) = asked.iter().find(|g| !allowed.iter().any(|a| a == *g)) {
                return Err(PveError::perm(Some(format!(
                    "/access/groups/{g}, {joined}"
                ))));
            }
        }
        if existing
            && !allowed.iter().any(|g| {
                self.access
                    .groups
                    .get(*g)
                    .is_some_and(|g| g.members.contains(userid))
            })
        {
            return Err(PveError::perm(None));
        }
        Ok(())
    }

    /// `Realm.AllocateUser` on the user's realm.
    fn may_allocate_in_realm(&self, req: &Request, userid: &str) -> Result<(), PveError> {
        let realm = userid.rsplit_once('@').map_or("", |(_, r)| r);
        self.require(
            &req.who,
            &format!("/access/realm/{realm}"),
            "Realm.AllocateUser",
        )
    }

    /// `GET /access/users`: everyone with `User.Modify` or `Sys.Audit` on `/access/groups`
    /// sees every user; others themselves and the members of groups they may see.
    pub fn list_users(&self, req: &Request) -> Vec<&User> {
        let privs = ["User.Modify", "Sys.Audit"];
        let who = &req.who;
        let all = self.access.has_any(who, "/access/groups", &privs);
        let enabled = req.p.bool("enabled");
        self.access
            .users
            .values()
            .filter(|u| {
                all || u.userid == who.userid
                    || self.access.groups.iter().any(|(name, g)| {
                        g.members.contains(&u.userid)
                            && self
                                .access
                                .has_any(who, &format!("/access/groups/{name}"), &privs)
                    })
            })
            .filter(|u| enabled.is_none_or(|e| e == u.enable))
            .collect()
    }

    /// `POST /access/users`
    pub fn create_user(&mut self, req: &Request) -> Result<(), PveError> {
        let p = &req.p;
        check_param(p, "groups", true, bad_groupid)?;
        let userid = p.req_str("userid")?;
        self.may_allocate_in_realm(req, &userid)?;
        self.userid_group(req, &userid, &["User.Modify"], GroupsParam::Create)?;
        let failed = |e: String| PveError::die(format!("create user failed: {e}"));
        if self.access.users.contains_key(&userid) {
            return Err(failed(format!("user '{userid}' already exists")));
        }
        let mut user = User::new(&userid, "", p.bool("enable").unwrap_or(true));
        if let Some(pw) = p.str("password") {
            self.password_for_realm(&userid, &pw).map_err(failed)?;
            user.password = pw;
        }
        user.expire = p.int("expire").unwrap_or(0).max(0) as u64;
        let groups = self.new_groups(p).map_err(failed)?;
        user.firstname = truthy(p.str("firstname"));
        user.lastname = truthy(p.str("lastname"));
        user.email = truthy(p.str("email"));
        user.comment = truthy(p.str("comment"));
        user.keys = truthy(p.str("keys"));
        for g in groups {
            if let Some(g) = self.access.groups.get_mut(&g) {
                g.members.insert(userid.clone());
            }
        }
        self.access.users.insert(userid, user);
        Ok(())
    }

    /// The `groups` parameter's groups, each of which must exist.
    fn new_groups(&self, p: &Params) -> Result<Vec<String>, String> {
        let asked = p.str("groups").unwrap_or_default();
        split_list(&asked)
            .map(|g| {
                if self.access.groups.contains_key(g) {
                    Ok(g.to_string())
                } else {
                    Err(format!("no such group '{g}'"))
                }
            })
            .collect()
    }

    /// `domain_set_password`: only the `pve` realm type keeps passwords itself.
    fn password_for_realm(&self, userid: &str, _password: &str) -> Result<(), String> {
        let (name, realm) = userid.rsplit_once('@').unwrap_or((userid, ""));
        let Some(r) = self.access.realms.get(realm) else {
            return Err(format!("auth domain '{realm}' does not exist"));
        };
        match r.kind.as_str() {
            "pve" => Ok(()),
            // `usermod` on a node without that system user (the hash is not shown).
            "pam" => Err(format!(
                "change password failed: command 'usermod -p '*' {name}' failed: exit code 6"
            )),
            other => Err(format!("can't set password on auth type '{other}'")),
        }
    }

    /// `GET /access/users/{userid}`
    pub fn read_user(&self, req: &Request) -> Result<&User, PveError> {
        let userid = req.p.req_str("userid")?;
        self.userid_group(
            req,
            &userid,
            &["User.Modify", "Sys.Audit"],
            GroupsParam::None,
        )?;
        self.user_exists(&userid)
    }

    /// `PUT /access/users/{userid}`: `groups` replaces the user's groups unless `append`.
    pub fn update_user(&mut self, req: &Request) -> Result<(), PveError> {
        let p = &req.p;
        check_param(p, "groups", true, bad_groupid)?;
        let userid = p.req_str("userid")?;
        self.userid_group(req, &userid, &["User.Modify"], GroupsParam::Update)?;
        let failed = |e: String| PveError::die(format!("update user failed: {e}"));
        let groups = self.new_groups(p).map_err(failed)?;
        if !p.flag("append") && p.has("groups") {
            for g in self.access.groups.values_mut() {
                g.members.remove(&userid);
            }
        }
        for g in groups {
            if let Some(g) = self.access.groups.get_mut(&g) {
                g.members.insert(userid.clone());
            }
        }
        let Some(u) = self.access.users.get_mut(&userid) else {
            return Err(failed(format!("no such user ('{userid}')")));
        };
        if let Some(e) = p.bool("enable") {
            u.enable = e;
        }
        if let Some(e) = p.int("expire") {
            u.expire = e.max(0) as u64;
        }
        for (key, field) in [
            ("firstname", &mut u.firstname),
            ("lastname", &mut u.lastname),
            ("email", &mut u.email),
            ("comment", &mut u.comment),
            ("keys", &mut u.keys),
        ] {
            if p.has(key) {
                *field = truthy(p.str(key));
            }
        }
        Ok(())
    }

    /// `DELETE /access/users/{userid}`: the user's tokens, group memberships and ACL entries
    /// go with it. `root@pam` comes back at once, enabled and bare, as PVE re-adds it.
    pub fn delete_user(&mut self, req: &Request) -> Result<(), PveError> {
        let userid = req.p.req_str("userid")?;
        self.may_allocate_in_realm(req, &userid)?;
        self.userid_group(req, &userid, &["User.Modify"], GroupsParam::None)?;
        let removed = self.access.users.remove(&userid);
        let prefix = format!("{userid}!");
        self.access.tokens.retain(|t, _| !t.starts_with(&prefix));
        self.access
            .acls
            .retain(|a| a.ugid != userid && !a.ugid.starts_with(&prefix));
        for g in self.access.groups.values_mut() {
            g.members.remove(&userid);
        }
        if userid == "root@pam" {
            let pw = removed.map(|u| u.password).unwrap_or_default();
            self.access
                .users
                .insert(userid.clone(), User::new(&userid, &pw, true));
        }
        Ok(())
    }

    /// `GET /access/users/{userid}/tfa`: the realm's TFA type, if it enforces one (no user
    /// has TFA entries here).
    pub fn user_tfa(&self, req: &Request) -> Result<Option<String>, PveError> {
        let userid = req.p.req_str("userid")?;
        let own = req.who.userid == userid && req.who.tokenid.is_none();
        let allowed = self.access.users.contains_key(&userid)
            && (own
                || self
                    .userid_group(
                        req,
                        &userid,
                        &["User.Modify", "Sys.Audit"],
                        GroupsParam::None,
                    )
                    .is_ok());
        if !allowed {
            return Err(PveError::perm(None));
        }
        let realm = userid.rsplit_once('@').map_or("", |(_, r)| r);
        let r = self
            .access
            .realms
            .get(realm)
            .ok_or_else(|| PveError::die(format!("auth domain '{realm}' does not exist")))?;
        Ok(r.option_str("tfa").and_then(tfa_type))
    }

    /// `GET /access/groups`: the groups the caller may see.
    pub fn list_groups(&self, req: &Request) -> Vec<(&String, &Group)> {
        let privs = ["User.Modify", "Sys.Audit", "Group.Allocate"];
        self.access
            .groups
            .iter()
            .filter(|(g, _)| {
                self.access
                    .has_any(&req.who, &format!("/access/groups/{g}"), &privs)
            })
            .collect()
    }

    /// `POST /access/groups`
    pub fn create_group(&mut self, req: &Request) -> Result<(), PveError> {
        check_param(&req.p, "groupid", false, bad_groupid)?;
        self.require(&req.who, "/access/groups", "Group.Allocate")?;
        let g = req.p.req_str("groupid")?;
        if self.access.groups.contains_key(&g) {
            return Err(PveError::die(format!(
                "create group failed: group '{g}' already exists"
            )));
        }
        let group = Group {
            comment: truthy(req.p.str("comment")),
            ..Group::default()
        };
        self.access.groups.insert(g, group);
        Ok(())
    }

    /// `GET /access/groups/{groupid}`
    pub fn read_group(&self, req: &Request) -> Result<&Group, PveError> {
        check_param(&req.p, "groupid", false, bad_groupid)?;
        self.require_any(&req.who, "/access/groups", &["Sys.Audit", "Group.Allocate"])?;
        let g = req.p.req_str("groupid")?;
        self.access
            .groups
            .get(&g)
            .ok_or_else(|| PveError::die(format!("group '{g}' does not exist")))
    }

    /// `PUT /access/groups/{groupid}`: only the comment changes.
    pub fn update_group(&mut self, req: &Request) -> Result<(), PveError> {
        check_param(&req.p, "groupid", false, bad_groupid)?;
        self.require(&req.who, "/access/groups", "Group.Allocate")?;
        let g = req.p.req_str("groupid")?;
        let group = self.access.groups.get_mut(&g).ok_or_else(|| {
            PveError::die(format!("update group failed: group '{g}' does not exist"))
        })?;
        if req.p.has("comment") {
            group.comment = truthy(req.p.str("comment"));
        }
        Ok(())
    }

    /// `DELETE /access/groups/{groupid}`: its ACL entries go with it.
    pub fn delete_group(&mut self, req: &Request) -> Result<(), PveError> {
        check_param(&req.p, "groupid", false, bad_groupid)?;
        self.require(&req.who, "/access/groups", "Group.Allocate")?;
        let g = req.p.req_str("groupid")?;
        if self.access.groups.remove(&g).is_none() {
            return Err(PveError::die(format!(
                "delete group failed: group '{g}' does not exist"
            )));
        }
        let ugid = format!("@{g}");
        self.access.acls.retain(|a| a.ugid != ugid);
        Ok(())
    }
}

/// The `type` of a realm's `tfa` property string (`type=oath,…`).
pub fn tfa_type(tfa: &str) -> Option<String> {
    tfa.split(',').find_map(|kv| match kv.split_once('=') {
        Some(("type", t)) => Some(t.to_string()),
        None if !kv.is_empty() => Some(kv.to_string()),
        _ => None,
    })
}
