//! Faults and power through QMP: partition (link down/up), freeze (pause/resume), reset.

use qapi::qmp;

use super::Node;
use crate::error::Result;
use crate::qemu_args::LAN_NIC_ID;
use crate::qmp as qmp_conn;

impl Node {
    async fn qmp<C>(&self, cmd: C) -> Result<C::Ok>
    where
        C: qmp::QmpCommand + 'static,
    {
        self.ensure_running().await?;
        qmp_conn::execute(&self.paths.qmp_ctl, cmd, self.ctx.timeouts.qmp)
            .await
            .map_err(|e| self.control_error("qmp", e))
    }

    /// Wait until QEMU's control monitor answers (it opens a moment after the process starts).
    pub async fn wait_for_monitor(&self, timeout: std::time::Duration) -> Result<()> {
        self.retry("the QMP monitor", timeout, |left| async move {
            self.ensure_running().await?;
            match qmp_conn::execute(&self.paths.qmp_ctl, qmp::query_status {}, left).await {
                Ok(_) => Ok(super::Probe::Done(())),
                Err(e) => Ok(super::Probe::NotYet(e)),
            }
        })
        .await
    }

    /// QEMU's run state (`running`, `paused`, …).
    pub async fn run_state(&self) -> Result<String> {
        let st = self.qmp(qmp::query_status {}).await?;
        Ok(serde_json::to_value(st.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "unknown".into()))
    }

    /// Unplug the lab NIC's cable (a network partition of this node).
    pub async fn link_down(&self) -> Result<()> {
        self.qmp(qmp::set_link {
            name: LAN_NIC_ID.into(),
            up: false,
        })
        .await
        .map(|_| ())
    }

    /// Plug the lab NIC's cable back in.
    pub async fn link_up(&self) -> Result<()> {
        self.qmp(qmp::set_link {
            name: LAN_NIC_ID.into(),
            up: true,
        })
        .await
        .map(|_| ())
    }

    /// Freeze the vCPUs.
    pub async fn pause(&self) -> Result<()> {
        self.qmp(qmp::stop {}).await.map(|_| ())
    }

    /// Let paused vCPUs run again (QMP `cont`).
    pub async fn resume(&self) -> Result<()> {
        self.qmp(qmp::cont {}).await.map(|_| ())
    }

    /// Hard reset: the VM powers on again from the same netboot image with the same disk and
    /// MACs; does not wait for the boot. QEMU runs with `-no-reboot` (so a guest panic ends it
    /// and the driver fails fast instead of watching a boot loop), which makes a QMP
    /// `system_reset` end the process too; a reset is therefore a kill plus a fresh start.
    pub async fn reset(&self) -> Result<()> {
        self.kill().await?;
        self.start().await
    }

    /// [`Node::reset`], then wait until ready.
    pub async fn restart(&self) -> Result<()> {
        self.reset().await?;
        self.wait_ready().await
    }
}

/// Bound on saving or loading one node's memory and device state (TCG, a loaded host).
pub const VMSTATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

impl Node {
    /// An HMP command through QMP; HMP reports errors as text, so any output is returned.
    async fn hmp(&self, line: &str, timeout: std::time::Duration) -> Result<String> {
        self.ensure_running().await?;
        qmp_conn::execute(
            &self.paths.qmp_ctl,
            qmp::human_monitor_command {
                command_line: line.into(),
                cpu_index: None,
            },
            timeout,
        )
        .await
        .map_err(|e| self.control_error("qmp", e))
    }

    /// Save memory, devices and every disk (internal qcow2 snapshots) under `name`. The VM's
    /// run state is kept (a paused VM stays paused).
    pub async fn save_vm(&self, name: &str) -> Result<()> {
        let out = self.hmp(&format!("savevm {name}"), VMSTATE_TIMEOUT).await?;
        self.hmp_ok("savevm", out)
    }

    /// Load the state saved under `name` (memory, devices, disks); the run state is kept.
    pub async fn load_vm(&self, name: &str) -> Result<()> {
        let out = self.hmp(&format!("loadvm {name}"), VMSTATE_TIMEOUT).await?;
        self.hmp_ok("loadvm", out)
    }

    /// Forget the state saved under `name`.
    pub async fn delete_vm_state(&self, name: &str) -> Result<()> {
        let out = self.hmp(&format!("delvm {name}"), VMSTATE_TIMEOUT).await?;
        self.hmp_ok("delvm", out)
    }

    fn hmp_ok(&self, what: &'static str, out: String) -> Result<()> {
        // Success prints nothing; errors and warnings come back as text.
        if out.trim().is_empty() {
            Ok(())
        } else {
            Err(self.control_error(what, out.trim().to_string()))
        }
    }
}
