//! Runner of the `@stack` Gherkin features (`features/stack/`): the whole stack end to end. The
//! deployer makes the PhotonCloud nodes through the PVE API of a lab-backed fake-proxmox (each
//! VM a real QEMU guest booting the project's cloud image with the cluster's packages baked in),
//! then the cluster provisioner forms seed 002's cluster on those VMs, restarting them through
//! the PVE API only. Scenarios run one at a time; one that starts from a formed cluster takes
//! over the one an earlier scenario left (if it passed). Reports: `target/cucumber/stack-junit.xml`
//! and `target/cucumber/stack.json`.
//!
//! `cargo test --test stack -- --name 'stopped'` runs one scenario; `--shard I/N` (or
//! `HARNESS_SHARD`) and `--durations FILE` as for the other runners (`tests/support/shard.rs`).

#[path = "stack/containers.rs"]
mod containers;
#[path = "lab/params.rs"]
mod params;
#[path = "support/shard.rs"]
mod shard;
#[path = "stack/steps.rs"]
mod steps;
#[path = "rollout/trace_writer.rs"]
mod trace_writer;
#[path = "stack/world.rs"]
mod world;

use std::fs;
use std::sync::Arc;

use cucumber::writer::Stats as _;
use cucumber::{World as _, WriterExt as _, writer};
use futures::FutureExt as _;

use world::StackWorld;

#[tokio::main]
async fn main() {
    // Logs as STACK_LOG says; the deployer's spans for the scenarios' traces.
    provision_harness::trace::install_with_logs("STACK_LOG");
    // A CI timeout's SIGTERM must not leave the guests' disks and the fake's state behind.
    vm_lab::lab::remove_run_dirs_on_sigterm().expect("SIGTERM handler");
    let root = world::workspace_root();
    let features = root.join("features").join("stack");
    // `--trace` is this runner's, not cucumber's.
    let args = std::env::args().filter(|a| a != "--trace");
    let mut cli = <cucumber::cli::Opts<_, _, _, shard::ShardCli> as clap::Parser>::parse_from(args);
    let filter = shard::CliFilter::take(&mut cli);
    let every: shard::RunnerFilter = Arc::new(|_, _, _| true);
    let plan = shard::Plan::new(&features, &cli.parser, &filter, &every, &cli.custom)
        .await
        .unwrap_or_else(|e| {
            eprintln!("stack: {e:#}");
            std::process::exit(2)
        });
    eprintln!("stack: {}", plan.description);
    let out = plan.reports_dir(&root.join("target").join("cucumber"));
    fs::create_dir_all(&out).expect("target/cucumber must be creatable");
    let junit = fs::File::create(out.join("stack-junit.xml")).expect("JUnit report file");
    let json = fs::File::create(out.join("stack.json")).expect("cucumber JSON report file");
    trace_writer::configure(&out, "stack", trace_writer::trace_requested());
    let summary = StackWorld::cucumber()
        .max_concurrent_scenarios(1)
        .before(|_feature, _rule, scenario, world| {
            let wants_formed = scenario
                .steps
                .iter()
                .any(|s| s.value == "the cluster formed on the deployer's VMs");
            // Steps call the provisioner directly: its spans go to this scenario's trace.
            world.capture.adopt_cluster_spans();
            async move {
                if !wants_formed {
                    // No scenario next wants it: do not keep three idle guests running.
                    if let Some(f) = world::take_formed() {
                        f.target.fake.shutdown().await;
                    }
                }
            }
            .boxed_local()
        })
        .after(|feature, _rule, scenario, ev, world| {
            let passed = matches!(ev, cucumber::event::ScenarioFinished::StepPassed);
            let keeps = scenario.tags.iter().any(|t| t == "leaves-cluster-formed");
            async move {
                let Some(w) = world else { return };
                if trace_writer::wanted(!passed) {
                    trace_writer::finish_scenario(feature, scenario, w.collect_trace().await);
                }
                if passed
                    && keeps
                    && let (Some(target), Some(deploy), Some(cluster)) =
                        (w.target.take(), w.deploy.take(), w.cluster.take())
                {
                    world::keep_formed(world::Formed {
                        target,
                        deploy,
                        cluster,
                    });
                    return;
                }
                w.shutdown().await;
            }
            .boxed_local()
        })
        .with_writer(
            writer::Basic::stdout()
                .summarized()
                .tee::<StackWorld, _>(writer::JUnit::for_tee(junit, 0))
                .tee::<StackWorld, _>(writer::Json::for_tee(json))
                .tee::<StackWorld, _>(
                    trace_writer::StepTrace::default()
                        .discard_stats_writes()
                        .discard_arbitrary_writes(),
                )
                .normalized(),
        )
        .fail_on_skipped()
        .with_cli(cli)
        .filter_run(features, plan.filter(filter, every))
        .await;
    match plan.write_durations(&out.join("stack.json"), &out.join("stack.durations.json")) {
        Ok(n) => eprintln!("stack: durations of {n} scenarios in {}", out.display()),
        Err(e) => eprintln!("stack: no durations file written: {e:#}"),
    }
    if let Some(f) = world::take_formed() {
        f.target.fake.shutdown().await;
    }
    world::remove_image();
    println!(
        "stack steps: {} passed, {} failed, {} skipped",
        summary.passed_steps(),
        summary.failed_steps(),
        summary.skipped_steps()
    );
    if summary.execution_has_failed() {
        std::process::exit(1);
    }
}
