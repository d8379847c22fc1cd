//! What the simulated guest agent answers: an Ubuntu cloud image whose interfaces carry
//! the config's static `ipconfigN` address or the bridge's DHCP lease.

use serde_json::{Value, json};

use super::{AgentCall, AgentCommand};
use crate::qemu::model::{Nic, is_ipconfig_key, is_net_key, prop, split_props};

pub(super) fn answer(call: &AgentCall<'_>) -> Value {
    let vm = call.vm;
    match call.command {
        AgentCommand::Ping => json!({}),
        AgentCommand::Info => info(),
        AgentCommand::NetworkGetInterfaces => interfaces(call),
        AgentCommand::GetHostName => {
            json!({"host-name": vm.config.get("name").cloned().unwrap_or_else(|| "ubuntu".into())})
        }
        AgentCommand::GetOsinfo => json!({
            "id": "ubuntu", "name": "Ubuntu", "pretty-name": "Ubuntu 22.04.5 LTS",
            "version": "22.04.5 LTS (Jammy Jellyfish)", "version-id": "22.04",
            "kernel-release": "5.15.0-131-generic", "kernel-version": "#141-Ubuntu SMP", "machine": "x86_64",
        }),
        AgentCommand::GetTime => json!((call.now * 1e9) as u64),
        AgentCommand::GetTimezone => json!({"zone": "UTC", "offset": 0}),
        AgentCommand::GetUsers => json!([]),
        AgentCommand::GetVcpus => Value::Array(
            (0..vm.cpus())
                .map(|i| json!({"logical-id": i, "online": true, "can-offline": i != 0}))
                .collect(),
        ),
        AgentCommand::GetFsinfo => {
            let total = vm.maxdisk();
            json!([{
                "name": "sda1", "mountpoint": "/", "type": "ext4",
                "total-bytes": total, "used-bytes": total / 10,
                "disk": [{"bus-type": "scsi", "bus": 0, "target": 0, "unit": 0, "dev": "/dev/sda1"}],
            }])
        }
        AgentCommand::GetMemoryBlocks => Value::Array(
            (0..vm.memory_mib() / 128)
                .map(|i| json!({"phys-index": i, "online": true, "can-offline": i != 0}))
                .collect(),
        ),
        AgentCommand::GetMemoryBlockInfo => json!({"size": 134_217_728u64}),
    }
}

fn info() -> Value {
    let cmds = [
        "guest-ping",
        "guest-get-time",
        "guest-info",
        "guest-shutdown",
        "guest-network-get-interfaces",
        "guest-get-osinfo",
        "guest-get-host-name",
    ];
    json!({
        "version": "8.2.2",
        "supported_commands": cmds.iter().map(|n| json!({"name": n, "enabled": true, "success-response": true})).collect::<Vec<_>>(),
    })
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

fn interfaces(call: &AgentCall<'_>) -> Value {
    let vm = call.vm;
    let up = vm.uptime(call.now);
    let mut out = vec![json!({
        "name": "lo",
        "hardware-address": "00:00:00:00:00:00",
        "ip-addresses": [
            {"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
            {"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
        ],
        "statistics": stats(0),
    })];
    for (i, (k, v)) in vm.config.iter().filter(|(k, _)| is_net_key(k)).enumerate() {
        let nic = Nic::parse(v);
        let mac = nic.mac.clone().unwrap_or_default().to_ascii_lowercase();
        let idx = &k[3..];
        let mut addrs = Vec::new();
        let bridge = nic
            .bridge()
            .and_then(|b| call.node.and_then(|n| n.bridge(b)));
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
    Value::Array(out)
}
