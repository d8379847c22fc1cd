//! Restore against rebuild: seed 002's provisioned 3-node cluster (S1–S6 on vm-lab), then a
//! whole-lab snapshot of it, then restores of that snapshot, each until the cluster again has
//! 3 started members and one leader. Both in the same run, on the same machine. Prints
//! `name: value unit` lines.
//!
//! `cargo bench --bench lab_restore` (about 4 minutes on 2 cores under TCG; needs QEMU).
//! `LAB_RESTORE_RUNS` sets how many restores are timed (default 3; the median is reported).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use provision_harness::cluster::config::StageOptions;
use provision_harness::cluster::lab::Bringup;

const LAB_FILE: &str = "examples/photoncloud-t036/lab.yaml";
const QUORUM_TIMEOUT: Duration = Duration::from_secs(300);

fn line(name: &str, d: Duration) {
    println!("{name}: {:.2} s", d.as_secs_f64());
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let spec = vm_lab::LabSpec::from_file(&root.join(LAB_FILE))?;
    let runs: usize = std::env::var("LAB_RESTORE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(3);

    // The rebuild: what every scenario paid before snapshots.
    let t = Instant::now();
    let mut b = Bringup::start_lab(spec, vm_lab::LabOptions::default()).await?;
    b.check_ssh().await?;
    b.make_certificates()?;
    b.stage_configs(StageOptions::default())?;
    b.provision_over_ssh().await?;
    b.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
    let rebuild = t.elapsed();
    line("lab_rebuild_s1_to_s6", rebuild);
    println!("# accelerator: {}", b.lab.accel().name());

    // The check every restore is followed by, on its own (etcdctl over SSH on each member).
    let t = Instant::now();
    b.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
    let check = t.elapsed();
    line("lab_quorum_check_healthy", check);

    let t = Instant::now();
    let info = b.lab.snapshot("bench").await?;
    line("lab_snapshot_take", t.elapsed());
    println!("lab_snapshot_paused: {} ms", info.paused_ms);

    let mut restores = Vec::new();
    let mut to_quorum = Vec::new();
    for i in 0..runs {
        // Change the cluster so each restore has something to undo.
        let member = b.member("node01")?;
        member
            .put(&b.layout, "bench/after-snapshot", &i.to_string())
            .await?;
        let t = Instant::now();
        b.lab.restore("bench").await?;
        let restored = t.elapsed();
        b.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
        let quorum = t.elapsed();
        if b.member("node02")?
            .get(&b.layout, "bench/after-snapshot")
            .await?
            .is_some()
        {
            anyhow::bail!("restore {i} kept a key written after the snapshot");
        }
        restores.push(restored);
        to_quorum.push(quorum);
    }
    restores.sort();
    to_quorum.sort();
    let restore = restores[restores.len() / 2];
    let quorum = to_quorum[to_quorum.len() / 2];
    line("lab_restore_median", restore);
    line("lab_restore_to_quorum_median", quorum);
    println!(
        "lab_restore_speedup: {:.1} x (rebuild / restore, {runs} restores)",
        rebuild.as_secs_f64() / restore.as_secs_f64()
    );
    println!(
        "lab_restore_to_quorum_speedup: {:.1} x (rebuild incl. its quorum check / restore + quorum check)",
        rebuild.as_secs_f64() / quorum.as_secs_f64()
    );
    b.lab.down().await?;
    Ok(())
}
