//! PVE's side of a guest agent call (`PVE::QemuServer::Agent::agent_cmd`): the privilege,
//! the VM, an agent configured and answering. The answer itself comes from the site's
//! executor (see `exec`).

use serde_json::Value;

use crate::access::model::Identity;
use crate::exec::{AgentCall, AgentCommand};
use crate::qemu::model::{Power, Vm};
use crate::wire::PveError;
use crate::world::Site;

impl Site {
    /// The VM, after PVE's agent checks: configured, running, agent answering.
    pub fn agent_vm(
        &self,
        node: &str,
        vmid: u32,
        who: &Identity,
        now: f64,
    ) -> Result<&Vm, PveError> {
        let vm = self.vm_on(node, vmid)?;
        self.require_any(
            who,
            &format!("/vms/{vmid}"),
            &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"],
        )?;
        if !vm.is_agent_enabled() {
            return Err(PveError::die("No QEMU guest agent configured"));
        }
        if vm.power == Power::Stopped {
            return Err(PveError::die(format!("VM {vmid} is not running")));
        }
        if vm.power == Power::Paused || !self.exec_on(&vm.node).agent_ready(vm, now) {
            return Err(PveError::die("QEMU guest agent is not running"));
        }
        Ok(vm)
    }

    /// A guest agent command's `result`.
    pub fn agent_call(
        &self,
        node: &str,
        vmid: u32,
        who: &Identity,
        command: AgentCommand,
        now: f64,
    ) -> Result<Value, PveError> {
        let vm = self.agent_vm(node, vmid, who, now)?;
        self.exec_on(&vm.node)
            .agent(&AgentCall {
                vm,
                node: self.node(&vm.node),
                command,
                now,
            })
            .map_err(PveError::die)
    }
}
