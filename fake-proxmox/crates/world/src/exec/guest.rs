//! What the simulated guest agent answers: an Ubuntu cloud image whose interfaces carry
//! the config's static `ipconfigN` address or the bridge's DHCP lease, whose files,
//! processes and freeze state live on the VM (`agent::guest_os`), and whose programs are
//! `agent::shell`'s. Answers are what PVE's `mon_cmd` returns: QGA's `return` value, or
//! `{"error": …}` as qemu-ga refuses.

use serde_json::{Value, json};

use super::{AgentCall, AgentCommand};
use crate::agent::guest_os::{Process, qbase64_decode, qga_error};
use crate::agent::shell;
use crate::qemu::model::{Nic, Power, Vm, is_ipconfig_key, is_net_key, prop, split_props};

/// What qemu-ga still runs while the file systems are frozen (`ga_freeze_allowlist`).
const FROZEN_ALLOWLIST: [&str; 6] = [
    "guest-ping",
    "guest-info",
    "guest-sync",
    "guest-sync-delimited",
    "guest-fsfreeze-status",
    "guest-fsfreeze-thaw",
];

fn allowed_while_frozen(c: &AgentCommand) -> bool {
    FROZEN_ALLOWLIST.contains(&super::lab::agent::qga_command(c))
}

/// The guest's host name: the VM's name, as cloud-init sets it.
pub fn hostname(vm: &Vm) -> String {
    vm.config
        .get("name")
        .cloned()
        .unwrap_or_else(|| "ubuntu".into())
}

/// Whether the machine offers the guest ACPI S3 (`s3`) or S4: `enable-s3`/`enable-s4` of
/// `machine`, else on for machine versions before 9.2 and off from 9.2 (PVE 9's default).
fn sleep_state_enabled(vm: &Vm, key: &str) -> bool {
    let machine = vm.config.get("machine").map(String::as_str).unwrap_or("");
    let props = split_props(machine, "type");
    if let Some(v) = prop(&props, key) {
        return v == "1";
    }
    let ty = prop(&props, "type").unwrap_or("");
    let version: Vec<u32> = ty
        .split('-')
        .find(|p| p.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|v| v.split(['.', '+']).filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    matches!(version.as_slice(), [major, minor, ..] if (*major, *minor) < (9, 2))
        || matches!(version.as_slice(), [major] if *major < 9)
}

/// Everything the simulated agent answers; a command that powers the guest off records it.
pub(super) fn answer(call: &mut AgentCall<'_>) -> Value {
    let host = hostname(call.vm);
    // The model seeds it with the site's setup first; this only covers a direct call.
    call.vm.guest.seed(&host, &Default::default());
    if call.vm.guest.frozen && !allowed_while_frozen(&call.command) {
        return json!({"error": {
            "class": "CommandNotFound",
            "desc": format!(
                "Command {} has been disabled: the agent is in frozen state",
                super::lab::agent::qga_command(&call.command)
            ),
        }});
    }
    let now = call.now;
    let os = &mut call.vm.guest;
    match &call.command {
        AgentCommand::FsfreezeFreeze => {
            os.frozen = true;
            return json!(1);
        }
        AgentCommand::FsfreezeStatus => {
            return json!(if os.frozen { "frozen" } else { "thawed" });
        }
        AgentCommand::FsfreezeThaw => {
            let n = i32::from(os.frozen);
            os.frozen = false;
            return json!(n);
        }
        AgentCommand::Exec {
            path,
            args,
            input_data,
        } => {
            let stdin = match input_data.as_deref().map(qbase64_decode) {
                None => Vec::new(),
                Some(Ok(b)) => b,
                Some(Err(e)) => return e,
            };
            let mut argv = vec![path.clone()];
            argv.extend(args.iter().cloned());
            return match shell::spawn(os, &host, &argv, &stdin) {
                Ok(o) => {
                    let pid = os.add_process(Process {
                        ends_at: now + o.secs,
                        exitcode: Some(o.exitcode),
                        signal: o.signal,
                        out: o.out,
                        err: o.err,
                    });
                    json!({ "pid": pid })
                }
                Err(why) => qga_error(format!("Guest agent command failed, error was '{why}'")),
            };
        }
        AgentCommand::ExecStatus { pid } => return os.exec_status(*pid, now),
        AgentCommand::FileOpen { path, mode } => return os.file_open(path, mode.as_deref()),
        AgentCommand::FileSeek { handle, offset } => return os.file_seek(*handle, *offset),
        AgentCommand::FileRead { handle, count } => return os.file_read(*handle, *count),
        AgentCommand::FileWrite { handle, buf_b64 } => return os.file_write(*handle, buf_b64),
        AgentCommand::FileClose { handle } => return os.file_close(*handle),
        AgentCommand::SetUserPassword {
            username,
            password,
            crypted,
        } => return os.set_user_password(username, password, *crypted),
        AgentCommand::Fstrim => {
            let total = call.vm.maxdisk();
            return json!({"paths": [{"path": "/", "trimmed": total / 20, "minimum": 0}]});
        }
        AgentCommand::Shutdown => {
            // qemu-ga powers the guest off and sends no answer; QEMU then exits.
            power_off(call.vm);
            return Value::Null;
        }
        AgentCommand::SuspendDisk => {
            if !sleep_state_enabled(call.vm, "enable-s4") {
                return qga_error("the requested suspend mode is not supported by the guest");
            }
            // Hibernation writes RAM to the guest's swap and powers off.
            power_off(call.vm);
            return Value::Null;
        }
        AgentCommand::SuspendRam | AgentCommand::SuspendHybrid => {
            if !sleep_state_enabled(call.vm, "enable-s3") {
                return qga_error("the requested suspend mode is not supported by the guest");
            }
            // The guest sleeps: QEMU's vCPUs stop, the agent no longer answers.
            call.vm.power = Power::Paused;
            return Value::Null;
        }
        _ => {}
    }
    let vm = &*call.vm;
    match call.command {
        AgentCommand::Ping => json!({}),
        AgentCommand::Info => info(vm.guest.frozen),
        AgentCommand::NetworkGetInterfaces => interfaces(call),
        AgentCommand::GetHostName => json!({"host-name": host}),
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
        // Answered above.
        _ => Value::Null,
    }
}

/// The guest has powered itself off: QEMU exits, nothing of the running guest is left.
fn power_off(vm: &mut Vm) {
    vm.power = Power::Stopped;
    vm.pid = None;
    vm.agent_ready_at = None;
    vm.guest.power_cycle();
}

/// `guest-info`; while frozen, qemu-ga shows the commands it refuses as disabled.
fn info(frozen: bool) -> Value {
    // (name, success-response): the commands that power the guest off send no answer.
    let cmds = [
        ("guest-ping", true),
        ("guest-get-time", true),
        ("guest-info", true),
        ("guest-shutdown", false),
        ("guest-network-get-interfaces", true),
        ("guest-get-osinfo", true),
        ("guest-get-host-name", true),
        ("guest-get-timezone", true),
        ("guest-get-users", true),
        ("guest-get-vcpus", true),
        ("guest-get-fsinfo", true),
        ("guest-get-memory-blocks", true),
        ("guest-get-memory-block-info", true),
        ("guest-exec", true),
        ("guest-exec-status", true),
        ("guest-file-open", true),
        ("guest-file-close", true),
        ("guest-file-read", true),
        ("guest-file-write", true),
        ("guest-file-seek", true),
        ("guest-file-flush", true),
        ("guest-fsfreeze-status", true),
        ("guest-fsfreeze-freeze", true),
        ("guest-fsfreeze-freeze-list", true),
        ("guest-fsfreeze-thaw", true),
        ("guest-fstrim", true),
        ("guest-set-user-password", true),
        ("guest-suspend-disk", false),
        ("guest-suspend-ram", false),
        ("guest-suspend-hybrid", false),
        ("guest-sync", true),
        ("guest-sync-delimited", true),
    ];
    json!({
        "version": "8.2.2",
        "supported_commands": cmds.iter().map(|(n, ok)| {
            let enabled = !frozen || FROZEN_ALLOWLIST.contains(n);
            json!({"name": n, "enabled": enabled, "success-response": ok})
        }).collect::<Vec<_>>(),
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
    let vm = &*call.vm;
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
