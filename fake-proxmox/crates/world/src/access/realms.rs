//! The access family's decisions on authentication realms (`/access/domains`): each
//! realm type's options, required and allowed, as pve-access-control's `Auth/*.pm` plugins
//! declare them, and PVE's texts (`API2/Domains.pm`, `SectionConfig::check_config`).
//! No directory server exists: syncing an LDAP/AD realm fails as it does when the server
//! cannot be reached.

use std::collections::BTreeMap;

use serde_json::Value;
use sha1::{Digest, Sha1};

use crate::access::directory::Realm;
use crate::request::Request;
use crate::schema::formats::split_list;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// What `Net::LDAP` reports when no server answers (the fake has none).
const NO_SERVER: &str = "IO::Socket::IP: connect: Connection refused";

const DIRECTORY: &[&str] = &[
    "server2",
    "port",
    "secure",
    "sslversion",
    "default",
    "comment",
    "tfa",
    "verify",
    "capath",
    "cert",
    "certkey",
    "bind_dn",
    "password",
    "filter",
    "sync_attributes",
    "user_classes",
    "group_dn",
    "group_name_attr",
    "group_filter",
    "group_classes",
    "sync-defaults-options",
    "mode",
    "case-sensitive",
];

/// A realm type's options: (required, optional).
fn options(kind: &str) -> (Vec<&'static str>, Vec<&'static str>) {
    match kind {
        "ldap" => (vec!["server1", "base_dn", "user_attr"], DIRECTORY.to_vec()),
        "ad" => {
            let mut opt = DIRECTORY.to_vec();
            opt.extend(["base_dn", "user_attr"]);
            (vec!["server1", "domain"], opt)
        }
        "openid" => (
            vec!["issuer-url", "client-id"],
            vec![
                "client-key",
                "autocreate",
                "username-claim",
                "groups-claim",
                "groups-autocreate",
                "groups-overwrite",
                "prompt",
                "scopes",
                "acr-values",
                "audiences",
                "default",
                "comment",
                "query-userinfo",
            ],
        ),
        _ => (vec![], vec!["default", "comment", "tfa"]),
    }
}

/// Parameters of create/update that are not realm options.
const CONTROL: &[&str] = &["realm", "type", "check-connection", "digest", "delete"];

impl Site {
    /// The realms' `digest` (of the realms as they stand).
    pub fn realms_digest(&self) -> String {
        let text = serde_json::to_string(&self.access.realms).unwrap_or_default();
        hex::encode(Sha1::digest(text.as_bytes()))
    }

    /// `SectionConfig::check_config`: every option known to the type, the required ones
    /// given on create; the options to store (booleans as PVE stores them, 1/0).
    fn realm_options(
        &self,
        kind: &str,
        req: &Request,
        create: bool,
    ) -> Result<BTreeMap<String, Value>, String> {
        let (required, optional) = options(kind);
        let mut out = BTreeMap::new();
        for k in req.p.keys() {
            if CONTROL.contains(&k.as_str()) || k == "password" {
                continue;
            }
            if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
                return Err(format!("unexpected property '{k}'"));
            }
            if !create && k == "username-claim" {
                return Err(format!("can't change value of fixed parameter '{k}'"));
            }
            let v = match req.p.0.get(k) {
                Some(Value::Bool(b)) => Value::from(u8::from(*b)),
                Some(v) => v.clone(),
                None => continue,
            };
            out.insert(k.clone(), v);
        }
        if create && let Some(missing) = required.iter().find(|k| !out.contains_key(**k)) {
            return Err(format!("missing value for required option '{missing}'"));
        }
        Ok(out)
    }

    /// `POST /access/domains`
    pub fn create_realm(&mut self, req: &Request) -> Result<(), PveError> {
        self.require(&req.who, "/access/realm", "Realm.Allocate")?;
        let failed = |e: String| PveError::die(format!("add auth server failed: {e}"));
        let realm = req.p.req_str("realm")?;
        let kind = req.p.req_str("type")?;
        if self.access.realms.contains_key(&realm) {
            return Err(failed(format!("domain '{realm}' already exists")));
        }
        if realm == "pam" || realm == "pve" {
            return Err(failed(format!("unable to use reserved name '{realm}'")));
        }
        if kind == "pam" || kind == "pve" {
            return Err(failed(format!("unable to create builtin type '{kind}'")));
        }
        let check = req.p.has("check-connection");
        if check && kind != "ldap" && kind != "ad" {
            return Err(failed(
                "'check-connection' parameter can only be set for realms of type 'ldap' or 'ad'"
                    .into(),
            ));
        }
        let options = self.realm_options(&kind, req, true).map_err(failed)?;
        if check && req.p.flag("check-connection") {
            return Err(failed(NO_SERVER.into()));
        }
        if options.get("default").is_some_and(is_true) {
            self.clear_default_realm();
        }
        self.access.realms.insert(realm, Realm { kind, options });
        Ok(())
    }

    fn clear_default_realm(&mut self) {
        for r in self.access.realms.values_mut() {
            r.options.remove("default");
        }
    }

    /// `GET /access/domains/{realm}`
    pub fn read_realm(&self, req: &Request) -> Result<&Realm, PveError> {
        self.require_any(&req.who, "/access/realm", &["Realm.Allocate", "Sys.Audit"])?;
        let realm = req.p.req_str("realm")?;
        self.access
            .realms
            .get(&realm)
            .ok_or_else(|| PveError::die(format!("domain '{realm}' does not exist")))
    }

    /// `PUT /access/domains/{realm}`: `delete` removes options, the rest are set.
    pub fn update_realm(&mut self, req: &Request) -> Result<(), PveError> {
        self.require(&req.who, "/access/realm", "Realm.Allocate")?;
        let failed = |e: String| PveError::die(format!("update auth server failed: {e}"));
        if let Some(d) = req.p.str("digest")
            && d != self.realms_digest()
        {
            return Err(failed(
                "detected modified configuration - file changed by other user? Try again.".into(),
            ));
        }
        let name = req.p.req_str("realm")?;
        let Some(kind) = self.access.realms.get(&name).map(|r| r.kind.clone()) else {
            return Err(failed(format!("domain '{name}' does not exist")));
        };
        if req.p.has("check-connection") && kind != "ldap" && kind != "ad" {
            return Err(failed(
                "'check-connection' parameter can only be set for realms of type 'ldap' or 'ad'"
                    .into(),
            ));
        }
        let delete = req.p.str("delete").unwrap_or_default();
        let rest = req
            .p
            .keys()
            .any(|k| !["realm", "digest", "check-connection", "delete"].contains(&k.as_str()));
        if delete.is_empty() && !rest {
            return Err(failed("no options specified".into()));
        }
        let options = self.realm_options(&kind, req, false).map_err(failed)?;
        if req.p.flag("check-connection") {
            return Err(failed(NO_SERVER.into()));
        }
        if options.get("default").is_some_and(is_true) {
            self.clear_default_realm();
        }
        if let Some(r) = self.access.realms.get_mut(&name) {
            for opt in split_list(&delete) {
                r.options.remove(opt);
            }
            r.options.extend(options);
        }
        Realm::ensure_builtin(&mut self.access.realms);
        Ok(())
    }

    /// `DELETE /access/domains/{realm}`: `pam` and `pve` come back at once (PVE adds them to
    /// every `domains.cfg` it reads); the realm's users stay.
    pub fn delete_realm(&mut self, req: &Request) -> Result<(), PveError> {
        self.require(&req.who, "/access/realm", "Realm.Allocate")?;
        let realm = req.p.req_str("realm")?;
        if self.access.realms.remove(&realm).is_none() {
            return Err(PveError::die(format!(
                "delete auth server failed: authentication domain '{realm}' does not exist"
            )));
        }
        Realm::ensure_builtin(&mut self.access.realms);
        Ok(())
    }

    /// `POST /access/domains/{realm}/sync`: an `auth-realm-sync` task that fails to reach
    /// the directory server.
    pub fn sync_realm(&mut self, req: &Request) -> Result<String, PveError> {
        let realm = req.p.req_str("realm")?;
        self.require(
            &req.who,
            &format!("/access/realm/{realm}"),
            "Realm.AllocateUser",
        )?;
        self.require(&req.who, "/access/groups", "User.Modify")?;
        let Some(r) = self.access.realms.get(&realm) else {
            return Err(PveError::param("realm", "Realm does not exist."));
        };
        if r.kind != "ldap" && r.kind != "ad" {
            return Err(PveError::die(format!(
                "Cannot sync realm type '{}'! Only LDAP/AD realms can be synced.",
                r.kind
            )));
        }
        let defaults = r.option_str("sync-defaults-options").unwrap_or_default();
        let scope = req.p.str("scope").or_else(|| {
            defaults
                .split(',')
                .find_map(|kv| kv.strip_prefix("scope=").map(str::to_string))
        });
        if scope.is_none() {
            return Err(PveError::param(
                "scope",
                "Not passed as parameter and not defined in realm default sync options.",
            ));
        }
        let dry = req.p.flag("dry-run");
        let ttype = if dry {
            "auth-realm-sync-test"
        } else {
            "auth-realm-sync"
        };
        let node = self
            .nodes
            .values()
            .find(|n| n.online)
            .or_else(|| self.nodes.values().next())
            .map(|n| n.name.clone())
            .unwrap_or_default();
        let mut plan = TaskPlan::new(
            ttype,
            realm.clone(),
            &node,
            &req.who.task_user(),
            Work::Noop,
        );
        let prefix = if dry { "(dry test run) " } else { "" };
        plan.line(0.0, format!("{prefix}starting sync for realm {realm}"));
        plan.duration = 0.5;
        plan.planned_error = Some(NO_SERVER.to_string());
        Ok(self.start_task(plan, req.now))
    }
}

fn is_true(v: &Value) -> bool {
    v.as_u64().is_some_and(|n| n != 0) || v.as_bool() == Some(true)
}
