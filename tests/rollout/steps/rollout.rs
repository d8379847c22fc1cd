//! The full rollout of the seed's manifests: the plan's verdict and figures, the deploy, and the
//! order it follows.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, anyhow, bail, ensure};
use cucumber::gherkin::Step;
use cucumber::{given, then, when};
use serde_json::Value;

use super::rows;
use crate::rollout::adapter::Action;
use crate::rollout::params::{NodeName, VmName};
use crate::rollout::status::Status;
use crate::rollout::world::RolloutWorld;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[given(regex = r#"^a Proxmox test cluster with the scenario "([^"]+)"$"#)]
fn cluster_scenario(w: &mut RolloutWorld, path: String) -> anyhow::Result<()> {
    if w.is_real() {
        bail!("a scenario file configures the fake (tag the scenario @fake)");
    }
    let s =
        fake_proxmox::Scenario::from_yaml_file(repo(&path)).map_err(|e| anyhow!("{path}: {e}"))?;
    w.target = Some(crate::rollout::world::Target::Pending(Box::new(s)));
    Ok(())
}

/// The manifests of `dir`, each asking for 1 vCPU, 512 MiB and a 10 GiB disk on local-lvm: the
/// rollout's names, phases, groups and dependencies at a size a test cluster holds 30 times.
#[given(
    regex = r#"^the manifests of "([^"]+)" scaled down to 1 vCPU, 512Mi and 10Gi on local-lvm$"#
)]
fn manifests_scaled(w: &mut RolloutWorld, dir: String) -> anyhow::Result<()> {
    manifests_of(w, dir)?;
    for text in w.raw_manifests.values_mut() {
        let Ok(mut doc) = serde_norway::from_str::<serde_norway::Value>(text) else {
            continue;
        };
        let Some(fp) = doc
            .get_mut("spec")
            .and_then(|s| s.get_mut("forProvider"))
            .and_then(|f| f.as_mapping_mut())
        else {
            continue;
        };
        for (k, v) in [
            ("cpu", serde_norway::Value::from(1)),
            ("memory", "512Mi".into()),
            ("disk", "10Gi".into()),
            ("storage", "local-lvm".into()),
        ] {
            fp.insert(k.into(), v);
        }
        *text = serde_norway::to_string(&doc)?;
    }
    Ok(())
}

/// Copies the ProxmoxVM manifests under `<dir>/production` as they are (unreadable ones too).
#[given(regex = r#"^the manifests of "([^"]+)"$"#)]
fn manifests_of(w: &mut RolloutWorld, dir: String) -> anyhow::Result<()> {
    let root = repo(&dir);
    let mut stack = vec![root.join("production")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                let rel = p.strip_prefix(&root)?.to_string_lossy().replace('\\', "/");
                w.raw_manifests.insert(rel, std::fs::read_to_string(&p)?);
            }
        }
    }
    ensure!(
        !w.raw_manifests.is_empty(),
        "no manifests under {dir}/production"
    );
    Ok(())
}

#[when("the deployer plans the rollout")]
async fn plans(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let req = w.request(Action::Plan).await?;
    let first = w.journal_mark().await? + 1;
    let report = w.deployer.plan(req).await.context("plan")?;
    let last = w.journal_mark().await?;
    w.plan = Some(report);
    w.runs.push(crate::rollout::world::Run {
        first_seq: first,
        last_seq: last,
        status: Default::default(),
    });
    Ok(())
}

fn plan(w: &RolloutWorld) -> anyhow::Result<&Value> {
    w.plan
        .as_ref()
        .ok_or_else(|| anyhow!("the deployer has not planned"))
}

fn findings(p: &Value) -> String {
    p["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| format!("  {} {}: {}", f["severity"], f["subject"], f["message"]))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[then(regex = r#"^the plan's verdict is "([^"]+)"$"#)]
fn verdict(w: &mut RolloutWorld, want: String) -> anyhow::Result<()> {
    let p = plan(w)?;
    ensure!(
        p["verdict"] == want.as_str(),
        "verdict {} (expected {want}); findings:\n{}",
        p["verdict"],
        findings(p)
    );
    Ok(())
}

#[then(regex = r#"^the plan's verdict is not "([^"]+)"$"#)]
fn verdict_not(w: &mut RolloutWorld, bad: String) -> anyhow::Result<()> {
    let p = plan(w)?;
    ensure!(
        p["verdict"] != bad.as_str(),
        "verdict {}; findings:\n{}",
        p["verdict"],
        findings(p)
    );
    Ok(())
}

#[then("the plan lists these unreadable manifests with their errors:")]
fn unreadable(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let p = plan(w)?;
    let listed = p["unreadable"].as_array().cloned().unwrap_or_default();
    let want: Vec<String> = rows(step).into_iter().map(|r| r[0].clone()).collect();
    let got: Vec<&str> = listed.iter().filter_map(|u| u["path"].as_str()).collect();
    ensure!(
        got.len() == want.len(),
        "unreadable manifests: {got:?}, expected {want:?}"
    );
    for path in &want {
        let u = listed
            .iter()
            .find(|u| u["path"] == path.as_str())
            .ok_or_else(|| anyhow!("{path} is not listed as unreadable (listed: {got:?})"))?;
        let err = u["error"].as_str().unwrap_or_default();
        ensure!(!err.trim().is_empty(), "{path} is listed without its error");
    }
    Ok(())
}

fn gib_of_mib(v: &Value) -> Option<u64> {
    v.as_u64().map(|m| m / 1024)
}

#[then("the plan shows these node figures:")]
fn node_figures(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let p = plan(w)?;
    let nodes = p["nodes"].as_array().cloned().unwrap_or_default();
    for r in rows(step).into_iter().skip(1) {
        let n = nodes
            .iter()
            .find(|n| n["node"] == r[0].as_str())
            .ok_or_else(|| anyhow!("the plan has no figures for node {}", r[0]))?;
        let got = [
            n["new_vms"].as_u64(),
            n["requested_cores"].as_u64(),
            n["cpu_threads"].as_u64(),
            gib_of_mib(&n["requested_memory_mib"]),
        ];
        let want: Vec<Option<u64>> = r[1..].iter().map(|c| c.parse().ok()).collect();
        ensure!(
            got.as_slice() == want.as_slice(),
            "node {}: plan says new VMs/cores/threads/memory GiB = {got:?}, expected {want:?}\n{n}",
            r[0]
        );
    }
    Ok(())
}

#[then("the plan shows these storage figures:")]
fn storage_figures(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let p = plan(w)?;
    let storages = p["storages"].as_array().cloned().unwrap_or_default();
    for r in rows(step).into_iter().skip(1) {
        let s = storages
            .iter()
            .find(|s| s["node"] == r[0].as_str() && s["storage"] == r[1].as_str())
            .ok_or_else(|| anyhow!("the plan has no figures for {}/{}", r[0], r[1]))?;
        let got = (
            s["new_vms"].as_u64(),
            s["requested_gib"].as_u64(),
            s["holds_vm_disks"].as_bool(),
        );
        let want = (r[2].parse().ok(), r[3].parse().ok(), Some(r[4] == "yes"));
        ensure!(
            got == want,
            "{}/{}: plan says new VMs/GiB/holds disks = {got:?}, expected {want:?}\n{s}",
            r[0],
            r[1]
        );
    }
    Ok(())
}

#[then(regex = r#"^the plan has an error mentioning "([^"]+)"$"#)]
fn error_mentioning(w: &mut RolloutWorld, text: String) -> anyhow::Result<()> {
    let p = plan(w)?;
    let hit = p["findings"].as_array().is_some_and(|a| {
        a.iter().any(|f| {
            f["severity"] == "error" && f["message"].as_str().is_some_and(|m| m.contains(&text))
        })
    });
    ensure!(
        hit,
        "no error finding mentions {text}; findings:\n{}",
        findings(p)
    );
    Ok(())
}

#[then(regex = r#"^the plan has an error about "([^"]+)"$"#)]
fn error_about(w: &mut RolloutWorld, subject: String) -> anyhow::Result<()> {
    let subject = w.target_text(&subject);
    let p = plan(w)?;
    let hit = p["findings"].as_array().is_some_and(|a| {
        a.iter().any(|f| {
            f["severity"] == "error" && f["subject"].as_str().is_some_and(|s| s.contains(&subject))
        })
    });
    ensure!(
        hit,
        "no error finding about {subject}; findings:\n{}",
        findings(p)
    );
    Ok(())
}

#[then(
    regex = r#"^the plan says PVE ([0-9.]+) would refuse "([^"]+)" for VM "([^"]+)": parameter "([^"]+)", PVE's message mentioning "([^"]+)"$"#
)]
fn schema_refusal(
    w: &mut RolloutWorld,
    release: String,
    request: String,
    vm: String,
    parameter: String,
    mentions: String,
) -> anyhow::Result<()> {
    let vm = w.target_text(&vm);
    let p = plan(w)?;
    let head = format!(
        "VM {vm}: PVE {release} would refuse {request} (400 Parameter verification failed) — {parameter}"
    );
    let hit = p["findings"].as_array().is_some_and(|a| {
        a.iter().any(|f| {
            f["severity"] == "error"
                && f["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&head) && m.contains(&mentions))
        })
    });
    ensure!(
        hit,
        "no error finding '{head}…{mentions}…'; findings:\n{}",
        findings(p)
    );
    Ok(())
}

#[then(regex = r#"^(\d+) VMs are ready and (\d+) failed$"#)]
async fn counts(w: &mut RolloutWorld, ready: usize, failed: usize) -> anyhow::Result<()> {
    let st = w.last_status()?.clone();
    let r = st.vms.iter().filter(|v| v.outcome == "ready").count();
    let f = st.vms.iter().filter(|v| v.outcome == "failed").count();
    let lines: Vec<String> = st
        .vms
        .iter()
        .map(|v| format!("  {}", v.describe()))
        .collect();
    ensure!(
        r == ready && f == failed,
        "{r} ready, {f} failed (expected {ready}, {failed}):\n{}",
        lines.join("\n")
    );
    verify_all(w, &st).await
}

/// Every claim of a status checked against the cluster: ready VMs are there as their manifests
/// say, failed ones left nothing behind.
async fn verify_all(w: &mut RolloutWorld, st: &Status) -> anyhow::Result<()> {
    let dir = w.manifests_dir();
    w.verify_status(st, &dir).await
}

/// The storage each manifest asks for, from the manifest files themselves.
fn storage_by_name(w: &RolloutWorld) -> anyhow::Result<BTreeMap<String, String>> {
    let set = provision_harness::manifest::load_dir(&w.manifests_dir())?;
    Ok(set
        .vms
        .iter()
        .map(|l| {
            (
                l.vm.spec.for_provider.name.clone(),
                l.vm.spec.for_provider.storage.clone(),
            )
        })
        .collect())
}

#[then(regex = r#"^every VM on storage "([^"]+)" failed with reason "([^"]+)" after 1 attempt$"#)]
async fn all_on_storage_failed(
    w: &mut RolloutWorld,
    storage: String,
    reason: String,
) -> anyhow::Result<()> {
    let storages = storage_by_name(w)?;
    let st = w.last_status()?.clone();
    let on: Vec<_> = st
        .vms
        .iter()
        .filter(|v| storages.get(&v.name) == Some(&storage))
        .collect();
    ensure!(!on.is_empty(), "no VM asks for storage {storage}");
    for v in &on {
        let ok = v.outcome == "failed"
            && v.error
                .as_ref()
                .is_some_and(|e| e.reason == reason && e.message.contains(&storage))
            && v.attempts <= 1;
        ensure!(
            ok,
            "expected {reason} naming {storage} after one attempt: {}",
            v.describe()
        );
    }
    let on = Status {
        vms: on.into_iter().cloned().collect(),
        unreadable: Vec::new(),
    };
    verify_all(w, &on).await
}

#[then(regex = r#"^the status lists the (\d+) unreadable manifests$"#)]
fn status_unreadable(w: &mut RolloutWorld, n: usize) -> anyhow::Result<()> {
    let st = w.last_status()?;
    let paths: Vec<&str> = st.unreadable.iter().map(|u| u.path.as_str()).collect();
    ensure!(
        st.unreadable.len() == n,
        "unreadable in the status: {paths:?}"
    );
    ensure!(
        st.unreadable.iter().all(|u| !u.error.is_empty()),
        "an unreadable manifest has no error: {:?}",
        st.unreadable
    );
    Ok(())
}

#[then(regex = r#"^all (\d+) VMs are ready with VMIDs distinct on each site and an IP address$"#)]
async fn all_ready(w: &mut RolloutWorld, n: usize) -> anyhow::Result<()> {
    let st = w.last_status()?.clone();
    let bad: Vec<String> = st
        .vms
        .iter()
        .filter(|v| v.outcome != "ready" || v.vmid.is_none() || v.ip.is_none())
        .map(|v| format!("  {}", v.describe()))
        .collect();
    ensure!(
        bad.is_empty() && st.vms.len() == n,
        "{} VMs reported, not ready with an IP:\n{}\nunreadable: {:?}",
        st.vms.len(),
        bad.join("\n"),
        st.unreadable
    );
    // Each site is its own PVE cluster with its own VMID space.
    let mut ids: Vec<(String, u32)> = st
        .vms
        .iter()
        .filter_map(|v| v.vmid.map(|id| (v.site.clone(), id)))
        .collect();
    ids.sort();
    ids.dedup();
    ensure!(
        ids.len() == n,
        "VMIDs are not distinct within a site: {ids:?}"
    );
    verify_all(w, &st).await
}

/// Successful creates in journal order: (seq, VM name).
/// The successful creates of VMs (`name`) and containers (`hostname`), in journal order.
async fn creates(w: &mut RolloutWorld) -> anyhow::Result<Vec<(u64, String)>> {
    let j = w.deployer_journal().await?;
    let vms = j
        .matching("POST", "/nodes/*/qemu")
        .filter(|e| e.status == 200)
        .filter_map(|e| e.params.get("name").map(|n| (e.seq, n.clone())));
    let cts = j
        .matching("POST", "/nodes/*/lxc")
        .filter(|e| e.status == 200)
        .filter_map(|e| e.params.get("hostname").map(|n| (e.seq, n.clone())));
    let mut all: Vec<(u64, String)> = vms.chain(cts).collect();
    all.sort();
    Ok(all)
}

fn deployment_of(w: &RolloutWorld) -> anyhow::Result<BTreeMap<String, (String, Option<String>)>> {
    let set = provision_harness::manifest::load_dir(&w.manifests_dir())?;
    Ok(set
        .vms
        .iter()
        .map(|l| {
            let d = &l.vm.spec.deployment;
            (
                l.vm.spec.for_provider.name.clone(),
                (d.phase.as_str().to_string(), d.group.clone()),
            )
        })
        .collect())
}

fn check_order(
    created: &[(u64, String)],
    key: impl Fn(&str) -> Option<usize>,
    what: &str,
) -> anyhow::Result<()> {
    let mut last: Option<(usize, &str)> = None;
    for (_, name) in created {
        let Some(k) = key(name) else { continue };
        if let Some((prev, prev_name)) = last {
            ensure!(
                k >= prev,
                "{name} was created after {prev_name}, against the {what} order"
            );
        }
        last = Some((k, name));
    }
    Ok(())
}

#[then(regex = r#"^the VMs were created in the seed's phase order: (.+)$"#)]
async fn phase_order(w: &mut RolloutWorld, order: String) -> anyhow::Result<()> {
    let phases: Vec<String> = order.split(',').map(|s| s.trim().to_string()).collect();
    let dep = deployment_of(w)?;
    let created = creates(w).await?;
    ensure!(
        created.len() == dep.len(),
        "{} creates for {} manifests",
        created.len(),
        dep.len()
    );
    check_order(
        &created,
        |n| {
            dep.get(n)
                .and_then(|(p, _)| phases.iter().position(|x| x == p))
        },
        "phase",
    )
}

#[then(regex = r#"^within the blockchain phase the groups were created in order: (.+)$"#)]
async fn group_order(w: &mut RolloutWorld, order: String) -> anyhow::Result<()> {
    let groups: Vec<String> = order.split(',').map(|s| s.trim().to_string()).collect();
    let dep = deployment_of(w)?;
    let created = creates(w).await?;
    check_order(
        &created,
        |n| {
            dep.get(n)
                .and_then(|(_, g)| g.as_ref())
                .and_then(|g| groups.iter().position(|x| x == g))
        },
        "group",
    )
}

#[then(regex = r#"^"([^"]+)" was created after "([^"]+)" was running$"#)]
async fn after_running(w: &mut RolloutWorld, later: String, first: String) -> anyhow::Result<()> {
    let vmid = w
        .last_status()?
        .vm(&first)
        .map_err(|e| anyhow!(e))?
        .vmid
        .ok_or_else(|| anyhow!("{first} has no VMID"))?;
    let j = w.deployer_journal().await?;
    let started = j
        .matching("POST", &format!("/nodes/*/qemu/{vmid}/status/start"))
        .chain(j.matching("POST", &format!("/nodes/*/lxc/{vmid}/status/start")))
        .find(|e| e.status == 200)
        .map(|e| e.seq)
        .ok_or_else(|| anyhow!("{first} ({vmid}) was never started"))?;
    let created = creates(w).await?;
    let later = w.target_name(&later);
    let at = created
        .iter()
        .find(|(_, n)| *n == later)
        .map(|(s, _)| *s)
        .ok_or_else(|| anyhow!("{later} was never created"))?;
    ensure!(
        at > started,
        "{later} was created (#{at}) before {first} was started (#{started})"
    );
    Ok(())
}

#[then(regex = r#"^VM ("[^"]+") ends (ready|failed with [A-Za-z]+)$"#)]
async fn ends(w: &mut RolloutWorld, name: VmName, outcome: String) -> anyhow::Result<()> {
    let vm = w.last_status()?.vm(&name).map_err(|e| anyhow!(e))?.clone();
    let dir = w.manifests_dir();
    match outcome.strip_prefix("failed with ") {
        None => w.verify_ready(&vm, &dir).await,
        Some(reason) => {
            ensure!(
                vm.outcome == "failed" && vm.error.as_ref().is_some_and(|e| e.reason == reason),
                "expected failure {reason}: {}",
                vm.describe()
            );
            w.verify_nothing_left(&vm, &dir).await
        }
    }
}

/// The plan's figures for `node` (every site's entry: on a real target both of the seed's sites
/// are the one cluster).
fn plan_nodes<'a>(p: &'a Value, node: &str) -> Vec<&'a Value> {
    p["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["node"] == node)
        .collect()
}

/// The capacity the plan used is what the node itself reports (`GET /nodes/{node}/status`:
/// CPU threads, memory), and each storage's "holds VM disks" is its `images` content.
#[then(expr = "the plan shows the figures the cluster reports for node {node}")]
async fn plan_matches_cluster(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    let p = plan(w)?.clone();
    let obs = w.observer(&node).await?;
    let status = obs.get(&format!("/nodes/{node}/status")).await?;
    let threads = status["cpuinfo"]["cpus"].as_u64();
    let memory_mib = status["memory"]["total"].as_u64().map(|b| b >> 20);
    let entries = plan_nodes(&p, &node);
    ensure!(
        !entries.is_empty(),
        "the plan has no figures for node {node}:\n{p}"
    );
    for n in entries {
        ensure!(
            n["cpu_threads"].as_u64() == threads && n["memory_total_mib"].as_u64() == memory_mib,
            "node {node}: the plan says {} CPU threads and {} MiB, the node reports {threads:?} and {memory_mib:?}",
            n["cpu_threads"],
            n["memory_total_mib"]
        );
    }
    let storages = obs.get(&format!("/nodes/{node}/storage")).await?;
    for s in p["storages"].as_array().into_iter().flatten() {
        if s["node"] != node.as_str() {
            continue;
        }
        let name = s["storage"].as_str().unwrap_or_default();
        let real = storages
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["storage"] == name)
            .ok_or_else(|| anyhow!("the plan lists storage {name}, node {node} has none"))?;
        let images = real["content"]
            .as_str()
            .unwrap_or_default()
            .split(',')
            .any(|c| c == "images");
        ensure!(
            s["holds_vm_disks"].as_bool() == Some(images),
            "{node}/{name}: the plan says holds VM disks = {}, its content is {}",
            s["holds_vm_disks"],
            real["content"]
        );
    }
    Ok(())
}

#[then(expr = "the plan shows {int} new VMs asking for {int} cores and {int} GiB on node {node}")]
fn plan_new_vms(
    w: &mut RolloutWorld,
    vms: u64,
    cores: u64,
    gib: u64,
    node: NodeName,
) -> anyhow::Result<()> {
    let node = w.real_node(&node);
    let p = plan(w)?;
    let sum = |k: &str| -> u64 {
        plan_nodes(p, &node)
            .iter()
            .filter_map(|n| n[k].as_u64())
            .sum()
    };
    let got = (
        sum("new_vms"),
        sum("requested_cores"),
        sum("requested_memory_mib") / 1024,
    );
    ensure!(
        got == (vms, cores, gib),
        "node {node}: the plan counts new VMs/cores/memory GiB = {got:?}, expected {:?}",
        (vms, cores, gib)
    );
    Ok(())
}
