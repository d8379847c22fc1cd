//! `POST …/lxc/{vmid}/status/{start,stop,shutdown,reboot,suspend,resume}` as
//! pve-container's `src/PVE/API2/LXC/Status.pm` answers them: the running check before the
//! task, the lock and template checks inside it, and PVE's task types.
//!
//! What runs a container is the node's executor (`exec`): the simulated one draws a pid, the
//! lab backend starts a real container from the config.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::model::{Ct, NetConf, is_net_key};
use super::work::CtWork;
use crate::exec::{CT_SHUTDOWN_DEFAULT, CtShutdown, Executor, Host};
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

impl Site {
    fn ct_running(&self, vmid: u32) -> bool {
        self.cts.get(&vmid).is_some_and(|c| c.is_running())
    }

    /// `skiplock` is root's only (`raise_param_exc`).
    fn check_skiplock(req: &Request) -> Result<bool, PveError> {
        let skiplock = req.p.flag("skiplock");
        if skiplock && !(req.who.userid == "root@pam" && req.who.tokenid.is_none()) {
            return Err(PveError::param(
                "skiplock",
                "Only root may use this option.",
            ));
        }
        Ok(skiplock)
    }

    /// Why the task refuses inside its worker (`check_lock`, template), if it does.
    fn ct_task_refusal(&self, vmid: u32, skiplock: bool, start: bool) -> Option<String> {
        let ct = self.cts.get(&vmid)?;
        if start && ct.is_template() {
            return Some("you can't start a CT if it's a template".into());
        }
        match &ct.lock {
            // A start may go on over the `mounted` lock (`has_lock($conf, 'mounted')`).
            Some(l) if !(skiplock || (start && l == "mounted")) => {
                Some(format!("CT is locked ({l})"))
            }
            _ => None,
        }
    }

    /// `POST …/status/start`
    pub fn start_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.PowerMgmt"])?;
        let skiplock = Self::check_skiplock(req)?;
        if self.ct_running(vmid) {
            return Err(PveError::die(format!("CT {vmid} already running")));
        }
        let mut plan = self.ct_plan(req, "vzstart", &node, vmid, CtWork::Start { vmid });
        plan.planned_error = self.ct_task_refusal(vmid, skiplock, true);
        plan.duration = if plan.planned_error.is_some() {
            0.2
        } else {
            1.0
        };
        Ok(self.start_task(plan, req.now))
    }

    /// `POST …/status/stop`
    pub fn stop_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.PowerMgmt"])?;
        let skiplock = Self::check_skiplock(req)?;
        if !self.ct_running(vmid) {
            return Err(PveError::die(format!("CT {vmid} not running")));
        }
        let mut plan = self.ct_plan(req, "vzstop", &node, vmid, CtWork::Stop { vmid });
        plan.planned_error = self.ct_task_refusal(vmid, skiplock, false);
        plan.duration = 0.5;
        Ok(self.start_task(plan, req.now))
    }

    /// `POST …/status/shutdown`: the container's init stops it; `forceStop` is what
    /// happens after `timeout` when it does not (a simulated init always does).
    pub fn shutdown_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.PowerMgmt"])?;
        if !self.ct_running(vmid) {
            return Err(PveError::die(format!("CT {vmid} not running")));
        }
        let work = CtWork::Shutdown {
            vmid,
            timeout: req.p.int("timeout").and_then(|t| u64::try_from(t).ok()),
            force: req.p.flag("forceStop"),
        };
        let mut plan = self.ct_plan(req, "vzshutdown", &node, vmid, work);
        plan.planned_error = self.ct_task_refusal(vmid, false, false);
        plan.duration = 2.0;
        Ok(self.start_task(plan, req.now))
    }

    /// `POST …/status/reboot` (its not-running text says `VM`, as pve-container's does).
    pub fn reboot_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.PowerMgmt"])?;
        if !self.ct_running(vmid) {
            return Err(PveError::die(format!("VM {vmid} not running")));
        }
        let work = CtWork::Reboot {
            vmid,
            timeout: req.p.int("timeout").and_then(|t| u64::try_from(t).ok()),
        };
        let mut plan = self.ct_plan(req, "vzreboot", &node, vmid, work);
        plan.planned_error = self.ct_task_refusal(vmid, false, false);
        plan.duration = 3.0;
        Ok(self.start_task(plan, req.now))
    }

    /// `POST …/status/suspend`: `lxc-checkpoint -s` dumps the container and stops it.
    pub fn suspend_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.PowerMgmt"])?;
        if !self.ct_running(vmid) {
            return Err(PveError::die(format!("CT {vmid} not running")));
        }
        let mut plan = self.ct_plan(req, "vzsuspend", &node, vmid, CtWork::Suspend { vmid });
        plan.planned_error = self.ct_task_refusal(vmid, false, false);
        plan.duration = 1.0;
        Ok(self.start_task(plan, req.now))
    }

    /// `POST …/status/resume`: `lxc-checkpoint -r` restores a suspended container.
    pub fn resume_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.PowerMgmt"])?;
        if self.ct_running(vmid) {
            return Err(PveError::die(format!("CT {vmid} already running")));
        }
        let mut plan = self.ct_plan(req, "vzresume", &node, vmid, CtWork::Resume { vmid });
        plan.duration = 1.0;
        Ok(self.start_task(plan, req.now))
    }

    /// The container runs: pending changes applied first (`vmconfig_apply_pending`), its
    /// bridges checked, then the executor starts it; its NICs with `ip=dhcp` take leases
    /// from their bridges' pools.
    pub(crate) fn finish_start_ct(&mut self, vmid: u32, now: f64) -> Result<(), String> {
        let bridges_ok = self.ct_bridges_exist(vmid);
        let Some(ct) = self.cts.get_mut(&vmid) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        let pending = std::mem::take(&mut ct.pending);
        ct.config.extend(pending.set);
        for k in pending.delete.keys() {
            ct.config.remove(k);
        }
        bridges_ok?;
        self.run_ct(vmid, now, |exec, ct, host| exec.start_ct(ct, host))?;
        self.assign_ct_leases(vmid);
        Ok(())
    }

    /// Carry out an effect on container `vmid` through its node's executor (see `exec`);
    /// `Err` is the task's exit status.
    pub(crate) fn run_ct(
        &mut self,
        vmid: u32,
        now: f64,
        effect: impl FnOnce(&dyn Executor, &mut Ct, &mut Host<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let Some(node) = self.cts.get(&vmid).map(|c| c.node.clone()) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        let exec = self.exec_on(&node).clone();
        let bridges = self
            .nodes
            .get(&node)
            .map(|n| n.bridges.as_slice())
            .unwrap_or_default();
        let mut host = Host {
            rng: &mut self.rng,
            boot_delay_secs: self.boot_delay_secs,
            now,
            bridges,
        };
        let Some(ct) = self.cts.get_mut(&vmid) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        effect(exec.as_ref(), ct, &mut host)
    }

    /// The container is killed now (a stop, or a verb that needs it stopped first).
    pub(crate) fn kill_ct(&mut self, vmid: u32, now: f64) -> Result<(), String> {
        self.run_ct(vmid, now, |exec, ct, _| exec.stop_ct(ct))
    }

    /// `vzshutdown`: the container's init asked to stop, killed after the timeout when
    /// `force`, else the task fails.
    pub(crate) fn shut_down_ct(
        &mut self,
        vmid: u32,
        timeout: Option<u64>,
        force: bool,
        now: f64,
    ) -> Result<(), String> {
        let how = CtShutdown {
            timeout: timeout.map_or(CT_SHUTDOWN_DEFAULT, Duration::from_secs),
            force,
        };
        self.run_ct(vmid, now, |exec, ct, _| exec.shutdown_ct(ct, &how))
    }

    /// `PVE::LXC::update_net` at start: a NIC's bridge must exist on the node.
    fn ct_bridges_exist(&self, vmid: u32) -> Result<(), String> {
        let Some(ct) = self.cts.get(&vmid) else {
            return Ok(());
        };
        let config = ct.effective_config();
        let node = self.node(&ct.node);
        for (k, v) in config.iter().filter(|(k, _)| is_net_key(k)) {
            if let Some(b) = NetConf::parse(v).bridge()
                && node.is_some_and(|n| n.bridge(b).is_none())
            {
                let _ = k;
                return Err(format!("bridge '{b}' does not exist"));
            }
        }
        Ok(())
    }

    /// Every `ip=dhcp` NIC gets an address from its bridge's DHCP pool (kept across
    /// restarts), unique among the node's guests of every kind.
    fn assign_ct_leases(&mut self, vmid: u32) {
        let Some(ct) = self.cts.get(&vmid) else {
            return;
        };
        let Some(node) = self.nodes.get(&ct.node) else {
            return;
        };
        let mut used: std::collections::BTreeSet<Ipv4Addr> = self
            .guests_on(&ct.node)
            .flat_map(|g| g.core().leases.values().copied())
            .collect();
        let mut new = Vec::new();
        for (k, v) in ct.config.iter().filter(|(k, _)| is_net_key(k)) {
            let net = NetConf::parse(v);
            if ct.leases.contains_key(k) || net.get("ip") != Some("dhcp") {
                continue;
            }
            let Some((lo, hi)) = net
                .bridge()
                .and_then(|b| node.bridge(b))
                .and_then(|b| b.dhcp)
            else {
                continue;
            };
            if let Some(ip) = (u32::from(lo)..=u32::from(hi))
                .map(Ipv4Addr::from)
                .find(|ip| !used.contains(ip))
            {
                used.insert(ip);
                new.push((k.clone(), ip));
            }
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.leases.extend(new);
        }
    }
}
