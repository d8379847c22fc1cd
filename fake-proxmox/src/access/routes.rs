//! `/access`, `/access/ticket`, `/access/permissions`, `/access/users/{userid}/token...`.

use serde_json::{Map, Value, json};

use crate::access::model::Token;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply, b};

/// The `/api2/json` routes of login and permissions: `GET /access`, `GET`/`POST
/// /access/ticket` (the ticket and CSRF token PVE's login hands out),
/// `GET /access/permissions` and the API tokens under
/// `/access/users/{userid}/token[/{tokenid}]`; collected into the router's table.
pub fn routes() -> Vec<Route> {
    let mut v = vec![
        route("GET", "/access", index),
        route("GET", "/access/ticket", ticket_get),
        Route {
            allowtoken: false,
            ..route("POST", "/access/ticket", ticket_post)
        },
        route("GET", "/access/permissions", permissions),
        route("GET", "/access/users/{userid}/token", token_list),
        route("GET", "/access/users/{userid}/token/{tokenid}", token_get),
        route(
            "POST",
            "/access/users/{userid}/token/{tokenid}",
            token_create,
        ),
        route(
            "PUT",
            "/access/users/{userid}/token/{tokenid}",
            token_update,
        ),
        route(
            "DELETE",
            "/access/users/{userid}/token/{tokenid}",
            token_delete,
        ),
    ];
    v.extend(crate::access::admin_routes::routes());
    v
}

fn index(_c: &mut Ctx) -> Result<Reply, PveError> {
    let dirs = [
        "users",
        "groups",
        "roles",
        "acl",
        "domains",
        "openid",
        "tfa",
        "ticket",
        "password",
        "permissions",
    ];
    Ok(Reply::index("subdir", &dirs))
}

fn ticket_get(_c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::null())
}

fn caps_of(c: &Ctx, userid: &str) -> Value {
    let id = crate::access::model::Identity {
        userid: userid.to_string(),
        tokenid: None,
    };
    let group = |path: &str, prefix: &[&str]| -> Value {
        let privs = c.site.access.privs(&id, path);
        let mut m = Map::new();
        for p in privs
            .iter()
            .filter(|p| prefix.iter().any(|x| p.starts_with(x)))
        {
            m.insert((*p).to_string(), json!(1));
        }
        Value::Object(m)
    };
    json!({
        "vms": group("/vms", &["VM."]),
        "storage": group("/storage", &["Datastore."]),
        "nodes": group("/nodes", &["Sys."]),
        "access": group("/access", &["User.", "Group.", "Permissions.", "Realm."]),
        "dc": group("/", &["Sys.Audit", "SDN.", "Sys.Modify"]),
        "sdn": group("/sdn", &["SDN."]),
        "mapping": group("/mapping", &["Mapping."]),
    })
}

fn ticket_post(c: &mut Ctx) -> Result<Reply, PveError> {
    let user = c.site.authenticate(&c.req)?;
    if let (Some(path), Some(privs)) = (c.req.p.str("path"), c.req.p.str("privs")) {
        // Verify mode: check privileges, return nothing else.
        c.site.verify_privs(&user, &path, &privs)?;
        return Ok(Reply::data(json!({"username": user})));
    }
    let mut data = json!({
        "username": user,
        "ticket": c.site.access.make_ticket(&user, c.req.now),
        "CSRFPreventionToken": c.site.access.make_csrf(&user, c.req.now),
        "cap": caps_of(c, &user),
    });
    if let Some(name) = &c.site.cluster_name {
        data["clustername"] = json!(name);
    }
    Ok(Reply::data(data))
}

fn permissions(c: &mut Ctx) -> Result<Reply, PveError> {
    let target = c.site.permissions_of(&c.req)?;
    let paths: Vec<String> = match c.req.p.str("path") {
        Some(p) => vec![p],
        None => c.site.access.known_paths().into_iter().collect(),
    };
    let mut out = Map::new();
    for path in paths {
        let privs = c.site.access.privs(&target, &path);
        if privs.is_empty() {
            continue;
        }
        let mut m = Map::new();
        for p in privs {
            m.insert(p.to_string(), json!(1));
        }
        out.insert(path, Value::Object(m));
    }
    Ok(Reply::data(Value::Object(out)))
}

fn token_json(t: &Token) -> Value {
    let mut v = json!({"privsep": b(t.privsep), "expire": t.expire});
    if let Some(cm) = &t.comment {
        v["comment"] = json!(cm);
    }
    v
}

fn token_list(c: &mut Ctx) -> Result<Reply, PveError> {
    let prefix = format!("{}!", c.req.p.req_str("userid")?);
    let data: Vec<Value> = c
        .site
        .tokens_of(&c.req)?
        .into_iter()
        .filter_map(|t| {
            let name = t.tokenid.strip_prefix(&prefix)?;
            let mut v = token_json(t);
            v["tokenid"] = json!(name);
            Some(v)
        })
        .collect();
    Ok(Reply::data(Value::Array(data)))
}

fn token_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(token_json(c.site.token(&c.req)?)))
}

fn token_create(c: &mut Ctx) -> Result<Reply, PveError> {
    let (t, secret) = c.site.create_token(&c.req)?;
    Ok(Reply::data(
        json!({"full-tokenid": t.tokenid, "info": token_json(&t), "value": secret}),
    ))
}

fn token_update(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(token_json(c.site.update_token(&c.req)?)))
}

fn token_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.delete_token(&c.req)?;
    Ok(Reply::null())
}
