//! `POST /nodes/{node}/status` (`reboot`, `shutdown`): pve-manager answers at once and powers
//! the node off two seconds later; on the way down pve-guests' `stopall` shuts its running
//! VMs down, on the way up `startall` starts those marked `onboot` (in `startup` order). While
//! it is down the node answers `595 No route to host`, as any offline node does.

use crate::qemu::model::Power;
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// Seconds a rebooting node is gone: its firmware, kernel and services (chosen).
pub const BOOT_SECS: f64 = 90.0;
/// What pve-guests runs as.
const GUESTS_USER: &str = "root@pam";

/// `startup: order=N,...`: the VM's start order (PVE starts unordered ones last).
fn start_order(startup: Option<&String>) -> u64 {
    startup
        .and_then(|s| crate::qemu::model::find_prop(s, "order", "order"))
        .and_then(|o| o.parse().ok())
        .unwrap_or(u64::MAX)
}

impl Site {
    /// The node goes down: `stopall` shuts its running VMs down (highest VMID first).
    pub fn power_off_node(&mut self, req: &Request, reboot: bool) -> Result<(), PveError> {
        let node = req.node()?;
        let mut running: Vec<u32> = self
            .vms_on(&node)
            .filter(|v| v.power != Power::Stopped)
            .map(|v| v.vmid)
            .collect();
        running.sort_unstable_by(|a, b| b.cmp(a));
        let mut plan = TaskPlan::new("stopall", "", &node, GUESTS_USER, Work::NodeDown { reboot });
        // The API's `sleep 2` before the power-off, then a shutdown per VM.
        let mut at = 2.0;
        for vmid in &running {
            plan.line(at, format!("Stopping VM {vmid} (timeout = 180 seconds)"));
            at += 1.0;
        }
        plan.duration = at;
        self.start_task(plan, req.now);
        Ok(())
    }

    /// `stopall` done: the VMs are down and so is the node.
    pub(crate) fn finish_node_down(&mut self, node: &str, reboot: bool, now: f64) -> Vec<String> {
        let running: Vec<u32> = self
            .vms_on(node)
            .filter(|v| v.power != Power::Stopped)
            .map(|v| v.vmid)
            .collect();
        for vmid in running {
            if let Err(e) = self.run_vm(vmid, now, |exec, vm, host| exec.shutdown(vm, host)) {
                tracing::warn!("node {node} going down: VM {vmid}: {e}");
            }
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.online = false;
            n.powered_off = true;
            n.boot_at = reboot.then_some(now + BOOT_SECS);
            if let Some(at) = n.boot_at {
                self.boots_not_before = self.boots_not_before.min(at);
            }
        }
        Vec::new()
    }

    /// Nodes whose boot time has come are up again, and start their `onboot` VMs.
    pub(crate) fn boot_due_nodes(&mut self, now: f64) {
        if now < self.boots_not_before {
            return;
        }
        let due: Vec<(String, f64)> = self
            .nodes
            .values()
            .filter_map(|n| Some((n.name.clone(), n.boot_at.filter(|t| *t <= now)?)))
            .collect();
        for (node, at) in due {
            self.boot_node(&node, at);
        }
        self.boots_not_before = self
            .nodes
            .values()
            .filter_map(|n| n.boot_at)
            .fold(f64::INFINITY, f64::min);
    }

    /// A powered-off node is up at `at` (its reboot, or the control plane switching it on).
    pub fn boot_node(&mut self, node: &str, at: f64) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        n.online = true;
        n.powered_off = false;
        n.boot_at = None;
        n.booted_at = at;
        let mut onboot: Vec<(u64, u32)> = self
            .vms_on(node)
            .filter(|v| v.config.get("onboot").is_some_and(|o| o == "1"))
            .map(|v| (start_order(v.config.get("startup")), v.vmid))
            .collect();
        onboot.sort_unstable();
        let mut plan = TaskPlan::new("startall", "", node, GUESTS_USER, Work::NodeUp);
        let mut t = 0.0;
        for (_, vmid) in &onboot {
            plan.line(t, format!("Starting VM {vmid}"));
            t += 1.0;
        }
        plan.duration = t.max(0.5);
        self.start_task(plan, at);
    }

    /// `startall` done: the `onboot` VMs run.
    pub(crate) fn finish_node_up(&mut self, node: &str, now: f64) -> Vec<String> {
        let onboot: Vec<u32> = self
            .vms_on(node)
            .filter(|v| {
                v.power == Power::Stopped && v.config.get("onboot").is_some_and(|o| o == "1")
            })
            .map(|v| v.vmid)
            .collect();
        let mut lines = Vec::new();
        for vmid in onboot {
            if let Err(e) = self.finish_start(node, vmid, now) {
                lines.push(format!("Starting VM {vmid} failed: {e}"));
            }
        }
        lines
    }
}
