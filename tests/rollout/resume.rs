//! World verbs for interrupted runs: a clock that stands still so a killed run's task is
//! provably still running when the next run starts, whatever the build's speed.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use fake_proxmox::ClockMode;

use super::world::{CLOCK_FACTOR, RolloutWorld};

impl RolloutWorld {
    /// The fake starts with a stepped clock: tasks make no progress until [`Self::run_clock`].
    pub fn stop_clock(&mut self) -> anyhow::Result<()> {
        // Changing the scenario is only possible before the fake starts; the clock likewise.
        self.scenario_mut()?;
        self.clock = ClockMode::Stepped;
        Ok(())
    }

    /// Every site's clock stops where it is: running tasks stay running until [`Self::run_clock`].
    pub async fn hold_clock(&mut self) -> anyhow::Result<()> {
        self.set_clock_everywhere(ClockMode::Stepped).await
    }

    /// Every site's clock runs fast again (the default of the features).
    pub async fn run_clock(&mut self) -> anyhow::Result<()> {
        self.set_clock_everywhere(ClockMode::Scaled(CLOCK_FACTOR))
            .await
    }

    async fn set_clock_everywhere(&mut self, mode: ClockMode) -> anyhow::Result<()> {
        let fake = self.fake().await?;
        for site in fake.sites() {
            site.control()
                .set_clock(mode)
                .await
                .map_err(|e| anyhow!("setting the clock of {} to {mode:?}: {e}", site.name()))?;
        }
        self.clock = mode;
        Ok(())
    }

    /// Waits until the run going in the background has sent `method path` itself (requests of
    /// earlier runs do not count).
    pub async fn wait_background_sent(
        &mut self,
        within: Duration,
        method: &str,
        path: &str,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let first = match &self.background {
                Some((first, h)) if !h.is_finished() => *first,
                Some(_) => bail!("the background run finished before it sent {method} {path}"),
                None => bail!("no background run was started"),
            };
            let own = self.journal().await?.within(&[(first, u64::MAX)]);
            if own.count(method, path) > 0 {
                return Ok(());
            }
            if started.elapsed() > within {
                bail!(
                    "waited {within:?} for the background run to send {method} {path}; it sent:\n{}",
                    own.render_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `(vmid, name, lock)` of every VM the fake holds on `node`, read through the PVE API.
    pub async fn vms_on(
        &mut self,
        node: &str,
    ) -> anyhow::Result<Vec<(u32, String, Option<String>)>> {
        let obs = self.observer(node).await?;
        let mut out = Vec::new();
        for vm in obs.vms().await?.into_iter().filter(|v| v.node == node) {
            let cfg = obs.guest_config(node, &vm.kind, vm.vmid).await?;
            let lock = cfg["lock"].as_str().map(str::to_string);
            out.push((vm.vmid, vm.name, lock));
        }
        Ok(out)
    }

    /// Exactly one VM on `node` is locked by a create that is still running.
    pub async fn ensure_create_running(&mut self, node: &str) -> anyhow::Result<u32> {
        let vms = self.vms_on(node).await?;
        let creating: Vec<_> = vms
            .iter()
            .filter(|(_, _, lock)| lock.as_deref() == Some("create"))
            .collect();
        ensure!(
            creating.len() == 1,
            "expected one VM on {node} locked by a running create, found {vms:?}"
        );
        Ok(creating[0].0)
    }
}
