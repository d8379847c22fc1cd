//! Steps for interrupted runs and the fake's clock.

use anyhow::ensure;
use cucumber::{given, then, when};

use crate::rollout::RolloutWorld;

#[given("the fake's clock stands still until a step lets it run")]
async fn clock_stopped(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.stop_clock()
}

#[when("the fake's clock runs again")]
async fn clock_runs(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.run_clock().await
}

#[when(regex = r#"^the background run has sent "([A-Z]+)" "([^"]+)"$"#)]
async fn background_sent(w: &mut RolloutWorld, method: String, path: String) -> anyhow::Result<()> {
    w.wait_background_sent(super::WAIT, &method, &path).await
}

#[then(regex = r#"^the killed run's create on "([^"]+)" is still running$"#)]
async fn create_still_running(w: &mut RolloutWorld, node: String) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    w.ensure_create_running(&node).await.map(|_| ())
}

#[then(regex = r#"^the fake holds exactly (\d+) VMs? on "([^"]+)"$"#)]
async fn vm_count(w: &mut RolloutWorld, n: usize, node: String) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    let vms = w.vms_on(&node).await?;
    ensure!(
        vms.len() == n,
        "expected {n} VM(s) on {node}, found {vms:?}"
    );
    Ok(())
}
