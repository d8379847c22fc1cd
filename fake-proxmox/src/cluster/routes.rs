//! `/cluster`, `/cluster/nextid`, `/cluster/resources`, `/cluster/status`.

use serde_json::{Value, json};

use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply, b};

/// The `/api2/json` routes `GET /cluster`, `/cluster/nextid` (the lowest free VMID from 100
/// up, or the one given if it is free), `/cluster/resources` and `/cluster/status`;
/// collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/cluster", index),
        route("GET", "/cluster/nextid", nextid),
        route("GET", "/cluster/resources", resources),
        route("GET", "/cluster/status", status),
    ]
}

fn index(_c: &mut Ctx) -> Result<Reply, PveError> {
    let dirs = [
        "acme",
        "backup",
        "backup-info",
        "bulk-action",
        "ceph",
        "config",
        "firewall",
        "ha",
        "jobs",
        "log",
        "mapping",
        "metrics",
        "nextid",
        "notifications",
        "options",
        "replication",
        "resources",
        "sdn",
        "status",
        "tasks",
    ];
    Ok(Reply::index("name", &dirs))
}

fn nextid(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = c.site.next_vmid(c.req.p.int("vmid"))?;
    Ok(Reply::data(json!(id.to_string())))
}

fn resources(c: &mut Ctx) -> Result<Reply, PveError> {
    let ty = c.req.p.str("type");
    Ok(Reply::typed(&super::resources::list(
        c.site,
        &c.req,
        ty.as_deref(),
    )))
}

fn status(c: &mut Ctx) -> Result<Reply, PveError> {
    let site = &*c.site;
    let mut out = Vec::new();
    if let Some(name) = &site.cluster_name {
        out.push(json!({
            "type": "cluster",
            "id": "cluster",
            "name": name,
            "nodes": site.nodes.len(),
            "quorate": b(site.quorate()),
            "version": site.nodes.len() + 1,
        }));
    }
    for (i, n) in site.nodes.values().enumerate() {
        out.push(json!({
            "type": "node",
            "id": format!("node/{}", n.name),
            "name": n.name,
            "nodeid": i + 1,
            "ip": n.ip,
            "local": b(site.local_node() == Some(n.name.as_str())),
            "online": b(n.online),
            "level": "",
        }));
    }
    Ok(Reply::data(Value::Array(out)))
}
