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
pub mod resume;
pub mod score;
#[path = "../support/shard.rs"]
pub mod shard;
pub mod status;
mod steps;
pub mod world;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cucumber::{StatsWriter as _, World as _, WriterExt as _, writer};
use futures::FutureExt as _;

pub use world::RolloutWorld;

pub fn features_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("features/rollout")
}

/// This run's reports dir once [`run_all`] has set it (a shard's own subdirectory).
static REPORTS: OnceLock<PathBuf> = OnceLock::new();

/// `<target dir>/cucumber`: next to the build, wherever CARGO_TARGET_DIR points
/// (`…/cucumber/shard-I-of-N` in a sharded run).
pub fn reports_dir() -> PathBuf {
    if let Some(d) = REPORTS.get() {
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

/// The after-hook: against a real PVE, remove what the scenario created (best effort, reported).
pub fn after_hook<'a>(
    _f: &'a cucumber::gherkin::Feature,
    _r: Option<&'a cucumber::gherkin::Rule>,
    _sc: &'a cucumber::gherkin::Scenario,
    _ev: &'a cucumber::event::ScenarioFinished,
    w: Option<&'a mut RolloutWorld>,
) -> futures::future::LocalBoxFuture<'a, ()> {
    async move {
        let Some(w) = w else { return };
        if let Some((_, h)) = w.background.take() {
            h.abort();
        }
        if w.is_real()
            && !w.manifests.is_empty()
            && let Err(e) = w.run(adapter::Action::Destroy).await
        {
            eprintln!("cleanup on the real PVE failed: {e:#}");
        }
        if let Some(world::Target::Fake(fake)) = w.target.take() {
            fake.shutdown().await;
        }
    }
    .boxed_local()
}

/// The runner as `cargo test --test rollout` uses it: concurrent scenarios, undefined or skipped
/// steps fail, JUnit XML, cucumber JSON and durations in `<target>/cucumber/`; `--shard I/N`
/// runs one shard of them (`tests/support/shard.rs`).
pub async fn run_all() {
    let mut cli = cucumber::cli::Opts::<_, _, _, shard::ShardCli>::parsed();
    let filter = shard::CliFilter::take(&mut cli);
    let real = world::RealPve::from_env().is_some();
    let include_wip = std::env::var("HARNESS_INCLUDE_WIP").is_ok_and(|v| v == "1");
    let runner: shard::RunnerFilter = Arc::new(move |feat, rule, sc| {
        let mut tags: Vec<String> = feat.tags.clone();
        if let Some(r) = rule {
            tags.extend(r.tags.iter().cloned());
        }
        tags.extend(sc.tags.iter().cloned());
        if real {
            return real_pve_selected(&tags);
        }
        include_wip || !tags.iter().any(|t| t == "wip")
    });
    let plan = shard::Plan::new(&features_dir(), &cli.parser, &filter, &runner, &cli.custom)
        .await
        .unwrap_or_else(|e| {
            eprintln!("rollout: {e:#}");
            std::process::exit(2)
        });
    eprintln!("rollout: {}", plan.description);
    let reports = plan.reports_dir(&reports_dir());
    let _ = REPORTS.set(reports.clone());
    std::fs::create_dir_all(&reports).expect("create the reports dir");
    // Start from an empty HTML dir, so the check at the end counts this run's timelines only.
    let html = reports.join("html");
    let _ = std::fs::remove_dir_all(&html);
    let junit = std::fs::File::create(reports.join("rollout.junit.xml")).expect("junit report");
    let json = std::fs::File::create(reports.join("rollout.cucumber.json")).expect("json report");
    let summary = RolloutWorld::cucumber()
        .max_concurrent_scenarios(8)
        .after(after_hook)
        .with_writer(
            writer::Basic::stdout()
                .summarized()
                .tee::<RolloutWorld, _>(writer::JUnit::for_tee(junit, 0))
                .tee::<RolloutWorld, _>(writer::Json::for_tee(json))
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
        std::process::exit(1);
    }
    let built_in = std::env::var("HARNESS_DEPLOYER_CMD").map_or(true, |c| c.trim().is_empty());
    let timelines = std::fs::read_dir(&html).map_or(0, |d| d.count());
    if built_in && summary.passed_steps() > 0 && timelines == 0 {
        eprintln!(
            "rollout features: no HTML timeline was written to {}",
            html.display()
        );
        std::process::exit(1);
    }
    println!("rollout HTML timelines: {timelines} in {}", html.display());
}
