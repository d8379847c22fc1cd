//! PVE's side of a guest agent call (`PVE::QemuServer::Agent`, `PVE::API2::Qemu::Agent`): the
//! privilege, the VM, an agent configured and answering (`assert_agent_available`), then the
//! QGA calls in PVE's order with its error texts (`check_agent_error`'s `Agent error: …`).
//! The answers themselves come from the site's executor (see `exec`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::access::model::Identity;
use crate::exec::{AgentCall, AgentCommand};
use crate::qemu::model::{Power, Vm};
use crate::version::PveVersion;
use crate::wire::PveError;
use crate::world::Site;

/// The most `file-read` returns (`$MAX_READ_SIZE`).
pub const MAX_READ_SIZE: i64 = 16 * 1024 * 1024;
/// The chunk PVE asks QGA for per `guest-file-read`.
const READ_CHUNK: i64 = 1024 * 1024;

/// Who calls an agent route on which VM, and when.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    /// Node the VM is on.
    pub node: &'a str,
    /// The VM's id.
    pub vmid: u32,
    /// Who calls.
    pub who: &'a Identity,
    /// Site time (seconds) of the call.
    pub now: f64,
}

/// The privileges a route accepts on `/vms/{vmid}`: any one of them.
pub type Privs = &'static [&'static str];

/// Reading commands (`info`, `get-osinfo`, `network-get-interfaces`, ...).
pub const AUDIT: Privs = &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"];
/// `fsfreeze-status`.
pub const FREEZE_STATUS: Privs = &[
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.Unrestricted",
];
/// `fsfreeze-freeze`, `fsfreeze-thaw` and `fstrim`.
pub const FS_MGMT: Privs = &["VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.Unrestricted"];
/// `shutdown` and the `suspend-*` commands.
pub const POWER: Privs = &["VM.PowerMgmt", "VM.GuestAgent.Unrestricted"];
/// `exec`, `exec-status`, `set-user-password` and the raw `file-*` commands.
pub const UNRESTRICTED: Privs = &["VM.GuestAgent.Unrestricted"];
/// `GET …/agent/file-read`.
pub const FILE_READ: Privs = &["VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"];
/// `POST …/agent/file-write`.
pub const FILE_WRITE: Privs = &["VM.GuestAgent.FileWrite", "VM.GuestAgent.Unrestricted"];

/// The privileges and whether the answer is checked (`agent_cmd`) of each simple command.
pub fn privs_of(cmd: &AgentCommand) -> Privs {
    use AgentCommand::*;
    match cmd {
        FsfreezeStatus => FREEZE_STATUS,
        FsfreezeFreeze | FsfreezeThaw | Fstrim => FS_MGMT,
        Shutdown | SuspendDisk | SuspendRam | SuspendHybrid => POWER,
        Exec { .. }
        | ExecStatus { .. }
        | SetUserPassword { .. }
        | FileOpen { .. }
        | FileSeek { .. }
        | FileRead { .. }
        | FileWrite { .. }
        | FileClose { .. } => UNRESTRICTED,
        _ => AUDIT,
    }
}

/// `check_agent_error`: QGA's error (`Agent error: <desc>`) or no answer at all.
fn check_agent_error(res: Value, errmsg: &str) -> Result<Value, PveError> {
    if let Some(desc) = res
        .get("error")
        .and_then(|e| e.get("desc"))
        .and_then(Value::as_str)
    {
        return Err(PveError::die(format!("Agent error: {desc}")));
    }
    if res.is_null() {
        return Err(PveError::die(format!("Agent error: {errmsg}")));
    }
    Ok(res)
}

/// `mon_cmd`'s death for an agent command: since qemu-server 9.1 the QMP client names the
/// peer type (`VM 100 qga command 'guest-ping' failed - got timeout`); 8.x said `qmp` for all.
fn peer_named(e: &str, version: PveVersion) -> String {
    if !version.names_qga_peer() {
        return e.to_string();
    }
    match e.split_once(" qmp command 'guest-") {
        Some((vm, rest)) => format!("{vm} qga command 'guest-{rest}"),
        None => e.to_string(),
    }
}

/// Perl's `encode_base64` of a parameter (a character string): each character one byte, so
/// `é` goes to the guest as Latin-1; a character past U+00FF makes Perl die.
fn perl_encode_base64(text: &str) -> Result<String, PveError> {
    let bytes: Option<Vec<u8>> = text
        .chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect();
    bytes
        .map(|b| B64.encode(b))
        .ok_or_else(|| PveError::die("Wide character in subroutine entry"))
}

/// A Perl byte string as the API's JSON encoder writes it: each byte one character.
fn perl_bytes(b: &[u8]) -> String {
    b.iter().map(|&c| char::from(c)).collect()
}

impl Site {
    /// The VM, after PVE's agent checks: configured, running, agent answering.
    pub fn agent_vm(
        &self,
        node: &str,
        vmid: u32,
        who: &Identity,
        now: f64,
    ) -> Result<&Vm, PveError> {
        self.agent_vm_for(node, vmid, who, AUDIT, now)
    }

    /// `agent_vm` for a route that accepts `privs`.
    pub fn agent_vm_for(
        &self,
        node: &str,
        vmid: u32,
        who: &Identity,
        privs: Privs,
        now: f64,
    ) -> Result<&Vm, PveError> {
        let vm = self.vm_on(node, vmid)?;
        self.agent_privs(vmid, who, privs)?;
        self.assert_agent_available(vm, now)?;
        Ok(vm)
    }

    fn agent_privs(&self, vmid: u32, who: &Identity, privs: Privs) -> Result<(), PveError> {
        let path = format!("/vms/{vmid}");
        match privs {
            [one] => self.require(who, &path, one),
            many => self.require_any(who, &path, many),
        }
    }

    /// `assert_agent_available`.
    fn assert_agent_available(&self, vm: &Vm, now: f64) -> Result<(), PveError> {
        if !vm.is_agent_enabled() {
            return Err(PveError::die("No QEMU guest agent configured"));
        }
        if vm.power == Power::Stopped {
            return Err(PveError::die(format!("VM {} is not running", vm.vmid)));
        }
        if vm.power == Power::Paused || !self.exec_on(&vm.node).agent_ready(vm, now) {
            return Err(PveError::die("QEMU guest agent is not running"));
        }
        Ok(())
    }

    /// `mon_cmd($vmid, "guest-…")`: what the executor answers (an `Err` is `mon_cmd` dying).
    /// A command that powered the guest off leaves the VM stopped; its pending changes stay
    /// pending (qmeventd's `qm cleanup` calls `vm_stop_cleanup` without applying them).
    fn mon_cmd(&mut self, vmid: u32, command: AgentCommand, now: f64) -> Result<Value, PveError> {
        let Some(vm) = self.vms.get(&vmid) else {
            return Err(PveError::die(format!("VM {vmid} is not running")));
        };
        let exec = self.exec_on(&vm.node).clone();
        let node_name = vm.node.clone();
        let Some(vm) = self.vms.get_mut(&vmid) else {
            return Err(PveError::die(format!("VM {vmid} is not running")));
        };
        let host = crate::exec::guest_hostname(vm);
        vm.guest.seed(&host, &self.guest);
        let mut call = AgentCall {
            vm,
            node: self.nodes.get(&node_name),
            command,
            now,
        };
        let version = self.version;
        exec.agent(&mut call)
            .map_err(|e| PveError::die(peer_named(&e, version)))
    }

    /// A simple guest agent command (`register_command`): checks, then QGA's answer as it
    /// is, an agent's `error` included.
    pub fn agent_call(
        &mut self,
        node: &str,
        vmid: u32,
        who: &Identity,
        command: AgentCommand,
        now: f64,
    ) -> Result<Value, PveError> {
        self.agent_vm_for(node, vmid, who, privs_of(&command), now)?;
        self.mon_cmd(vmid, command, now)
    }

    /// `agent_cmd`: checks, the call, `check_agent_error`.
    fn agent_cmd(
        &mut self,
        node: &str,
        vmid: u32,
        who: &Identity,
        command: AgentCommand,
        errmsg: &str,
        now: f64,
    ) -> Result<Value, PveError> {
        let res = self.agent_call(node, vmid, who, command, now)?;
        check_agent_error(res, errmsg)
    }

    /// `POST …/agent/exec` (`qemu_exec`): the pid of the started process.
    pub fn agent_exec(
        &mut self,
        at: Caller<'_>,
        command: Vec<String>,
        input_data: Option<String>,
    ) -> Result<Value, PveError> {
        let Caller {
            node,
            vmid,
            who,
            now,
        } = at;
        self.agent_privs(vmid, who, UNRESTRICTED)?;
        self.vm_on(node, vmid)?;
        let mut argv = command.into_iter();
        let path = argv.next();
        let args: Vec<String> = argv.collect();
        if path.is_none() && input_data.is_none() {
            return Err(PveError::die("command or input-data (or both) required"));
        }
        let mut errmsg = "can't execute command".to_string();
        if let Some(p) = &path {
            errmsg.push_str(&format!(" ({p} {})", args.join(" ")));
        }
        if input_data.is_some() {
            errmsg.push_str(" (input-data given)");
        }
        let Some(path) = path else {
            // PVE sends `path: null`; QGA's argument checking refuses it.
            self.agent_vm_for(node, vmid, who, UNRESTRICTED, now)?;
            return Err(PveError::die(
                "Agent error: Invalid parameter type for 'path', expected: string",
            ));
        };
        let input_data = input_data.as_deref().map(perl_encode_base64).transpose()?;
        let cmd = AgentCommand::Exec {
            path,
            args,
            input_data,
        };
        self.agent_cmd(node, vmid, who, cmd, &errmsg, now)
    }

    /// `GET …/agent/exec-status` (`qemu_exec_status`): output decoded, booleans as 1/0.
    pub fn agent_exec_status(&mut self, at: Caller<'_>, pid: i64) -> Result<Value, PveError> {
        let Caller {
            node,
            vmid,
            who,
            now,
        } = at;
        let errmsg = format!("can't get exec status for '{pid}'");
        let res = self.agent_cmd(
            node,
            vmid,
            who,
            AgentCommand::ExecStatus { pid },
            &errmsg,
            now,
        )?;
        let Value::Object(obj) = res else {
            return Ok(res);
        };
        let mut out = Map::new();
        for (k, v) in obj {
            let v = match (k.as_str(), v) {
                ("out-data" | "err-data", Value::String(s)) => match B64.decode(&s) {
                    Ok(b) => Value::String(perl_bytes(&b)),
                    Err(_) => Value::String(s),
                },
                (_, Value::Bool(b)) => json!(u8::from(b)),
                (_, v) => v,
            };
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }

    /// `GET …/agent/file-read`: `content` (decoded unless `decode=0`), `bytes-read`, and
    /// `truncated` when the end of the file was not reached.
    pub fn agent_file_read(
        &mut self,
        at: Caller<'_>,
        file: &str,
        count: Option<i64>,
        decode: bool,
        offset: i64,
    ) -> Result<Value, PveError> {
        let Caller {
            node,
            vmid,
            who,
            now,
        } = at;
        self.agent_privs(vmid, who, FILE_READ)?;
        let limit = count.unwrap_or(MAX_READ_SIZE);
        let open = AgentCommand::FileOpen {
            path: file.into(),
            mode: None,
        };
        self.agent_vm_for(node, vmid, who, FILE_READ, now)?;
        let handle = check_agent_error(self.mon_cmd(vmid, open, now)?, "can't open file")?
            .as_i64()
            .unwrap_or(-1);
        if offset > 0 {
            let seek = self.mon_cmd(vmid, AgentCommand::FileSeek { handle, offset }, now)?;
            check_agent_error(seek, "can't seek to offset position")?;
        }
        let (mut bytes_read, mut eof) = (0i64, false);
        let mut content = String::new();
        while bytes_read < limit && !eof {
            let count = (limit - bytes_read).min(READ_CHUNK);
            let read = self.mon_cmd(vmid, AgentCommand::FileRead { handle, count }, now)?;
            let read = check_agent_error(read, "can't read from file")?;
            let chunk = read.get("buf-b64").and_then(Value::as_str).unwrap_or("");
            if decode {
                content.push_str(&perl_bytes(&B64.decode(chunk).unwrap_or_default()));
            } else {
                content.push_str(chunk);
            }
            bytes_read += read.get("count").and_then(Value::as_i64).unwrap_or(0);
            eof = read.get("eof").and_then(Value::as_bool).unwrap_or(false);
        }
        // A failed close is only warned about.
        let _ = self.mon_cmd(vmid, AgentCommand::FileClose { handle }, now);
        let mut res = json!({"content": content, "bytes-read": bytes_read});
        if !eof {
            if count.is_none() {
                tracing::warn!(
                    vmid,
                    "agent file-read: reached maximum read size: {MAX_READ_SIZE} bytes. output might be truncated."
                );
            }
            res["truncated"] = json!(1);
        }
        Ok(res)
    }

    /// `POST …/agent/file-write`: the file replaced by `content` (base64-encoded here unless
    /// `encode=0`, where the caller sends base64).
    pub fn agent_file_write(
        &mut self,
        at: Caller<'_>,
        file: &str,
        content: &str,
        encode: bool,
    ) -> Result<(), PveError> {
        let Caller {
            node,
            vmid,
            who,
            now,
        } = at;
        self.agent_privs(vmid, who, FILE_WRITE)?;
        self.vm_on(node, vmid)?;
        let buf = if encode {
            perl_encode_base64(content)?
        } else {
            content.to_string()
        };
        let open = AgentCommand::FileOpen {
            path: file.into(),
            mode: Some("wb".into()),
        };
        self.agent_vm_for(node, vmid, who, FILE_WRITE, now)?;
        let handle = check_agent_error(self.mon_cmd(vmid, open, now)?, "can't open file")?
            .as_i64()
            .unwrap_or(-1);
        self.agent_vm_for(node, vmid, who, FILE_WRITE, now)?;
        let write = self.mon_cmd(
            vmid,
            AgentCommand::FileWrite {
                handle,
                buf_b64: buf,
            },
            now,
        )?;
        check_agent_error(write, "can't write to file")?;
        self.agent_vm_for(node, vmid, who, FILE_WRITE, now)?;
        let close = self.mon_cmd(vmid, AgentCommand::FileClose { handle }, now)?;
        check_agent_error(close, "can't close file")?;
        Ok(())
    }

    /// `POST …/agent/set-user-password`: the password base64-encoded, as PVE sends it.
    pub fn agent_set_user_password(
        &mut self,
        at: Caller<'_>,
        username: &str,
        password: &str,
        crypted: bool,
    ) -> Result<Value, PveError> {
        let Caller {
            node,
            vmid,
            who,
            now,
        } = at;
        let cmd = AgentCommand::SetUserPassword {
            username: username.into(),
            password: B64.encode(password.as_bytes()),
            crypted,
        };
        self.agent_cmd(node, vmid, who, cmd, "cannot set user password", now)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use super::*;
    use crate::scenario::Scenario;

    /// A site with VM 100 running on its first node, its agent answering at `t = 0`.
    fn site_with_running_vm() -> (Site, String) {
        let spec = &Scenario::embedded_default().sites[0];
        let node = spec.nodes[0].name.clone();
        let mut site = Site::from_spec(spec, 1, 0.0);
        let config: BTreeMap<String, String> = [("agent", "1"), ("name", "big")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut vm = Vm::stopped(100, &node, config, None);
        vm.power = Power::Running;
        vm.agent_ready_at = Some(0.0);
        site.vms.insert(100, vm);
        (site, node)
    }

    #[test]
    fn a_read_without_count_stops_at_pves_maximum_and_says_truncated() {
        let (mut site, node) = site_with_running_vm();
        let root = Identity {
            userid: "root@pam".into(),
            tokenid: None,
        };
        let big = vec![b'x'; MAX_READ_SIZE as usize + 1];
        if let Some(vm) = site.vms.get_mut(&100) {
            vm.guest.seed("big", &Default::default());
            vm.guest.files.insert("/var/log/big.log".into(), big);
        }
        let at = Caller {
            node: &node,
            vmid: 100,
            who: &root,
            now: 1.0,
        };
        let res = site
            .agent_file_read(at, "/var/log/big.log", None, true, 0)
            .unwrap();
        assert_eq!(res["bytes-read"], MAX_READ_SIZE);
        assert_eq!(res["truncated"], 1);
        assert_eq!(
            res["content"].as_str().map(str::len),
            Some(MAX_READ_SIZE as usize)
        );
        // The whole file in one read when it is within the limit.
        let res = site
            .agent_file_read(at, "/etc/hostname", None, true, 0)
            .unwrap();
        assert_eq!(res, json!({"content": "big\n", "bytes-read": 4}));
    }

    #[test]
    fn agent_errors_read_as_check_agent_error_dies() {
        let e = check_agent_error(
            json!({"error": {"class": "GenericError", "desc": "Invalid parameter 'pid'"}}),
            "x",
        );
        assert_eq!(
            e.err().map(|e| e.message),
            Some("Agent error: Invalid parameter 'pid'\n".into())
        );
        let e = check_agent_error(Value::Null, "can't open file");
        assert_eq!(
            e.err().map(|e| e.message),
            Some("Agent error: can't open file\n".into())
        );
        assert_eq!(perl_bytes("é".as_bytes()), "Ã©");
        assert_eq!(perl_encode_base64("é").ok(), Some("6Q==".to_string()));
        assert_eq!(
            perl_encode_base64("→").err().map(|e| e.message),
            Some("Wide character in subroutine entry\n".into())
        );
        let died = "VM 100 qmp command 'guest-ping' failed - got timeout";
        assert_eq!(
            peer_named(died, PveVersion::V9_1),
            "VM 100 qga command 'guest-ping' failed - got timeout"
        );
        assert_eq!(peer_named(died, PveVersion::V8_4), died);
    }
}
