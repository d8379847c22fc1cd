//! Power on a real guest: launch, power off (agent or ACPI, bounded), QMP verbs, and the
//! texts PVE's tasks end with when they fail.

use std::time::Duration;

use vm_lab::guests::{BridgeSpec, Guest};

use super::{LabExecutor, argv, bridge_spec, gone};
use crate::exec::Host;
use crate::qemu::model::{Power, Vm};

/// Bound on asking the agent to shut the guest down (it does not answer on success).
pub(super) const AGENT_SHUTDOWN_ASK: Duration = Duration::from_secs(1);

impl LabExecutor {
    /// QEMU starts for `vm`'s config, each NIC on the segment of its bridge as the node has it
    /// now (`host.bridges`); `Err` is the start task's exit status.
    pub(super) fn launch(&self, vm: &mut Vm, host: &Host<'_>) -> Result<(), String> {
        if self.running_guest(vm).is_some() {
            return Err(format!("VM {} already running", vm.vmid));
        }
        let mut spec = argv::guest_spec(vm, &|n: &str, s: &str, v: &str| (self.volumes)(n, s, v))?;
        for nic in &mut spec.nics {
            let cut = |b: &str| host.bridges.iter().any(|nb| nb.name == b && nb.link_cut);
            if nic.bridge.as_deref().is_some_and(cut) {
                nic.link_up = false;
            }
        }
        for nic in &spec.nics {
            let Some(b) = nic.bridge.as_deref() else {
                continue;
            };
            let seg = host
                .bridges
                .iter()
                .find(|nb| nb.name == b)
                .map(bridge_spec)
                .unwrap_or_else(|| BridgeSpec::new(b));
            self.host
                .ensure_bridge(&seg)
                .map_err(|e| format!("start failed: bridge '{b}': {e}"))?;
        }
        let g = self.host.launch(spec).map_err(start_error)?;
        vm.power = Power::Running;
        vm.started_at = host.now;
        vm.pid = Some(g.pid());
        vm.agent_ready_at = None;
        Ok(())
    }

    /// The guest powers off: through its agent when it is configured and answering (as
    /// `qm shutdown` does), else the ACPI button; `Err` when it has not within the timeout.
    pub(super) fn power_off(&self, vm: &mut Vm) -> Result<(), String> {
        let Some(g) = self.running_guest(vm) else {
            gone(vm);
            return Ok(());
        };
        if vm.is_agent_enabled() && g.agent_answering() {
            // qemu-ga powers off without answering: the missing reply is expected.
            let _ = g.agent("guest-shutdown", None, AGENT_SHUTDOWN_ASK);
        } else {
            g.powerdown()
                .map_err(|e| qmp_failed(vm.vmid, "system_powerdown", &e))?;
        }
        if g.wait_exit(self.shutdown_timeout) {
            gone(vm);
            Ok(())
        } else {
            Err("VM quit/powerdown failed - got timeout".into())
        }
    }

    /// A QMP verb on the running guest; PVE's texts when it is not running or QMP fails.
    pub(super) fn qmp_verb(
        &self,
        vm: &Vm,
        command: &str,
        verb: impl Fn(&Guest) -> vm_lab::Result<()>,
    ) -> Result<(), String> {
        let g = self
            .running_guest(vm)
            .ok_or_else(|| format!("VM {} not running", vm.vmid))?;
        verb(&g).map_err(|e| qmp_failed(vm.vmid, command, &e))
    }
}

/// `VM 100 qmp command 'stop' failed - got timeout`, as PVE's `mon_cmd` dies.
pub fn qmp_failed(vmid: u32, command: &str, e: &vm_lab::Error) -> String {
    match e {
        vm_lab::Error::QemuExited { .. } => format!("VM {vmid} not running"),
        vm_lab::Error::Control { detail, .. } => {
            let detail = detail
                .strip_prefix(&format!("{command}: "))
                .unwrap_or(detail);
            format!("VM {vmid} qmp command '{command}' failed - {detail}")
        }
        other => format!("VM {vmid} qmp command '{command}' failed - {other}"),
    }
}

/// A launch failure as the start task ends: `start failed: QEMU exited with code N` (with
/// QEMU's last words), or `start failed: …` with the lab's reason.
pub fn start_error(e: vm_lab::Error) -> String {
    match e {
        vm_lab::Error::QemuExited { status, stderr, .. } => {
            let code: String = status.chars().filter(char::is_ascii_digit).collect();
            let code = if code.is_empty() { "1".into() } else { code };
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            if last.is_empty() {
                format!("start failed: QEMU exited with code {code}")
            } else {
                format!(
                    "start failed: QEMU exited with code {code}: {}",
                    last.trim()
                )
            }
        }
        other => format!("start failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_refusing_its_arguments_reads_like_pves_start_task() {
        let e = vm_lab::Error::QemuExited {
            node: "pve1-100".into(),
            status: "exit status: 1".into(),
            stderr: "qemu-system-x86_64: -drive file=/x: Could not open '/x'\n".into(),
            serial: String::new(),
        };
        assert_eq!(
            start_error(e),
            "start failed: QEMU exited with code 1: qemu-system-x86_64: -drive file=/x: Could not open '/x'"
        );
        let e = vm_lab::Error::Lab("cannot start guest x: it needs 512 MiB".into());
        assert_eq!(
            start_error(e),
            "start failed: lab: cannot start guest x: it needs 512 MiB"
        );
    }

    #[test]
    fn qmp_failures_read_like_mon_cmd() {
        let e = vm_lab::Error::Control {
            node: "n".into(),
            channel: "qmp",
            detail: "stop: got timeout".into(),
        };
        assert_eq!(
            qmp_failed(100, "stop", &e),
            "VM 100 qmp command 'stop' failed - got timeout"
        );
        let gone = vm_lab::Error::QemuExited {
            node: "n".into(),
            status: "signal: 9".into(),
            stderr: String::new(),
            serial: String::new(),
        };
        assert_eq!(qmp_failed(100, "cont", &gone), "VM 100 not running");
    }
}
