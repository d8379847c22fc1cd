//! VMs: manifests, deployer runs, and what the deployer reports about each VM.

use anyhow::{Context, anyhow, bail, ensure};
use cucumber::gherkin::Step;
use cucumber::{given, then, when};

use super::rows;
use crate::rollout::adapter::Action;
use crate::rollout::manifest::VmManifest;
use crate::rollout::params::{NodeName, Request, SiteName, VmName};
use crate::rollout::world::{Peer, RolloutWorld};

#[given(expr = "a Proxmox test cluster with the seed's two sites")]
fn cluster(w: &mut RolloutWorld) {
    w.use_seed_sites();
}

#[given(expr = "a VM manifest {vm} on node {node} at {site}")]
fn manifest(w: &mut RolloutWorld, name: VmName, node: NodeName, site: SiteName) {
    w.manifests
        .insert(name.to_string(), VmManifest::standard(&name, &node, &site));
}

#[given(expr = "a VM manifest {vm} on node {node} at {site} with:")]
fn manifest_with(
    w: &mut RolloutWorld,
    step: &Step,
    name: VmName,
    node: NodeName,
    site: SiteName,
) -> anyhow::Result<()> {
    let mut m = VmManifest::standard(&name, &node, &site);
    for row in rows(step) {
        let [k, v] = row.as_slice() else {
            bail!("each row needs | field | value |, got {row:?}");
        };
        m.set(k, v).map_err(|e| anyhow!(e))?;
    }
    w.manifests.insert(name.into(), m);
    Ok(())
}

#[given(expr = "a container manifest {vm} on node {node} at {site}")]
fn ct_manifest(w: &mut RolloutWorld, name: VmName, node: NodeName, site: SiteName) {
    w.manifests
        .insert(name.to_string(), VmManifest::container(&name, &node, &site));
}

#[given(expr = "a container manifest {vm} on node {node} at {site} with:")]
fn ct_manifest_with(
    w: &mut RolloutWorld,
    step: &Step,
    name: VmName,
    node: NodeName,
    site: SiteName,
) -> anyhow::Result<()> {
    let mut m = VmManifest::container(&name, &node, &site);
    for row in rows(step) {
        let [k, v] = row.as_slice() else {
            bail!("each row needs | field | value |, got {row:?}");
        };
        m.set(k, v).map_err(|e| anyhow!(e))?;
    }
    w.manifests.insert(name.into(), m);
    Ok(())
}

#[given(
    expr = "a second deployer with its own state and a VM manifest {vm} on node {node} at {site}"
)]
fn second_deployer(
    w: &mut RolloutWorld,
    name: VmName,
    node: NodeName,
    site: SiteName,
) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("rollout-peer-").tempdir()?;
    let mut manifests = std::collections::BTreeMap::new();
    manifests.insert(name.to_string(), VmManifest::standard(&name, &node, &site));
    w.peer = Some(Peer {
        manifests,
        dir,
        last: None,
    });
    Ok(())
}

#[given(expr = "the deployer runs with a concurrency of {int}")]
fn concurrency(w: &mut RolloutWorld, n: usize) {
    w.concurrency = n;
}

#[when("the deployer runs")]
async fn runs(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.run(Action::Deploy).await?;
    Ok(())
}

#[when("the deployer runs again")]
async fn runs_again(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.run(Action::Deploy).await?;
    Ok(())
}

#[given("the deployer has run once and every VM is ready")]
async fn ran_once(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let status = w.run(Action::Deploy).await?.clone();
    let dir = w.manifests_dir();
    for name in w.manifests.keys().cloned().collect::<Vec<_>>() {
        let vm = status.vm(&name).map_err(|e| anyhow!(e))?;
        w.verify_ready(vm, &dir)
            .await
            .with_context(|| format!("first run: {}", vm.describe()))?;
    }
    w.vmids_before = status
        .vms
        .iter()
        .map(|v| (v.name.clone(), v.vmid))
        .collect();
    Ok(())
}

#[when("the deployer starts in the background")]
async fn background(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.start_background().await
}

#[when("the background run finishes")]
async fn background_done(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.finish_background(super::wait()).await?;
    Ok(())
}

#[when(expr = "the deployer is killed right after it sends {request}")]
async fn killed_after(w: &mut RolloutWorld, req: Request) -> anyhow::Result<()> {
    let Request { method, path } = req;
    w.start_background().await?;
    let what = format!("a {method} {path}");
    w.wait_journal(super::wait(), &what, |j| j.count(&method, &path) > 0)
        .await?;
    w.kill_background().await
}

#[when("both deployers run at the same time")]
async fn both_run(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let first = w.journal_mark().await? + 1;
    let a = w.request(Action::Deploy).await?;
    let b = w.peer_request().await?;
    let (ra, rb) = tokio::join!(w.deployer.run(a), w.deployer.run(b));
    let last = w.journal_mark().await?;
    let ra = ra.context("first deployer")?;
    let rb = rb.context("second deployer")?;
    if let Some(p) = w.peer.as_mut() {
        p.last = Some(rb);
    }
    w.runs.push(crate::rollout::world::Run {
        first_seq: first,
        last_seq: last,
        status: ra,
    });
    Ok(())
}

#[when("the deployer checks the status")]
async fn status(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.run(Action::Status).await?;
    Ok(())
}

#[when("the deployer destroys the rollout")]
async fn destroy(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let before = w.last_status()?.clone();
    w.destroyed = before
        .vms
        .iter()
        .filter_map(|v| v.vmid.map(|id| (v.node.clone(), id)))
        .collect();
    w.run(Action::Destroy).await?;
    Ok(())
}

/// What the fake refused, to put next to a failed expectation (empty against a real PVE).
async fn refusals(w: &mut RolloutWorld) -> String {
    if w.is_real() {
        return String::new();
    }
    match w.deployer_journal().await {
        Ok(j) => {
            let failed: Vec<String> = j
                .api()
                .filter(|e| e.failed())
                .map(|e| format!("  {}", e.render()))
                .collect();
            if failed.is_empty() {
                String::new()
            } else {
                let skip = failed.len().saturating_sub(8);
                format!(
                    "\nthe fake refused {} request(s); the last ones:\n{}",
                    failed.len(),
                    failed[skip..].join("\n")
                )
            }
        }
        Err(e) => format!("\n(journal unavailable: {e})"),
    }
}

#[then(expr = "VM {vm} is ready with a VMID")]
async fn ready(w: &mut RolloutWorld, name: VmName) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let dir = w.manifests_dir();
    if let Err(e) = w.verify_ready(&vm, &dir).await {
        bail!("{e:#}{}", refusals(w).await);
    }
    Ok(())
}

#[then(expr = "VM {vm} of the second deployer is ready with a VMID")]
async fn peer_ready(w: &mut RolloutWorld, name: VmName) -> anyhow::Result<()> {
    let peer = w
        .peer
        .as_ref()
        .ok_or_else(|| anyhow!("no second deployer"))?;
    let st = peer
        .last
        .as_ref()
        .ok_or_else(|| anyhow!("the second deployer has not run"))?;
    let vm = st.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let dir = peer.dir.path().join("manifests");
    w.verify_ready(&vm, &dir).await
}

#[then("the two VMs have distinct VMIDs")]
fn distinct(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let a = w
        .last_status()?
        .vms
        .iter()
        .filter_map(|v| v.vmid)
        .collect::<Vec<_>>();
    let b = w
        .peer
        .as_ref()
        .and_then(|p| p.last.as_ref())
        .map(|s| s.vms.iter().filter_map(|v| v.vmid).collect::<Vec<_>>())
        .unwrap_or_default();
    ensure!(
        a.len() == 1 && b.len() == 1,
        "expected one VMID each, got {a:?} and {b:?}"
    );
    ensure!(a[0] != b[0], "both deployers report VMID {}", a[0]);
    Ok(())
}

/// "running" with an IP: the claim, and the VM in the cluster (state, config, agent's address).
#[then(expr = "VM {vm} is {string} with an IP address from the guest agent")]
async fn running_with_ip(w: &mut RolloutWorld, name: VmName, state: String) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let dir = w.manifests_dir();
    w.verify_state(&vm, &dir, &state).await?;
    w.verify_ready(&vm, &dir).await
}

#[then(expr = "VM {vm} is in state {string}")]
async fn in_state(w: &mut RolloutWorld, name: VmName, state: String) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let dir = w.manifests_dir();
    w.verify_state(&vm, &dir, &state).await
}

/// The failure the deployer reports, and nothing it created for the VM left behind.
#[then(expr = "VM {vm} failed with reason {string}")]
async fn failed(w: &mut RolloutWorld, name: VmName, reason: String) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let got = vm.error.as_ref().map(|e| e.reason.as_str());
    ensure!(
        vm.outcome == "failed" && got == Some(reason.as_str()),
        "expected failure {reason}: {}",
        vm.describe()
    );
    let dir = w.manifests_dir();
    w.verify_nothing_left(&vm, &dir).await
}

#[then(regex = r#"^the error of VM ("[^"]+") mentions "(.+)"$"#)]
fn error_mentions(w: &mut RolloutWorld, name: VmName, text: String) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?;
    let msg = vm.error.as_ref().map(|e| e.message.as_str()).unwrap_or("");
    let text = w.target_text(&text);
    ensure!(
        msg.contains(&text),
        "the error should mention \"{text}\": {}",
        vm.describe()
    );
    Ok(())
}

#[then(expr = "VM {vm} was attempted at most {int} time(s)")]
fn attempts_at_most(w: &mut RolloutWorld, name: VmName, n: u32) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?;
    ensure!(
        vm.attempts <= n,
        "expected at most {n} attempt(s) (fail fast, no retry): {}",
        vm.describe()
    );
    Ok(())
}

#[then(expr = "VM {vm} was attempted at least {int} time(s)")]
fn attempts_at_least(w: &mut RolloutWorld, name: VmName, n: u32) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?;
    ensure!(
        vm.attempts >= n,
        "expected at least {n} attempts (retried): {}",
        vm.describe()
    );
    Ok(())
}

#[then("every VM is ready with the same VMID as before")]
async fn same_vmids(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let st = w.last_status()?.clone();
    let dir = w.manifests_dir();
    for (name, before) in w.vmids_before.clone() {
        let vm = st.vm(&name).map_err(|e| anyhow!(e))?;
        ensure!(
            vm.vmid == before,
            "expected VMID {before:?}: {}",
            vm.describe()
        );
        w.verify_ready(vm, &dir).await?;
    }
    Ok(())
}

#[then(expr = "the IP address of VM {vm} is the one the fake's guest agent reports")]
async fn ip_matches_agent(w: &mut RolloutWorld, name: VmName) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let dir = w.manifests_dir();
    w.verify_ready(&vm, &dir).await
}

#[when(regex = r#"^VM ("[^"]+") is (stopped|started) outside the deployer$"#)]
async fn power_outside(w: &mut RolloutWorld, name: VmName, how: String) -> anyhow::Result<()> {
    let verb = if how == "stopped" { "stop" } else { "start" };
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let vmid = vm
        .vmid
        .ok_or_else(|| anyhow!("no VMID: {}", vm.describe()))?;
    let node = w.real_node(&vm.node);
    let obs = w.observer(&node).await?;
    let upid = obs
        .post(&format!("/nodes/{node}/qemu/{vmid}/status/{verb}"), &[])
        .await?;
    let upid = upid
        .as_str()
        .ok_or_else(|| anyhow!("{verb} returned no UPID: {upid}"))?
        .to_string();
    let exit = obs.await_task(&node, &upid, super::wait()).await?;
    ensure!(exit == "OK", "{verb} of VM {vmid} ended with {exit}");
    Ok(())
}
