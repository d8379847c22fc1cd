//! The real guest agent behind `…/agent/{command}`: readiness from the host's watcher (a
//! `guest-ping` answered within the last second), commands forwarded and their `return`
//! handed back as the `result`.

use std::net::Ipv4Addr;
use std::path::Path;

use serde_json::{Value, json};

use super::LabExecutor;
use crate::exec::{AgentCall, AgentCommand};
use crate::qemu::model::{Nic, Power, Vm};

/// Bound on one forwarded agent command.
const AGENT_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The QGA command behind an API agent command.
pub fn qga_command(c: &AgentCommand) -> &'static str {
    use AgentCommand::*;
    match c {
        Ping => "guest-ping",
        Info => "guest-info",
        NetworkGetInterfaces => "guest-network-get-interfaces",
        GetHostName => "guest-get-host-name",
        GetOsinfo => "guest-get-osinfo",
        GetTime => "guest-get-time",
        GetTimezone => "guest-get-timezone",
        GetUsers => "guest-get-users",
        GetVcpus => "guest-get-vcpus",
        GetFsinfo => "guest-get-fsinfo",
        GetMemoryBlocks => "guest-get-memory-blocks",
        GetMemoryBlockInfo => "guest-get-memory-block-info",
        FsfreezeFreeze => "guest-fsfreeze-freeze",
        FsfreezeStatus => "guest-fsfreeze-status",
        FsfreezeThaw => "guest-fsfreeze-thaw",
        Fstrim => "guest-fstrim",
        Shutdown => "guest-shutdown",
        SuspendDisk => "guest-suspend-disk",
        SuspendRam => "guest-suspend-ram",
        SuspendHybrid => "guest-suspend-hybrid",
        Exec { .. } => "guest-exec",
        ExecStatus { .. } => "guest-exec-status",
        FileOpen { .. } => "guest-file-open",
        FileSeek { .. } => "guest-file-seek",
        FileRead { .. } => "guest-file-read",
        FileWrite { .. } => "guest-file-write",
        FileClose { .. } => "guest-file-close",
        SetUserPassword { .. } => "guest-set-user-password",
    }
}

/// The `arguments` PVE sends with the command (none for the simple ones).
pub fn qga_arguments(c: &AgentCommand) -> Option<Value> {
    use AgentCommand::*;
    Some(match c {
        Exec {
            path,
            args,
            input_data,
        } => {
            let mut a = json!({"path": path, "arg": args, "capture-output": true});
            if let Some(d) = input_data {
                a["input-data"] = json!(d);
            }
            a
        }
        ExecStatus { pid } => json!({ "pid": pid }),
        FileOpen { path, mode } => match mode {
            Some(m) => json!({"path": path, "mode": m}),
            None => json!({ "path": path }),
        },
        FileSeek { handle, offset } => {
            json!({"handle": handle, "offset": offset, "whence": "set"})
        }
        FileRead { handle, count } => json!({"handle": handle, "count": count}),
        FileWrite { handle, buf_b64 } => json!({"handle": handle, "buf-b64": buf_b64}),
        FileClose { handle } => json!({ "handle": handle }),
        SetUserPassword {
            username,
            password,
            crypted,
        } => json!({"username": username, "password": password, "crypted": crypted}),
        _ => return None,
    })
}

/// Commands after which qemu-ga sends no answer: the guest powers off or sleeps
/// (PVE's `$qga_allow_close_cmds`).
pub fn answers_nothing(c: &AgentCommand) -> bool {
    matches!(
        c,
        AgentCommand::Shutdown
            | AgentCommand::SuspendDisk
            | AgentCommand::SuspendRam
            | AgentCommand::SuspendHybrid
    )
}

/// Whether a failed exchange was the agent answering an error (kept as `{"error": …}`, as
/// PVE's QMP client returns it) rather than the channel failing.
fn answered_error(detail: &str) -> bool {
    const TRANSPORT: [&str; 7] = [
        "got timeout",
        "closed",
        "write:",
        "bad JSON",
        "not connected",
        "socket:",
        "unexpected agent reply",
    ];
    !TRANSPORT.iter().any(|t| detail.contains(t))
}

impl LabExecutor {
    /// Whether the guest's agent answers: never blocks on the guest.
    pub(super) fn agent_answers(&self, vm: &Vm) -> bool {
        vm.power == Power::Running && self.guest(vm).is_some_and(|g| g.agent_answering())
    }

    /// Forward one command; an error the agent answered comes back as `{"error": {…}}`, a
    /// failed exchange reads as PVE's `mon_cmd` dies
    /// (`VM 100 qmp command 'guest-ping' failed - got timeout`). A shutdown or suspend gets no
    /// answer: the guest going away is the answer (`null`).
    pub(super) fn forward(&self, call: &mut AgentCall<'_>) -> Result<Value, String> {
        let vmid = call.vm.vmid;
        let name = qga_command(&call.command);
        let g = self
            .guest(call.vm)
            .filter(|g| g.is_running())
            .ok_or_else(|| format!("VM {vmid} is not running"))?;
        if answers_nothing(&call.command) {
            let _ = g.agent(name, None, super::power::AGENT_SHUTDOWN_ASK);
            if matches!(
                call.command,
                AgentCommand::Shutdown | AgentCommand::SuspendDisk
            ) && g.wait_exit(self.shutdown_timeout)
            {
                super::gone(call.vm);
            }
            return Ok(Value::Null);
        }
        match g.agent(name, qga_arguments(&call.command), AGENT_CALL_TIMEOUT) {
            Ok(v) => Ok(v),
            Err(vm_lab::Error::Control { detail, .. }) if answered_error(&detail) => {
                let desc = detail
                    .strip_prefix(&format!("{name}: "))
                    .unwrap_or(&detail)
                    .to_string();
                Ok(json!({"error": {"class": "GenericError", "desc": desc}}))
            }
            Err(e) => Err(super::power::qmp_failed(vmid, name, &e)),
        }
    }
}

impl LabExecutor {
    /// The IPv4 address the guest's agent reports on NIC `net` (`net0`), matched by its MAC:
    /// where to reach the guest from the lab's namespace.
    pub fn guest_ipv4(&self, vm: &Vm, net: &str) -> Result<Ipv4Addr, String> {
        let mac = vm
            .config
            .get(net)
            .and_then(|v| Nic::parse(v).mac)
            .ok_or_else(|| format!("VM {} has no {net} with a MAC", vm.vmid))?;
        let g = self
            .guest(vm)
            .filter(|g| g.is_running())
            .ok_or_else(|| format!("VM {} is not running", vm.vmid))?;
        let ifaces = g
            .agent("guest-network-get-interfaces", None, AGENT_CALL_TIMEOUT)
            .map_err(|e| e.to_string())?;
        ipv4_for_mac(&ifaces, &mac).ok_or_else(|| {
            format!(
                "VM {}: the agent reports no IPv4 address on {net} ({mac})",
                vm.vmid
            )
        })
    }

    /// A system `ssh` command reaching `user@` the guest's `net0` address from inside the
    /// lab's namespace, with `key`; `remote` becomes the remote command.
    pub fn ssh_command(
        &self,
        vm: &Vm,
        key: &Path,
        user: &str,
        remote: &[&str],
    ) -> Result<std::process::Command, String> {
        let addr = self.guest_ipv4(vm, "net0")?;
        Ok(self.host.ssh_command(key, user, addr, remote))
    }

    /// The guest's serial console log (kept after it stops, until its next start).
    pub fn serial_log(&self, vm: &Vm) -> Option<std::path::PathBuf> {
        self.guest(vm).map(|g| g.serial_log().to_path_buf())
    }
}

/// The first global IPv4 address of the interface with `mac` in a
/// `guest-network-get-interfaces` answer.
pub fn ipv4_for_mac(ifaces: &Value, mac: &str) -> Option<Ipv4Addr> {
    ifaces
        .as_array()?
        .iter()
        .filter(|i| {
            i.get("hardware-address")
                .and_then(Value::as_str)
                .is_some_and(|m| m.eq_ignore_ascii_case(mac))
        })
        .flat_map(|i| {
            i.get("ip-addresses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter(|a| a.get("ip-address-type").and_then(Value::as_str) == Some("ipv4"))
        .filter_map(|a| a.get("ip-address")?.as_str()?.parse::<Ipv4Addr>().ok())
        .find(|ip| !ip.is_loopback() && !ip.is_link_local())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_address_is_the_one_on_the_nic_with_the_mac() {
        let ifaces = json!([
            {"name": "lo", "hardware-address": "00:00:00:00:00:00",
             "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}]},
            {"name": "eth1", "hardware-address": "bc:24:11:00:00:02",
             "ip-addresses": [{"ip-address": "10.0.0.2", "ip-address-type": "ipv4", "prefix": 24}]},
            {"name": "eth0", "hardware-address": "bc:24:11:00:00:01",
             "ip-addresses": [
                {"ip-address": "fe80::1", "ip-address-type": "ipv6", "prefix": 64},
                {"ip-address": "169.254.3.3", "ip-address-type": "ipv4", "prefix": 16},
                {"ip-address": "192.168.11.100", "ip-address-type": "ipv4", "prefix": 24}]},
        ]);
        assert_eq!(
            ipv4_for_mac(&ifaces, "BC:24:11:00:00:01"),
            Some(Ipv4Addr::new(192, 168, 11, 100))
        );
        assert_eq!(ipv4_for_mac(&ifaces, "bc:24:11:00:00:09"), None);
    }

    #[test]
    fn every_api_command_has_its_qga_name() {
        assert_eq!(
            qga_command(&AgentCommand::NetworkGetInterfaces),
            "guest-network-get-interfaces"
        );
        assert_eq!(qga_command(&AgentCommand::GetOsinfo), "guest-get-osinfo");
        assert_eq!(
            qga_command(&AgentCommand::GetMemoryBlockInfo),
            "guest-get-memory-block-info"
        );
    }

    #[test]
    fn commands_carry_the_arguments_pve_sends() {
        let exec = AgentCommand::Exec {
            path: "/bin/sh".into(),
            args: vec!["-c".into(), "true".into()],
            input_data: Some("aGk=".into()),
        };
        assert_eq!(qga_command(&exec), "guest-exec");
        assert_eq!(
            qga_arguments(&exec),
            Some(json!({"path": "/bin/sh", "arg": ["-c", "true"],
                        "capture-output": true, "input-data": "aGk="}))
        );
        let seek = AgentCommand::FileSeek {
            handle: 1000,
            offset: 5,
        };
        assert_eq!(
            qga_arguments(&seek),
            Some(json!({"handle": 1000, "offset": 5, "whence": "set"}))
        );
        let open = AgentCommand::FileOpen {
            path: "/etc/hostname".into(),
            mode: None,
        };
        assert_eq!(qga_arguments(&open), Some(json!({"path": "/etc/hostname"})));
        assert_eq!(qga_arguments(&AgentCommand::FsfreezeFreeze), None);
        assert!(answers_nothing(&AgentCommand::SuspendRam));
        assert!(!answers_nothing(&AgentCommand::Fstrim));
    }

    #[test]
    fn an_answered_error_is_kept_apart_from_a_failed_channel() {
        assert!(answered_error(
            "guest-file-open: failed to open file '/x' (mode: 'r'): No such file or directory"
        ));
        assert!(!answered_error("guest-exec: got timeout"));
        assert!(!answered_error(
            "guest-ping: the other side closed the connection"
        ));
    }
}
