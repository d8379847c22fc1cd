//! The real guest agent behind `…/agent/{command}`: readiness from the host's watcher (a
//! `guest-ping` answered within the last second), commands forwarded and their `return`
//! handed back as the `result`.

use serde_json::Value;

use super::LabExecutor;
use crate::exec::{AgentCall, AgentCommand};
use crate::qemu::model::{Power, Vm};

/// Bound on one forwarded agent command.
const AGENT_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The QGA command behind an API agent command.
pub fn qga_command(c: AgentCommand) -> &'static str {
    match c {
        AgentCommand::Ping => "guest-ping",
        AgentCommand::Info => "guest-info",
        AgentCommand::NetworkGetInterfaces => "guest-network-get-interfaces",
        AgentCommand::GetHostName => "guest-get-host-name",
        AgentCommand::GetOsinfo => "guest-get-osinfo",
        AgentCommand::GetTime => "guest-get-time",
        AgentCommand::GetTimezone => "guest-get-timezone",
        AgentCommand::GetUsers => "guest-get-users",
        AgentCommand::GetVcpus => "guest-get-vcpus",
        AgentCommand::GetFsinfo => "guest-get-fsinfo",
        AgentCommand::GetMemoryBlocks => "guest-get-memory-blocks",
        AgentCommand::GetMemoryBlockInfo => "guest-get-memory-block-info",
    }
}

impl LabExecutor {
    /// Whether the guest's agent answers: never blocks on the guest.
    pub(super) fn agent_answers(&self, vm: &Vm) -> bool {
        vm.power == Power::Running && self.guest(vm).is_some_and(|g| g.agent_answering())
    }

    /// Forward one command; errors read as PVE's `mon_cmd` dies
    /// (`VM 100 qmp command 'guest-ping' failed - got timeout`).
    pub(super) fn forward(&self, call: &AgentCall<'_>) -> Result<Value, String> {
        let vmid = call.vm.vmid;
        let name = qga_command(call.command);
        let g = self
            .guest(call.vm)
            .filter(|g| g.is_running())
            .ok_or_else(|| format!("VM {vmid} is not running"))?;
        g.agent(name, None, AGENT_CALL_TIMEOUT)
            .map_err(|e| super::power::qmp_failed(vmid, name, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_command_has_its_qga_name() {
        assert_eq!(
            qga_command(AgentCommand::NetworkGetInterfaces),
            "guest-network-get-interfaces"
        );
        assert_eq!(qga_command(AgentCommand::GetOsinfo), "guest-get-osinfo");
        assert_eq!(
            qga_command(AgentCommand::GetMemoryBlockInfo),
            "guest-get-memory-block-info"
        );
    }
}
