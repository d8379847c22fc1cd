//! `GET /cluster/resources`: every VM, node, storage and SDN zone the caller may see, with
//! the figures PVE's status daemon would report.

use serde_json::{Value, json};

use crate::nodes::model::{cpu_with, node_loads};
use crate::qemu::facts::ConfigFacts;
use crate::qemu::status::VmStatus;
use crate::request::Request;
use crate::wire::b;
use crate::world::Site;

/// One row of `cluster/resources`: VM rows are typed (there are many), the rest are few.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum Resource {
    /// A VM's row (`type` `qemu`), no pool.
    Vm(Box<VmStatus>),
    /// A VM in a pool the caller may audit: its row with the pool's name.
    Pooled {
        #[serde(flatten)]
        /// The VM's row as in `Vm`.
        vm: Box<VmStatus>,
        /// The pool's ID (the row's `pool` field).
        pool: String,
    },
    /// A container, node, storage, pool or SDN zone row, as JSON.
    Other(Value),
}

/// The rows of type `ty` (all types when `None`) that `req`'s caller may see.
pub fn list(site: &Site, req: &Request, ty: Option<&str>) -> Vec<Resource> {
    let want = |t: &str| ty.is_none_or(|x| x == t);
    let mut out = Vec::new();
    if ty.is_none() {
        out.extend(pools(site, req));
    }
    if want("vm") {
        out.extend(vms(site, req));
        out.extend(cts(site, req));
    }
    if want("node") {
        out.extend(nodes(site, req));
    }
    if want("storage") {
        out.extend(storages(site, req));
    }
    if want("sdn") {
        out.extend(sdn_zones(site));
    }
    out
}

/// VMs with `VM.Audit` on `/vms/{vmid}`; on an offline node their status is `unknown`.
fn vms(site: &Site, req: &Request) -> Vec<Resource> {
    let sees_all = site.access.holds_everything(&req.who);
    let visible = |vmid: u32| {
        sees_all
            || site
                .access
                .has(&req.who, &format!("/vms/{vmid}"), "VM.Audit")
    };
    // Nodes are few and usually all online: one look per listing, not one per VM.
    let all_online = site.nodes.values().all(|n| n.online);
    site.vms
        .values()
        .filter(|vm| visible(vm.vmid))
        .map(|vm| {
            let online = all_online || site.node(&vm.node).is_some_and(|n| n.online);
            let facts = ConfigFacts::of(&vm.config);
            let mut st = vm.vmstatus_with(&facts, req.now, site.version);
            st.id = Some(format!("qemu/{}", vm.vmid));
            st.kind = Some("qemu");
            st.node = Some(vm.node.clone());
            st.template = Some(u8::from(vm.is_template()));
            st.maxcpu = st.cpus.take();
            let (read, written) = vm.disk_io_with(&facts, req.now);
            st.diskread = Some(read);
            st.diskwrite = Some(written);
            // Keys of qemu-server's vmstatus that the 9.1 schema of resources does not list.
            st.balloon_min = None;
            st.shares = None;
            st.serial = None;
            st.pressurecpufull = None;
            st.pressurecpusome = None;
            st.pressureiofull = None;
            st.pressureiosome = None;
            st.pressurememoryfull = None;
            st.pressurememorysome = None;
            if !online {
                st.status = "unknown";
            }
            let pool = site.pool_of_vm(vm.vmid).filter(|p| {
                site.access
                    .has(&req.who, &format!("/pool/{p}"), "Pool.Audit")
            });
            match pool {
                Some(p) => Resource::Pooled {
                    vm: Box::new(st),
                    pool: p.to_string(),
                },
                None => Resource::Vm(Box::new(st)),
            }
        })
        .collect()
}

/// Containers with `VM.Audit` on `/vms/{vmid}`, as `type: lxc` rows.
fn cts(site: &Site, req: &Request) -> Vec<Resource> {
    let sees_all = site.access.holds_everything(&req.who);
    site.cts
        .values()
        .filter(|ct| {
            sees_all
                || site
                    .access
                    .has(&req.who, &format!("/vms/{}", ct.vmid), "VM.Audit")
        })
        .map(|ct| {
            let mut row = ct.vmstatus(req.now, site.node_cpus(&ct.node));
            let online = site.node(&ct.node).is_some_and(|n| n.online);
            row["id"] = json!(format!("lxc/{}", ct.vmid));
            row["node"] = json!(ct.node);
            row["template"] = json!(u8::from(ct.is_template()));
            if let Some(obj) = row.as_object_mut() {
                if let Some(c) = obj.remove("cpus") {
                    obj.insert("maxcpu".into(), c);
                }
                obj.remove("pid");
                obj.remove("swap");
                obj.remove("maxswap");
            }
            if !online {
                row["status"] = json!("unknown");
            }
            if let Some(p) = site.pool_of_vm(ct.vmid).filter(|p| {
                site.access
                    .has(&req.who, &format!("/pool/{p}"), "Pool.Audit")
            }) {
                row["pool"] = json!(p);
            }
            Resource::Other(row)
        })
        .collect()
}

/// Pools with `Pool.Audit`, with the sums of their running VMs' figures, as PVE adds them.
fn pools(site: &Site, req: &Request) -> Vec<Resource> {
    site.access
        .pools
        .iter()
        .filter(|(p, _)| {
            site.access
                .has(&req.who, &format!("/pool/{p}"), "Pool.Audit")
        })
        .map(|(p, cfg)| {
            let mut v = json!({"id": format!("/pool/{p}"), "pool": p, "type": "pool"});
            let running = cfg
                .vms
                .iter()
                .filter_map(|id| site.vms.get(id))
                .map(|vm| vm.vmstatus(req.now, site.version))
                .filter(|st| st.uptime > 0);
            let (mut uptime, mut mem, mut maxmem, mut cpu, mut maxcpu) =
                (0u64, 0u64, 0u64, 0.0, 0u32);
            let mut any = false;
            for st in running {
                any = true;
                uptime = uptime.max(st.uptime);
                mem += st.mem;
                maxmem += st.maxmem;
                let cpus = st.cpus.unwrap_or(0);
                let load = st.cpu.as_f64().unwrap_or(0.0);
                let total = maxcpu + cpus;
                if total > 0 {
                    cpu = (cpu * f64::from(maxcpu) + load * f64::from(cpus)) / f64::from(total);
                }
                maxcpu = total;
            }
            if any {
                v["uptime"] = json!(uptime);
                v["mem"] = json!(mem);
                v["maxmem"] = json!(maxmem);
                v["cpu"] = json!(cpu);
                v["maxcpu"] = json!(maxcpu);
            }
            Resource::Other(v)
        })
        .collect()
}

/// Nodes with `Sys.Audit`; an offline node reports no figures.
fn nodes(site: &Site, req: &Request) -> Vec<Resource> {
    let load = node_loads(site.guests());
    site.nodes
        .values()
        .filter(|n| {
            site.access
                .has(&req.who, &format!("/nodes/{}", n.name), "Sys.Audit")
        })
        .map(|n| {
            let (running, vm_mem) = load.get(n.name.as_str()).copied().unwrap_or_default();
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
                v["uptime"] = json!((req.now - n.booted_at) as u64);
            }
            Resource::Other(v)
        })
        .collect()
}

/// Every node's storages the caller may see; usage only from online nodes.
fn storages(site: &Site, req: &Request) -> Vec<Resource> {
    let mut out = Vec::new();
    for n in site.nodes.values() {
        for s in n.storages.values() {
            if !site.can_see_storage(&req.who, &s.name) {
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
    out
}

/// PVE lists each node's built-in `localnetwork` zone.
fn sdn_zones(site: &Site) -> Vec<Resource> {
    site.nodes
        .keys()
        .map(|n| {
            Resource::Other(json!({
                "id": format!("sdn/{n}/localnetwork"),
                "type": "sdn",
                "sdn": "localnetwork",
                "node": n,
                "status": "ok",
            }))
        })
        .collect()
}
