//! Steps for interrupted runs and the fake's clock.

use anyhow::ensure;
use cucumber::{given, then, when};

use crate::rollout::RolloutWorld;
use crate::rollout::params::{NodeName, Request};

#[given("the fake's clock stands still until a step lets it run")]
async fn clock_stopped(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.stop_clock()
}

#[when("the fake's clock runs again")]
async fn clock_runs(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.run_clock().await
}

#[when(expr = "the background run has sent {request}")]
async fn background_sent(w: &mut RolloutWorld, req: Request) -> anyhow::Result<()> {
    let Request { method, path } = req;
    w.wait_background_sent(super::wait(), &method, &path).await
}

#[then(expr = "the killed run's create on {node} is still running")]
async fn create_still_running(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    w.ensure_create_running(&node).await.map(|_| ())
}

#[then(expr = "the fake holds exactly {int} VM(s) on {node}")]
async fn vm_count(w: &mut RolloutWorld, n: usize, node: NodeName) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    let vms = w.vms_on(&node).await?;
    ensure!(
        vms.len() == n,
        "expected {n} VM(s) on {node}, found {vms:?}"
    );
    Ok(())
}
