//! `cargo bench --bench crash_points`: crash-point exploration over a larger rollout than the
//! test's (`HARNESS_CRASH_VMS` VMs, default 6, spread over both sites), printing how many points
//! were explored, which failed, and what one point costs. `HARNESS_DEPLOYER_CMD` aims it at
//! another deployer through the external-deployer contract; `HARNESS_CRASH_POINT=TEXT` re-runs
//! the points whose description contains TEXT.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/crash/mod.rs"]
mod crash;
#[path = "../tests/rollout/mod.rs"]
mod rollout;

use std::sync::Arc;
use std::time::Instant;

use crash::{Explorer, Verdict};
use rollout::manifest::VmManifest;

#[tokio::main]
async fn main() {
    provision_harness::pve::tls::ensure_crypto_provider();
    let n: usize = std::env::var("HARNESS_CRASH_VMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let vms: Vec<VmManifest> = (0..n)
        .map(|i| {
            let (node, site) = if i % 2 == 0 {
                ("ml110-01", "site-1")
            } else {
                ("r630-01", "site-2")
            };
            VmManifest::standard(&format!("crash-vm-{i:02}"), node, site)
        })
        .collect();
    let ex = Arc::new(Explorer {
        vms,
        concurrency: 4,
        parallel: 4,
        deployer: None,
    });
    let t = Instant::now();
    let points = ex.learn().await.expect("learning the rollout");
    let learned = t.elapsed();
    let t = Instant::now();
    let report = Arc::clone(&ex)
        .explore_all(points)
        .await
        .expect("exploring");
    let took = t.elapsed();
    println!("{}", report.render());
    let total = report.explored.len().max(1);
    println!(
        "rollout of {n} VMs: learning run {:.1} s; {} crash points in {:.1} s ({:.2} s per point, 4 at a time)",
        learned.as_secs_f64(),
        report.explored.len(),
        took.as_secs_f64(),
        took.as_secs_f64() / total as f64 * 4.0
    );
    let held = report.count(|v| matches!(v, Verdict::Held { .. }));
    println!("held {held}, failed {}", report.failed().len());
    if !report.failed().is_empty() {
        std::process::exit(1);
    }
}
