//! The lab side of the harness self-test: every mutant of the cluster provisioner (a thin variant of
//! `src/cluster/`, one `mutants::active` hook each, see `provision_harness::mutants::LAB`) must
//! fail at least one `@lab` scenario, or the lab specs would pass a provisioner with that bug.
//!
//! It runs the scenarios tagged `@kills-lab-mutants` (real QEMU guests, as `tests/lab.rs` does):
//! first with the provisioner as it is — the control: every one must pass, or a kill proves
//! nothing; it also records which mutation points the subset reaches — then once per mutant.
//! It prints, per mutant, the scenarios that killed it and the failed step's first line, then the
//! score (mutants killed / mutants), and fails when a mutant survives.
//!
//! The guests boot once: the first direct boot is snapshotted (disks still blank) and every later
//! run restores that snapshot instead of booting three guests again (`world::RESTORE_BOOTED`).
//!
//! `HARNESS_SELFTEST_LAB_MUTANTS=etcd-without-tls,…` runs the control and only those mutants;
//! `LAB_LOG=info` shows the lab's logs.

#[path = "lab/params.rs"]
mod params;
#[path = "lab/steps/mod.rs"]
mod steps;
#[path = "lab/world.rs"]
mod world;

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cucumber::event::ScenarioFinished;
use cucumber::writer::{self, Coloring, Verbosity};
use cucumber::{World as _, WriterExt as _};
use futures::FutureExt as _;
use provision_harness::mutants::{self, Mutant, Reached};

use world::LabWorld;

/// The tag of the scenarios the mutants run against: the cheapest that still kill every one.
const TAG: &str = "kills-lab-mutants";

/// What each lab mutant does, for the report.
fn what(m: Mutant) -> &'static str {
    match m {
        Mutant::SkipsFirstBootScript => {
            "installs config, certificates and etcd on the disk, but no first-boot script"
        }
        Mutant::CertsUnderWrongNames => {
            "installs the certificates as ca-cert.pem, cert.pem, key.pem (the seed's first names)"
        }
        Mutant::EtcdWithoutTls => "starts etcd over plain HTTP, no certificate asked or offered",
        Mutant::ClientsWithoutCertificates => {
            "starts etcd with TLS but without a client CA: clients need no certificate"
        }
        _ => "a deployer mutant (not run here)",
    }
}

#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One scenario's outcome in one run of the subset.
#[derive(Debug, Clone)]
struct ScenarioResult {
    /// `file.feature:line`.
    id: String,
    name: String,
    /// The failed step's error, first line; `None` if the scenario passed.
    failure: Option<String>,
    /// The failed step, as the feature file words it.
    step: Option<String>,
}

#[derive(Default)]
struct SubsetRun {
    results: Vec<ScenarioResult>,
    /// Cucumber's report, shown when the control fails.
    report: String,
    secs: f64,
}

impl SubsetRun {
    fn failed(&self) -> impl Iterator<Item = &ScenarioResult> {
        self.results.iter().filter(|r| r.failure.is_some())
    }
}

fn first_line(e: &cucumber::event::StepError) -> String {
    let text = e.to_string();
    let text = text
        .strip_prefix("Step panicked. Captured output: ")
        .unwrap_or(&text);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut short: String = line.chars().take(200).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    short
}

/// Runs the `@kills-lab-mutants` scenarios with `mutant` active in the provisioner (`None`: as
/// it is), recording the mutation points they reach in `reached`.
async fn run_subset(mutant: Option<Mutant>, reached: Option<Reached>) -> SubsetRun {
    let t = Instant::now();
    let results: Arc<Mutex<Vec<ScenarioResult>>> = Arc::default();
    let sink = Arc::clone(&results);
    let buf = SharedBuf::default();
    let features = world::workspace_root().join("features").join("lab");
    let run = LabWorld::cucumber()
        .with_default_cli()
        .max_concurrent_scenarios(1)
        .before(|_feature, _rule, scenario, world| {
            world.reuses_lab = scenario.tags.iter().any(|t| t == "reuses-lab");
            async {}.boxed_local()
        })
        .after(move |feature, _rule, scenario, ev, world| {
            let file = feature
                .path
                .as_ref()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let failure = match ev {
                ScenarioFinished::StepPassed => None,
                ScenarioFinished::StepSkipped => Some("a step was skipped".to_owned()),
                ScenarioFinished::StepFailed(_, _, e) => Some(first_line(e)),
                ScenarioFinished::BeforeHookFailed(_) => Some("a before hook failed".to_owned()),
            };
            let passed = failure.is_none();
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(ScenarioResult {
                    id: format!("{file}:{}", scenario.position.line),
                    name: scenario.name.clone(),
                    failure,
                    step: None,
                });
            // The lab goes where `tests/lab.rs` puts it: back to its snapshot's keeper, handed
            // on, or torn down.
            async move {
                let Some(w) = world else { return };
                let Some(mut b) = w.bringup.take() else {
                    return;
                };
                if w.holds_boot_snapshot {
                    world::keep_booted(b);
                } else if w.holds_snapshot {
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
            writer::Basic::new(buf.clone(), Coloring::Never, Verbosity::Default).summarized(),
        )
        .fail_on_skipped()
        .filter_run(features, |feature, rule, scenario| {
            feature
                .tags
                .iter()
                .chain(rule.iter().flat_map(|r| r.tags.iter()))
                .chain(scenario.tags.iter())
                .any(|t| t == TAG)
        });
    mutants::run_as(mutant, reached, run).await;
    let mut results = std::mem::take(&mut *results.lock().unwrap_or_else(|p| p.into_inner()));
    let report =
        String::from_utf8_lossy(&buf.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    // Scenarios run one at a time and stop at their failed step: the report's failed steps (✘)
    // are the failed scenarios', in order.
    let failed_steps = report
        .lines()
        .filter_map(|l| l.trim().strip_prefix('✘'))
        .map(str::trim);
    for (r, step) in results
        .iter_mut()
        .filter(|r| r.failure.is_some())
        .zip(failed_steps)
    {
        r.step = Some(step.to_owned());
    }
    SubsetRun {
        results,
        report,
        secs: t.elapsed().as_secs_f64(),
    }
}

async fn score() -> Result<(), String> {
    let only = std::env::var("HARNESS_SELFTEST_LAB_MUTANTS").unwrap_or_default();
    let chosen: Vec<Mutant> = mutants::LAB
        .into_iter()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n.trim() == m.name()))
        .collect();
    if chosen.is_empty() {
        return Err(format!(
            "HARNESS_SELFTEST_LAB_MUTANTS={only} names no lab mutant; they are: {}",
            mutants::LAB.map(Mutant::name).join(", ")
        ));
    }
    let started = Instant::now();

    // The control: the provisioner as it is passes every scenario of the subset.
    let reached = Reached::default();
    let control = run_subset(None, Some(reached.clone())).await;
    let failed: Vec<String> = control
        .failed()
        .map(|r| {
            format!(
                "  {} {}: {}",
                r.id,
                r.name,
                r.failure.as_deref().unwrap_or("")
            )
        })
        .collect();
    if control.results.is_empty() || !failed.is_empty() {
        return Err(format!(
            "the provisioner as it is must pass every @{TAG} scenario for a kill to mean anything; it ran {} and failed:\n{}\n{}",
            control.results.len(),
            failed.join("\n"),
            control.report
        ));
    }
    println!(
        "ok: the provisioner as it is passes the {} @{TAG} scenario(s) ({:.0} s)",
        control.results.len(),
        control.secs
    );
    let reached = reached.names();
    let unreached: Vec<&str> = chosen
        .iter()
        .map(|m| m.name())
        .filter(|n| !reached.contains(n))
        .collect();
    if !unreached.is_empty() {
        return Err(format!(
            "the @{TAG} scenarios never reach the mutation point of {}: tag a scenario that does",
            unreached.join(", ")
        ));
    }

    // Each mutant, one after the other (one lab, restored from its booted snapshot each time).
    let mut survivors = Vec::new();
    let mut report = String::new();
    for m in &chosen {
        let run = run_subset(Some(*m), None).await;
        let killers: Vec<&ScenarioResult> = run.failed().collect();
        println!(
            "  {}: {} scenario(s) run in {:.0} s",
            m.name(),
            run.results.len(),
            run.secs
        );
        if killers.is_empty() {
            survivors.push(m.name());
            report.push_str(&format!(
                "{} ({}): SURVIVED the {} scenario(s)\n",
                m.name(),
                what(*m),
                run.results.len()
            ));
            for r in &run.results {
                report.push_str(&format!("    passed {} {}\n", r.id, r.name));
            }
        } else {
            report.push_str(&format!(
                "{} ({}): killed by {} of the {} scenario(s)\n",
                m.name(),
                what(*m),
                killers.len(),
                run.results.len()
            ));
            for k in killers {
                report.push_str(&format!(
                    "    {} {}\n      at: {}\n      — {}\n",
                    k.id,
                    k.name,
                    k.step
                        .as_deref()
                        .unwrap_or("(step not found in the report)"),
                    k.failure.as_deref().unwrap_or("")
                ));
            }
        }
    }
    print!("{report}");
    println!(
        "lab mutation score: {}/{} mutants killed (control and {} mutant runs in {:.0} s)",
        chosen.len() - survivors.len(),
        chosen.len(),
        chosen.len(),
        started.elapsed().as_secs_f64()
    );
    if !survivors.is_empty() {
        return Err(format!(
            "lab mutant(s) no @{TAG} scenario kills: {}; tag a scenario, write one, or sharpen the step that catches each",
            survivors.join(", ")
        ));
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LAB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    // A CI timeout's SIGTERM must not leave lab run directories behind.
    if let Err(e) = vm_lab::lab::remove_run_dirs_on_sigterm() {
        eprintln!("harness self-test (lab): SIGTERM handler: {e}");
        std::process::exit(2);
    }
    world::RESTORE_BOOTED.store(true, Ordering::Relaxed);
    let result = score().await;
    drop(world::take_booted());
    drop(world::take_spare());
    drop(world::take_provisioned());
    if let Err(e) = result {
        let _ = writeln!(std::io::stderr(), "harness self-test (lab): {e}");
        std::process::exit(1);
    }
    println!("harness self-test (lab): all lab mutants killed");
}
