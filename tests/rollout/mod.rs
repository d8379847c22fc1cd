//! The Gherkin acceptance specs of seed 000's Proxmox rollout (`features/rollout/`), run by
//! cucumber-rs: the World, the deployer adapter, journal helpers, and the steps.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Shared by two test binaries (the runner and the harness self-test); each uses a part.
#![allow(dead_code)]

pub mod adapter;
pub mod claims;
pub mod journal;
pub mod journal_checks;
pub mod manifest;
pub mod mutants;
pub mod params;
pub mod pve;
pub mod recorder;
pub mod resume;
pub mod score;
#[path = "../support/shard.rs"]
pub mod shard;
pub mod status;
mod steps;
pub mod target;
pub mod trace;
pub mod trace_writer;
pub mod world;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use cucumber::{StatsWriter as _, World as _, WriterExt as _, writer};
use futures::FutureExt as _;

pub use world::RolloutWorld;

pub fn features_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("features/rollout")
}

/// This run's reports dir once [`run_all`] has set it (a shard's own subdirectory).
static REPORTS: OnceLock<PathBuf> = OnceLock::new();

/// Where a runner other than `cargo test --test rollout` keeps its reports (set before the run).
static BASE: OnceLock<PathBuf> = OnceLock::new();

/// Puts this process's reports under `dir` instead of `<target dir>/cucumber`.
pub fn set_reports_base(dir: PathBuf) {
    let _ = BASE.set(dir);
}

/// `<target dir>/cucumber`: next to the build, wherever CARGO_TARGET_DIR points
/// (`…/cucumber/shard-I-of-N` in a sharded run).
pub fn reports_dir() -> PathBuf {
    if let Some(d) = REPORTS.get() {
        return d.clone();
    }
    if let Some(d) = BASE.get() {
        return d.clone();
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("cucumber")
}

/// Scenarios a real PVE can run: everything not tagged `@fake` (which needs the control API or
/// the journal) and not `@wip`.
pub fn real_pve_selected(tags: &[String]) -> bool {
    !tags.iter().any(|t| t == "fake" || t == "wip")
}

/// Why a scenario does not run against a real target.
pub const FAKE_ONLY_REASON: &str = "tagged @fake: it needs the fake's control API (fault injection, the clock, a scenario file, or the fake's own journal)";

/// The after-hook. Against a real target, whether the scenario passed or failed: the deployer's
/// `destroy`, then every VM still named with the scenario's prefix removed (what a failed or
/// killed deployer left), and the scenario's cassette written.
pub fn after_hook<'a>(
    f: &'a cucumber::gherkin::Feature,
    _r: Option<&'a cucumber::gherkin::Rule>,
    sc: &'a cucumber::gherkin::Scenario,
    ev: &'a cucumber::event::ScenarioFinished,
    w: Option<&'a mut RolloutWorld>,
) -> futures::future::LocalBoxFuture<'a, ()> {
    async move {
        let Some(w) = w else { return };
        if let Some((_, h)) = w.background.take() {
            h.abort();
            let _ = h.await;
        }
        // The trace and the failure bundle: read before the fake stops.
        use cucumber::event::ScenarioFinished as Fin;
        let failed = matches!(ev, Fin::StepFailed(..) | Fin::BeforeHookFailed(_));
        if trace_writer::wanted(failed) {
            trace_writer::finish_scenario(f, sc, trace::collect(w).await);
        }
        let real = match &w.target {
            Some(world::Target::Real(r)) => Some(r.clone()),
            _ => None,
        };
        if let Some(real) = real {
            if (!w.manifests.is_empty() || !w.raw_manifests.is_empty())
                && let Err(e) = w.run(adapter::Action::Destroy).await
            {
                eprintln!("real target: destroy after \"{}\" failed: {e:#}", sc.name);
            }
            if let Some(rec) = w.recorder.take() {
                let prefix = w.map.as_ref().map_or("unnamed", |m| m.prefix.as_str());
                let file = reports_dir()
                    .join("cassettes")
                    .join(format!("{}.json", prefix.trim_end_matches('-')));
                if let Err(e) = rec.write_cassette(&file, &sc.name) {
                    eprintln!("real target: no cassette for \"{}\": {e:#}", sc.name);
                }
                rec.shutdown();
            }
            if let Some(map) = &w.map {
                match real.sweep(&map.prefix).await {
                    Ok(r) if !r.vms.is_empty() => eprintln!(
                        "real target: removed {} VM(s) left after \"{}\": {:?}",
                        r.vms.len(),
                        sc.name,
                        r.vms
                            .iter()
                            .map(|v| format!("{} {} {}", v.vmid, v.name, v.outcome))
                            .collect::<Vec<_>>()
                    ),
                    Ok(_) => {}
                    Err(e) => eprintln!("real target: cleanup of {}* failed: {e:#}", map.prefix),
                }
            }
        }
        if let Some(world::Target::Fake(fake)) = w.target.take() {
            fake.shutdown().await;
        }
    }
    .boxed_local()
}

/// What a runner must still do when Ctrl-C ends a real-target run (exit runs no destructors).
static BEFORE_INTERRUPTED_EXIT: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// Registers `f` to run when Ctrl-C ends a real-target run, after its cleanup (e.g. stop a
/// server the runner started).
pub fn before_interrupted_exit(f: impl Fn() + Send + Sync + 'static) {
    let _ = BEFORE_INTERRUPTED_EXIT.set(Box::new(f));
}

/// How a run ended: the process exit code the runner would use (0 passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteOutcome {
    pub code: i32,
}

/// The runner as `cargo test --test rollout` uses it: concurrent scenarios, undefined or skipped
/// steps fail, JUnit XML, cucumber JSON and durations in `<target>/cucumber/`; `--shard I/N`
/// runs one shard of them (`tests/support/shard.rs`).
pub async fn run_all() {
    let outcome = run_suite().await;
    if outcome.code != 0 {
        std::process::exit(outcome.code);
    }
}

/// Runs the suite (on its own fakes, or on the real target of [`target::RealPve::current`]) and
/// returns how it ended, without exiting.
pub async fn run_suite() -> SuiteOutcome {
    let fail = |code| SuiteOutcome { code };
    // `--trace` is this runner's, not cucumber's.
    let args = std::env::args().filter(|a| a != "--trace");
    let mut cli = <cucumber::cli::Opts<_, _, _, shard::ShardCli> as clap::Parser>::parse_from(args);
    let filter = shard::CliFilter::take(&mut cli);
    let real_target = target::RealPve::current();
    let real = real_target.is_some();
    let include_wip = std::env::var("HARNESS_INCLUDE_WIP").is_ok_and(|v| v == "1");
    // Scenarios left out on a real target, reported with the reason.
    let fake_only: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let seen = Arc::clone(&fake_only);
    let runner: shard::RunnerFilter = Arc::new(move |feat, rule, sc| {
        let mut tags: Vec<String> = feat.tags.clone();
        if let Some(r) = rule {
            tags.extend(r.tags.iter().cloned());
        }
        tags.extend(sc.tags.iter().cloned());
        if real {
            let run = real_pve_selected(&tags);
            if !run && tags.iter().any(|t| t == "fake") {
                let key = format!("{}:{} {}", feat.name, sc.position.line, sc.name);
                if let Ok(mut s) = seen.lock() {
                    s.insert(key);
                }
            }
            return run;
        }
        include_wip || !tags.iter().any(|t| t == "wip")
    });
    let plan =
        match shard::Plan::new(&features_dir(), &cli.parser, &filter, &runner, &cli.custom).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("rollout: {e:#}");
                return fail(2);
            }
        };
    eprintln!("rollout: {}", plan.description);
    if let Some(t) = &real_target {
        println!(
            "real target {} (node {}): VM names prefixed with {}sNN- (NN: the scenario), {} scenario(s) at once",
            t.url, t.node, t.run_prefix, t.parallel
        );
        println!(
            "if this run is interrupted, remove what it left with: {}",
            t.cleanup_command()
        );
    }
    // Ctrl-C: remove what the run made so far before exiting (the cleanup command is the remedy
    // when even this does not run: SIGKILL, a lost machine).
    let on_interrupt = real_target.clone().map(|t| {
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "real target: interrupted; removing every VM named {}*",
                    t.run_prefix
                );
                match t.sweep(&t.run_prefix).await {
                    Ok(r) => eprintln!("real target: removed {} VM(s)", r.vms.len()),
                    Err(e) => eprintln!(
                        "real target: cleanup failed ({e:#}); run: {}",
                        t.cleanup_command()
                    ),
                }
                if let Some(f) = BEFORE_INTERRUPTED_EXIT.get() {
                    f();
                }
                std::process::exit(130);
            }
        })
    });
    let reports = plan.reports_dir(&reports_dir());
    let _ = REPORTS.set(reports.clone());
    if let Err(e) = std::fs::create_dir_all(&reports) {
        eprintln!("rollout: creating {}: {e}", reports.display());
        return fail(2);
    }
    // Start from an empty HTML dir, so the check at the end counts this run's timelines only.
    let html = reports.join("html");
    let _ = std::fs::remove_dir_all(&html);
    if real {
        // This run's cassettes only.
        let _ = std::fs::remove_dir_all(reports.join("cassettes"));
    }
    provision_harness::trace::install();
    trace_writer::configure(&reports, "rollout", trace_writer::trace_requested());
    let junit = std::fs::File::create(reports.join("rollout.junit.xml")).expect("junit report");
    let json = std::fs::File::create(reports.join("rollout.cucumber.json")).expect("json report");
    let summary = RolloutWorld::cucumber()
        .max_concurrent_scenarios(real_target.as_ref().map_or(8, |t| t.parallel.max(1)))
        .after(after_hook)
        .with_writer(
            writer::Basic::stdout()
                .summarized()
                .tee::<RolloutWorld, _>(writer::JUnit::for_tee(junit, 0))
                .tee::<RolloutWorld, _>(writer::Json::for_tee(json))
                .tee::<RolloutWorld, _>(
                    trace_writer::StepTrace::default()
                        .discard_stats_writes()
                        .discard_arbitrary_writes(),
                )
                .normalized(),
        )
        .fail_on_skipped()
        .with_cli(cli)
        .filter_run(features_dir(), plan.filter(filter, runner))
        .await;
    let durations = reports.join("rollout.durations.json");
    if let Err(e) = plan.write_durations(&reports.join("rollout.cucumber.json"), &durations) {
        eprintln!("rollout: no durations file written: {e:#}");
    }
    if let Some(h) = on_interrupt {
        h.abort();
    }
    if let Some(t) = &real_target {
        let skipped = fake_only.lock().map(|s| s.clone()).unwrap_or_default();
        println!(
            "real target: {} scenario(s) skipped for this target, {FAKE_ONLY_REASON}:",
            skipped.len()
        );
        for s in &skipped {
            println!("  skipped: {s}");
        }
        // What no scenario's own cleanup caught (a World that never reached its after-hook).
        match t.sweep(&t.run_prefix).await {
            Ok(r) if !r.vms.is_empty() => {
                eprintln!(
                    "real target: removed {} VM(s) the run left: {:?}",
                    r.vms.len(),
                    r.vms
                );
            }
            Ok(_) => println!("real target: nothing named {}* is left", t.run_prefix),
            Err(e) => eprintln!("real target: the final cleanup failed: {e:#}"),
        }
    }
    // Exit on the summary ourselves: with a `discard_stats_writes()` in the writer chain,
    // `filter_run_and_exit` saw no failed step and exited 0 on a failing scenario.
    if summary.execution_has_failed() {
        eprintln!(
            "rollout features failed: {} step(s) failed, {} skipped, {} parsing error(s), {} hook error(s)",
            summary.failed_steps(),
            summary.skipped_steps(),
            summary.parsing_errors(),
            summary.hook_errors()
        );
        return fail(1);
    }
    let built_in = std::env::var("HARNESS_DEPLOYER_CMD").map_or(true, |c| c.trim().is_empty());
    let timelines = std::fs::read_dir(&html).map_or(0, |d| d.count());
    if built_in && summary.passed_steps() > 0 && timelines == 0 {
        eprintln!(
            "rollout features: no HTML timeline was written to {}",
            html.display()
        );
        return fail(1);
    }
    println!("rollout HTML timelines: {timelines} in {}", html.display());
    SuiteOutcome { code: 0 }
}
