//! `/access`, `/access/ticket`, `/access/permissions`, `/access/users/{userid}/token...`.

use serde_json::{Map, Value, json};

use crate::access::model::Token;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply, b};

pub fn routes() -> Vec<Route> {
    vec![
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
    ]
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
    Ok(Reply::data(Value::Array(
        dirs.iter().map(|d| json!({"subdir": d})).collect(),
    )))
}

fn ticket_get(_c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::null())
}

fn auth_failure() -> PveError {
    PveError::new(401, "authentication failure\n")
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
    let username = c.req.p.req_str("username")?;
    let password = c.req.p.req_str("password")?;
    let realm = c.req.p.str("realm");
    let userid = if username.contains('@') {
        username.clone()
    } else {
        format!("{username}@{}", realm.as_deref().unwrap_or("pam"))
    };
    // The password may be a still-valid ticket of the same user (ticket renewal).
    let user = match c.site.access.verify_ticket(&password, c.req.now) {
        Some(u) if u == userid => Some(u),
        _ => c.site.access.login(&username, &password, realm.as_deref()),
    };
    let user = user.ok_or_else(auth_failure)?;
    if let (Some(path), Some(privs)) = (c.req.p.str("path"), c.req.p.str("privs")) {
        // Verify mode: check privileges, return nothing else.
        let id = crate::access::model::Identity {
            userid: user.clone(),
            tokenid: None,
        };
        for p in privs.split([',', ';', ' ']).filter(|p| !p.is_empty()) {
            if !c.site.access.has(&id, &path, p) {
                return Err(auth_failure());
            }
        }
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
    let target = match c.req.p.str("userid") {
        Some(u) if u != c.req.who.task_user() && u != c.req.who.userid => {
            c.require("/access", "Sys.Audit")?;
            let (user, tok) = match u.split_once('!') {
                Some((user, _)) => (user.to_string(), Some(u.clone())),
                None => (u.clone(), None),
            };
            crate::access::model::Identity {
                userid: user,
                tokenid: tok,
            }
        }
        _ => c.req.who.clone(),
    };
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

fn check_user_admin(c: &Ctx, userid: &str) -> Result<(), PveError> {
    if c.req.who.userid == userid && c.req.who.tokenid.is_none() {
        return Ok(());
    }
    c.require(&format!("/access/users/{userid}"), "User.Modify")
}

fn token_json(t: &Token) -> Value {
    let mut v = json!({"privsep": b(t.privsep), "expire": t.expire});
    if let Some(cm) = &t.comment {
        v["comment"] = json!(cm);
    }
    v
}

fn full_id(c: &Ctx) -> Result<(String, String), PveError> {
    let userid = c.req.p.req_str("userid")?;
    let tokenid = c.req.p.req_str("tokenid")?;
    Ok((userid.clone(), format!("{userid}!{tokenid}")))
}

fn token_list(c: &mut Ctx) -> Result<Reply, PveError> {
    let userid = c.req.p.req_str("userid")?;
    check_user_admin(c, &userid)?;
    if !c.site.access.users.contains_key(&userid) {
        return Err(PveError::die(format!("no such user ('{userid}')")));
    }
    let prefix = format!("{userid}!");
    let data: Vec<Value> = c
        .site
        .access
        .tokens
        .values()
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
    let (userid, full) = full_id(c)?;
    check_user_admin(c, &userid)?;
    let t = c.site.access.tokens.get(&full).ok_or_else(|| {
        PveError::die(format!(
            "no such token '{}' for user '{userid}'",
            c.req.p.str("tokenid").unwrap_or_default()
        ))
    })?;
    Ok(Reply::data(token_json(t)))
}

fn token_create(c: &mut Ctx) -> Result<Reply, PveError> {
    let (userid, full) = full_id(c)?;
    check_user_admin(c, &userid)?;
    if !c.site.access.users.contains_key(&userid) {
        return Err(PveError::die(format!("no such user ('{userid}')")));
    }
    if c.site.access.tokens.contains_key(&full) {
        return Err(PveError::die("Token already exists."));
    }
    let secret = c
        .site
        .access
        .new_token_secret(&format!("{full}{}", c.req.now));
    let t = Token {
        tokenid: full.clone(),
        secret: secret.clone(),
        privsep: c.req.p.bool("privsep").unwrap_or(true),
        comment: c.req.p.str("comment"),
        expire: c.req.p.int("expire").unwrap_or(0).max(0) as u64,
    };
    let info = token_json(&t);
    c.site.access.tokens.insert(full.clone(), t);
    Ok(Reply::data(
        json!({"full-tokenid": full, "info": info, "value": secret}),
    ))
}

fn token_update(c: &mut Ctx) -> Result<Reply, PveError> {
    let (userid, full) = full_id(c)?;
    check_user_admin(c, &userid)?;
    let (privsep, comment, expire) = (
        c.req.p.bool("privsep"),
        c.req.p.str("comment"),
        c.req.p.int("expire"),
    );
    let t = c
        .site
        .access
        .tokens
        .get_mut(&full)
        .ok_or_else(|| PveError::die(format!("no such token for user '{userid}'")))?;
    if let Some(p) = privsep {
        t.privsep = p;
    }
    if let Some(cm) = comment {
        t.comment = Some(cm);
    }
    if let Some(e) = expire {
        t.expire = e.max(0) as u64;
    }
    Ok(Reply::data(token_json(t)))
}

fn token_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    let (userid, full) = full_id(c)?;
    check_user_admin(c, &userid)?;
    if c.site.access.tokens.remove(&full).is_none() {
        return Err(PveError::die(format!("no such token for user '{userid}'")));
    }
    c.site.access.acls.retain(|a| a.ugid != full);
    Ok(Reply::null())
}
