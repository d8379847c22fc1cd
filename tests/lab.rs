//! Runner of the `@lab` Gherkin features (`features/lab/`): seed 002's cluster bring-up on real
//! QEMU VMs driven by vm-lab. Scenarios run one at a time (each boots three TCG guests on a
//! 2-core machine); each has its own lab. Reports: `target/cucumber/lab-junit.xml` and
//! `target/cucumber/lab.json`.
//!
//! `cargo test --test lab -- --name 'PXE'` runs one scenario; `LAB_PROVISIONER_CMD` runs the
//! user's own provisioner in place of the built-in one; `LAB_KEEP_ON_FAILURE=1` keeps a failed
//! scenario's lab run directory (serial logs, disks). Features tagged `@provisioned` start
//! each scenario from a snapshot of the provisioned cluster, taken once and restored in about
//! a second; `LAB_REBUILD=1` rebuilds the cluster for every such scenario instead.
//! `LAB_BREAK_ON_FAILURE=1` keeps a failed scenario's lab running, prints how to enter it
//! (`vm-lab shell/ssh/logs`), and waits for Ctrl-C before going on.
//!
//! `--shard I/N` (or `HARNESS_SHARD`) runs shard I of N, its reports in
//! `target/cucumber/shard-I-of-N/`; `--durations FILE` balances the shards by a previous run's
//! `lab.durations.json` (see `tests/support/shard.rs`).

#[path = "lab/params.rs"]
mod params;
#[path = "support/shard.rs"]
mod shard;
#[path = "lab/steps/mod.rs"]
mod steps;
#[path = "rollout/trace_writer.rs"]
mod trace_writer;
#[path = "lab/world.rs"]
mod world;

use std::fs;
use std::sync::Arc;

use cucumber::writer::Stats as _;
use cucumber::{World as _, WriterExt as _, writer};
use futures::FutureExt as _;

use world::LabWorld;

/// Keeps a failed scenario's lab running, says how to get into it, and waits for Ctrl-C.
async fn break_on_failure(scenario: &str, lab: &vm_lab::Lab) {
    let root = lab
        .run_dir()
        .parent()
        .unwrap_or(lab.run_dir())
        .display()
        .to_string();
    let dir = lab
        .run_dir()
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let node = lab.nodes().first().map(|n| n.name()).unwrap_or("node01");
    eprintln!(
        "\n== scenario failed: {scenario}\n== its lab {dir} is still running; from another terminal:\n   \
         vm-lab --run-root {root} status --lab {dir}\n   \
         vm-lab --run-root {root} shell {node} --lab {dir}     (serial console, Ctrl-] leaves)\n   \
         vm-lab --run-root {root} ssh {node} --lab {dir}\n   \
         vm-lab --run-root {root} logs {node} --lab {dir}\n== press Ctrl-C here to go on"
    );
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() {
    // Logs as LAB_LOG says; the cluster provisioner's spans for the scenarios' traces.
    provision_harness::trace::install_with_logs("LAB_LOG");
    // A CI timeout's SIGTERM must not leave lab run directories (disks, snapshot images) behind.
    vm_lab::lab::remove_run_dirs_on_sigterm().expect("SIGTERM handler");
    let root = world::workspace_root();
    let features = root.join("features").join("lab");
    // `--trace` is this runner's, not cucumber's.
    let args = std::env::args().filter(|a| a != "--trace");
    let mut cli = <cucumber::cli::Opts<_, _, _, shard::ShardCli> as clap::Parser>::parse_from(args);
    let filter = shard::CliFilter::take(&mut cli);
    let every: shard::RunnerFilter = Arc::new(|_, _, _| true);
    let plan = shard::Plan::new(&features, &cli.parser, &filter, &every, &cli.custom)
        .await
        .unwrap_or_else(|e| {
            eprintln!("lab: {e:#}");
            std::process::exit(2)
        });
    eprintln!("lab: {}", plan.description);
    let out = plan.reports_dir(&root.join("target").join("cucumber"));
    fs::create_dir_all(&out).expect("target/cucumber must be creatable");
    let junit = fs::File::create(out.join("lab-junit.xml")).expect("JUnit report file");
    let json = fs::File::create(out.join("lab.json")).expect("cucumber JSON report file");
    trace_writer::configure(&out, "lab", trace_writer::trace_requested());
    let summary = LabWorld::cucumber()
        .max_concurrent_scenarios(1)
        .before(|feature, _rule, scenario, world| {
            let reuse = scenario.tags.iter().any(|t| t == "reuses-lab");
            let provisioned = feature
                .tags
                .iter()
                .chain(&scenario.tags)
                .any(|t| t == "provisioned");
            // Steps call the provisioner directly: its spans go to this scenario's trace.
            world.capture.adopt_cluster_spans();
            async move {
                world.reuses_lab = reuse;
                if !reuse {
                    // No later scenario in a row wants it: do not keep three idle VMs running.
                    drop(world::take_spare());
                }
                if !provisioned {
                    drop(world::take_provisioned());
                }
            }
            .boxed_local()
        })
        .after(|feature, _rule, scenario, ev, world| {
            let passed = matches!(ev, cucumber::event::ScenarioFinished::StepPassed);
            let name = scenario.name.clone();
            async move {
                let Some(w) = world else { return };
                let Some(mut b) = w.bringup.take() else {
                    return;
                };
                // The guests' serial logs and QMP events, for the trace and the bundle.
                if trace_writer::wanted(!passed) {
                    let (files, lab) = trace_writer::lab_files(b.lab.run_dir());
                    let mut trace = w.capture.take();
                    trace.extend(lab);
                    let c = trace_writer::Collected {
                        trace,
                        files,
                        world: format!("{w:?}"),
                        ..Default::default()
                    };
                    trace_writer::finish_scenario(feature, scenario, c);
                }
                if !passed && std::env::var_os("LAB_BREAK_ON_FAILURE").is_some() {
                    break_on_failure(&name, &b.lab).await;
                }
                if w.holds_boot_snapshot {
                    // The next direct boot restores the booted lab, whatever this one did.
                    world::keep_booted(b);
                } else if w.holds_snapshot {
                    // The next @provisioned scenario restores its snapshot, whatever this one did.
                    world::keep_provisioned(b);
                } else if w.reuses_lab && passed {
                    world::keep_spare(b);
                } else {
                    if !passed {
                        b.lab.mark_failed();
                    }
                    drop(b);
                }
            }
            .boxed_local()
        })
        .with_writer(
            writer::Basic::stdout()
                .summarized()
                .tee::<LabWorld, _>(writer::JUnit::for_tee(junit, 0))
                .tee::<LabWorld, _>(writer::Json::for_tee(json))
                .tee::<LabWorld, _>(
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
    match plan.write_durations(&out.join("lab.json"), &out.join("lab.durations.json")) {
        Ok(n) => eprintln!("lab: durations of {n} scenarios in {}", out.display()),
        Err(e) => eprintln!("lab: no durations file written: {e:#}"),
    }
    // Tear down the labs the last `@reuses-lab` and `@provisioned` scenarios left before exiting.
    drop(world::take_spare());
    drop(world::take_provisioned());
    drop(world::take_booted());
    // A plain closing line for CI's log reader (cucumber's own summary is above).
    println!(
        "lab steps: {} passed, {} failed, {} skipped",
        summary.passed_steps(),
        summary.failed_steps(),
        summary.skipped_steps()
    );
    if summary.execution_has_failed() {
        std::process::exit(1);
    }
}
