//! What must hold after a resumed run, read from the fake through the PVE API (and from the
//! deployer's own state file when it is the built-in one): the fake is the truth, the deployer's
//! report is only a claim to compare with it.

use std::collections::{BTreeMap, BTreeSet};

use provision_harness::deployer::state::{StateStore, journal_path};
use serde_json::Value;

use super::config_str;
use crate::rollout::RolloutWorld;
use crate::rollout::manifest::VmManifest;
use crate::rollout::pve::disk_size_gib;
use crate::rollout::status::Status;

/// Every broken invariant, as a sentence; empty when the rollout converged.
pub async fn check(
    w: &mut RolloutWorld,
    vms: &[VmManifest],
    status: &Status,
) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut by_node: BTreeMap<&str, Vec<&VmManifest>> = BTreeMap::new();
    for vm in vms {
        by_node.entry(vm.node.as_str()).or_default().push(vm);
    }
    let mut found: BTreeMap<String, u32> = BTreeMap::new();
    for (node, wanted) in &by_node {
        let obs = w.observer(node).await?;
        let on_node: Vec<_> = obs
            .vms()
            .await?
            .into_iter()
            .filter(|v| v.node == *node)
            .collect();
        let names: BTreeSet<&str> = wanted.iter().map(|m| m.name.as_str()).collect();
        for stray in on_node.iter().filter(|v| !names.contains(v.name.as_str())) {
            problems.push(format!(
                "VM {} ({:?}) on {node} belongs to no manifest (a duplicate or an orphan)",
                stray.vmid, stray.name
            ));
        }
        for m in wanted {
            let named: Vec<_> = on_node.iter().filter(|v| v.name == m.name).collect();
            if named.len() != 1 {
                problems.push(format!(
                    "{} VMs named {} on {node}, expected exactly one: {:?}",
                    named.len(),
                    m.name,
                    named.iter().map(|v| v.vmid).collect::<Vec<_>>()
                ));
                continue;
            }
            let vm = named[0];
            found.insert(m.name.clone(), vm.vmid);
            if vm.status != "running" {
                problems.push(format!(
                    "{} ({}) is {}, not running",
                    m.name, vm.vmid, vm.status
                ));
            }
            let cfg = obs.guest_config(node, &vm.kind, vm.vmid).await?;
            if m.kind == "ProxmoxContainer" {
                problems.extend(ct_config_problems(m, vm.vmid, &vm.kind, &cfg));
            } else {
                problems.extend(config_problems(m, vm.vmid, &cfg));
            }
        }
        problems.extend(orphan_volumes(w, node).await?);
    }
    for m in vms {
        let claim = status.vms.iter().find(|v| v.name == m.name);
        match claim {
            None => problems.push(format!("the deployer reported nothing for {}", m.name)),
            Some(c) if c.outcome != "ready" => problems.push(format!(
                "the deployer reported {} as {} ({:?})",
                m.name, c.outcome, c.error
            )),
            Some(c) if c.vmid != found.get(&m.name).copied() => problems.push(format!(
                "the deployer reported {} as VMID {:?}, the fake holds {:?}",
                m.name,
                c.vmid,
                found.get(&m.name)
            )),
            Some(_) => {}
        }
    }
    problems.extend(state_file_problems(w, vms, &found));
    Ok(problems)
}

fn config_problems(m: &VmManifest, vmid: u32, cfg: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut expect = |what: &str, ok: bool, seen: String| {
        if !ok {
            out.push(format!("{} ({vmid}): {what}, config has {seen}", m.name));
        }
    };
    let cores = config_str(cfg, "cores");
    expect(&format!("cores = {}", m.cpu), cores == m.cpu, cores);
    let memory = config_str(cfg, "memory");
    let want_mib = quantity_bytes(&m.memory).map(|b| b / (1 << 20));
    expect(
        &format!("memory = {want_mib:?} MiB ({})", m.memory),
        want_mib.is_some_and(|w| memory == w.to_string()),
        memory,
    );
    let scsi0 = config_str(cfg, "scsi0");
    let want_gib = quantity_bytes(&m.disk).map(|b| b as f64 / f64::from(1u32 << 30));
    expect(
        &format!("scsi0 on {} with {} ({want_gib:?} GiB)", m.storage, m.disk),
        scsi0.starts_with(&format!("{}:", m.storage)) && disk_size_gib(&scsi0) == want_gib,
        scsi0,
    );
    let net0 = config_str(cfg, "net0");
    expect(
        &format!("net0 on bridge {}", m.network),
        net0.split(',')
            .any(|p| p == format!("bridge={}", m.network)),
        net0,
    );
    let agent = config_str(cfg, "agent");
    expect(
        "the guest agent enabled",
        agent == "1" || agent.starts_with("1,") || agent.split(',').any(|p| p == "enabled=1"),
        agent,
    );
    let has_ci = cfg.as_object().is_some_and(|o| {
        o.values()
            .any(|v| v.as_str().is_some_and(|s| s.contains("cloudinit")))
    });
    expect("a cloud-init drive", has_ci, "none".into());
    let lock = config_str(cfg, "lock");
    expect("no lock", lock.is_empty(), format!("lock {lock}"));
    out
}

/// A container as its manifest asks: an `lxc` guest with its cores, memory, rootfs on the
/// storage at the size, the NIC on the bridge, and no lock.
fn ct_config_problems(m: &VmManifest, vmid: u32, kind: &str, cfg: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut expect = |what: &str, ok: bool, seen: String| {
        if !ok {
            out.push(format!("{} ({vmid}): {what}, config has {seen}", m.name));
        }
    };
    expect("a container", kind == "lxc", kind.to_string());
    let cores = config_str(cfg, "cores");
    expect(&format!("cores = {}", m.cpu), cores == m.cpu, cores);
    let memory = config_str(cfg, "memory");
    let want_mib = quantity_bytes(&m.memory).map(|b| b / (1 << 20));
    expect(
        &format!("memory = {want_mib:?} MiB ({})", m.memory),
        want_mib.is_some_and(|w| memory == w.to_string()),
        memory,
    );
    let rootfs = config_str(cfg, "rootfs");
    let want_gib = quantity_bytes(&m.disk).map(|b| b as f64 / f64::from(1u32 << 30));
    expect(
        &format!("rootfs on {} with {} ({want_gib:?} GiB)", m.storage, m.disk),
        rootfs.starts_with(&format!("{}:", m.storage)) && disk_size_gib(&rootfs) == want_gib,
        rootfs,
    );
    let net0 = config_str(cfg, "net0");
    expect(
        &format!("net0 on bridge {}", m.network),
        net0.split(',')
            .any(|p| p == format!("bridge={}", m.network)),
        net0,
    );
    let lock = config_str(cfg, "lock");
    expect("no lock", lock.is_empty(), format!("lock {lock}"));
    out
}

/// Disk volumes on the node's storages that no VM's config references.
async fn orphan_volumes(w: &mut RolloutWorld, node: &str) -> anyhow::Result<Vec<String>> {
    let obs = w.observer(node).await?;
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    for vm in obs.vms().await?.into_iter().filter(|v| v.node == node) {
        let cfg = obs.guest_config(node, &vm.kind, vm.vmid).await?;
        if let Some(o) = cfg.as_object() {
            for v in o.values().filter_map(Value::as_str) {
                let file = v.split(',').next().unwrap_or_default();
                referenced.insert(file.to_string());
            }
        }
    }
    let storages = obs.get(&format!("/nodes/{node}/storage")).await?;
    let mut out = Vec::new();
    for s in storages.as_array().into_iter().flatten() {
        let Some(id) = s["storage"].as_str() else {
            continue;
        };
        if !s["content"].as_str().unwrap_or_default().contains("images") {
            continue;
        }
        let content = obs
            .get(&format!(
                "/nodes/{node}/storage/{id}/content?content=images"
            ))
            .await?;
        for vol in content.as_array().into_iter().flatten() {
            let volid = vol["volid"].as_str().unwrap_or_default();
            if !referenced.contains(volid) {
                out.push(format!(
                    "volume {volid} on {node} is referenced by no VM (an orphan)"
                ));
            }
        }
    }
    Ok(out)
}

/// The built-in deployer's state file must name the VMIDs the fake holds. (An external
/// deployer's state is its own business: its status report is checked instead.)
fn state_file_problems(
    w: &RolloutWorld,
    vms: &[VmManifest],
    found: &BTreeMap<String, u32>,
) -> Vec<String> {
    let path = w.dir.path().join("state").join("state.json");
    if !path.exists() && !journal_path(&path).exists() {
        return Vec::new();
    }
    // A killed run leaves its latest changes in the journal beside the snapshot.
    let state: Value = match StateStore::read(&path).map(serde_json::to_value) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            return vec![format!(
                "the state file {} does not serialise: {e}",
                path.display()
            )];
        }
        Err(e) => {
            return vec![format!(
                "the state file {} is unreadable: {e}",
                path.display()
            )];
        }
    };
    let records: Vec<&Value> = state["vms"]
        .as_object()
        .map(|o| o.values().collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for m in vms {
        let rec = records.iter().find(|r| r["name"] == m.name.as_str());
        let vmid = rec.and_then(|r| r["vmid"].as_u64()).map(|v| v as u32);
        let stage = rec.and_then(|r| r["stage"].as_str()).unwrap_or("none");
        if vmid != found.get(&m.name).copied() || stage != "ready" {
            out.push(format!(
                "the state file records {} as VMID {vmid:?} at stage {stage}; the fake holds {:?}",
                m.name,
                found.get(&m.name)
            ));
        }
    }
    out
}

/// A Kubernetes quantity in bytes (`4Gi`, `512Mi`, `20G`), read independently of the deployer
/// so that a deployer's unit mistake cannot hide in the check.
pub fn quantity_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (num, unit) = q.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}
