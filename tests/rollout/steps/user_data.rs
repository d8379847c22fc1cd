//! User-data: what each manifest's `userData` asked for, checked where it has to arrive, in
//! the guest (the fake's simulated guest applies its cloud-init drive as cloud-init would and
//! shows what it applied), and the snippets storage a deployer needs to deliver it.

use anyhow::{Context, anyhow, bail, ensure};
use cucumber::{given, then};
use serde_json::Value;

use crate::rollout::params::{SiteName, VmName};
use crate::rollout::world::RolloutWorld;

/// The `userData` of every manifest of the scenario, by VM name: the steps' manifests and
/// the example files copied as they are.
fn wanted(w: &RolloutWorld) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = w
        .manifests
        .values()
        .filter_map(|m| Some((m.name.clone(), m.user_data.clone()?)))
        .collect();
    for text in w.raw_manifests.values() {
        let Ok(doc) = serde_norway::from_str::<serde_norway::Value>(text) else {
            continue;
        };
        let p = &doc["spec"]["forProvider"];
        if let (Some(name), Some(ud)) = (p["name"].as_str(), p["userData"].as_str())
            && doc["kind"].as_str() == Some("ProxmoxVM")
        {
            out.push((name.to_string(), ud.to_string()));
        }
    }
    out
}

/// The packages and commands a cloud-config asks for.
fn asked(user_data: &str) -> (Vec<String>, Vec<String>) {
    let doc: serde_norway::Value = serde_norway::from_str(user_data).unwrap_or_default();
    let list = |k: &str| -> Vec<String> {
        doc[k]
            .as_sequence()
            .map(|s| {
                s.iter()
                    .filter_map(|v| match v {
                        serde_norway::Value::Sequence(argv) => Some(
                            argv.iter()
                                .filter_map(|a| a.as_str().map(str::to_string))
                                .collect::<Vec<_>>()
                                .join(" "),
                        ),
                        other => other.as_str().map(str::to_string),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    (list("packages"), list("runcmd"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[then("every VM whose manifest has userData got it in its guest")]
async fn every_vm_got_its_user_data(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let wanted = wanted(w);
    ensure!(
        !wanted.is_empty(),
        "no manifest of this scenario has userData"
    );
    let status = w.last_status()?.clone();
    let mut problems = Vec::new();
    for (name, user_data) in &wanted {
        let Some((node, vmid)) = status
            .vm(name)
            .ok()
            .and_then(|v| Some((v.node.clone(), v.vmid?)))
        else {
            problems.push(format!("{name}: the deployer reports no VMID"));
            continue;
        };
        let obs = w.observer(&node).await?;
        let config = obs.vm_config(&node, vmid).await?;
        let cicustom = config["cicustom"].as_str().unwrap_or_default();
        if !cicustom.split(',').any(|p| p.starts_with("user=")) {
            problems.push(format!(
                "{name}: cicustom names no user snippet (cicustom: '{cicustom}'), so PVE writes only its own user-data"
            ));
            continue;
        }
        let guest = w
            .control_for_node(&node)
            .await?
            .guest_state(&node, vmid)
            .await
            .map_err(|e| anyhow!("{name}: the guest's state: {e}"))?;
        let ci = &guest["cloud_init"];
        if ci.is_null() {
            problems.push(format!("{name}: cloud-init applied nothing in the guest"));
            continue;
        }
        let errors = strings(&ci["errors"]);
        if !errors.is_empty() {
            problems.push(format!("{name}: cloud-init failed: {}", errors.join("; ")));
        }
        let (packages, commands) = asked(user_data);
        let installed = strings(&ci["packages"]);
        let ran = strings(&ci["commands"]);
        for p in packages.iter().filter(|p| !installed.contains(p)) {
            problems.push(format!(
                "{name}: package '{p}' was not installed (installed: {installed:?})"
            ));
        }
        for c in commands.iter().filter(|c| !ran.contains(c)) {
            problems.push(format!("{name}: command '{c}' did not run (ran: {ran:?})"));
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} of {} VMs with userData did not get it:\n  {}",
            problems.len(),
            wanted.len(),
            problems.join("\n  ")
        );
    }
    Ok(())
}

#[then(expr = "VM {string}'s guest has the manifest's SSH key for user {string}")]
async fn guest_has_key(w: &mut RolloutWorld, name: String, user: String) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let vmid = vm.vmid.with_context(|| format!("{name}: no VMID"))?;
    let guest = w
        .control_for_node(&vm.node)
        .await?
        .guest_state(&vm.node, vmid)
        .await
        .map_err(|e| anyhow!("{name}: the guest's state: {e}"))?;
    let keys = strings(&guest["cloud_init"]["ssh_keys"][&user]);
    ensure!(
        !keys.is_empty(),
        "{name}: user {user} has no authorized SSH key in the guest (cloud-init gave keys to: {})",
        guest["cloud_init"]["ssh_keys"]
    );
    Ok(())
}

#[given(expr = "no storage of site {site} holds snippets")]
async fn no_snippets(w: &mut RolloutWorld, site: SiteName) -> anyhow::Result<()> {
    let scenario = w.scenario_mut()?;
    let s = scenario
        .sites
        .iter_mut()
        .find(|s| s.name == site.0)
        .ok_or_else(|| anyhow!("the scenario has no site {}", site.0))?;
    for storage in s.nodes.iter_mut().flat_map(|n| &mut n.storages) {
        storage
            .content
            .retain(|c| *c != fake_proxmox::storage::model::Content::Snippets);
    }
    Ok(())
}

/// The VM runs, yet its guest never answers: PVE's agent calls fail and the deployer has no
/// address to report.
#[then(expr = "VM {vm} runs but its guest agent never answers")]
async fn agent_silent(w: &mut RolloutWorld, name: VmName) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    ensure!(
        vm.state.as_deref() == Some("running") && vm.ip.is_none(),
        "expected a running VM without an address: {}",
        vm.describe()
    );
    let vmid = vm.vmid.with_context(|| format!("{name}: no VMID"))?;
    let obs = w.observer(&vm.node).await?;
    let path = format!(
        "/nodes/{}/qemu/{vmid}/agent/network-get-interfaces",
        vm.node
    );
    match obs.get(&path).await {
        Ok(v) => bail!("{name}: the guest agent answered: {v}"),
        Err(e) => ensure!(
            format!("{e:#}").contains("not running"),
            "{name}: PVE should say the agent is not running: {e:#}"
        ),
    }
    Ok(())
}
