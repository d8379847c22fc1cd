//! A test of the harness itself: the specs must catch a broken deployer, name the cause, and
//! refuse to pass on undefined steps; and the mutation score — every mutant of the deployer
//! (`tests/rollout/mutants.rs`) must fail at least one scenario of the rollout suite.
//!
//! The same binary is also the deployer it drives through the external-command adapter
//! (`HARNESS_SELFTEST_ROLE=contract-builtin`): the built-in deployer behind the documented
//! contract (reads the ProviderConfig YAML the harness writes, writes the status JSON), as it is
//! or as the mutant named by `HARNESS_SELFTEST_MUTANT`.
//!
//! `HARNESS_SELFTEST_MUTANTS=0` skips the mutation score (the quick checks only);
//! `HARNESS_SELFTEST_SCORE=full` runs every scenario that reaches each mutant instead of stopping
//! at its first kill.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "rollout/mod.rs"]
mod rollout;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cucumber::writer::{self, Coloring, Verbosity};
use cucumber::{World as _, WriterExt as _};

use rollout::RolloutWorld;
use rollout::adapter::{self, Action, BuiltIn, Creds, Deployer, External, RunRequest, SiteTarget};
use rollout::mutants::Mutant;
use rollout::score::{MutantRun, Score, Stop, SuiteRun, run_suite};

use std::collections::BTreeSet;

use futures::StreamExt as _;

#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

struct Outcome {
    failed: bool,
    passed_scenarios: usize,
    output: String,
}

/// Runs the scenarios of `feature` whose name contains `name`, with the given deployer command
/// (`None`: the built-in deployer in-process).
async fn run_scenario(feature: PathBuf, name: &'static str, command: Option<String>) -> Outcome {
    let deployer: Arc<dyn Deployer> = match command {
        Some(command) => Arc::new(External { command }),
        None => Arc::new(BuiltIn::default()),
    };
    let buf = SharedBuf::default();
    let run = RolloutWorld::cucumber()
        .with_default_cli()
        .after(rollout::after_hook)
        .with_writer(
            writer::Basic::new(buf.clone(), Coloring::Never, Verbosity::Default).summarized(),
        )
        .fail_on_skipped()
        .filter_run(feature, move |_, _, sc| sc.name.contains(name));
    let w = adapter::with_deployer(deployer, run).await;
    use cucumber::writer::Stats as _;
    Outcome {
        failed: w.execution_has_failed(),
        passed_scenarios: w.scenarios_stats().passed,
        output: buf.text(),
    }
}

/// This binary as the contract's deployer command, as it is or as `mutant`.
fn self_cmd(mutant: Option<Mutant>) -> String {
    let exe = std::env::current_exe().expect("own path");
    let m = mutant.map_or(String::new(), |m| {
        format!("HARNESS_SELFTEST_MUTANT={} ", m.name())
    });
    format!(
        "HARNESS_SELFTEST_ROLE=contract-builtin {m}'{}'",
        exe.display()
    )
}

const TOKEN_SCENARIO: &str = "the API token in the Authorization header is accepted";

async fn checks() -> Result<(), String> {
    rollout::journal::check_globs()?;
    rollout::params::check_rules()?;
    rollout::claims::check_rules()?;
    rollout::target::check_mapping()?;
    rollout::recorder::check_rules()?;
    let auth = rollout::features_dir().join("auth.feature");

    // 1. The built-in deployer, in-process: the token scenario passes.
    let ok = run_scenario(auth.clone(), TOKEN_SCENARIO, None).await;
    if ok.failed || ok.passed_scenarios != 1 {
        return Err(format!(
            "the built-in deployer should pass '{TOKEN_SCENARIO}':\n{}",
            ok.output
        ));
    }
    println!("ok: the built-in deployer passes '{TOKEN_SCENARIO}'");

    // 2. The same deployer behind the external-command contract passes too.
    let ext = run_scenario(auth.clone(), TOKEN_SCENARIO, Some(self_cmd(None))).await;
    if ext.failed || ext.passed_scenarios != 1 {
        return Err(format!(
            "the built-in deployer behind the external contract should pass:\n{}",
            ext.output
        ));
    }
    println!("ok: the external-command adapter runs a contract-conforming deployer");

    // 3. The deployer with the seed's bug (its token-as-cookie mutant, through the contract)
    // fails that scenario, and the message names the cause.
    let bad = run_scenario(
        auth.clone(),
        TOKEN_SCENARIO,
        Some(self_cmd(Some(Mutant::TokenAsCookie))),
    )
    .await;
    if !bad.failed {
        return Err(format!(
            "a deployer sending the token as a cookie must fail '{TOKEN_SCENARIO}':\n{}",
            bad.output
        ));
    }
    for cause in ["PVEAuthCookie cookie", "Authentication failed!"] {
        if !bad.output.contains(cause) {
            return Err(format!(
                "the failure should name the cause ('{cause}'):\n{}",
                bad.output
            ));
        }
    }
    println!("ok: the token-as-cookie deployer fails and the report names the cause");

    // 4. An undefined step fails the run (it is not silently skipped).
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let f = dir.path().join("undefined.feature");
    std::fs::write(
        &f,
        "Feature: undefined\n  Scenario: a step nobody wrote\n    Given a Proxmox test cluster with the seed's two sites\n    When the deployer does something no step defines\n",
    )
    .map_err(|e| e.to_string())?;
    let undef = run_scenario(f, "a step nobody wrote", None).await;
    if !undef.failed {
        return Err(format!(
            "an undefined step must fail the run:\n{}",
            undef.output
        ));
    }
    println!("ok: an undefined step fails the run");
    Ok(())
}

/// Mutant suites run at once: each is mostly waiting on the fake's clock and the deployer's polls.
const PARALLEL_SUITES: usize = 4;

/// The deployer the score runs as `m`: the do-nothing mutant through the external-command
/// contract (a new user's first try), the others in-process (the suite's fast path).
fn mutant_deployer(m: Mutant) -> Arc<dyn Deployer> {
    if m == Mutant::DoesNothing {
        Arc::new(External {
            command: self_cmd(Some(m)),
        })
    } else {
        Arc::new(BuiltIn { mutant: Some(m) })
    }
}

/// The whole rollout suite against the deployer (the control: every scenario must pass, and it
/// records which scenarios reach which mutation point), then each mutant against the scenarios
/// that reach its point (elsewhere it behaves exactly as the deployer); prints the score.
async fn mutation_score() -> Result<(), String> {
    if rollout::target::RealPve::current().is_some() {
        // Thirteen broken deployers against a real cluster would create real VMs thirteen times.
        println!(
            "mutation score skipped: HARNESS_PVE_URL is set (the mutants run on the fake only)"
        );
        return Ok(());
    }
    let only = env("HARNESS_SELFTEST_MUTANTS");
    let chosen: Vec<Mutant> = Mutant::ALL
        .into_iter()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n.trim() == m.name()))
        .collect();
    // The default stops each mutant's suite at its first kill (the test's verdict needs no
    // more); `full` runs every scenario that reaches each mutant, to count the kills and list the
    // scenarios no mutant fails. The do-nothing mutant always runs in full: its check is that it
    // fails every scenario that runs a deployer.
    let full = env("HARNESS_SELFTEST_SCORE") == "full";
    let started = std::time::Instant::now();
    let control = run_suite(Arc::new(BuiltIn::default()), 8, None, Stop::Never).await;
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
            "the deployer as it is must pass every scenario for the score to mean anything; it failed:\n{}\n{}",
            failed.join("\n"),
            control.report
        ));
    }
    println!(
        "ok: the deployer as it is passes all {} scenarios ({:.0} s)",
        control.results.len(),
        started.elapsed().as_secs_f64()
    );
    let jobs: Vec<(Mutant, BTreeSet<String>)> = chosen
        .into_iter()
        .map(|m| {
            let covering = control
                .results
                .iter()
                .filter(|r| r.reached.contains(m.name()))
                .map(|r| r.id.clone())
                .collect();
            (m, covering)
        })
        .collect();
    // Unordered: a long suite does not hold back the start of the next ones.
    let mut runs: Vec<(usize, MutantRun)> = futures::stream::iter(jobs)
        .enumerate()
        .map(|(i, (m, covering))| async move {
            let t = std::time::Instant::now();
            let reaching = covering.len();
            let stop = if full || m == Mutant::DoesNothing {
                Stop::Never
            } else {
                Stop::AtFirstFailure
            };
            let run = if covering.is_empty() {
                SuiteRun::default()
            } else {
                run_suite(mutant_deployer(m), 8, Some(covering), stop).await
            };
            println!(
                "  {}: {} scenario(s) reach it, {} run in {:.0} s",
                m.name(),
                reaching,
                run.results.len(),
                t.elapsed().as_secs_f64()
            );
            let run = MutantRun {
                name: m.name().to_string(),
                what: m.what().to_string(),
                reaching,
                stop,
                run,
            };
            (i, run)
        })
        .buffer_unordered(PARALLEL_SUITES)
        .collect()
        .await;
    runs.sort_by_key(|r| r.0);
    let runs: Vec<MutantRun> = runs.into_iter().map(|(_, r)| r).collect();
    if let Some(nothing) = runs
        .iter()
        .find(|r| r.name == Mutant::DoesNothing.name())
        .map(|r| &r.run)
    {
        let deploying = control.results.iter().filter(|r| r.ran_deployer).count();
        let passed: Vec<String> = nothing
            .results
            .iter()
            .filter(|r| r.failure.is_none())
            .map(|r| format!("  {} {}", r.id, r.name))
            .collect();
        if deploying == 0 || nothing.results.len() != deploying || !passed.is_empty() {
            return Err(format!(
                "a deployer that does nothing and claims success must fail all {deploying} scenarios that run a deployer; it ran {} and passed:\n{}",
                nothing.results.len(),
                passed.join("\n")
            ));
        }
        println!(
            "ok: the do-nothing deployer fails all {deploying} scenarios that run a deployer (the other {} only probe the API)",
            control.results.len() - deploying
        );
    }
    let score = Score::new(&control, runs);
    print!("{}", score.render());
    println!(
        "mutation score: control and {} mutant suites in {:.0} s",
        score.mutants.len(),
        started.elapsed().as_secs_f64()
    );
    let survivors = score.survivors();
    if !survivors.is_empty() {
        return Err(format!(
            "mutant(s) no scenario kills: {}; write the scenario or sharpen the step that catches each",
            survivors.join(", ")
        ));
    }
    Ok(())
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

/// The request the harness described through the environment (the contract).
fn request_from_env() -> Result<RunRequest, String> {
    let sites: Vec<serde_json::Value> =
        serde_json::from_str(&env("HARNESS_SITES")).map_err(|e| format!("HARNESS_SITES: {e}"))?;
    let sites = sites
        .iter()
        .map(|s| SiteTarget {
            name: s["name"].as_str().unwrap_or_default().into(),
            url: s["url"].as_str().unwrap_or_default().into(),
            node: s["node"].as_str().unwrap_or_default().into(),
            fingerprint: s["fingerprint"].as_str().map(str::to_string),
            insecure: false,
            snippets: s["snippets"]["storage"]
                .as_str()
                .zip(s["snippets"]["path"].as_str())
                .map(|(st, p)| (st.to_string(), std::path::PathBuf::from(p))),
        })
        .collect();
    let action = match env("HARNESS_ACTION").as_str() {
        "deploy" => Action::Deploy,
        "status" => Action::Status,
        "destroy" => Action::Destroy,
        "plan" => Action::Plan,
        other => return Err(format!("unknown action '{other}'")),
    };
    Ok(RunRequest {
        action,
        sites,
        creds: Creds::Token {
            id: env("HARNESS_PVE_TOKEN_ID"),
            secret: env("HARNESS_PVE_TOKEN_SECRET"),
        },
        manifests_dir: env("HARNESS_MANIFESTS_DIR").into(),
        state_dir: env("HARNESS_STATE_DIR").into(),
        concurrency: env("HARNESS_CONCURRENCY").parse().unwrap_or(4),
        reached: None,
    })
}

/// The built-in deployer behind the contract: the provider config from the YAML the harness
/// wrote, the status JSON to `HARNESS_STATUS_FILE`; as the mutant `HARNESS_SELFTEST_MUTANT`
/// names, if any.
async fn contract_builtin() -> Result<(), String> {
    let req = request_from_env()?;
    let provider = provision_harness::config::load_provider(
        std::path::Path::new(&env("HARNESS_PROVIDER_CONFIG")),
        None,
    )
    .map_err(|e| format!("the harness's provider config: {e}"))?;
    let mutant = match env("HARNESS_SELFTEST_MUTANT").as_str() {
        "" => None,
        name => Some(Mutant::from_name(name).ok_or_else(|| format!("no mutant named '{name}'"))?),
    };
    let json = BuiltIn { mutant }
        .execute(provider, &req)
        .await
        .map_err(|e| format!("{e:#}"))?;
    std::fs::write(env("HARNESS_STATUS_FILE"), json.to_string()).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() {
    let role = env("HARNESS_SELFTEST_ROLE");
    let result = match role.as_str() {
        "contract-builtin" => contract_builtin().await,
        _ => match checks().await {
            Ok(()) if env("HARNESS_SELFTEST_MUTANTS") == "0" => Ok(()),
            Ok(()) => mutation_score().await,
            Err(e) => Err(e),
        },
    };
    if let Err(e) = result {
        let _ = writeln!(
            std::io::stderr(),
            "harness self-test ({}): {e}",
            if role.is_empty() { "checks" } else { &role }
        );
        std::process::exit(1);
    }
    if role.is_empty() {
        println!("harness self-test: all checks passed");
    }
}
