//! `/nodes/{node}/lxc...` routes: parse, call the model verb, render.

use serde_json::{Value, json};

use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The `/api2/json` routes of containers under `/nodes/{node}/lxc[/{vmid}…]`: create,
/// list, delete, config and pending, status and power (`status/start`, `stop`, `shutdown`,
/// `reboot`, `suspend`, `resume`), interfaces, feature, template, resize, snapshots,
/// clone, migrate and the rest pve-container serves; collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/nodes/{node}/lxc", list),
        route("POST", "/nodes/{node}/lxc", create),
        route("GET", "/nodes/{node}/lxc/{vmid}", index),
        route("DELETE", "/nodes/{node}/lxc/{vmid}", destroy),
        route("GET", "/nodes/{node}/lxc/{vmid}/config", config_get),
        route("PUT", "/nodes/{node}/lxc/{vmid}/config", config_put),
        route("GET", "/nodes/{node}/lxc/{vmid}/pending", pending),
        route("GET", "/nodes/{node}/lxc/{vmid}/status", status_index),
        route(
            "GET",
            "/nodes/{node}/lxc/{vmid}/status/current",
            status_current,
        ),
        route("POST", "/nodes/{node}/lxc/{vmid}/status/start", |c| {
            Ok(upid(c.site.start_ct(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/status/stop", |c| {
            Ok(upid(c.site.stop_ct(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown", |c| {
            Ok(upid(c.site.shutdown_ct(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/status/reboot", |c| {
            Ok(upid(c.site.reboot_ct(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/status/suspend", |c| {
            Ok(upid(c.site.suspend_ct(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/status/resume", |c| {
            Ok(upid(c.site.resume_ct(&c.req)?))
        }),
        route("GET", "/nodes/{node}/lxc/{vmid}/interfaces", interfaces),
        route("GET", "/nodes/{node}/lxc/{vmid}/feature", |c| {
            Ok(Reply::data(c.site.ct_feature(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/template", |c| {
            Ok(upid(c.site.template_ct(&c.req)?))
        }),
        route("PUT", "/nodes/{node}/lxc/{vmid}/resize", |c| {
            Ok(upid(c.site.resize_ct(&c.req)?))
        }),
        route("GET", "/nodes/{node}/lxc/{vmid}/snapshot", |c| {
            Ok(Reply::data(c.site.ct_snapshot_list(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/snapshot", |c| {
            Ok(upid(c.site.start_ct_snapshot(&c.req)?))
        }),
        route(
            "GET",
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
            snapshot_index,
        ),
        route(
            "DELETE",
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
            |c| Ok(upid(c.site.start_ct_snapshot_delete(&c.req)?)),
        ),
        route(
            "POST",
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback",
            |c| Ok(upid(c.site.start_ct_rollback(&c.req)?)),
        ),
        route(
            "GET",
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config",
            snapshot_config_get,
        ),
        route(
            "PUT",
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config",
            |c| {
                c.site.set_ct_snapshot_description(&c.req)?;
                Ok(Reply::null())
            },
        ),
        route("POST", "/nodes/{node}/lxc/{vmid}/clone", |c| {
            Ok(upid(c.site.clone_ct(&c.req)?))
        }),
        route("GET", "/nodes/{node}/lxc/{vmid}/migrate", |c| {
            Ok(Reply::data(c.site.ct_migrate_precondition(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/migrate", |c| {
            Ok(upid(c.site.migrate_ct(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/move_volume", |c| {
            Ok(upid(c.site.move_volume_ct(&c.req)?))
        }),
        // The remote-migration verbs serve both kinds (the path tells which).
        route("POST", "/nodes/{node}/lxc/{vmid}/remote_migrate", |c| {
            Ok(upid(c.site.remote_migrate(&c.req)?))
        }),
        route("POST", "/nodes/{node}/lxc/{vmid}/mtunnel", |c| {
            Ok(Reply::data(c.site.mtunnel(&c.req)?))
        })
        .served_locally(),
        route("GET", "/nodes/{node}/lxc/{vmid}/mtunnelwebsocket", |c| {
            Ok(Reply::data(c.site.mtunnel_websocket(&c.req)?))
        })
        .served_locally(),
    ]
}

fn upid(u: String) -> Reply {
    Reply::data(json!(u))
}

/// `vmlist`: the node's containers the caller may audit.
fn list(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let cpus = c.site.node_cpus(&node);
    let rows: Vec<Value> = c
        .site
        .cts_on(&node)
        .filter(|ct| {
            c.site
                .access
                .has(&c.req.who, &format!("/vms/{}", ct.vmid), "VM.Audit")
        })
        .map(|ct| ct.vmstatus(c.req.now, cpus))
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

fn create(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.create_ct(&c.req)?))
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.ct_on(&c.node()?, c.req.vmid()?)?;
    let dirs = [
        "config",
        "status",
        "vncproxy",
        "termproxy",
        "vncwebsocket",
        "spiceproxy",
        "migrate",
        "clone",
        "rrd",
        "rrddata",
        "firewall",
        "snapshot",
        "resize",
        "interfaces",
    ];
    Ok(Reply::index("subdir", &dirs))
}

fn destroy(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.destroy_ct(&c.req)?))
}

fn config_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = c.site.ct_op(&c.req, &["VM.Audit"])?;
    let ct = c.site.ct_on(&node, vmid)?;
    let current = c.req.p.flag("current");
    if let Some(s) = c.req.p.str("snapshot") {
        if current {
            let msg = "cannot use 'snapshot' parameter with 'current'";
            return Err(PveError::params(
                [("snapshot", msg), ("current", msg)]
                    .into_iter()
                    .map(|(k, m)| (k.to_string(), m.to_string()))
                    .collect(),
            ));
        }
        let snap = ct
            .snapshots
            .get(&s)
            .ok_or_else(|| PveError::die(format!("snapshot '{s}' does not exist")))?;
        let mut m = serde_json::Map::new();
        for (k, v) in snap.lines() {
            m.insert(
                k.clone(),
                crate::lxc::model::typed_value(&k, &v, c.site.version),
            );
        }
        m.insert("digest".into(), json!(ct.digest()));
        return Ok(Reply::data(Value::Object(m)));
    }
    Ok(Reply::data(ct.config_json(c.site.version, current)))
}

fn config_put(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_ct_config(&c.req)?;
    Ok(Reply::null())
}

fn pending(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = c.site.ct_op(&c.req, &["VM.Audit"])?;
    Ok(Reply::data(
        c.site.ct_on(&node, vmid)?.pending_json(c.site.version),
    ))
}

fn status_index(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.ct_on(&c.node()?, c.req.vmid()?)?;
    let dirs = [
        "current", "start", "stop", "shutdown", "reboot", "suspend", "resume",
    ];
    Ok(Reply::index("subdir", &dirs))
}

fn status_current(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = c.site.ct_op(&c.req, &["VM.Audit"])?;
    let ct = c.site.ct_on(&node, vmid)?;
    let mut st = ct.vmstatus(c.req.now, c.site.node_cpus(&node));
    st["ha"] = json!({"managed": 0});
    Ok(Reply::data(st))
}

fn interfaces(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = c.site.ct_op(&c.req, &["VM.Audit"])?;
    Ok(Reply::data(c.site.ct_interfaces(&node, vmid)?))
}

fn snapshot_index(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.ct_snapshot(&c.req)?;
    Ok(Reply::index("subdir", &["rollback", "config"]))
}

fn snapshot_config_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let snap = c.site.ct_snapshot(&c.req)?;
    let mut m = serde_json::Map::new();
    for (k, v) in snap.lines() {
        let typed = if k == "snaptime" {
            v.parse::<u64>().map_or_else(|_| json!(v), Value::from)
        } else {
            crate::lxc::model::typed_value(&k, &v, c.site.version)
        };
        m.insert(k, typed);
    }
    Ok(Reply::data(Value::Object(m)))
}
