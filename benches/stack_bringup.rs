//! Benchmark of the whole stack against the lab alone, in one run, printing `name: value unit`
//! lines: the wall time of `@stack` scenarios 1+2 (ProxmoxVM manifests → the deployer through a
//! lab-backed fake's PVE API → real guests → the cluster provisioner → quorum, restarts through
//! the API), the wall time of vm-lab's own S1–S6 bring-up of the same three nodes (netboot, no
//! PVE API), and the ratio of the two. The floor for the ratio is 1.5.
//!
//! `cargo bench --bench stack_bringup` (a few minutes; runs real guests, needs QEMU).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use provision_harness::cluster::config::StageOptions;
use provision_harness::cluster::lab::Bringup;
use provision_harness::rehearse_stack::{rehearse_stack, stack_options};

const LAB_FILE: &str = "examples/photoncloud-t036/lab.yaml";
const QUORUM_TIMEOUT: Duration = Duration::from_secs(300);

fn line(name: &str, d: Duration) {
    println!("{name}: {:.1} s", d.as_secs_f64());
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    vm_lab::lab::remove_run_dirs_on_sigterm()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));

    // Warm the image caches first, so neither side pays for a build: both images are cached
    // after one run of each, and this run's figures are boots and work only.
    let warm = tempfile::tempdir()?;
    let p = warm.path().to_path_buf();
    tokio::task::spawn_blocking(move || provision_harness::rehearse_stack::golden_image_qcow2(&p))
        .await??;

    // The whole stack: manifests to quorum.
    let quiet = |_: &str| {};
    let t = Instant::now();
    let report = rehearse_stack(&stack_options(), &quiet).await?;
    let stack = t.elapsed();
    for (phase, ms) in &report.phases_ms {
        line(
            &format!("stack_{phase}"),
            Duration::from_millis(u64::try_from(*ms).unwrap_or(0)),
        );
    }
    line("stack_manifests_to_quorum", stack);

    // vm-lab's S1–S6 of the same three nodes.
    let spec = vm_lab::LabSpec::from_file(&root.join(LAB_FILE))?;
    let t = Instant::now();
    let mut b = Bringup::start_lab(spec, vm_lab::LabOptions::default()).await?;
    b.check_ssh().await?;
    b.make_certificates()?;
    b.stage_configs(StageOptions::default())?;
    b.provision_over_ssh().await?;
    b.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
    let lab = t.elapsed();
    line("lab_s1_to_s6", lab);
    println!("# accelerator: {}", b.lab.accel().name());
    drop(b);
    println!(
        "stack_over_lab_ratio: {:.2} x",
        stack.as_secs_f64() / lab.as_secs_f64()
    );
    Ok(())
}
