//! The execution seam: everything that *runs* a VM, apart from the PVE rules that decide
//! whether it may run.
//!
//! The qemu model decides (privileges, locks, pending changes, task plans, the errors PVE
//! gives) and then hands each effect on a guest to an [`Executor`]: QEMU starting, stopping,
//! shutting down, resetting, pausing and resuming (a reboot is a shutdown and a start, as
//! qmeventd makes it); the guest agent answering.
//! The executor records the run state it produces on the [`Vm`] (`power`, `pid`,
//! `started_at`, `agent_ready_at`), which is what every route reads.
//!
//! Two implementations: [`Simulated`] (the default: no process, figures from the site's seeded
//! random source and its boot delay, agent answers made up from the config) and
//! [`LabExecutor`] (real QEMU guests in a vm-lab namespace, one L2 per PVE bridge, QMP for
//! power, the real guest agent; see `lab`). Either is handed to
//! `FakeProxmox::builder().executor(…)` or chosen by a scenario's `backend:`; the PVE rules
//! do not change.
//!
//! Effects on volume *data* (allocating, freeing, growing, copying volumes, RAM states,
//! placed files, the cloud-init drive) go through the second seam, [`Disks`]:
//! [`SimulatedDisks`] keeps no data (the default), [`FileDisks`] keeps real files, whose
//! paths ([`Disks::path`]) a guest executor boots from. It is handed to
//! `FakeProxmox::builder().disks(…)`.
//!
//! Containers go through the same executor: the lxc model decides, then hands over the end of
//! a create (`create_ct`: the template unpacked, root's keys written), start, stop, shutdown
//! (timeout, `forceStop`), suspend, `refresh_ct` (an init that exited; pid and memory),
//! `ct_interfaces`, `destroy_ct` and `ct_access`. The defaults are the simulated behaviour
//! (a pid from the seeded source, the model's rows); [`LabExecutor`] runs vm-lab containers.
//! Container volumes are allocated through [`Disks::allocate_rootdir`] (a directory where data
//! is kept) and copied with [`Disks::copy_rootdir`].
//!
//! Faults on a real guest ([`GuestFault`]: QEMU killed or paused from outside, a NIC's link
//! down or up, a disk's writes failing) go through [`Executor::fault`], which the control API's
//! `…/qemu/{vmid}/fault` calls; the simulated executor refuses them (it runs no guest).
//!
//! Not in the seam yet: consoles (`vncproxy`, `termproxy`, `spiceproxy`), because no route
//! serves them (they answer 501).

mod ct;
mod disks;
mod files;
mod guest;
pub mod lab;
mod simulated;

use std::fmt;

use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::lxc::model::Ct;
use crate::nodes::model::Node;
use crate::qemu::model::Vm;

pub use crate::storage::volid::volume_path;
pub use ct::{CT_SHUTDOWN_DEFAULT, CtCreate, CtCreated, CtIface, CtShutdown};
pub use disks::{
    CloudInitImage, Copied, CopyFailed, CopyJob, CopyLog, Disks, Placed, SimulatedDisks,
    StorageInfo, Vol,
};
pub use files::FileDisks;
pub use guest::hostname as guest_hostname;
pub use lab::LabExecutor;
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
    /// The bridges of the VM's node as the model has them now (addresses, gateway, DHCP
    /// pool): a real backend builds its segments from them at start, so a scenario loaded
    /// later through the control API is followed.
    pub bridges: &'a [crate::nodes::model::Bridge],
}

/// A guest agent command as PVE sends it to QGA (`guest-{name}` with these arguments): the
/// executor answers what PVE's `mon_cmd` returns, so the PVE side (`agent::model`) runs the
/// same sequence of calls real PVE runs (`file-open`, `file-read`…, `file-close`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentCommand {
    /// `guest-ping`: the agent answers.
    Ping,
    /// `guest-info`: agent version and supported commands.
    Info,
    /// `guest-network-get-interfaces`: NICs with their MACs and addresses.
    NetworkGetInterfaces,
    /// `guest-get-host-name`: the guest's hostname.
    GetHostName,
    /// `guest-get-osinfo`: OS name, version and kernel.
    GetOsinfo,
    /// `guest-get-time`: guest clock in nanoseconds.
    GetTime,
    /// `guest-get-timezone`: zone name and UTC offset.
    GetTimezone,
    /// `guest-get-users`: logged-in users.
    GetUsers,
    /// `guest-get-vcpus`: each vCPU and whether it is online.
    GetVcpus,
    /// `guest-get-fsinfo`: mounted file systems.
    GetFsinfo,
    /// `guest-get-memory-blocks`: memory blocks and whether each is online.
    GetMemoryBlocks,
    /// `guest-get-memory-block-info`: the size of a memory block.
    GetMemoryBlockInfo,
    /// `guest-fsfreeze-freeze`: freeze the guest's file systems.
    FsfreezeFreeze,
    /// `guest-fsfreeze-status`: `frozen` or `thawed`.
    FsfreezeStatus,
    /// `guest-fsfreeze-thaw`: thaw the frozen file systems.
    FsfreezeThaw,
    /// `guest-fstrim`: discard unused blocks.
    Fstrim,
    /// `guest-shutdown`: power the guest off from inside.
    Shutdown,
    /// `guest-suspend-disk`: hibernate.
    SuspendDisk,
    /// `guest-suspend-ram`: suspend to RAM.
    SuspendRam,
    /// `guest-suspend-hybrid`: both.
    SuspendHybrid,
    /// `guest-exec` with `capture-output`; `input_data` is base64 as PVE encodes it.
    Exec {
        /// Program to run.
        path: String,
        /// Its arguments.
        args: Vec<String>,
        /// Standard input, base64.
        input_data: Option<String>,
    },
    /// `guest-exec-status` of a process `Exec` started.
    ExecStatus {
        /// The pid `guest-exec` returned.
        pid: i64,
    },
    /// `mode` absent is QGA's `r`.
    FileOpen {
        /// File path in the guest.
        path: String,
        /// fopen mode (`r`, `w`, `a+`...).
        mode: Option<String>,
    },
    /// `guest-file-seek` to an absolute offset.
    FileSeek {
        /// Handle `guest-file-open` returned.
        handle: i64,
        /// Byte offset from the start of the file.
        offset: i64,
    },
    /// `guest-file-read` from an open file at its position.
    FileRead {
        /// Handle `guest-file-open` returned.
        handle: i64,
        /// Most bytes to read.
        count: i64,
    },
    /// `guest-file-write` to an open file at its position.
    FileWrite {
        /// Handle `guest-file-open` returned.
        handle: i64,
        /// Data to write, base64.
        buf_b64: String,
    },
    /// `guest-file-close`: release a handle.
    FileClose {
        /// Handle `guest-file-open` returned.
        handle: i64,
    },
    /// `password` is base64 as PVE encodes it.
    SetUserPassword {
        /// Account whose password is set.
        username: String,
        /// The new password, base64.
        password: String,
        /// Whether the password is already hashed.
        crypted: bool,
    },
}

/// One agent call: the VM (config, leases, the simulated guest's state) and the node it runs
/// on (its bridges). The VM is mutable: an agent `shutdown` powers it off, a simulated guest
/// keeps its files and processes on it.
pub struct AgentCall<'a> {
    /// The VM the agent runs in.
    pub vm: &'a mut Vm,
    /// The node the VM is on, when known.
    pub node: Option<&'a Node>,
    /// What to send.
    pub command: AgentCommand,
    /// Site time (seconds) of the call.
    pub now: f64,
}

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
    /// The guest restarts inside the same QEMU process.
    fn reset(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// QEMU pauses the guest.
    fn suspend(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// QEMU continues a paused guest.
    fn resume(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String>;
    /// Whether the guest agent answers now.
    fn agent_ready(&self, vm: &Vm, now: f64) -> bool;
    /// What PVE's `mon_cmd` returns for a guest agent command, asked once the model has
    /// found the agent configured and answering: QGA's `return` value, `{"error": {"class",
    /// "desc"}}` when the agent answered an error, `null` for the commands that get no answer
    /// (`shutdown`, `suspend-*`). `Err` is `mon_cmd` dying (a timeout, the VM gone). A command
    /// that powers the guest off records it on `call.vm`.
    fn agent(&self, call: &mut AgentCall<'_>) -> Result<Value, String>;
    /// Bring `vm`'s run state up to what really runs: a guest that powered itself off, or
    /// whose QEMU died, is `stopped`. For the routes to call before they read the state; the
    /// simulated executor has nothing to observe.
    fn refresh(&self, _vm: &mut Vm, _now: f64) {}
    /// Whether `refresh` can find anything: the site skips its per-request pass over every
    /// VM when it cannot (that pass cost the simulated fake a third of its throughput at
    /// 1,000 VMs and 64 clients).
    fn observes_guests(&self) -> bool {
        false
    }
    /// The VM is destroyed: whatever ran it (a stopped guest's run directory, its taps)
    /// goes too.
    fn destroy(&self, _vm: &Vm) {}
    /// Disk `disk` of a running VM grows to `bytes`: a real guest's QEMU grows it itself
    /// (QMP `block_resize`, as PVE's `qemu_block_resize` does for a running VM), and then
    /// the volume's data must not be resized on the side: `Ok(true)`. `Ok(false)`: nothing
    /// runs it here, the `Disks` seam resizes the data.
    fn resize_running_disk(&self, _vm: &Vm, _disk: &str, _bytes: u64) -> Result<bool, String> {
        Ok(false)
    }
    /// How the host reaches a running guest: `Err` says why it cannot (the simulated
    /// executor runs none).
    fn access(&self, vm: &Vm, user: &str, key: &std::path::Path) -> Result<GuestAccess, String> {
        let _ = (user, key);
        Err(format!(
            "VM {} runs on the simulated backend: there is no guest to reach",
            vm.vmid
        ))
    }
    /// A fault on the running guest (the control API's `…/qemu/{vmid}/fault`): what the
    /// executor observes of it is recorded on `vm` (a pause), or left for `refresh` to find (a
    /// killed QEMU). `Err` says why it cannot happen (the simulated executor runs no guest).
    fn fault(&self, vm: &mut Vm, fault: &GuestFault) -> Result<(), String> {
        let _ = fault;
        Err(format!(
            "the simulated backend runs no guest: VM {} has nothing to fault \
             (the /_fake/faults rules apply to the API)",
            vm.vmid
        ))
    }

    // Containers (`lxc`): the model decides as for VMs, then hands the effect over. The
    // defaults are the simulated backend's: nothing runs, the model's rows are the truth.

    /// The end of a container's create: its template unpacked into the root file system and
    /// root's SSH keys written (`restore_archive`, `post_create_hook`). `Err` fails the
    /// `vzcreate` task (its volumes are freed again).
    fn create_ct(&self, job: &CtCreate<'_>) -> Result<CtCreated, String> {
        let _ = job;
        Ok(CtCreated::default())
    }
    /// The container starts (its config already has the pending changes applied): PVE's
    /// setup files written, its init run. Records `power`, `pid`, `started_at` on `ct`.
    fn start_ct(&self, ct: &mut Ct, host: &mut Host<'_>) -> Result<(), String> {
        ct::start_simulated(ct, host);
        Ok(())
    }
    /// The container is killed (`lxc-stop --kill`).
    fn stop_ct(&self, ct: &mut Ct) -> Result<(), String> {
        ct.core.power_lost();
        Ok(())
    }
    /// The container's init is asked to stop (`lxc-stop`), bounded as `how` says.
    fn shutdown_ct(&self, ct: &mut Ct, how: &CtShutdown) -> Result<(), String> {
        let _ = how;
        ct.core.power_lost();
        Ok(())
    }
    /// The container is checkpointed and stops (`lxc-checkpoint -s`).
    fn suspend_ct(&self, ct: &mut Ct) -> Result<(), String> {
        ct.core.power_lost();
        Ok(())
    }
    /// Bring the container's run state up to what really runs (its init exited: stopped;
    /// else its pid and memory), for the routes before they read it.
    fn refresh_ct(&self, _ct: &mut Ct, _now: f64) {}
    /// What `interfaces` answers for a running container: `None` when nothing runs it here
    /// (the model answers from the config); `Err` when looking failed.
    fn ct_interfaces(&self, _ct: &Ct) -> Option<Result<Vec<CtIface>, String>> {
        None
    }
    /// The container is destroyed: whatever ran it goes (its volumes are the `Disks` seam's).
    fn destroy_ct(&self, _ct: &Ct) {}
    /// How the host reaches a running container (the control API's `…/lxc/{vmid}/guest`).
    fn ct_access(&self, ct: &Ct, user: &str, key: &std::path::Path) -> Result<GuestAccess, String> {
        let _ = (user, key);
        Err(format!(
            "CT {} runs on the simulated backend: there is no container to reach",
            ct.vmid
        ))
    }
}

/// A fault on a real guest, as the control API takes it (`{"fault": "link_down", "net":
/// "net0"}`). None of them changes the VM's config: PVE would show the same config, only
/// the guest notices.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum GuestFault {
    /// QEMU dies (SIGKILL, as a crash or the OOM killer): `status/current` shows `stopped`.
    Kill,
    /// The vCPUs stop from outside PVE (QMP `stop`): `paused`, the agent silent, until
    /// `status/resume`.
    Pause,
    /// The cable of NIC `net` (`net0`) is pulled (QMP `set_link … off`); the config keeps no
    /// `link_down=1`.
    LinkDown {
        /// NIC key (`net0`).
        net: String,
    },
    /// The cable of NIC `net` is plugged back in.
    LinkUp {
        /// NIC key (`net0`).
        net: String,
    },
    /// Every write to disk `disk` (`scsi0`) fails with an I/O error from now until QEMU
    /// stops; reads still work and the volume keeps what was written before.
    DiskWriteError {
        /// Disk key (`scsi0`, `virtio1`).
        disk: String,
    },
}

/// A fault on a node, as the control API takes it (`{"fault": "link_down", "bridge":
/// "vmbr0"}`): see `nodes::links`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum NodeFault {
    /// The node's link on `bridge` goes down: its guests' NICs there lose carrier.
    LinkDown {
        /// Bridge name (`vmbr0`).
        bridge: String,
    },
    /// The link comes back.
    LinkUp {
        /// Bridge name (`vmbr0`).
        bridge: String,
    },
}

impl GuestFault {
    /// The NIC (`netN`) or disk key the fault names, checked for its shape.
    pub fn target(&self) -> Result<Option<&str>, String> {
        match self {
            GuestFault::Kill | GuestFault::Pause => Ok(None),
            GuestFault::LinkDown { net } | GuestFault::LinkUp { net } => {
                if crate::qemu::model::is_net_key(net) {
                    Ok(Some(net))
                } else {
                    Err(format!("'{net}' is not a NIC (net0 … net31)"))
                }
            }
            GuestFault::DiskWriteError { disk } => {
                if crate::qemu::model::is_disk_key(disk) {
                    Ok(Some(disk))
                } else {
                    Err(format!(
                        "'{disk}' is not a disk (ideN, sataN, scsiN, virtioN)"
                    ))
                }
            }
        }
    }
}

/// How the host reaches a guest (the control API's `…/qemu/{vmid}/guest`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GuestAccess {
    /// The guest's IPv4 address on `net0`, as its agent reports it.
    pub address: String,
    /// A ready `ssh` command line (program first) that runs inside the lab's namespace as
    /// `user` with `key`; append the remote command.
    pub ssh: Vec<String>,
    /// The guest's serial console log on the host.
    pub serial_log: Option<String>,
}

/// The default executor of a site read back from a state file (replaced by
/// `World::reattached`).
pub fn simulated_exec() -> std::sync::Arc<dyn Executor> {
    std::sync::Arc::new(Simulated)
}

/// The default disks of a site read back from a state file (replaced by `World::reattached`).
pub fn simulated_disks() -> std::sync::Arc<dyn Disks> {
    std::sync::Arc::new(SimulatedDisks)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::access::model::Identity;
    use crate::qemu::model::Power;
    use crate::scenario::Scenario;
    use crate::world::Site;
    use crate::world::work::Work;

    /// A second executor: records what the PVE rules asked of it, runs it as `Simulated`.
    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Recorder {
        fn note(&self, what: impl Into<String>) {
            if let Ok(mut v) = self.0.lock() {
                v.push(what.into());
            }
        }
        fn seen(&self) -> Vec<String> {
            self.0.lock().map(|v| v.clone()).unwrap_or_default()
        }
    }

    impl Executor for Recorder {
        fn start(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
            self.note("start");
            Simulated.start(vm, host)
        }
        fn start_from_state(
            &self,
            vm: &mut Vm,
            s: &str,
            host: &mut Host<'_>,
        ) -> Result<(), String> {
            self.note("start_from_state");
            Simulated.start_from_state(vm, s, host)
        }
        fn stop(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
            self.note("stop");
            Simulated.stop(vm, host)
        }
        fn shutdown(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
            self.note("shutdown");
            Simulated.shutdown(vm, host)
        }
        fn reset(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
            self.note("reset");
            Simulated.reset(vm, host)
        }
        fn suspend(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
            self.note("suspend");
            Simulated.suspend(vm, host)
        }
        fn resume(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
            self.note("resume");
            Simulated.resume(vm, host)
        }
        fn agent_ready(&self, vm: &Vm, now: f64) -> bool {
            Simulated.agent_ready(vm, now)
        }
        fn agent(&self, call: &mut AgentCall<'_>) -> Result<Value, String> {
            self.note("agent");
            Simulated.agent(call)
        }
        fn start_ct(&self, ct: &mut Ct, host: &mut Host<'_>) -> Result<(), String> {
            self.note(format!("start_ct {}", ct.config["hostname"]));
            ct::start_simulated(ct, host);
            Ok(())
        }
        fn stop_ct(&self, ct: &mut Ct) -> Result<(), String> {
            self.note("stop_ct");
            ct.core.power_lost();
            Ok(())
        }
        fn shutdown_ct(&self, ct: &mut Ct, how: &CtShutdown) -> Result<(), String> {
            self.note(format!(
                "shutdown_ct {}s force={}",
                how.timeout.as_secs(),
                how.force
            ));
            ct.core.power_lost();
            Ok(())
        }
        fn destroy_ct(&self, ct: &Ct) {
            self.note(format!("destroy_ct {}", ct.vmid));
        }
    }

    #[test]
    fn container_power_goes_through_the_nodes_executor_with_pves_shutdown_terms() {
        use crate::lxc::work::CtWork;
        let spec = &Scenario::embedded_default().sites[0];
        let node = spec.nodes[0].name.clone();
        let mut site = Site::from_spec(spec, 1, 0.0);
        let recorder = Arc::new(Recorder::default());
        site.exec = recorder.clone();
        let config = [("hostname", "ct1"), ("memory", "256")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        site.cts.insert(200, Ct::stopped(200, &node, config, None));
        // A pending change is applied before the executor sees the config.
        if let Some(ct) = site.cts.get_mut(&200) {
            ct.pending.set.insert("hostname".into(), "ct2".into());
        }
        for work in [
            CtWork::Start { vmid: 200 },
            CtWork::Shutdown {
                vmid: 200,
                timeout: Some(5),
                force: true,
            },
            CtWork::Start { vmid: 200 },
            CtWork::Reboot {
                vmid: 200,
                timeout: None,
            },
            CtWork::Stop { vmid: 200 },
            CtWork::Destroy {
                vmid: 200,
                unreferenced: false,
            },
        ] {
            let r = site.apply_ct_work(&node, &work, 1.0);
            assert!(r.is_ok(), "{work:?}: {r:?}");
        }
        assert_eq!(
            recorder.seen(),
            [
                "start_ct ct2",
                "shutdown_ct 5s force=true",
                "start_ct ct2",
                "shutdown_ct 60s force=true",
                "start_ct ct2",
                "stop_ct",
                "destroy_ct 200",
            ]
        );
        assert!(!site.cts.contains_key(&200));
    }

    #[test]
    fn every_power_effect_and_agent_answer_goes_through_the_sites_executor() {
        let spec = &Scenario::embedded_default().sites[0];
        let node = spec.nodes[0].name.clone();
        let mut site = Site::from_spec(spec, 1, 0.0);
        let recorder = Arc::new(Recorder::default());
        site.exec = recorder.clone();
        let config = [("agent", "1"), ("memory", "512")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        site.vms.insert(100, Vm::stopped(100, &node, config, None));

        site.spawn_start(&node, 100, "root@pam", 0.0);
        site.tick(10.0);
        assert_eq!(site.vms[&100].power, Power::Running);
        let root = Identity {
            userid: "root@pam".into(),
            tokenid: None,
        };
        let boot = site.boot_delay_secs;
        let ping = site.agent_call(&node, 100, &root, AgentCommand::Ping, boot + 1.0);
        assert!(ping.is_ok(), "{ping:?}");
        for work in [
            Work::Suspend { vmid: 100 },
            Work::Resume { vmid: 100 },
            Work::Reset { vmid: 100 },
            Work::Reboot { vmid: 100 },
            Work::Shutdown { vmid: 100 },
        ] {
            assert!(site.finish_power(&work, boot + 2.0).is_ok());
        }
        assert_eq!(site.vms[&100].power, Power::Stopped);
        assert_eq!(
            recorder.seen(),
            [
                "start", "agent", "suspend", "resume", "reset", "shutdown", "start", "shutdown"
            ]
        );
    }
}
