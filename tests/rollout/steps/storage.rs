//! Storage and images: what the node holds before the run, and what is left after it.

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};

use crate::rollout::params::{NodeName, VmName};
use crate::rollout::pve::disk_size_gib;
use crate::rollout::world::RolloutWorld;

/// `local:iso/x.img` → (`local`, `iso/x.img`).
fn split_volid(volid: &str) -> anyhow::Result<(String, String)> {
    volid
        .split_once(':')
        .map(|(s, v)| (s.to_string(), v.to_string()))
        .ok_or_else(|| anyhow!("'{volid}' is not a volume id (storage:path)"))
}

/// The seed's cloud image: 2252 MiB virtual size.
const IMAGE_BYTES: u64 = 2_361_393_152;

#[given(expr = "the image {string} is missing on node {node}")]
async fn image_missing(w: &mut RolloutWorld, volid: String, node: NodeName) -> anyhow::Result<()> {
    let (storage, _) = split_volid(&volid)?;
    let ctl = w.control_for_node(&node).await?;
    ctl.delete_volume(&node, &storage, &volid)
        .await
        .map_err(|e| anyhow!("deleting {volid} on {node}: {e}"))?;
    Ok(())
}

#[when(expr = "the image {string} is uploaded to node {node}")]
async fn image_uploaded(w: &mut RolloutWorld, volid: String, node: NodeName) -> anyhow::Result<()> {
    let (storage, volname) = split_volid(&volid)?;
    let ctl = w.control_for_node(&node).await?;
    ctl.upload_volume(&node, &storage, &volname, IMAGE_BYTES)
        .await
        .map_err(|e| anyhow!("uploading {volid} to {node}: {e}"))?;
    Ok(())
}

#[given(expr = "storage {string} on node {node} is full")]
async fn storage_full(w: &mut RolloutWorld, storage: String, node: NodeName) -> anyhow::Result<()> {
    let ctl = w.control_for_node(&node).await?;
    ctl.set_storage_full(&node, &storage, true)
        .await
        .map_err(|e| anyhow!("filling {storage} on {node}: {e}"))?;
    let a = provision_harness::trace::args([
        ("node", serde_json::json!(node.to_string())),
        ("storage", serde_json::json!(storage)),
    ]);
    crate::rollout::trace::fault(w, "storage full", a);
    Ok(())
}

#[then(expr = "the fake/cluster holds exactly one VM named {vm} on {node} with a {int} GiB disk")]
async fn one_vm(
    w: &mut RolloutWorld,
    name: VmName,
    node: NodeName,
    gib: u32,
) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    let name = w.target_name(&name);
    let obs = w.observer(&node).await?;
    let vms = obs.vms().await?;
    let named: Vec<_> = vms.iter().filter(|v| v.name == name).collect();
    ensure!(
        named.len() == 1,
        "expected one VM named {name}, found {named:?}"
    );
    let vm = named[0];
    ensure!(vm.node == node, "VM {name} is on {}, not {node}", vm.node);
    let cfg = obs.vm_config(&node, vm.vmid).await?;
    let scsi0 = cfg["scsi0"].as_str().unwrap_or_default();
    let size = disk_size_gib(scsi0);
    ensure!(
        size == Some(f64::from(gib)),
        "VM {name} ({}) has scsi0 = {scsi0:?}, expected {gib} GiB",
        vm.vmid
    );
    Ok(())
}

#[then(expr = "the fake/cluster holds no VM named {vm}")]
async fn no_vm(w: &mut RolloutWorld, name: VmName) -> anyhow::Result<()> {
    let name = w.target_name(&name);
    for node in ["ml110-01", "r630-01"] {
        let node = w.real_node(node);
        let obs = w.observer(&node).await?;
        let left: Vec<_> = obs
            .vms()
            .await?
            .into_iter()
            .filter(|v| v.name == name)
            .collect();
        ensure!(
            left.is_empty(),
            "VMs named {name} are still there: {left:?}"
        );
        if w.is_real() {
            break;
        }
    }
    Ok(())
}

/// On a shared cluster a destroyed VM's VMID is free for anyone: a volume `vm-<id>-…` only
/// counts as left over while no VM holds that VMID (volumes listed before and after the VMs, so
/// a VM created in between is not mistaken for a leftover).
#[then(expr = "the fake/cluster holds no disk volume of the destroyed VMs")]
async fn no_disks(w: &mut RolloutWorld) -> anyhow::Result<()> {
    ensure!(!w.destroyed.is_empty(), "no VM was destroyed");
    for (node, vmid) in w.destroyed.clone() {
        let node = w.real_node(&node);
        let obs = w.observer(&node).await?;
        let prefix = format!(":vm-{vmid}-");
        let before: Vec<String> = obs
            .image_volumes(&node)
            .await?
            .into_iter()
            .filter(|v| v.contains(&prefix))
            .collect();
        if before.is_empty() {
            continue;
        }
        let owner: Vec<_> = obs
            .vms()
            .await?
            .into_iter()
            .filter(|v| v.vmid == vmid)
            .collect();
        let after = obs.image_volumes(&node).await?;
        let left: Vec<&String> = before.iter().filter(|v| after.contains(v)).collect();
        ensure!(
            left.is_empty() || !owner.is_empty(),
            "disks of the destroyed VM {vmid} are left on {node}, and no VM holds that VMID: {left:?}"
        );
    }
    Ok(())
}

#[then("every VM delete request asked to purge")]
async fn purge(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let deletes: Vec<_> = j.matching("DELETE", "/nodes/*/qemu/*").collect();
    ensure!(
        !deletes.is_empty(),
        "no VM was deleted:\n{}",
        j.render_tail(40)
    );
    for d in deletes {
        let purge = d.params.get("purge").map(String::as_str);
        ensure!(
            matches!(purge, Some("1" | "true")),
            "{} had no purge=1 (params {:?})",
            d.render(),
            d.params
        );
    }
    Ok(())
}

/// The seed names `local:iso/ubuntu-22.04-cloud.img`; PVE's `import-from` only reads `images` or
/// `import` volumes, so the image must also sit in an `import` content storage (the upload the
/// seed's Issue 1 mitigation asks for).
#[given(regex = r#"^the cloud image is placed for import as "([^"]+)" on every node$"#)]
async fn image_for_import(w: &mut RolloutWorld, volid: String) -> anyhow::Result<()> {
    if w.is_real() {
        // A real cluster must hold it already (docs/src/real-pve.md: targeting a real PVE).
        return Ok(());
    }
    let (storage, volname) = split_volid(&volid)?;
    for node in ["ml110-01", "r630-01"] {
        // Placed when the fake starts, so later Given steps may still change its scenario.
        w.setup_uploads.push((
            node.to_string(),
            storage.clone(),
            volname.clone(),
            IMAGE_BYTES,
        ));
    }
    Ok(())
}

#[then(expr = "every disk volume on node {node} belongs to an existing VM")]
async fn no_orphans(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    let obs = w.observer(&node).await?;
    let vmids: Vec<u32> = obs.vms().await?.iter().map(|v| v.vmid).collect();
    let orphans: Vec<String> = obs
        .image_volumes(&node)
        .await?
        .into_iter()
        .filter(|v| {
            let owner = v
                .split(':')
                .nth(1)
                .and_then(|n| n.strip_prefix("vm-"))
                .and_then(|n| n.split('-').next());
            owner
                .and_then(|o| o.parse::<u32>().ok())
                .is_some_and(|id| !vmids.contains(&id))
        })
        .collect();
    ensure!(
        orphans.is_empty(),
        "orphan disks on {node} (VMs there: {vmids:?}): {orphans:?}"
    );
    Ok(())
}
