//! The lab executor: VMs run as real QEMU guests on a [`vm_lab::guests::GuestHost`] (one
//! private namespace; each bridge name one L2 segment with a real DHCP server where the bridge
//! has a pool). The PVE rules are unchanged; only what runs is real:
//!
//! - `start` maps the config to a guest ([`argv`]) and launches QEMU; a start that cannot
//!   happen (a volume without a file, an unsupported NIC model, QEMU refusing its arguments,
//!   the memory budget) fails the start task with PVE's wording where PVE has one.
//! - `stop` kills QEMU; `shutdown` asks the guest agent (when configured and answering) or
//!   presses the ACPI power button, then waits up to the shutdown timeout and fails with
//!   `VM quit/powerdown failed - got timeout`; `reset`, `suspend`, `resume` are QMP
//!   `system_reset`, `stop`, `cont` ([`power`]). A reboot is the model's shutdown and start:
//!   pending changes applied, the cloud-init drive written again, a new QEMU.
//! - `agent_ready` is a real `guest-ping` answered (kept fresh by the host's watcher, so the
//!   call never waits on the guest); `agent` forwards the command to the real agent ([`agent`]):
//!   `exec`, `file-*`, `fsfreeze-*`, `set-user-password` with PVE's arguments, an error the
//!   agent answers handed back as PVE's QMP client returns it, `shutdown`/`suspend-disk`
//!   waiting (bounded) for QEMU to exit.
//! - `refresh` notices a guest that powered itself off (or a QEMU that died): `stopped`.
//! - `fault` kills, pauses, pulls a NIC's cable or fails a disk's writes ([`faults`]).
//! - Host access for the next step: [`LabExecutor::guest_ipv4`] (the agent's address on a
//!   NIC), [`LabExecutor::ssh_command`] (system `ssh` run inside the lab's namespace) and
//!   [`LabExecutor::serial_log`]; the namespace holds the node's and the gateway's addresses
//!   on each bridge, so no management NIC is added to the guest.
//!
//! - Containers: real vm-lab containers on the same segments ([`ct`]): the template unpacked
//!   at create, PVE's setup files written at every start ([`rootfs`]), real pid, memory and
//!   interfaces, SIGPWR for a shutdown.
//!
//! Deviations from real PVE:
//! - Every call blocks its caller (the site lock) for at most a few seconds: the shutdown
//!   timeout is the executor's (default 10 s), not the request's `timeout`.
//! - Starting from a RAM state (`vmstate` rollback) cold-boots the guest: no state is loaded.
//! - Volume data (import, resize, cloud-init drive) is the `Disks` seam's: with `FileDisks` the
//!   guest boots from the real files `Disks::path` names.
//! - QEMU gets `min(memory, memory_cap_mib)` of memory; PVE-side figures keep the config's.
//! - One segment per bridge *name*, shared by all nodes: two nodes' `vmbr0` are one L2 with one
//!   DHCP server whose pool spans both nodes' pools.

pub mod agent;
pub mod argv;
pub mod backend;
pub mod ct;
pub mod faults;
pub mod power;
pub mod rootfs;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use vm_lab::guests::{BridgeSpec, DhcpPool, Guest, GuestHost};

use super::{
    AgentCall, CtCreate, CtCreated, CtIface, CtShutdown, Executor, GuestAccess, GuestFault, Host,
};
use crate::lxc::model::Ct;
use crate::nodes::model::Bridge;
use crate::qemu::model::{Power, Vm};

/// Finds a volume's file: (node, storage, volume name) → path; `None` when it has none.
pub type VolumePath = Arc<dyn Fn(&str, &str, &str) -> Option<PathBuf> + Send + Sync>;

/// How long `shutdown` and `reboot` wait for the guest to power off.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs VMs as real QEMU guests on a lab host (see the module documentation).
pub struct LabExecutor {
    host: GuestHost,
    volumes: VolumePath,
    shutdown_timeout: Duration,
}

impl fmt::Debug for LabExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LabExecutor")
            .field("host", &self.host.run_dir())
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish()
    }
}

impl LabExecutor {
    /// Run VMs on `host`, finding their volumes' files through `volumes`.
    pub fn new(host: GuestHost, volumes: VolumePath) -> LabExecutor {
        LabExecutor {
            host,
            volumes,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }

    /// The same executor, waiting `timeout` for a guest to power off on `shutdown` and `reboot`.
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> LabExecutor {
        self.shutdown_timeout = timeout;
        self
    }

    /// The lab host the guests run on.
    pub fn host(&self) -> &GuestHost {
        &self.host
    }

    /// The guest running (or last run) for `vm`.
    pub fn guest(&self, vm: &Vm) -> Option<Arc<Guest>> {
        self.host.guest(&argv::guest_name(&vm.node, vm.vmid))
    }

    fn running_guest(&self, vm: &Vm) -> Option<Arc<Guest>> {
        self.guest(vm).filter(|g| g.is_running())
    }
}

/// A node's bridge as a segment: its own address (`cidr`), the gateway, the DHCP pool
/// handing out the gateway as router.
pub fn bridge_spec(b: &Bridge) -> BridgeSpec {
    let mut s = BridgeSpec::new(&b.name);
    let prefix = b.prefix_len();
    let own = b
        .cidr
        .as_deref()
        .and_then(|c| c.split('/').next())
        .and_then(|ip| ip.parse().ok());
    let gateway = b.gateway.as_deref().and_then(|g| g.parse().ok());
    for ip in [own, gateway].into_iter().flatten() {
        if !s.addresses.contains(&(ip, prefix)) {
            s.addresses.push((ip, prefix));
        }
    }
    s.dhcp = b.dhcp.map(|(start, end)| DhcpPool {
        start,
        end,
        router: gateway,
    });
    s
}

/// QEMU is gone: no pid, no agent.
fn gone(vm: &mut Vm) {
    vm.power = Power::Stopped;
    vm.pid = None;
    vm.agent_ready_at = None;
}

impl Executor for LabExecutor {
    fn start(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        self.launch(vm, host)
    }

    fn start_from_state(
        &self,
        vm: &mut Vm,
        vmstate: &str,
        host: &mut Host<'_>,
    ) -> Result<(), String> {
        tracing::warn!(
            "lab backend: VM {} cold-boots; its RAM state {vmstate} is not loaded",
            vm.vmid
        );
        self.launch(vm, host)
    }

    fn stop(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        if let Some(g) = self.guest(vm) {
            g.kill();
        }
        gone(vm);
        Ok(())
    }

    fn shutdown(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        self.power_off(vm)
    }

    fn reset(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        self.qmp_verb(vm, "system_reset", Guest::reset)?;
        vm.power = Power::Running;
        vm.agent_ready_at = None;
        Ok(())
    }

    fn suspend(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        self.qmp_verb(vm, "stop", Guest::pause)?;
        vm.power = Power::Paused;
        Ok(())
    }

    fn resume(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        self.qmp_verb(vm, "cont", Guest::resume)?;
        vm.power = Power::Running;
        Ok(())
    }

    fn agent_ready(&self, vm: &Vm, _now: f64) -> bool {
        self.agent_answers(vm)
    }

    fn agent(&self, call: &mut AgentCall<'_>) -> Result<Value, String> {
        self.forward(call)
    }

    fn access(&self, vm: &Vm, user: &str, key: &std::path::Path) -> Result<GuestAccess, String> {
        let address = self.guest_ipv4(vm, "net0")?;
        let cmd = self.ssh_command(vm, key, user, &[])?;
        let ssh = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        Ok(GuestAccess {
            address: address.to_string(),
            ssh,
            serial_log: self
                .serial_log(vm)
                .map(|p| p.to_string_lossy().into_owned()),
        })
    }

    fn fault(&self, vm: &mut Vm, fault: &GuestFault) -> Result<(), String> {
        self.inject(vm, fault)
    }

    fn destroy(&self, vm: &Vm) {
        if let Err(e) = self.host.remove(&argv::guest_name(&vm.node, vm.vmid)) {
            tracing::warn!("removing the guest of VM {}: {e}", vm.vmid);
        }
    }

    fn observes_guests(&self) -> bool {
        true
    }

    fn resize_running_disk(&self, vm: &Vm, disk: &str, bytes: u64) -> Result<bool, String> {
        let Some(g) = self.running_guest(vm) else {
            return Ok(false);
        };
        let args = serde_json::json!({"device": format!("drive-{disk}"), "size": bytes});
        g.qmp(
            "block_resize",
            Some(args),
            std::time::Duration::from_secs(30),
        )
        .map_err(|e| power::qmp_failed(vm.vmid, "block_resize", &e))?;
        Ok(true)
    }

    fn create_ct(&self, job: &CtCreate<'_>) -> Result<CtCreated, String> {
        self.create_container(job)
    }

    fn start_ct(&self, ct: &mut Ct, host: &mut Host<'_>) -> Result<(), String> {
        self.start_container(ct, host)
    }

    fn stop_ct(&self, ct: &mut Ct) -> Result<(), String> {
        self.kill_container(ct);
        Ok(())
    }

    fn shutdown_ct(&self, ct: &mut Ct, how: &CtShutdown) -> Result<(), String> {
        self.shut_down_container(ct, how)
    }

    fn suspend_ct(&self, ct: &mut Ct) -> Result<(), String> {
        Err(format!(
            "CT {}: the lab backend cannot checkpoint a container (lxc-checkpoint); \
             stop or shut it down instead",
            ct.vmid
        ))
    }

    fn refresh_ct(&self, ct: &mut Ct, _now: f64) {
        self.refresh_container(ct);
    }

    fn ct_interfaces(&self, ct: &Ct) -> Option<Result<Vec<CtIface>, String>> {
        Some(self.container_interfaces(ct))
    }

    fn destroy_ct(&self, ct: &Ct) {
        self.remove_container(ct);
    }

    fn ct_access(&self, ct: &Ct, user: &str, key: &std::path::Path) -> Result<GuestAccess, String> {
        self.container_access(ct, user, key)
    }

    fn refresh(&self, vm: &mut Vm, now: f64) {
        if vm.power == Power::Stopped {
            return;
        }
        match self.running_guest(vm) {
            None => gone(vm),
            Some(g) => {
                vm.pid = Some(g.pid());
                // QEMU's own run state where it differs from what PVE's verbs made: a drive
                // error that stopped it, a `cont` that let it run on.
                match (g.last_run_state().as_deref(), vm.power) {
                    (Some("io-error"), Power::Running) => vm.power = Power::IoError,
                    (Some("running"), Power::IoError) => vm.power = Power::Running,
                    _ => {}
                }
                match (g.agent_answering(), vm.agent_ready_at) {
                    (true, None) => vm.agent_ready_at = Some(now),
                    (false, Some(_)) => vm.agent_ready_at = None,
                    _ => {}
                }
            }
        }
    }
}
