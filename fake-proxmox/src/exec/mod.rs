//! The execution seam: everything that *runs* a VM, apart from the PVE rules that decide
//! whether it may run.
//!
//! The qemu model decides (privileges, locks, pending changes, task plans, the errors PVE
//! gives) and then hands each effect on a guest to an [`Executor`]: QEMU starting, stopping,
//! shutting down, rebooting, resetting, pausing and resuming; disk data being copied into a
//! new volume or a RAM state being written; the guest agent answering. The executor records
//! the run state it produces on the [`Vm`] (`power`, `pid`, `started_at`, `agent_ready_at`),
//! which is what every route reads.
//!
//! Today's only implementation is [`Simulated`]: no process, figures from the site's seeded
//! random source and its boot delay, agent answers made up from the config. A lab-backed
//! executor (real QEMU guests) implements the same trait; the PVE rules do not change.
//!
//! Not in the seam yet: consoles (`vncproxy`, `termproxy`, `spiceproxy`) and agent `exec`
//! / file commands, because no route serves them (they answer 501).

mod guest;
mod simulated;

use std::fmt;

use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::nodes::model::Node;
use crate::qemu::model::Vm;

pub use simulated::Simulated;

/// What the site lends an executor for one effect.
pub struct Host<'a> {
    /// The site's seeded random source: a simulated run draws its figures (a QEMU pid) from
    /// it, so a scenario replays the same way.
    pub rng: &'a mut ChaCha8Rng,
    /// How long a simulated guest takes to boot until its agent answers.
    pub boot_delay_secs: f64,
    /// The site's clock.
    pub now: f64,
}

/// A guest agent command the API forwards (`GET|POST …/agent/{command}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentCommand {
    Ping,
    Info,
    NetworkGetInterfaces,
    GetHostName,
    GetOsinfo,
    GetTime,
    GetTimezone,
    GetUsers,
    GetVcpus,
    GetFsinfo,
    GetMemoryBlocks,
    GetMemoryBlockInfo,
}

/// One agent call: the VM (config and leases) and the node it runs on (its bridges).
pub struct AgentCall<'a> {
    pub vm: &'a Vm,
    pub node: Option<&'a Node>,
    pub command: AgentCommand,
    pub now: f64,
}

/// A volume on a node's storage: (storage id, volume name).
pub type VolumeRef<'a> = (&'a str, &'a str);

/// Runs VMs. Every method is called after the qemu model has decided that the effect
/// happens; an `Err` is the task's exit status, as QEMU or the tool would report it.
pub trait Executor: Send + Sync + fmt::Debug {
    /// QEMU starts `vm` (its config already has the pending changes applied).
    fn start(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// QEMU starts from a saved RAM state (rollback to a snapshot with `vmstate`): the
    /// guest carries on where it was, its agent answering at once.
    fn start_from_state(
        &self,
        vm: &mut Vm,
        vmstate: &str,
        host: &mut Host<'_>,
    ) -> Result<(), String>;
    /// QEMU is killed (`qm stop`, or a rollback stopping the VM first).
    fn stop(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// The guest powers off (ACPI or the agent) and QEMU exits.
    fn shutdown(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// The guest shuts down and QEMU is started again (qmeventd's part of a reboot).
    fn reboot(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// The guest restarts inside the same QEMU process.
    fn reset(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// QEMU pauses the guest.
    fn suspend(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// QEMU continues a paused guest.
    fn resume(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// Copy a volume's data into a freshly allocated one (`import-from`, clone, move_disk):
    /// the bytes written, of the `used` bytes the source holds.
    fn copy_disk(&self, from: VolumeRef<'_>, to: VolumeRef<'_>, used: u64) -> Result<u64, String>;
    /// Write a running VM's RAM state of `size` bytes into `volid` (a snapshot with
    /// `vmstate`): the bytes written.
    fn save_state(&self, vm: &Vm, volid: &str, size: u64) -> Result<u64, String>;
    /// Whether the guest agent answers now.
    fn agent_ready(&self, vm: &Vm, now: f64) -> bool;
    /// The `result` of a guest agent command, asked once the model has found the agent
    /// configured and answering.
    fn agent(&self, call: &AgentCall<'_>) -> Result<Value, String>;
}
