//! `/nodes`, `/nodes/{node}`, `/nodes/{node}/status`, `/nodes/{node}/network...`, `/version`.

use serde_json::{Value, json};

use super::model::{cpu_with, node_loads};
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The `/api2/json` routes `GET /version`, `GET /nodes`, `GET /nodes/{node}`,
/// `GET /nodes/{node}/status` and `GET /nodes/{node}/version`; collected into the router's
/// table.
pub fn routes() -> Vec<Route> {
    let mut v = vec![
        route("GET", "/version", version),
        route("GET", "/nodes", nodes),
        route("GET", "/nodes/{node}", node_index),
        route("GET", "/nodes/{node}/status", node_status),
        // The node's pve-manager version: the same answer as `/version` (one release per site).
        route("GET", "/nodes/{node}/version", version),
    ];
    v.extend(crate::nodes::network_routes::routes());
    v
}

fn version(c: &mut Ctx) -> Result<Reply, PveError> {
    let v = c.site.version;
    Ok(Reply::data(json!({
        "version": v.manager_version(),
        "release": v.release(),
        "repoid": v.repoid(),
    })))
}

fn nodes(c: &mut Ctx) -> Result<Reply, PveError> {
    let site = &*c.site;
    let data: Vec<Value> = site
        .nodes
        .values()
        .map(|n| {
            let mut v = json!({
                "node": n.name,
                "status": if n.online { "online" } else { "offline" },
                "id": format!("node/{}", n.name),
                "type": "node",
                "level": "",
                "ssl_fingerprint": fingerprint_for(&n.name),
            });
            if n.online {
                v["cpu"] = json!(n.cpu(site.guests_on(&n.name)));
                v["maxcpu"] = json!(n.threads);
                v["mem"] = json!(n.mem_used(site.guests_on(&n.name)));
                v["maxmem"] = json!(n.memory);
                v["uptime"] = json!((c.req.now - n.booted_at) as u64);
                v["disk"] = json!(8u64 << 30);
                v["maxdisk"] = json!(100u64 << 30);
            }
            v
        })
        .collect();
    Ok(Reply::data(Value::Array(data)))
}

/// A stable, node-specific fingerprint-shaped string for `ssl_fingerprint` in listings.
fn fingerprint_for(node: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(node.as_bytes());
    d.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn node_index(c: &mut Ctx) -> Result<Reply, PveError> {
    c.node()?;
    let dirs = [
        "apt",
        "capabilities",
        "ceph",
        "config",
        "disks",
        "dns",
        "execute",
        "firewall",
        "hosts",
        "journal",
        "lxc",
        "netstat",
        "network",
        "qemu",
        "query-url-metadata",
        "replication",
        "report",
        "rrd",
        "rrddata",
        "scan",
        "services",
        "spiceshell",
        "startall",
        "status",
        "stopall",
        "storage",
        "subscription",
        "syslog",
        "tasks",
        "termproxy",
        "time",
        "version",
        "vncshell",
        "vzdump",
        "wakeonlan",
    ];
    Ok(Reply::index("name", &dirs))
}

fn node_status(c: &mut Ctx) -> Result<Reply, PveError> {
    let name = c.node()?;
    c.require(&format!("/nodes/{name}"), "Sys.Audit")?;
    let site = &*c.site;
    let n = site.node_of_request(&c.req)?;
    // One pass over the node's guests (indexed) for both figures: a deployer asks once per
    // VM it places.
    let (running, share) = node_loads(site.guests_on(&n.name))
        .remove(n.name.as_str())
        .unwrap_or_default();
    let used = n.mem_used_with(share);
    let cpu = cpu_with(running);
    let v = site.version;
    Ok(Reply::data(json!({
        "cpu": cpu,
        "wait": 0.0003,
        "uptime": (c.req.now - n.booted_at) as u64,
        "loadavg": [format!("{:.2}", cpu * n.threads as f64), "0.30", "0.25"],
        "kversion": format!("Linux {} #1 SMP PREEMPT_DYNAMIC PMX", v.kernel()),
        "pveversion": format!("pve-manager/{}/{}", v.manager_version(), &v.repoid()[..8.min(v.repoid().len())]),
        "cpuinfo": {
            "cpus": n.threads,
            "cores": n.cores,
            "sockets": n.sockets,
            "model": n.cpu_model,
            "mhz": "2400.000",
            "hvm": "1",
            "user_hz": 100,
            "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx lm constant_tsc vmx",
        },
        "memory": {
            "total": n.memory,
            "used": used,
            "free": n.memory - used,
            "available": n.memory - used,
        },
        "swap": {"total": 8u64 << 30, "used": 0, "free": 8u64 << 30},
        "rootfs": {"total": 100u64 << 30, "used": 8u64 << 30, "free": 92u64 << 30, "avail": 87u64 << 30},
        "ksm": {"shared": 0},
        "idle": 0,
        "current-kernel": {
            "sysname": "Linux",
            "release": v.kernel(),
            "version": "#1 SMP PREEMPT_DYNAMIC PMX",
            "machine": "x86_64",
        },
        "boot-info": {"mode": "efi", "secureboot": 0},
    })))
}
