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
