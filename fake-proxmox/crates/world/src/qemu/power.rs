//! Power verbs: start (with the start-time admission checks), stop, shutdown, reboot,
//! reset, suspend, resume. All but reboot's "not running" check fail inside the task.

use std::net::Ipv4Addr;

use crate::qemu::model::{Nic, Power};
use crate::qemu::op::{VmOp, lock_refusal};
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// What `start` would do now: the task error and its log lines, or fine.
pub struct StartCheck {
    /// Task log lines QEMU would print before failing (a missing bridge).
    pub lines: Vec<String>,
    /// The task's exit status if the start would fail; `None`: it would start.
    pub error: Option<String>,
}

/// The planned part of a power task on a node with real guests (see `power_duration`).
const REAL_POWER_TASK_SECS: f64 = 0.05;

impl Site {
    /// The checks `vm_start` makes before `vm_start_nolock` applies pending changes.
    fn start_precheck(&self, node: &str, vmid: u32) -> Result<&crate::qemu::model::Vm, String> {
        let Some(vm) = self.vms.get(&vmid).filter(|v| v.node == node) else {
            return Err(format!(
                "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            ));
        };
        if let Some(l) = &vm.lock {
            return Err(format!("VM is locked ({l})"));
        }
        if vm.power != Power::Stopped {
            return Err(format!("VM {vmid} already running"));
        }
        if vm.is_template() {
            return Err("you can't start a vm if it's a template".into());
        }
        Ok(vm)
    }

    /// Whether a start of `vmid` on `node` would succeed now (config locked, already
    /// running, template, too many vCPUs, missing bridge), with pending changes applied.
    pub fn check_start(&self, node: &str, vmid: u32) -> StartCheck {
        let fail = |e: String| StartCheck {
            lines: Vec::new(),
            error: Some(e),
        };
        // QEMU sees the config with pending changes applied.
        let vm = match self.start_precheck(node, vmid) {
            Ok(vm) => &vm.with_pending_applied(),
            Err(e) => return fail(e),
        };
        let Some(n) = self.nodes.get(node) else {
            return fail(format!("node '{node}' does not exist"));
        };
        if vm.cpus() > n.threads {
            return fail(format!(
                "MAX {} vcpus allowed per VM on this node",
                n.threads
            ));
        }
        for (k, v) in vm
            .config
            .iter()
            .filter(|(k, _)| crate::qemu::model::is_net_key(k))
        {
            let nic = Nic::parse(v);
            if let Some(b) = nic.bridge()
                && n.bridge(b).is_none()
            {
                let idx = &k[3..];
                return StartCheck {
                    lines: vec![
                        format!("bridge '{b}' does not exist"),
                        format!(
                            "kvm: -netdev type=tap,id={k},ifname=tap{vmid}i{idx},script=/var/lib/qemu-server/pve-bridge,downscript=/var/lib/qemu-server/pve-bridgedown,vhost=on: network script /var/lib/qemu-server/pve-bridge failed with status 512"
                        ),
                    ],
                    error: Some("start failed: QEMU exited with code 1".into()),
                };
            }
        }
        let mem = vm.memory_bytes();
        if mem > n.memory {
            return StartCheck {
                lines: vec![
                    "kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory".into(),
                ],
                error: Some("start failed: QEMU exited with code 1".into()),
            };
        }
        StartCheck {
            lines: Vec::new(),
            error: None,
        }
    }

    /// Power verbs check the privilege before they look at the VM.
    fn power_op<'r>(&self, req: &'r Request) -> Result<VmOp<'r>, PveError> {
        let op = VmOp::of(req)?;
        op.require(self, &["VM.PowerMgmt"])?;
        Ok(op)
    }

    /// Start a power task that takes `dur` seconds, or fails at once with `err`.
    fn power_task(
        &mut self,
        mut plan: TaskPlan,
        dur: f64,
        err: Option<String>,
        now: f64,
    ) -> String {
        plan.duration = if err.is_some() {
            0.1
        } else {
            self.power_duration(&plan.node, dur)
        };
        plan.planned_error = err;
        self.start_task(plan, now)
    }

    /// How long a power task on `node` runs before its effect: `simulated` on a simulated
    /// node; on a node whose executor runs real guests, only a moment, because the effect
    /// itself (QEMU starting, the guest powering off) then takes its real time inside the task.
    fn power_duration(&self, node: &str, simulated: f64) -> f64 {
        if self.exec_on(node).observes_guests() {
            REAL_POWER_TASK_SECS
        } else {
            simulated
        }
    }

    /// `POST …/status/start`
    pub fn start_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let op = self.power_op(req)?;
        Ok(self.spawn_start(&op.node, op.vmid, &req.task_user(), req.now))
    }

    /// Start a `qmstart` task for `vmid` as `user`; returns its UPID. A start that
    /// `check_start` refuses still runs as a task that fails with that status.
    pub fn spawn_start(&mut self, node: &str, vmid: u32, user: &str, now: f64) -> String {
        let check = self.check_start(node, vmid);
        let mut plan = TaskPlan::new(
            "qmstart",
            vmid.to_string(),
            node,
            user,
            Work::Start { vmid },
        );
        for l in check.lines {
            plan.line(0.05, l);
        }
        plan.duration = if check.error.is_some() {
            0.2
        } else {
            self.power_duration(node, 1.0)
        };
        plan.planned_error = check.error;
        self.start_task(plan, now)
    }

    /// Complete a start: pending changes are applied (even if QEMU then fails, as in
    /// `vm_start_nolock`), the VM runs, the agent answers after the boot delay.
    pub fn finish_start(&mut self, node: &str, vmid: u32, now: f64) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        if self.start_precheck(node, vmid).is_ok() {
            self.apply_pending(vmid);
            // The cloud-init image is regenerated before QEMU starts.
            if let Some(vm) = self.vms.get_mut(&vmid) {
                vm.cloudinit.clear();
            }
            lines = self.write_cloudinit_drives(node, vmid)?;
        }
        let simulated = !self.exec_on(node).observes_guests();
        let seed = if simulated {
            self.cloudinit_seed(node, vmid)?
        } else {
            None
        };
        if let Some(e) = self.check_start(node, vmid).error {
            return Err(e);
        }
        self.run_vm(vmid, now, |exec, vm, host| exec.start(vm, host))?;
        self.assign_leases(vmid);
        if simulated {
            self.boot_simulated_guest(node, vmid, seed.as_ref(), now);
        }
        Ok(lines)
    }

    /// Give every NIC of the VM an address from its bridge's DHCP pool (kept across restarts).
    fn assign_leases(&mut self, vmid: u32) {
        let Some(vm) = self.vms.get(&vmid) else {
            return;
        };
        let Some(node) = self.nodes.get(&vm.node) else {
            return;
        };
        let mut new = Vec::new();
        for (k, v) in vm
            .config
            .iter()
            .filter(|(k, _)| crate::qemu::model::is_net_key(k))
        {
            if vm.leases.contains_key(k) {
                continue;
            }
            let nic = Nic::parse(v);
            let Some((lo, hi)) = nic
                .bridge()
                .and_then(|b| node.bridge(b))
                .and_then(|b| b.dhcp)
            else {
                continue;
            };
            let used: std::collections::BTreeSet<Ipv4Addr> = self
                .guests_on(&vm.node)
                .flat_map(|o| o.core().leases.values().copied())
                .chain(new.iter().map(|(_, ip)| *ip))
                .collect();
            if let Some(ip) = (u32::from(lo)..=u32::from(hi))
                .map(Ipv4Addr::from)
                .find(|ip| !used.contains(ip))
            {
                new.push((k.clone(), ip));
            }
        }
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.leases.extend(new);
        }
    }

    /// `POST …/status/stop`
    pub fn stop_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let op = self.power_op(req)?;
        let err = self.lock_error(&op);
        let plan = op.plan("qmstop", Work::Stop { vmid: op.vmid });
        Ok(self.power_task(plan, 0.5, err, req.now))
    }

    /// `POST …/status/shutdown`
    pub fn shutdown_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let op = self.power_op(req)?;
        let vm = self.vm_on(&op.node, op.vmid)?;
        if vm.power == Power::Paused {
            return Err(PveError::die("VM is paused - cannot shutdown"));
        }
        let dur = if vm.is_agent_enabled() && self.exec_on(&vm.node).agent_ready(vm, req.now) {
            3.0
        } else {
            5.0
        };
        let err = self.lock_error(&op);
        let plan = op.plan("qmshutdown", Work::Shutdown { vmid: op.vmid });
        Ok(self.power_task(plan, dur, err, req.now))
    }

    /// `POST …/status/reboot`
    pub fn reboot_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let op = self.power_op(req)?;
        if self.vm_on(&op.node, op.vmid)?.power == Power::Stopped {
            return Err(PveError::die(format!("VM {} not running", op.vmid)));
        }
        let err = self.lock_error(&op);
        let plan = op.plan("qmreboot", Work::Reboot { vmid: op.vmid });
        Ok(self.power_task(plan, 4.0, err, req.now))
    }

    /// `POST …/status/{reset,suspend,resume}` (`qmreset`, `qmsuspend`, `qmresume`).
    pub fn simple_power(&mut self, ttype: &'static str, req: &Request) -> Result<String, PveError> {
        let op = self.power_op(req)?;
        let vmid = op.vmid;
        let stopped = self.vm_on(&op.node, vmid)?.power == Power::Stopped;
        let mut err = self.lock_error(&op);
        let work = match ttype {
            "qmreset" => Work::Reset { vmid },
            "qmsuspend" => Work::Suspend { vmid },
            _ => Work::Resume { vmid },
        };
        if err.is_none() && stopped {
            err = Some(format!("VM {vmid} not running"));
        }
        Ok(self.power_task(op.plan(ttype, work), 0.5, err, req.now))
    }

    /// The lock check the power tasks make as they start: their exit status, if any.
    fn lock_error(&self, op: &VmOp) -> Option<String> {
        let (node, vmid) = (&op.node, op.vmid);
        match self.vms.get(&vmid).filter(|v| v.node == *node) {
            None => Some(format!(
                "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            )),
            Some(vm) => lock_refusal(vm, op.skiplock()),
        }
    }

    /// Apply a finished power task.
    pub fn finish_power(&mut self, work: &Work, now: f64) -> Result<Vec<String>, String> {
        use Work::*;
        let vmid = match work {
            Stop { vmid }
            | Shutdown { vmid }
            | Reboot { vmid }
            | Reset { vmid }
            | Suspend { vmid }
            | Resume { vmid } => *vmid,
            _ => return Ok(Vec::new()),
        };
        let Some(vm) = self.vms.get(&vmid) else {
            return Err(format!("VM {vmid} does not exist"));
        };
        // Checked again inside the task: all but stop and shutdown need QEMU running.
        if vm.power == Power::Stopped && !matches!(work, Stop { .. } | Shutdown { .. }) {
            return Err(format!("VM {vmid} not running"));
        }
        if let Reboot { .. } = work {
            return self.finish_reboot(vmid, now);
        }
        self.run_vm(vmid, now, |exec, vm, host| match work {
            Stop { .. } => exec.stop(vm, host),
            Shutdown { .. } => exec.shutdown(vm, host),
            Reset { .. } => exec.reset(vm, host),
            Suspend { .. } => exec.suspend(vm, host),
            _ => exec.resume(vm, host),
        })?;
        // `vm_stop_cleanup` applies pending changes once QEMU is gone. A reset restarts the
        // guest inside the same QEMU process: pending stays pending.
        if matches!(work, Stop { .. } | Shutdown { .. }) {
            self.apply_pending(vmid);
        }
        if let Reset { .. } = work
            && let Some(node) = self.vms.get(&vmid).map(|v| v.node.clone())
            && !self.exec_on(&node).observes_guests()
        {
            self.boot_simulated_guest(&node, vmid, None, now);
        }
        Ok(Vec::new())
    }

    /// `qm reboot` is a shutdown that qmeventd follows with a start: a new QEMU process, from
    /// the config with pending changes applied and a regenerated cloud-init drive, exactly as
    /// any start (so a start that cannot happen leaves the VM stopped and fails the task).
    fn finish_reboot(&mut self, vmid: u32, now: f64) -> Result<Vec<String>, String> {
        self.run_vm(vmid, now, |exec, vm, host| exec.shutdown(vm, host))?;
        let node = match self.vms.get(&vmid) {
            Some(vm) => vm.node.clone(),
            None => return Err(format!("VM {vmid} does not exist")),
        };
        self.finish_start(&node, vmid, now)
    }
}
