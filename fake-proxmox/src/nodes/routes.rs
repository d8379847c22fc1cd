//! `/nodes`, `/nodes/{node}`, `/nodes/{node}/status`, `/nodes/{node}/network...`, `/version`.

use serde_json::{Value, json};

use crate::nodes::model::{Bridge, Node};
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/version", version),
        route("GET", "/nodes", nodes),
        route("GET", "/nodes/{node}", node_index),
        route("GET", "/nodes/{node}/status", node_status),
        route("GET", "/nodes/{node}/network", network),
        route("GET", "/nodes/{node}/network/{iface}", network_iface),
    ]
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
                v["cpu"] = json!(n.cpu(site.vms.values()));
                v["maxcpu"] = json!(n.threads);
                v["mem"] = json!(n.mem_used(site.vms.values()));
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
    let used = n.mem_used(site.vms.values());
    let cpu = n.cpu(site.vms.values());
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

fn iface_json(n: &Node, b: &Bridge) -> Value {
    let mut v = json!({
        "iface": b.name,
        "type": "bridge",
        "method": if b.cidr.is_some() { "static" } else { "manual" },
        "method6": "manual",
        "families": ["inet"],
        "bridge_stp": "off",
        "bridge_fd": "0",
        "active": 1,
        "autostart": 1,
        "priority": 3,
    });
    if let Some(cidr) = &b.cidr {
        v["cidr"] = json!(cidr);
        if let Some((addr, prefix)) = cidr.split_once('/') {
            v["address"] = json!(addr);
            v["netmask"] = json!(prefix);
        }
    }
    if let Some(g) = &b.gateway {
        v["gateway"] = json!(g);
    }
    if let Some(p) = &b.ports {
        v["bridge_ports"] = json!(p);
    }
    let _ = n;
    v
}

fn eth_json(port: &str) -> Value {
    json!({
        "iface": port,
        "type": "eth",
        "method": "manual",
        "method6": "manual",
        "families": ["inet"],
        "active": 1,
        "exists": 1,
        "priority": 2,
    })
}

fn network(c: &mut Ctx) -> Result<Reply, PveError> {
    let n = c.site.node_of_request(&c.req)?;
    let ty = c.req.p.str("type");
    let mut out = Vec::new();
    let ports = n.ports();
    let want = |t: &str| match ty.as_deref() {
        None => true,
        Some("any_bridge") | Some("any_local_bridge") | Some("include_sdn") => t == "bridge",
        Some(x) => x == t,
    };
    if want("eth") {
        out.extend(ports.iter().map(|p| eth_json(p)));
    }
    if want("bridge") {
        out.extend(n.bridges.iter().map(|b| iface_json(n, b)));
    }
    Ok(Reply::data(Value::Array(out)))
}

fn network_iface(c: &mut Ctx) -> Result<Reply, PveError> {
    c.node()?;
    let iface = c.req.p.req_str("iface")?;
    let n = c.site.node_of_request(&c.req)?;
    if let Some(b) = n.bridge(&iface) {
        return Ok(Reply::data(iface_json(n, b)));
    }
    if n.ports().contains(iface.as_str()) {
        return Ok(Reply::data(eth_json(&iface)));
    }
    Err(PveError::die("interface does not exist"))
}
