//! The mutation score of the rollout suite: the whole suite run against a deployer, scenario by
//! scenario, then against each mutant. A mutant is killed when at least one scenario fails with it;
//! a scenario that the deployer passes and no mutant fails is a candidate for a sharper assertion.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use cucumber::event::ScenarioFinished;
use cucumber::writer::{self, Coloring, Verbosity};
use cucumber::{World as _, WriterExt as _};

use super::adapter::{self, Deployer};
use super::world::RolloutWorld;

/// One scenario's result in one run of the suite.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    /// `file.feature:line`, unique within the suite (outline examples have their own line).
    pub id: String,
    pub name: String,
    /// The World ran (or started) a deployer: a deploy, status, destroy or plan.
    pub ran_deployer: bool,
    /// The failed step's message, first line; `None` if the scenario passed.
    pub failure: Option<String>,
    /// The mutation points the built-in deployer reached (by mutant name).
    pub reached: BTreeSet<&'static str>,
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
    let mut short: String = line.chars().take(160).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    short
}

/// A suite run: each scenario's result, and cucumber's report (kept to show a surprise).
#[derive(Default)]
pub struct SuiteRun {
    pub results: Vec<ScenarioResult>,
    pub report: String,
}

impl SuiteRun {
    pub fn failed(&self) -> impl Iterator<Item = &ScenarioResult> {
        self.results.iter().filter(|r| r.failure.is_some())
    }
}

/// `file.feature:line` of a scenario.
fn scenario_id(f: &cucumber::gherkin::Feature, sc: &cucumber::gherkin::Scenario) -> String {
    let file = f
        .path
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| f.name.clone());
    format!("{file}:{}", sc.position.line)
}

/// How much of a suite a run needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every scenario, whatever fails.
    Never,
    /// No new scenario starts after the first failure (those already started finish): enough
    /// to show a mutant killed, for a fraction of the time.
    AtFirstFailure,
}

/// Runs the rollout scenarios not tagged `@wip` (only those in `only`, if given) with
/// `deployer`, `concurrency` at a time.
pub async fn run_suite(
    deployer: Arc<dyn Deployer>,
    concurrency: usize,
    only: Option<BTreeSet<String>>,
    stop: Stop,
) -> SuiteRun {
    let results: Arc<Mutex<Vec<ScenarioResult>>> = Arc::default();
    let sink = Arc::clone(&results);
    let buf = SharedBuf::default();
    let run = RolloutWorld::cucumber()
        .with_default_cli()
        .max_concurrent_scenarios(concurrency);
    let run = match stop {
        Stop::Never => run,
        Stop::AtFirstFailure => run.fail_fast(),
    };
    let run = run
        .after(move |f, r, sc, ev, w| {
            let ran_deployer = w
                .as_ref()
                .is_some_and(|w| !w.runs.is_empty() || w.background.is_some());
            let failure = match ev {
                ScenarioFinished::StepPassed => None,
                ScenarioFinished::StepSkipped => Some("a step was skipped".to_string()),
                ScenarioFinished::StepFailed(_, _, e) => Some(first_line(e)),
                ScenarioFinished::BeforeHookFailed(_) => Some("a before hook failed".to_string()),
            };
            let reached = w.as_ref().map(|w| w.reached.names()).unwrap_or_default();
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(ScenarioResult {
                    id: scenario_id(f, sc),
                    name: sc.name.clone(),
                    ran_deployer,
                    failure,
                    reached,
                });
            super::after_hook(f, r, sc, ev, w)
        })
        .with_writer(
            writer::Basic::new(buf.clone(), Coloring::Never, Verbosity::Default).summarized(),
        )
        .fail_on_skipped()
        .filter_run(super::features_dir(), move |feat, rule, sc| {
            let mut tags = feat
                .tags
                .iter()
                .chain(rule.iter().flat_map(|r| r.tags.iter()))
                .chain(sc.tags.iter());
            !tags.any(|t| t == "wip")
                && only
                    .as_ref()
                    .is_none_or(|ids| ids.contains(&scenario_id(feat, sc)))
        });
    adapter::with_deployer(deployer, run).await;
    let mut results = std::mem::take(&mut *results.lock().unwrap_or_else(|p| p.into_inner()));
    // By file, then line as a number (`:24` before `:102`).
    results.sort_by_key(|r| {
        let (file, line) = r.id.rsplit_once(':').unwrap_or((&r.id, ""));
        (file.to_string(), line.parse::<usize>().unwrap_or(0))
    });
    let report =
        String::from_utf8_lossy(&buf.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    SuiteRun { results, report }
}

/// The score: per mutant, the scenarios that killed it.
pub struct Score {
    /// Per mutant: its suite run (what ran, and what failed: the kills).
    pub mutants: Vec<MutantRun>,
    /// Scenarios the deployer passes and no mutant fails; `None` when the mutant suites stopped
    /// at their first kill, which leaves most scenarios unasked.
    pub unkilling: Option<Vec<ScenarioResult>>,
}

/// One mutant's suite run, as the score reads it.
pub struct MutantRun {
    pub name: String,
    pub what: String,
    pub reaching: usize,
    pub stop: Stop,
    pub run: SuiteRun,
}

impl Score {
    /// `runs`: each mutant's suite run; `control`: the unmutated deployer's run.
    pub fn new(control: &SuiteRun, runs: Vec<MutantRun>) -> Score {
        let unkilling = runs.iter().all(|m| m.stop == Stop::Never).then(|| {
            let mut kills: BTreeMap<&str, usize> = BTreeMap::new();
            for m in &runs {
                for f in m.run.failed() {
                    *kills.entry(f.id.as_str()).or_default() += 1;
                }
            }
            control
                .results
                .iter()
                .filter(|s| !kills.contains_key(s.id.as_str()))
                .cloned()
                .collect()
        });
        Score {
            mutants: runs,
            unkilling,
        }
    }

    pub fn killed(&self) -> usize {
        self.mutants
            .iter()
            .filter(|m| m.run.failed().next().is_some())
            .count()
    }

    pub fn survivors(&self) -> Vec<&str> {
        self.mutants
            .iter()
            .filter(|m| m.run.failed().next().is_none())
            .map(|m| m.name.as_str())
            .collect()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for m in &self.mutants {
            let (name, what, ran) = (&m.name, &m.what, &m.run.results);
            let killers: Vec<&ScenarioResult> = m.run.failed().collect();
            let verdict = if killers.is_empty() {
                format!("SURVIVED the {} scenario(s) that reach it", ran.len())
            } else if ran.len() < m.reaching {
                format!(
                    "killed by {} of the {} scenario(s) run before it stopped ({} reach it)",
                    killers.len(),
                    ran.len(),
                    m.reaching
                )
            } else {
                format!(
                    "killed by {} of the {} scenario(s) that reach it",
                    killers.len(),
                    ran.len()
                )
            };
            out.push_str(&format!("{name} ({what}): {verdict}\n"));
            if killers.is_empty() {
                for r in ran {
                    out.push_str(&format!("    passed {} {}\n", r.id, r.name));
                }
            }
            for k in &killers {
                out.push_str(&format!(
                    "    {} {} — {}\n",
                    k.id,
                    k.name,
                    k.failure.as_deref().unwrap_or("")
                ));
            }
        }
        out.push_str(&format!(
            "mutation score: {}/{} mutants killed\n",
            self.killed(),
            self.mutants.len()
        ));
        match &self.unkilling {
            None => out.push_str(
                "(each mutant stopped at its first kill; HARNESS_SELFTEST_SCORE=full runs every scenario that reaches it and lists the scenarios no mutant fails)\n",
            ),
            Some(unkilling) if !unkilling.is_empty() => {
                out.push_str(&format!(
                    "scenarios no mutant fails ({}; candidates for a sharper assertion, or for a new mutant):\n",
                    unkilling.len()
                ));
                for s in unkilling {
                    out.push_str(&format!("  {} {}\n", s.id, s.name));
                }
            }
            Some(_) => {}
        }
        out
    }
}
