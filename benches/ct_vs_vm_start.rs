//! A container's start against a VM's boot, through the same lab-backed fake, in one run:
//! the deployer makes node01 (a VM booting the project's golden cloud image) and node03 (a
//! container from vm-lab's template with the same etcd, uploaded through PVE's upload route),
//! then each is stopped and started through the PVE API a few times, one guest at a time. For
//! every start it measures, from `POST …/{qemu|lxc}/{vmid}/status/start`:
//!
//! - `start_task`: until the start task ends (QEMU launched; the container's init running),
//! - `address`: until PVE reports the manifest's address (a VM: its guest agent's
//!   `network-get-interfaces`; a container: `…/lxc/{vmid}/interfaces`),
//! - `ssh`: until the guest answers `hostname` over SSH as itself,
//!
//! and prints `name: value unit` lines, every round and the medians, and the VM/CT ratios.
//!
//! `cargo bench --bench ct_vs_vm_start` (about a minute; real guests, needs QEMU).

use std::path::Path;
use std::time::{Duration, Instant};

use provision_harness::cluster::stack::{GuestFamily, StackVm};
use provision_harness::cluster::transport::{NodeShell as _, SshShell};
use provision_harness::deployer::pve::PveClient;
use provision_harness::deployer::pve::guests::ct_primary_ipv4;
use provision_harness::deployer::pve::tasks::TaskWait;
use provision_harness::rehearse::run_against;
use provision_harness::rehearse_stack::{
    SITE, containers, golden_image_qcow2, pve_client, ssh_keypair, stack_options, stack_rollout,
    stack_vms, start_lab_fake,
};

const ROUNDS: usize = 3;
const WITHIN: Duration = Duration::from_secs(600);
const WAIT: TaskWait = TaskWait {
    poll: Duration::from_millis(20),
    timeout: Duration::from_secs(300),
};

/// One start of one guest.
struct Start {
    start_task: Duration,
    address: Duration,
    ssh: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    vm_lab::lab::remove_run_dirs_on_sigterm()?;
    let dir = tempfile::Builder::new().prefix("ct-vs-vm-").tempdir()?;
    vm_lab::lab::remove_on_sigterm(dir.path(), true);
    // Both images built (or found in vm-lab's cache) first: the figures are boots only.
    let d = dir.path().to_path_buf();
    let image = tokio::task::spawn_blocking(move || golden_image_qcow2(&d)).await??;
    let template = tokio::task::spawn_blocking(containers::container_template).await??;
    let (key, public) = ssh_keypair(dir.path())?;
    let mut rollout = stack_rollout(&image, &public)?;
    containers::with_container(&mut rollout, "node03")?;
    rollout
        .manifests
        .vms
        .retain(|m| ["node01", "node03"].contains(&m.vm.spec.for_provider.name.as_str()));
    let options = stack_options();
    let fake = start_lab_fake(&rollout, &options, &dir.path().join("state")).await?;
    let result = measure(&fake, &rollout, &options, &key, &template).await;
    fake.shutdown().await;
    vm_lab::lab::remove_on_sigterm(dir.path(), false);
    result
}

async fn measure(
    fake: &fake_proxmox::FakeProxmox,
    rollout: &provision_harness::rehearse::Rollout,
    options: &provision_harness::rehearse::RehearseOptions,
    key: &Path,
    template: &Path,
) -> anyhow::Result<()> {
    println!("# accelerator: {}", accelerator());
    // Other builds share the machine: the load says how far these figures compare.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("# load average: {}", load.trim());
    }
    let node = &rollout.manifests.vms[0].vm.spec.for_provider.node;
    let t = Instant::now();
    containers::upload_template(fake, SITE, rollout, node, template).await?;
    println!(
        "template_upload: {:.2} s ({} bytes)",
        t.elapsed().as_secs_f64(),
        std::fs::metadata(template)?.len()
    );
    let t = Instant::now();
    let run = run_against(
        fake,
        rollout.label.clone(),
        rollout.manifests.clone(),
        rollout.provider.clone(),
        options,
    )
    .await?;
    anyhow::ensure!(run.deploy.all_ready(), "the deploy: {:#?}", run.deploy);
    println!(
        "deploy_vm_and_ct: {:.1} s (both made and addressed, in parallel)",
        t.elapsed().as_secs_f64()
    );
    let pve = pve_client(fake, SITE, rollout)?;
    let guests = stack_vms(fake, SITE, &run.deploy, &rollout.manifests, key).await?;
    let mut medians = Vec::new();
    for g in &guests {
        let label = match g.family {
            GuestFamily::Qemu => "vm",
            GuestFamily::Lxc => "ct",
        };
        let mut starts = Vec::new();
        for round in 1..=ROUNDS {
            let s = restart(&pve, g).await?;
            println!(
                "{label}_round{round}: start_task {:.2} s, address {:.2} s, ssh {:.2} s",
                s.start_task.as_secs_f64(),
                s.address.as_secs_f64(),
                s.ssh.as_secs_f64()
            );
            starts.push(s);
        }
        let m = [
            median(starts.iter().map(|s| s.start_task)),
            median(starts.iter().map(|s| s.address)),
            median(starts.iter().map(|s| s.ssh)),
        ];
        for (what, d) in ["start_task", "start_to_address", "start_to_ssh"]
            .iter()
            .zip(m)
        {
            println!("{label}_{what}_median: {:.2} s", d.as_secs_f64());
        }
        medians.push(m);
    }
    if let [vm, ct] = medians.as_slice() {
        for (i, what) in ["start_to_address", "start_to_ssh"].iter().enumerate() {
            println!(
                "vm_over_ct_{what}: {:.1} x",
                vm[i + 1].as_secs_f64() / ct[i + 1].as_secs_f64().max(1e-6)
            );
        }
    }
    Ok(())
}

/// Stop (awaited), then one measured start of `g` through the PVE API.
async fn restart(pve: &PveClient, g: &StackVm) -> anyhow::Result<Start> {
    let path = |verb: &str| {
        format!(
            "/nodes/{}/{}/{}/status/{verb}",
            g.node,
            g.family.api(),
            g.vmid
        )
    };
    let upid: String = pve.post(&path("stop"), &[]).await?;
    pve.await_task(&upid, WAIT).await?;
    let t0 = Instant::now();
    let upid: String = pve.post(&path("start"), &[]).await?;
    pve.await_task(&upid, WAIT).await?;
    let start_task = t0.elapsed();
    let want = g.address.to_string();
    loop {
        let seen = match g.family {
            GuestFamily::Qemu => pve
                .agent_interfaces(&g.node, g.vmid)
                .await
                .ok()
                .and_then(|a| a.primary_ipv4()),
            GuestFamily::Lxc => pve
                .ct_interfaces(&g.node, g.vmid)
                .await
                .ok()
                .and_then(|i| ct_primary_ipv4(&i)),
        };
        if seen.as_deref() == Some(want.as_str()) {
            break;
        }
        anyhow::ensure!(t0.elapsed() < WITHIN, "{}: no address {want}", g.name);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let address = t0.elapsed();
    let shell = SshShell::new(g.ssh.clone());
    loop {
        if let Ok(out) = shell.run("hostname", Duration::from_secs(10)).await
            && out.ok()
            && out.stdout.trim() == g.name
        {
            break;
        }
        anyhow::ensure!(t0.elapsed() < WITHIN, "{}: no SSH", g.name);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Start {
        start_task,
        address,
        ssh: t0.elapsed(),
    })
}

fn median(ds: impl Iterator<Item = Duration>) -> Duration {
    let mut v: Vec<Duration> = ds.collect();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// What vm-lab's accelerator probe decided on this machine (its cached verdict).
fn accelerator() -> String {
    let file = vm_lab::image::default_cache_dir().join("accel-probe.json");
    let verdict = std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    match verdict {
        Some(v) if v["kvm_works"] == true => "kvm".into(),
        Some(v) => format!("tcg ({})", v["detail"].as_str().unwrap_or("no KVM")),
        None => "unknown (no probe verdict cached)".into(),
    }
}
