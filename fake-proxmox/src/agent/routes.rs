//! `/nodes/{node}/qemu/{vmid}/agent...`

use serde_json::{Value, json};

use crate::qemu::model::{Nic, Power, Vm, is_ipconfig_key, prop, split_props};
use crate::router::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

pub fn routes() -> Vec<Route> {
    let g = |p: &'static str, h| route("GET", p, h);
    vec![
        g("/nodes/{node}/qemu/{vmid}/agent", index),
        g(
            "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
            interfaces,
        ),
        g("/nodes/{node}/qemu/{vmid}/agent/info", info),
        g("/nodes/{node}/qemu/{vmid}/agent/get-host-name", host_name),
        g("/nodes/{node}/qemu/{vmid}/agent/get-osinfo", osinfo),
        g("/nodes/{node}/qemu/{vmid}/agent/get-time", get_time),
        g("/nodes/{node}/qemu/{vmid}/agent/get-timezone", timezone),
        g("/nodes/{node}/qemu/{vmid}/agent/get-users", users),
        g("/nodes/{node}/qemu/{vmid}/agent/get-vcpus", vcpus),
        g("/nodes/{node}/qemu/{vmid}/agent/get-fsinfo", fsinfo),
        g(
            "/nodes/{node}/qemu/{vmid}/agent/get-memory-blocks",
            memory_blocks,
        ),
        g(
            "/nodes/{node}/qemu/{vmid}/agent/get-memory-block-info",
            memory_block_info,
        ),
        route("POST", "/nodes/{node}/qemu/{vmid}/agent/ping", ping),
    ]
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    let cmds = [
        "fsfreeze-freeze",
        "fsfreeze-status",
        "fsfreeze-thaw",
        "fstrim",
        "get-fsinfo",
        "get-host-name",
        "get-memory-block-info",
        "get-memory-blocks",
        "get-osinfo",
        "get-time",
        "get-timezone",
        "get-users",
        "get-vcpus",
        "info",
        "network-get-interfaces",
        "ping",
        "shutdown",
        "suspend-disk",
        "suspend-hybrid",
        "suspend-ram",
    ];
    Ok(Reply::data(Value::Array(
        cmds.iter().map(|d| json!({"name": d})).collect(),
    )))
}

/// The VM, after PVE's agent checks: configured, running, agent answering.
fn agent_vm<'a>(c: &'a Ctx) -> Result<&'a Vm, PveError> {
    let node = c.node()?;
    let id = c.p.vmid()?;
    let vm = c.site.vm_on(&node, id)?;
    c.require_any(
        &format!("/vms/{id}"),
        &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"],
    )?;
    if !vm.is_agent_enabled() {
        return Err(PveError::die("No QEMU guest agent configured"));
    }
    if vm.power == Power::Stopped {
        return Err(PveError::die(format!("VM {id} is not running")));
    }
    if vm.power == Power::Paused || vm.agent_ready_at.is_none_or(|t| c.now < t) {
        return Err(PveError::die("QEMU guest agent is not running"));
    }
    Ok(vm)
}

fn result(v: Value) -> Reply {
    Reply::data(json!({ "result": v }))
}

fn stats(seed: u64) -> Value {
    json!({
        "rx-bytes": 1_048_576 + seed * 977, "rx-dropped": 0, "rx-errs": 0, "rx-packets": 1024 + seed,
        "tx-bytes": 524_288 + seed * 311, "tx-dropped": 0, "tx-errs": 0, "tx-packets": 612 + seed,
    })
}

/// IPv6 link-local address derived from a MAC (EUI-64).
fn link_local(mac: &str) -> String {
    let b: Vec<u8> = mac
        .split(':')
        .filter_map(|x| u8::from_str_radix(x, 16).ok())
        .collect();
    if b.len() != 6 {
        return "fe80::1".into();
    }
    format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        (u16::from(b[0] ^ 0x02) << 8) | u16::from(b[1]),
        (u16::from(b[2]) << 8) | 0xff,
        0xfe00 | u16::from(b[3]),
        (u16::from(b[4]) << 8) | u16::from(b[5])
    )
}

fn interfaces(c: &mut Ctx) -> Result<Reply, PveError> {
    let vm = agent_vm(c)?;
    let up = vm.uptime(c.now);
    let mut out = vec![json!({
        "name": "lo",
        "hardware-address": "00:00:00:00:00:00",
        "ip-addresses": [
            {"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
            {"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
        ],
        "statistics": stats(0),
    })];
    let node = c.site.node(&vm.node);
    for (i, (k, v)) in vm
        .config
        .iter()
        .filter(|(k, _)| crate::qemu::model::is_net_key(k))
        .enumerate()
    {
        let nic = Nic::parse(v);
        let mac = nic.mac.clone().unwrap_or_default().to_ascii_lowercase();
        let idx = &k[3..];
        let mut addrs = Vec::new();
        let bridge = nic.bridge().and_then(|b| node.and_then(|n| n.bridge(b)));
        // A static ipconfigN wins over the DHCP lease.
        let static_ip = vm
            .config
            .iter()
            .find(|(ck, _)| is_ipconfig_key(ck) && &ck[8..] == idx)
            .and_then(|(_, cv)| {
                let p = split_props(cv, "ip");
                prop(&p, "ip")
                    .filter(|ip| *ip != "dhcp")
                    .map(str::to_string)
            });
        match (static_ip, vm.leases.get(k)) {
            (Some(ip), _) => {
                let (a, pfx) = ip.split_once('/').unwrap_or((ip.as_str(), "24"));
                addrs.push(json!({"ip-address": a, "ip-address-type": "ipv4", "prefix": pfx.parse::<u8>().unwrap_or(24)}));
            }
            (None, Some(lease)) => {
                let prefix = bridge.map_or(24, |b| b.prefix_len());
                addrs.push(json!({"ip-address": lease.to_string(), "ip-address-type": "ipv4", "prefix": prefix}));
            }
            _ => {}
        }
        addrs
            .push(json!({"ip-address": link_local(&mac), "ip-address-type": "ipv6", "prefix": 64}));
        out.push(json!({
            "name": format!("ens{}", 18 + i),
            "hardware-address": mac,
            "ip-addresses": addrs,
            "statistics": stats(up + i as u64),
        }));
    }
    Ok(result(Value::Array(out)))
}

fn info(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    let cmds = [
        "guest-ping",
        "guest-get-time",
        "guest-info",
        "guest-shutdown",
        "guest-network-get-interfaces",
        "guest-get-osinfo",
        "guest-get-host-name",
    ];
    Ok(result(json!({
        "version": "8.2.2",
        "supported_commands": cmds.iter().map(|n| json!({"name": n, "enabled": true, "success-response": true})).collect::<Vec<_>>(),
    })))
}

fn host_name(c: &mut Ctx) -> Result<Reply, PveError> {
    let vm = agent_vm(c)?;
    Ok(result(
        json!({"host-name": vm.config.get("name").cloned().unwrap_or_else(|| "ubuntu".into())}),
    ))
}

fn osinfo(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    Ok(result(json!({
        "id": "ubuntu", "name": "Ubuntu", "pretty-name": "Ubuntu 22.04.5 LTS",
        "version": "22.04.5 LTS (Jammy Jellyfish)", "version-id": "22.04",
        "kernel-release": "5.15.0-131-generic", "kernel-version": "#141-Ubuntu SMP", "machine": "x86_64",
    })))
}

fn get_time(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    Ok(result(json!((c.now * 1e9) as u64)))
}

fn timezone(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    Ok(result(json!({"zone": "UTC", "offset": 0})))
}

fn users(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    Ok(result(json!([])))
}

fn vcpus(c: &mut Ctx) -> Result<Reply, PveError> {
    let vm = agent_vm(c)?;
    let v: Vec<Value> = (0..vm.cpus())
        .map(|i| json!({"logical-id": i, "online": true, "can-offline": i != 0}))
        .collect();
    Ok(result(Value::Array(v)))
}

fn fsinfo(c: &mut Ctx) -> Result<Reply, PveError> {
    let vm = agent_vm(c)?;
    let total = vm.maxdisk();
    Ok(result(json!([{
        "name": "sda1", "mountpoint": "/", "type": "ext4",
        "total-bytes": total, "used-bytes": total / 10,
        "disk": [{"bus-type": "scsi", "bus": 0, "target": 0, "unit": 0, "dev": "/dev/sda1"}],
    }])))
}

fn memory_blocks(c: &mut Ctx) -> Result<Reply, PveError> {
    let vm = agent_vm(c)?;
    let n = vm.memory_mib() / 128;
    let v: Vec<Value> = (0..n)
        .map(|i| json!({"phys-index": i, "online": true, "can-offline": i != 0}))
        .collect();
    Ok(result(Value::Array(v)))
}

fn memory_block_info(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    Ok(result(json!({"size": 134_217_728u64})))
}

fn ping(c: &mut Ctx) -> Result<Reply, PveError> {
    agent_vm(c)?;
    Ok(result(json!({})))
}
