//! Tenants benchmark: one fake-proxmox server, 100 tenants, the seed rollout (the deployer on
//! the embedded manifests, as `rehearse` runs it) against every tenant at once; then the same
//! with the fixed rollout, whose VMs all get ready, on 100 tenants of its scenario. Prints
//! `name: value unit` lines: tenant creation time, wall time of the 100 rollouts, per-rollout
//! p50 and max, the server's resident and peak memory. Every rollout must end as the same
//! rollout ends against a fake of its own. Run: `cargo bench --bench tenants`.
//!
//! The deployer's waits are `rehearse`'s, but longer in real time (see `options`): the
//! figure is the server's throughput, not a timeout of a starved client.
//!
//! The server runs in a child process (this binary re-executed with `--serve-fake`), so its
//! memory figures are its own, not the deployers'.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    ChildFake, SERVE_FAKE, fake_builder, options, point_at, serve_fake, shared, status_kib,
};
use fake_proxmox::{ControlClient, TenantInfo};
use provision_harness::deploy::{Deployer, RolloutResult};
use provision_harness::rehearse::{RehearseOptions, Rollout, fixed_rollout, run, seed_rollout};

const TENANTS: usize = 100;

/// A rollout against one tenant's sites; its result and wall time.
async fn rollout(
    rollout: Rollout,
    tenant: &TenantInfo,
    opts: &RehearseOptions,
) -> (RolloutResult, Duration) {
    let mut provider = rollout.provider;
    point_at(&mut provider, tenant);
    let mut deploy = opts.deploy.clone();
    deploy.concurrency = opts.concurrency;
    let t = Instant::now();
    let result = Deployer::new(provider, deploy)
        .unwrap()
        .deploy(&rollout.manifests)
        .await
        .unwrap();
    (result, t.elapsed())
}

fn seed() -> Rollout {
    seed_rollout(None).unwrap()
}

fn fixed() -> Rollout {
    fixed_rollout().unwrap()
}

/// One phase: the rollout against a fake of its own (the reference), then against
/// `TENANTS` tenants of the server at once (each made from the rollout's scenario); figures
/// prefixed with `label`; the tenants deleted at the end.
fn phase(
    rt: &tokio::runtime::Runtime,
    ctl: &ControlClient,
    pid: u32,
    label: &str,
    make: fn() -> Rollout,
    opts: &RehearseOptions,
) {
    let reference = rt.block_on(run(make(), opts)).unwrap();
    let want = outcomes(&reference.deploy);
    let sum = &reference.deploy.summary;
    println!(
        "{label}_reference_rollout: {} vms ready, {} failed, {} ms (a fake of its own)",
        sum.ready, sum.failed, reference.deploy.elapsed_ms
    );
    // Each tenant's snippets shares in a directory of its own.
    let shares = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (tenants, rollouts): (Vec<TenantInfo>, Vec<Rollout>) = rt.block_on(async {
        let mut out = Vec::new();
        for i in 0..TENANTS {
            let (r, req) = shared(make(), &shares.path().join(i.to_string()));
            out.push((ctl.create_tenant(&req).await.unwrap(), r));
        }
        out.into_iter().unzip()
    });
    println!(
        "{label}_create_{TENANTS}_tenants_wall: {} ms",
        t.elapsed().as_millis()
    );
    println!(
        "{label}_server_rss_{TENANTS}_tenants_idle: {} KiB",
        status_kib(pid, "VmRSS:")
    );
    let t = Instant::now();
    let results: Vec<(RolloutResult, Duration)> = rt.block_on(async {
        let runs = tenants
            .iter()
            .zip(rollouts)
            .map(|(tn, r)| rollout(r, tn, opts));
        futures::future::join_all(runs).await
    });
    let wall = t.elapsed();
    let mut times: Vec<u128> = results.iter().map(|(_, d)| d.as_millis()).collect();
    times.sort_unstable();
    println!(
        "{label}_{TENANTS}_rollouts_at_once_wall: {} ms",
        wall.as_millis()
    );
    println!("{label}_rollout_p50: {} ms", times[times.len() / 2]);
    println!("{label}_rollout_max: {} ms", times[times.len() - 1]);
    println!(
        "{label}_server_rss_after_rollouts: {} KiB",
        status_kib(pid, "VmRSS:")
    );
    println!("{label}_server_peak_rss: {} KiB", status_kib(pid, "VmHWM:"));
    let differ = results.iter().filter(|(r, _)| outcomes(r) != want).count();
    println!(
        "{label}_rollouts_as_reference: {}/{TENANTS} ({} vms each)",
        TENANTS - differ,
        want.len()
    );
    assert_eq!(
        differ, 0,
        "{label}: some rollouts ended otherwise than the reference"
    );
    let t = Instant::now();
    rt.block_on(async {
        for tn in &tenants {
            ctl.delete_tenant(&tn.id).await.unwrap();
        }
    });
    println!(
        "{label}_delete_{TENANTS}_tenants_wall: {} ms",
        t.elapsed().as_millis()
    );
    println!(
        "{label}_server_rss_after_delete: {} KiB",
        status_kib(pid, "VmRSS:")
    );
}

/// What must be the same for every run: each VM's outcome.
fn outcomes(r: &RolloutResult) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = r
        .vms
        .iter()
        .map(|o| (o.name.clone(), format!("{:?}", o.outcome)))
        .collect();
    v.sort();
    v
}

fn main() {
    let opts = options();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SERVE_FAKE) {
        let builder = fake_builder(opts.clock_factor).max_tenants(TENANTS);
        serve_fake(std::path::Path::new(&args[2]), builder);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let fake = ChildFake::start(|_| {});
    let ctl = ControlClient::new(&fake.url, Some(&fake.cert_pem));
    let pid = fake.pid();
    println!("server_rss_idle: {} KiB", status_kib(pid, "VmRSS:"));

    // The seed rollout as written (most VMs fail on the seed's own problems, quickly), then
    // the fixed rollout (every VM created, started and seen with an address).
    phase(&rt, &ctl, pid, "seed", seed, &opts);
    phase(&rt, &ctl, pid, "fixed", fixed, &opts);
    fake.stop();
}
