//! Benchmark of seed 002's bring-up on vm-lab, printing `name: value unit` lines:
//! - the wall time of each step S1–S6 and of the whole bring-up;
//! - boot-to-quorum of the provisioned nodes (power on from netboot with their disks until every
//!   member's console reports it is healthy), through the driver;
//! - the same boot-to-quorum for a plain QEMU run of the same three nodes and disks, without
//!   the driver or the provisioner (the QEMU command lines vm-lab recorded, started by `sh` in a
//!   fresh namespace, watched only through the serial log files), and the ratio of the two.
//!
//! `cargo bench --bench cluster_bringup` (about 3 minutes here; runs the lab, needs QEMU).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use provision_harness::cluster::config::StageOptions;
use provision_harness::cluster::etcd::sh_quote;
use provision_harness::cluster::lab::Bringup;
use provision_harness::cluster::provision::HEALTHY_MARKER;

const LAB_FILE: &str = "examples/photoncloud-t036/lab.yaml";
const QUORUM_TIMEOUT: Duration = Duration::from_secs(300);

fn line(name: &str, d: Duration) {
    println!("{name}: {:.1} s", d.as_secs_f64());
}

/// Waits until every serial log shows `marker` after its last `VMLAB-INIT` (the current boot).
async fn wait_marker(logs: &[PathBuf], marker: &str, timeout: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let mut all = true;
        for l in logs {
            let text = String::from_utf8_lossy(&std::fs::read(l).unwrap_or_default()).into_owned();
            let boot = text.rsplit("VMLAB-INIT").next().unwrap_or("");
            if !text.contains("VMLAB-INIT") || !boot.contains(marker) {
                all = false;
            }
        }
        if all {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("{marker:?} not on every console within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let spec = vm_lab::LabSpec::from_file(&root.join(LAB_FILE))?;

    // S1–S6 through the harness.
    let total = Instant::now();
    let mut b = Bringup::start_lab(spec, vm_lab::LabOptions::default()).await?;
    b.check_ssh().await?;
    b.make_certificates()?;
    b.stage_configs(StageOptions::default())?;
    b.provision_over_ssh().await?;
    b.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
    let s1_s6 = total.elapsed();
    for (step, d) in &b.timings {
        line(&format!("cluster_bringup_{step}"), *d);
    }
    line("cluster_bringup_s1_to_s6", s1_s6);
    println!("# accelerator: {}", b.lab.accel().name());

    // Boot-to-quorum through the driver: power-cycle the provisioned nodes.
    let logs: Vec<PathBuf> = b
        .lab
        .nodes()
        .iter()
        .map(|n| n.paths().serial_log.clone())
        .collect();
    let t = Instant::now();
    b.restart_all().await?;
    wait_marker(&logs, HEALTHY_MARKER, QUORUM_TIMEOUT).await?;
    let driver = t.elapsed();
    line("cluster_boot_to_quorum_driver", driver);

    // The plain run: the same disks and QEMU command lines, no driver.
    let bench_dir = tempfile::Builder::new()
        .prefix("cluster-bench-")
        .tempdir()?;
    let run_dir = b.lab.run_dir().to_string_lossy().into_owned();
    let mut argvs = Vec::new();
    let names: Vec<String> = b.lab.nodes().iter().map(|n| n.name().to_owned()).collect();
    for n in b.lab.nodes() {
        n.kill().await?;
    }
    for n in b.lab.nodes() {
        let dir = bench_dir.path().join(n.name());
        std::fs::create_dir_all(&dir)?;
        // The disk and the (snapshot) state image the recorded command line opens.
        for img in [&n.paths().disk, &n.paths().state] {
            let dst = dir.join(img.file_name().context("image file name")?);
            std::fs::copy(img, &dst).with_context(|| format!("copy {}", img.display()))?;
        }
        let argv: Vec<String> = serde_json::from_str(&std::fs::read_to_string(&n.paths().argv)?)?;
        let bench = bench_dir.path().to_string_lossy().into_owned();
        argvs.push(
            argv.iter()
                .map(|a| sh_quote(&a.replace(&run_dir, &bench)))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    drop(b);
    let plain = plain_run(bench_dir.path(), &names, &argvs).await?;
    line("cluster_boot_to_quorum_plain_qemu", plain);
    println!(
        "cluster_boot_to_quorum_ratio: {:.2} x",
        driver.as_secs_f64() / plain.as_secs_f64()
    );
    Ok(())
}

/// Starts the three QEMUs with `sh` in a fresh user + network + PID namespace (so the multicast
/// L2 stays private and everything dies with it) and times them to quorum by their consoles.
async fn plain_run(dir: &Path, names: &[String], argvs: &[String]) -> anyhow::Result<Duration> {
    let mut script = String::from("ip link set lo up\n");
    for a in argvs {
        script.push_str(a);
        script.push_str(" &\n");
    }
    script.push_str("wait\n");
    let logs: Vec<PathBuf> = names
        .iter()
        .map(|n| dir.join(n).join("serial.log"))
        .collect();
    let t = Instant::now();
    let mut child = tokio::process::Command::new("unshare")
        .args([
            "-r",
            "-n",
            "-p",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("unshare")?;
    let r = wait_marker(&logs, HEALTHY_MARKER, QUORUM_TIMEOUT).await;
    let elapsed = t.elapsed();
    let _ = child.kill().await;
    r.map(|_| elapsed)
}
