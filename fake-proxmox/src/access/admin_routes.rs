//! `/access/users`, `/access/groups`, `/access/roles`, `/access/acl`, `/access/domains`
//! and the TFA listings: the wire side (parameters in, PVE's JSON out).

use serde_json::{Map, Value, json};

use crate::access::acl::acl_type;
use crate::access::model::{Token, User};
use crate::access::users::tfa_type;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply, b};

/// The `/api2/json` routes of PVE's access administration: users, groups, roles, ACL and
/// realms (`/access/users…`, `/access/groups…`, `/access/roles…`, `/access/acl`,
/// `/access/domains…`, including `POST /access/domains/{realm}/sync`) and the TFA listings
/// (`/access/tfa…`, `/access/users/{userid}/tfa`); collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/access/users", users),
        route("POST", "/access/users", user_create),
        route("GET", "/access/users/{userid}", user_get),
        route("PUT", "/access/users/{userid}", user_update),
        route("DELETE", "/access/users/{userid}", user_delete),
        route("GET", "/access/users/{userid}/tfa", user_tfa),
        route("GET", "/access/tfa", tfa_list),
        route("GET", "/access/tfa/{userid}", tfa_user),
        route("GET", "/access/groups", groups),
        route("POST", "/access/groups", group_create),
        route("GET", "/access/groups/{groupid}", group_get),
        route("PUT", "/access/groups/{groupid}", group_update),
        route("DELETE", "/access/groups/{groupid}", group_delete),
        route("GET", "/access/roles", roles),
        route("POST", "/access/roles", role_create),
        route("GET", "/access/roles/{roleid}", role_get),
        route("PUT", "/access/roles/{roleid}", role_update),
        route("DELETE", "/access/roles/{roleid}", role_delete),
        route("GET", "/access/acl", acl),
        route("PUT", "/access/acl", acl_update),
        route("GET", "/access/domains", domains),
        route("POST", "/access/domains", domain_create),
        route("GET", "/access/domains/{realm}", domain_get),
        route("PUT", "/access/domains/{realm}", domain_update),
        route("DELETE", "/access/domains/{realm}", domain_delete),
        route("POST", "/access/domains/{realm}/sync", domain_sync),
    ]
}

/// The user's own fields as `user.cfg` yields them: `email` is there (empty) when a later
/// field of the user's line is set.
fn user_fields(u: &User) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("enable".into(), b(u.enable));
    m.insert("expire".into(), json!(u.expire));
    for (k, v) in [
        ("firstname", &u.firstname),
        ("lastname", &u.lastname),
        ("comment", &u.comment),
        ("keys", &u.keys),
    ] {
        if let Some(v) = v {
            m.insert(k.into(), json!(v));
        }
    }
    match &u.email {
        Some(e) => {
            m.insert("email".into(), json!(e));
        }
        None if u.comment.is_some() || u.keys.is_some() => {
            m.insert("email".into(), json!(""));
        }
        None => {}
    }
    m
}

fn token_info(t: &Token) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("privsep".into(), b(t.privsep));
    m.insert("expire".into(), json!(t.expire));
    if let Some(c) = t.comment.as_ref().filter(|c| !c.is_empty()) {
        m.insert("comment".into(), json!(c));
    }
    m
}

/// A user's tokens by name (`None`: the user has none, and PVE sends `null`).
fn tokens_of<'a>(c: &'a Ctx, userid: &str) -> Option<Vec<(&'a str, &'a Token)>> {
    let prefix = format!("{userid}!");
    let list: Vec<(&str, &Token)> = c
        .site
        .access
        .tokens
        .iter()
        .filter_map(|(id, t)| Some((id.strip_prefix(&prefix)?, t)))
        .collect();
    (!list.is_empty()).then_some(list)
}

fn users(c: &mut Ctx) -> Result<Reply, PveError> {
    let full = c.req.p.flag("full");
    let mut out = Vec::new();
    for u in c.site.list_users(&c.req) {
        let mut m = user_fields(u);
        m.insert("userid".into(), json!(u.userid));
        let realm = u.userid.rsplit_once('@').map_or("", |(_, r)| r);
        if let Some(r) = c.site.access.realms.get(realm) {
            m.insert("realm-type".into(), json!(r.kind));
        }
        if full {
            let groups = c.site.access.groups_of(&u.userid).join(",");
            m.insert("groups".into(), json!(groups));
            let tokens = tokens_of(c, &u.userid).map(|list| {
                list.into_iter()
                    .map(|(name, t)| {
                        let mut i = token_info(t);
                        i.insert("tokenid".into(), json!(name));
                        Value::Object(i)
                    })
                    .collect::<Vec<_>>()
            });
            m.insert("tokens".into(), json!(tokens));
        }
        out.push(Value::Object(m));
    }
    Ok(Reply::data(Value::Array(out)))
}

fn user_create(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.create_user(&c.req)?;
    Ok(Reply::null())
}

fn user_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let u = c.site.read_user(&c.req)?;
    let mut m = user_fields(u);
    let groups = c.site.access.groups_of(&u.userid);
    m.insert("groups".into(), json!(groups));
    let tokens = tokens_of(c, &u.userid).map(|list| {
        list.into_iter()
            .map(|(name, t)| (name.to_string(), Value::Object(token_info(t))))
            .collect::<Map<_, _>>()
    });
    m.insert("tokens".into(), json!(tokens));
    Ok(Reply::data(Value::Object(m)))
}

fn user_update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_user(&c.req)?;
    Ok(Reply::null())
}

fn user_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.delete_user(&c.req)?;
    Ok(Reply::null())
}

fn user_tfa(c: &mut Ctx) -> Result<Reply, PveError> {
    let realm = c.site.user_tfa(&c.req)?;
    let mut m = Map::new();
    if let Some(r) = realm {
        m.insert("realm".into(), json!(r));
    }
    // `multiple` lists the user's TFA types (none here); without it, the type is left out.
    if c.req.p.flag("multiple") {
        m.insert("user".into(), json!([]));
    }
    Ok(Reply::data(Value::Object(m)))
}

/// `GET /access/tfa`: only users with TFA entries are listed, and nobody has any.
fn tfa_list(_c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!([])))
}

/// `GET /access/tfa/{userid}`: the user's entries (none).
fn tfa_user(c: &mut Ctx) -> Result<Reply, PveError> {
    let userid = c.req.p.req_str("userid")?;
    let own = c.req.who.userid == userid && c.req.who.tokenid.is_none();
    if !own {
        c.site.read_user(&c.req).map_err(|_| PveError::perm(None))?;
    }
    Ok(Reply::data(json!([])))
}

fn groups(c: &mut Ctx) -> Result<Reply, PveError> {
    let out: Vec<Value> = c
        .site
        .list_groups(&c.req)
        .into_iter()
        .map(|(name, g)| {
            let members: Vec<&str> = g.members.iter().map(String::as_str).collect();
            let mut v = json!({"groupid": name, "users": members.join(",")});
            if let Some(cm) = &g.comment {
                v["comment"] = json!(cm);
            }
            v
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

fn group_create(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.create_group(&c.req)?;
    Ok(Reply::null())
}

fn group_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let g = c.site.read_group(&c.req)?;
    let mut v = json!({"members": g.members});
    if let Some(cm) = &g.comment {
        v["comment"] = json!(cm);
    }
    Ok(Reply::data(v))
}

fn group_update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_group(&c.req)?;
    Ok(Reply::null())
}

fn group_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.delete_group(&c.req)?;
    Ok(Reply::null())
}

fn roles(c: &mut Ctx) -> Result<Reply, PveError> {
    let out: Vec<Value> = c
        .site
        .list_roles()
        .into_iter()
        .map(|r| {
            let privs: Vec<&str> = r.privs.into_iter().collect();
            json!({"roleid": r.roleid, "privs": privs.join(","), "special": b(r.special)})
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

fn role_create(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.create_role(&c.req)?;
    Ok(Reply::null())
}

fn role_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let privs = c.site.read_role(&c.req)?;
    let m: Map<String, Value> = privs.into_iter().map(|p| (p.into(), json!(1))).collect();
    Ok(Reply::data(Value::Object(m)))
}

fn role_update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_role(&c.req)?;
    Ok(Reply::null())
}

fn role_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.delete_role(&c.req)?;
    Ok(Reply::null())
}

fn acl(c: &mut Ctx) -> Result<Reply, PveError> {
    let out: Vec<Value> = c
        .site
        .list_acl(&c.req)
        .into_iter()
        .map(|a| {
            json!({
                "path": crate::access::model::normalize_path(&a.path),
                "type": acl_type(&a.ugid),
                "ugid": a.ugid.trim_start_matches('@'),
                "roleid": a.role,
                "propagate": b(a.propagate),
            })
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

fn acl_update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_acl(&c.req)?;
    Ok(Reply::null())
}

fn domains(c: &mut Ctx) -> Result<Reply, PveError> {
    let out: Vec<Value> = c
        .site
        .access
        .realms
        .iter()
        .map(|(name, r)| {
            let mut v = json!({"realm": name, "type": r.kind});
            if let Some(cm) = r.option_str("comment").filter(|s| !s.is_empty()) {
                v["comment"] = json!(cm);
            }
            if r.options
                .get("default")
                .is_some_and(|d| d.as_u64() == Some(1))
            {
                v["default"] = json!(1);
            }
            if let Some(t) = r.option_str("tfa").and_then(tfa_type) {
                v["tfa"] = json!(t);
            }
            v
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

fn domain_create(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.create_realm(&c.req)?;
    Ok(Reply::null())
}

fn domain_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let r = c.site.read_realm(&c.req)?;
    let mut m: Map<String, Value> = r.options.clone().into_iter().collect();
    m.insert("type".into(), json!(r.kind));
    if r.kind == "pam" {
        m.insert("plugin".into(), json!("PVE::Auth::PAM"));
    }
    m.insert("digest".into(), json!(c.site.realms_digest()));
    Ok(Reply::data(Value::Object(m)))
}

fn domain_update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_realm(&c.req)?;
    Ok(Reply::null())
}

fn domain_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.delete_realm(&c.req)?;
    Ok(Reply::null())
}

fn domain_sync(c: &mut Ctx) -> Result<Reply, PveError> {
    let upid = c.site.sync_realm(&c.req)?;
    Ok(Reply::data(json!(upid)))
}
