//! `/cluster`, `/cluster/nextid`, `/cluster/resources`, `/cluster/status`.

use serde_json::{Value, json};

use crate::nodes::model::{cpu_with, node_loads};
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
    Ok(Reply::index("name", &dirs))
}

fn nextid(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = c.site.next_vmid(c.req.p.int("vmid"))?;
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
        let load = node_loads(site.vms.values());
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
                if !site.can_see_storage(&c.req.who, &s.name) {
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
            "local": b(i == 0),
            "online": b(n.online),
            "level": "",
        }));
    }
    Ok(Reply::data(Value::Array(out)))
}
