//! `/pools` and the deprecated `/pools/{poolid}`: the wire side.

use serde_json::{Map, Value, json};

use crate::access::model::PoolConfig;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply, b};
use crate::world::Site;

/// The `/api2/json` routes of resource pools: `/pools` (list, create, update, delete) and
/// the deprecated `/pools/{poolid}` forms PVE still answers; collected into the router's
/// table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/pools", index),
        route("POST", "/pools", create),
        route("PUT", "/pools", update),
        route("DELETE", "/pools", delete),
        route("GET", "/pools/{poolid}", read_deprecated),
        route("PUT", "/pools/{poolid}", update),
        route("DELETE", "/pools/{poolid}", delete),
    ]
}

/// VM members as `API2Tools::extract_vm_stats` reports them.
const VM_KEYS: &[&str] = &[
    "uptime",
    "name",
    "status",
    "template",
    "maxcpu",
    "cpu",
    "maxmem",
    "mem",
    "maxdisk",
    "disk",
    "netin",
    "netout",
    "diskread",
    "diskwrite",
    "memhost",
];

fn vm_member(site: &Site, vmid: u32, now: f64) -> Option<Value> {
    let vm = site.vms.get(&vmid)?;
    let mut entry = json!({
        "id": format!("qemu/{vmid}"),
        "vmid": vmid,
        "node": vm.node,
        "type": "qemu",
        "status": "unknown",
    });
    let online = site.node(&vm.node).is_some_and(|n| n.online);
    if online {
        let mut st = vm.vmstatus(now, site.version);
        st.maxcpu = st.cpus.take();
        st.template = Some(u8::from(vm.is_template()));
        let (read, written) = vm.disk_io(now);
        st.diskread = Some(read);
        st.diskwrite = Some(written);
        let v = serde_json::to_value(&st).ok()?;
        for k in VM_KEYS {
            if let Some(x) = v.get(*k) {
                entry[*k] = x.clone();
            }
        }
    }
    Some(entry)
}

/// A container member: its `vmstatus` row's figures under the same keys.
fn ct_member(site: &Site, vmid: u32, now: f64) -> Option<Value> {
    let ct = site.cts.get(&vmid)?;
    let mut entry = json!({
        "id": format!("lxc/{vmid}"),
        "vmid": vmid,
        "node": ct.node,
        "type": "lxc",
        "status": "unknown",
    });
    if site.node(&ct.node).is_some_and(|n| n.online) {
        let mut st = ct.vmstatus(now, site.node_cpus(&ct.node));
        st["maxcpu"] = st["cpus"].clone();
        st["template"] = json!(u8::from(ct.is_template()));
        for k in VM_KEYS {
            if let Some(x) = st.get(*k) {
                entry[*k] = x.clone();
            }
        }
    }
    Some(entry)
}

fn storage_member(site: &Site, sid: &str) -> Option<Value> {
    let node = site.nodes.values().find(|n| n.storages.contains_key(sid))?;
    let s = node.storages.get(sid)?;
    let mut entry = json!({
        "id": format!("storage/{}/{sid}", node.name),
        "storage": sid,
        "node": node.name,
        "type": "storage",
        "plugintype": s.kind.as_str(),
        "status": "unknown",
        "shared": b(s.shared),
        "content": s.content_string(),
    });
    if node.online {
        entry["maxdisk"] = json!(s.total);
        entry["disk"] = json!(s.used());
        entry["status"] = json!("available");
    }
    Some(entry)
}

/// One pool with its members (of one `type`, when asked).
fn pool_info(c: &Ctx, poolid: &str, cfg: &PoolConfig) -> Value {
    let ty = c.req.p.str("type");
    let mut members = Vec::new();
    if ty.as_deref().is_none_or(|t| t == "qemu") {
        members.extend(
            cfg.vms
                .iter()
                .filter_map(|v| vm_member(c.site, *v, c.req.now)),
        );
    }
    if ty.as_deref().is_none_or(|t| t == "lxc") {
        members.extend(
            cfg.vms
                .iter()
                .filter_map(|v| ct_member(c.site, *v, c.req.now)),
        );
    }
    if ty.as_deref().is_none_or(|t| t == "storage") {
        members.extend(cfg.storage.iter().filter_map(|s| storage_member(c.site, s)));
    }
    let mut m = Map::new();
    m.insert("members".into(), Value::Array(members));
    if let Some(cm) = &cfg.comment {
        m.insert("comment".into(), json!(cm));
    }
    m.insert("poolid".into(), json!(poolid));
    Value::Object(m)
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    if c.req.p.has("poolid") {
        let (p, cfg) = c.site.read_pool(&c.req, false)?;
        let info = pool_info(c, &p, cfg);
        return Ok(Reply::data(json!([info])));
    }
    let out: Vec<Value> = c
        .site
        .list_pools(&c.req)
        .into_iter()
        .map(|(p, cfg)| {
            let mut v = json!({"poolid": p});
            if let Some(cm) = &cfg.comment {
                v["comment"] = json!(cm);
            }
            v
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

fn read_deprecated(c: &mut Ctx) -> Result<Reply, PveError> {
    let (p, cfg) = c.site.read_pool(&c.req, true)?;
    // PVE answers the index's entry for the pool as it is, `poolid` included.
    Ok(Reply::data(pool_info(c, &p, cfg)))
}

fn create(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.create_pool(&c.req)?;
    Ok(Reply::null())
}

fn update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_pool(&c.req)?;
    Ok(Reply::null())
}

fn delete(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.delete_pool(&c.req)?;
    Ok(Reply::null())
}
