//! `/cluster`, `/cluster/nextid`, `/cluster/resources`, `/cluster/status`.

use serde_json::{Value, json};

use std::collections::HashMap;

use crate::nodes::model::cpu_with;
use crate::qemu::model::Power;
use crate::qemu::status::VmStatus;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply, b};

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
    Ok(Reply::data(Value::Array(
        dirs.iter().map(|d| json!({"name": d})).collect(),
    )))
}

/// Lowest free VMID; nothing is reserved, so concurrent callers get the same answer.
fn nextid(c: &mut Ctx) -> Result<Reply, PveError> {
    if let Some(v) = c.req.p.int("vmid") {
        let v = u32::try_from(v).unwrap_or(0);
        if c.site.vms.contains_key(&v) {
            return Err(PveError::param("vmid", format!("VM {v} already exists")));
        }
        return Ok(Reply::data(json!(v.to_string())));
    }
    let id = (100u32..1_000_000)
        .find(|i| !c.site.vms.contains_key(i))
        .ok_or_else(|| PveError::die("unable to get any free VMID in range [100, 1000000)"))?;
    Ok(Reply::data(json!(id.to_string())))
}

fn resources(c: &mut Ctx) -> Result<Reply, PveError> {
    let ty = c.req.p.str("type");
    let site = &*c.site;
    let mut out: Vec<Resource> = Vec::new();
    let want = |t: &str| ty.as_deref().is_none_or(|x| x == t);
    let sees_all = site.access.holds_everything(&c.req.who);
    if want("vm") {
        for vm in site.vms.values() {
            if !sees_all
                && !site
                    .access
                    .has(&c.req.who, &format!("/vms/{}", vm.vmid), "VM.Audit")
            {
                continue;
            }
            let online = site.node(&vm.node).is_some_and(|n| n.online);
            let mut st = vm.vmstatus(c.req.now);
            st.id = Some(format!("qemu/{}", vm.vmid));
            st.kind = Some("qemu");
            st.node = Some(vm.node.clone());
            st.template = Some(u8::from(vm.is_template()));
            st.maxcpu = st.cpus.take();
            if !online {
                st.status = "unknown";
            }
            out.push(Resource::Vm(Box::new(st)));
        }
    }
    if want("node") {
        // One pass over the VMs for every node's load, not one pass per node.
        let mut load: HashMap<&str, (usize, u64)> = HashMap::new();
        for vm in site.vms.values() {
            let e = load.entry(vm.node.as_str()).or_default();
            if vm.power == Power::Running {
                e.0 += 1;
            }
            if vm.power != Power::Stopped {
                e.1 = e.1.saturating_add(vm.memory_bytes() / 3);
            }
        }
        for n in site.nodes.values() {
            let (running, vm_mem) = load.get(n.name.as_str()).copied().unwrap_or_default();
            if !site
                .access
                .has(&c.req.who, &format!("/nodes/{}", n.name), "Sys.Audit")
            {
                continue;
            }
            let mut v = json!({
                "id": format!("node/{}", n.name),
                "type": "node",
                "node": n.name,
                "status": if n.online { "online" } else { "offline" },
                "level": "",
                "cgroup-mode": 2,
            });
            if n.online {
                v["cpu"] = json!(cpu_with(running));
                v["maxcpu"] = json!(n.threads);
                v["mem"] = json!(n.mem_used_with(vm_mem));
                v["maxmem"] = json!(n.memory);
                v["disk"] = json!(8u64 << 30);
                v["maxdisk"] = json!(100u64 << 30);
                v["uptime"] = json!((c.req.now - n.booted_at) as u64);
            }
            out.push(Resource::Other(v));
        }
    }
    if want("storage") {
        for n in site.nodes.values() {
            for s in n.storages.values() {
                let path = format!("/storage/{}", s.name);
                if !(site.access.has(&c.req.who, &path, "Datastore.Audit")
                    || site
                        .access
                        .has(&c.req.who, &path, "Datastore.AllocateSpace"))
                {
                    continue;
                }
                let mut v = json!({
                    "id": format!("storage/{}/{}", n.name, s.name),
                    "type": "storage",
                    "storage": s.name,
                    "node": n.name,
                    "plugintype": s.kind.as_str(),
                    "shared": b(s.shared),
                    "content": s.content_string(),
                    "status": if n.online { "available" } else { "unknown" },
                });
                if n.online {
                    v["disk"] = json!(s.used());
                    v["maxdisk"] = json!(s.total);
                }
                out.push(Resource::Other(v));
            }
        }
    }
    if want("sdn") {
        for n in site.nodes.values() {
            out.push(Resource::Other(json!({
                "id": format!("sdn/{}/localnetwork", n.name),
                "type": "sdn",
                "sdn": "localnetwork",
                "node": n.name,
                "status": "ok",
            })));
        }
    }
    Ok(Reply::typed(&out))
}

/// One row of `cluster/resources`: VM rows are typed (there are many), the rest are few.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Resource {
    Vm(Box<VmStatus>),
    Other(Value),
}

fn status(c: &mut Ctx) -> Result<Reply, PveError> {
    let site = &*c.site;
    let mut out = Vec::new();
    let online = site.nodes.values().filter(|n| n.online).count();
    if let Some(name) = &site.cluster_name {
        out.push(json!({
            "type": "cluster",
            "id": "cluster",
            "name": name,
            "nodes": site.nodes.len(),
            "quorate": b(online * 2 > site.nodes.len()),
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
            "local": b(i == 0),
            "online": b(n.online),
            "level": "",
        }));
    }
    Ok(Reply::data(Value::Array(out)))
}
