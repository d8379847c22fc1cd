//! Faults and versions set up in visible steps: nodes going away, memory running out, slow
//! calls, an older PVE.

use anyhow::{anyhow, bail};
use cucumber::{given, when};
use fake_proxmox::FaultRule;

use crate::rollout::params::{NodeName, Request, SiteName};
use crate::rollout::trace::fault;
use crate::rollout::world::{RolloutWorld, node_of_site};
use provision_harness::trace::args;
use serde_json::json;

#[given(expr = "node {node} is offline")]
async fn offline(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    ctl.set_node_online(&node, false)
        .await
        .map_err(|e| anyhow!("taking {node} offline: {e}"))?;
    fault(w, "node offline", args([("node", json!(node.to_string()))]));
    Ok(())
}

#[when(expr = "node {node} comes back online")]
async fn online(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    ctl.set_node_online(&node, true)
        .await
        .map_err(|e| anyhow!("bringing {node} back: {e}"))?;
    fault(
        w,
        "node back online",
        args([("node", json!(node.to_string()))]),
    );
    Ok(())
}

/// The fake admits a start against the node's total memory only, so "no free memory" is a
/// fault rule on the start call with the error PVE gives when QEMU cannot allocate guest RAM.
#[given(expr = "node {node} has no free memory to start VMs")]
async fn no_memory(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    ctl.add_fault(FaultRule {
        method: Some("POST".into()),
        path_pattern: Some(format!("/nodes/{node}/qemu/*/status/start")),
        status: Some(500),
        message: Some(
            "start failed: kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory".into(),
        ),
        ..FaultRule::default()
    })
    .await
    .map_err(|e| anyhow!("adding the memory fault: {e}"))?;
    fault(
        w,
        "no free memory for starts",
        args([("node", json!(node.to_string()))]),
    );
    Ok(())
}

#[when(expr = "memory is freed on node {node}")]
async fn memory_freed(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    ctl.clear_faults()
        .await
        .map_err(|e| anyhow!("clearing faults: {e}"))?;
    fault(
        w,
        "faults cleared",
        args([("node", json!(node.to_string()))]),
    );
    Ok(())
}

#[given(expr = "every create call on {node} takes {int} ms to arrive")]
async fn slow_create(w: &mut RolloutWorld, node: NodeName, ms: u64) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    ctl.add_fault(FaultRule {
        method: Some("POST".into()),
        path_pattern: Some(format!("/nodes/{node}/qemu")),
        latency_ms: Some(ms),
        ..FaultRule::default()
    })
    .await
    .map_err(|e| anyhow!("adding latency: {e}"))?;
    fault(
        w,
        "slow create calls",
        args([("node", json!(node.to_string())), ("latency_ms", json!(ms))]),
    );
    Ok(())
}

#[given(expr = "site {site} runs PVE version {string}")]
fn pve_version(w: &mut RolloutWorld, site: SiteName, version: String) -> anyhow::Result<()> {
    if node_of_site(&site).is_none() {
        bail!("unknown site {site}");
    }
    let scenario = w.scenario_mut()?;
    let s = scenario
        .sites
        .iter_mut()
        .find(|s| s.name == site)
        .ok_or_else(|| anyhow!("the scenario has no site {site}"))?;
    s.version = serde_json::from_value(serde_json::Value::String(version.clone()))
        .map_err(|e| anyhow!("PVE version '{version}': {e}"))?;
    Ok(())
}

#[given(expr = "the first {int} requests {request} to {site} fail with {int} {string}")]
async fn first_requests_fail(
    w: &mut RolloutWorld,
    count: u32,
    req: Request,
    site: SiteName,
    status: u16,
    message: String,
) -> anyhow::Result<()> {
    let Request { method, path } = req;
    let ctl = w.control(&site).await?;
    ctl.add_fault(FaultRule {
        site: Some(site.to_string()),
        method: Some(method),
        path_pattern: Some(path),
        count: Some(count),
        status: Some(status),
        message: Some(message.clone()),
        ..FaultRule::default()
    })
    .await
    .map_err(|e| anyhow!("adding the fault on {site}: {e}"))?;
    fault(
        w,
        "requests fail",
        args([
            ("site", json!(site.to_string())),
            ("count", json!(count)),
            ("status", json!(status)),
            ("message", json!(message)),
        ]),
    );
    Ok(())
}

#[given(regex = r#"^the next "([^"]+)" task on node "([^"]+)" fails with "(.+)"$"#)]
async fn next_task_fails(
    w: &mut RolloutWorld,
    task_type: String,
    node: String,
    exitstatus: String,
) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    // Gherkin keeps the backslashes of an escaped quote; PVE's text has plain quotes.
    let exitstatus = exitstatus.replace("\\\"", "\"");
    ctl.fail_next_task(&node, &task_type, &exitstatus)
        .await
        .map_err(|e| anyhow!("arming the {task_type} failure on {node}: {e}"))?;
    fault(
        w,
        "next task fails",
        args([
            ("node", json!(node)),
            ("type", json!(task_type)),
            ("exitstatus", json!(exitstatus)),
        ]),
    );
    Ok(())
}
