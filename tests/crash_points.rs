//! `cargo test --test crash_points`: every crash point of a rollout of 2 VMs and a container over
//! both sites — the
//! deployer killed before the fake handles each request and before each answer reaches it, then
//! resumed — must end with exactly one VM per manifest, configured, running, unlocked, no orphan
//! volume, and a state file that agrees with the fake. Also shows that the exploration catches a
//! deployer that ignores the VMID it recorded before its create call.
//!
//! `HARNESS_DEPLOYER_CMD` points it at another deployer (the external-deployer contract); without
//! it, the CLI is also explored through that contract at its create and start calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "crash/mod.rs"]
mod crash;
#[path = "rollout/mod.rs"]
mod rollout;

use std::sync::Arc;

use crash::{Explorer, Verdict, forgets_recorded_vmid};
use rollout::adapter::{Deployer, External};
use rollout::manifest::VmManifest;

fn the_guests() -> Vec<VmManifest> {
    vec![
        VmManifest::standard("nginx-proxy-vm", "ml110-01", "site-1"),
        VmManifest::standard("cloudflare-tunnel-vm", "r630-01", "site-2"),
        VmManifest::container("cache-ct", "r630-01", "site-2"),
    ]
}

fn explorer(deployer: Option<Arc<dyn Deployer>>) -> Explorer {
    Explorer {
        vms: the_guests(),
        concurrency: 2,
        parallel: 4,
        deployer,
    }
}

#[tokio::main]
async fn main() {
    provision_harness::pve::tls::ensure_crypto_provider();
    let mut failed = false;

    let ex = Arc::new(explorer(None));
    let points = ex.learn().await.expect("learning the rollout's requests");
    assert!(
        points.len() >= 20 || std::env::var("HARNESS_CRASH_POINT").is_ok(),
        "a rollout of three guests sends far more than {} distinct requests",
        points.len()
    );
    let report = Arc::clone(&ex)
        .explore_all(points)
        .await
        .expect("exploring crash points");
    println!("{}", report.render());
    let held = report.count(|v| matches!(v, Verdict::Held { .. }));
    if !report.failed().is_empty() {
        eprintln!("crash points failed for the deployer under test");
        failed = true;
    }
    // Most points must actually be reached: an exploration that never kills proves nothing.
    if held * 4 < report.explored.len() * 3 {
        eprintln!(
            "only {held} of {} crash points were reached and held",
            report.explored.len()
        );
        failed = true;
    }

    // The mutant that ignores its recorded VMID (issue: resume after a kill made a duplicate)
    // must be caught, at the point that exposed the bug: the answer to the create call lost.
    if std::env::var("HARNESS_DEPLOYER_CMD").is_err() {
        let mutant: Arc<dyn Deployer> = Arc::new(forgets_recorded_vmid());
        let ex = Arc::new(explorer(Some(mutant)));
        let points = ex.learn().await.expect("learning the mutant's requests");
        let creates: Vec<_> = points
            .into_iter()
            .filter(|p| {
                p.method == "POST" && (p.pattern.ends_with("/qemu") || p.pattern.ends_with("/lxc"))
            })
            .collect();
        let filtered = std::env::var("HARNESS_CRASH_POINT").is_ok();
        assert!(
            !creates.is_empty() || filtered,
            "the rollout sends a create call"
        );
        let report = ex.explore_all(creates).await.expect("exploring the mutant");
        println!(
            "mutant that ignores the recorded VMID:\n{}",
            report.render()
        );
        if report.failed().is_empty() && !filtered {
            eprintln!("the exploration did not catch the mutant that ignores the recorded VMID");
            failed = true;
        }
    }
    // The same exploration through the external-deployer contract: this repository's CLI
    // behind `tests/rollout/cli-deployer.sh`, killed with SIGKILL, at its create and start calls.
    if std::env::var("HARNESS_DEPLOYER_CMD").is_err() {
        let cli = format!(
            "PROVISION_HARNESS_BIN={} {}/tests/rollout/cli-deployer.sh",
            env!("CARGO_BIN_EXE_provision-harness"),
            env!("CARGO_MANIFEST_DIR")
        );
        let external: Arc<dyn Deployer> = Arc::new(External { command: cli });
        let ex = Arc::new(explorer(Some(external)));
        let points = ex.learn().await.expect("learning the CLI's requests");
        let writes: Vec<_> = points
            .into_iter()
            .filter(|p| {
                p.method == "POST"
                    && (p.pattern.ends_with("/qemu")
                        || p.pattern.ends_with("/lxc")
                        || p.pattern.ends_with("/status/start"))
            })
            .collect();
        assert!(
            writes.len() >= 8 || std::env::var("HARNESS_CRASH_POINT").is_ok(),
            "the CLI's create and start calls on both sites, under four cuts each: {writes:?}"
        );
        let report = ex.explore_all(writes).await.expect("exploring the CLI");
        println!(
            "the CLI through the external-deployer contract:\n{}",
            report.render()
        );
        if !report.failed().is_empty() {
            eprintln!("crash points failed for the CLI under the external-deployer contract");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
