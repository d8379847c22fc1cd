//! A third-party deployer under the rollout specs: the Ansible playbook of
//! `examples/ansible-deployer/` (community.proxmox modules), run through the external-deployer
//! contract (`HARNESS_DEPLOYER_CMD`), against the rollout features a general deployer can
//! satisfy: `@flow`, `@auth`, `@failures` and `@convergence` (the `@full` feature is left out:
//! its plan scenarios need a `plan` a playbook does not have, and its 30-VM rollouts would take
//! a sequential playbook many minutes).
//!
//! Each scenario's outcome is compared with `examples/ansible-deployer/expected-outcomes.md`
//! (scenario → pass, or fail with the text its failure must contain): the test fails on any
//! difference, so a finding about the playbook is asserted, and a fixed playbook forces the
//! table to be updated.
//!
//! Then the example's `container-lifecycle.yml` drives one LXC container through its life with
//! `community.proxmox.proxmox` against a fresh fake (create, a no-op re-create, start, read
//! back with `proxmox_vm_info`, stop, remove): the playbook's own assertions, then the fake's
//! journal and state, must agree.
//!
//! The venv (ansible, proxmoxer, requests from PyPI) is made under the target dir by the
//! example's `setup-venv.sh`; when that cannot be done the test fails, it does not skip.
//! `ANSIBLE_DEPLOYER_PARALLEL` sets the scenarios run at once (default 4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "rollout/mod.rs"]
mod rollout;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cucumber::event::ScenarioFinished;
use cucumber::writer::{self, Coloring, Verbosity};
use cucumber::{World as _, WriterExt as _};

use rollout::RolloutWorld;
use rollout::adapter::{self, External};

/// The features run, by their feature-level tag.
const FEATURE_TAGS: &[&str] = &["flow", "auth", "failures", "convergence"];

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ansible-deployer")
}

/// The venv under the target dir, made (or brought up to date) by the example's setup script.
fn venv() -> Result<PathBuf, String> {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = tmp.parent().unwrap_or(tmp).join("ansible-deployer-venv");
    if venv.join("bin/ansible-playbook").is_file()
        && Command::new(venv.join("bin/python"))
            .args([
                "-c",
                "import proxmoxer, requests, ansible_collections.community.proxmox",
            ])
            .status()
            .is_ok_and(|s| s.success())
    {
        return Ok(venv);
    }
    let out = Command::new(example_dir().join("setup-venv.sh"))
        .arg(&venv)
        .output()
        .map_err(|e| format!("running setup-venv.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "setup-venv.sh {} exited {} (python3 with the venv module and PyPI access are needed):\n{}{}",
            venv.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(venv)
}

/// One row of the expected-outcomes table.
#[derive(Debug, Clone)]
struct Expected {
    feature: String,
    scenario: String,
    /// `None`: passes; `Some(text)`: fails, and the failed step's first line contains `text`
    /// (or one of its alternatives separated by ` OR `, where the failing step depends on timing).
    failure: Option<String>,
}

/// The table's rows: `| feature | scenario | pass or fail | the failure contains | why |`.
fn expected_outcomes() -> Result<Vec<Expected>, String> {
    let path = example_dir().join("expected-outcomes.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') || line.starts_with("|--") || line.starts_with("| feature ") {
            continue;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().trim_matches('`').replace("\\|", "|"))
            .collect();
        let [feature, scenario, outcome, contains, _why] = cells.as_slice() else {
            return Err(format!(
                "{}:{}: a row needs 5 cells, has {}",
                path.display(),
                i + 1,
                cells.len()
            ));
        };
        let failure = match outcome.as_str() {
            "pass" => None,
            "fail" if !contains.is_empty() => Some(contains.clone()),
            _ => {
                return Err(format!(
                    "{}:{}: outcome must be pass, or fail with the text the failure contains",
                    path.display(),
                    i + 1
                ));
            }
        };
        rows.push(Expected {
            feature: feature.clone(),
            scenario: scenario.clone(),
            failure,
        });
    }
    Ok(rows)
}

#[derive(Debug, Clone)]
struct Ran {
    feature: String,
    scenario: String,
    failure: Option<String>,
}

fn first_line(e: &cucumber::event::StepError) -> String {
    let text = e.to_string();
    let text = text
        .strip_prefix("Step panicked. Captured output: ")
        .unwrap_or(&text);
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

fn file_name(f: &cucumber::gherkin::Feature) -> String {
    f.path
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| f.name.clone())
}

async fn run(command: String, parallel: usize) -> (Vec<Ran>, String) {
    let results: Arc<Mutex<Vec<Ran>>> = Arc::default();
    let sink = Arc::clone(&results);
    let buf = SharedBuf::default();
    let cucumber = RolloutWorld::cucumber()
        .with_default_cli()
        .max_concurrent_scenarios(parallel)
        .after(move |f, r, sc, ev, w| {
            let failure = match ev {
                ScenarioFinished::StepPassed => None,
                ScenarioFinished::StepSkipped => Some("a step was skipped".to_string()),
                ScenarioFinished::StepFailed(_, _, e) => Some(first_line(e)),
                ScenarioFinished::BeforeHookFailed(_) => Some("a before hook failed".to_string()),
            };
            sink.lock().unwrap().push(Ran {
                feature: file_name(f),
                scenario: sc.name.clone(),
                failure,
            });
            rollout::after_hook(f, r, sc, ev, w)
        })
        .with_writer(
            writer::Basic::new(buf.clone(), Coloring::Never, Verbosity::Default).summarized(),
        )
        .fail_on_skipped()
        .filter_run(rollout::features_dir(), |feat, rule, sc| {
            let tags: Vec<&String> = feat
                .tags
                .iter()
                .chain(rule.iter().flat_map(|r| r.tags.iter()))
                .chain(sc.tags.iter())
                .collect();
            !tags.iter().any(|t| *t == "wip")
                && feat.tags.iter().any(|t| FEATURE_TAGS.contains(&t.as_str()))
        });
    adapter::with_deployer(Arc::new(External { command }), cucumber).await;
    let ran = std::mem::take(&mut *results.lock().unwrap());
    (ran, buf.text())
}

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

/// Compares what ran with the table; the differences, one line each.
fn differences(expected: &[Expected], ran: &[Ran]) -> Vec<String> {
    let mut out = Vec::new();
    let table: BTreeMap<(&str, &str), &Expected> = expected
        .iter()
        .map(|e| ((e.feature.as_str(), e.scenario.as_str()), e))
        .collect();
    for r in ran {
        let key = (r.feature.as_str(), r.scenario.as_str());
        match (table.get(&key), &r.failure) {
            (None, got) => out.push(format!(
                "{}: \"{}\" is not in expected-outcomes.md (it {})",
                r.feature,
                r.scenario,
                got.as_deref()
                    .map_or("passed".to_string(), |f| format!("failed: {f}"))
            )),
            (Some(e), None) if e.failure.is_some() => out.push(format!(
                "{}: \"{}\" PASSED, the table says it fails with \"{}\" (update the table)",
                r.feature,
                r.scenario,
                e.failure.as_deref().unwrap_or("")
            )),
            (Some(e), Some(f)) => match &e.failure {
                None => out.push(format!(
                    "{}: \"{}\" FAILED, the table says it passes: {f}",
                    r.feature, r.scenario
                )),
                Some(want) if !want.split(" OR ").any(|w| f.contains(w)) => out.push(format!(
                    "{}: \"{}\" failed otherwise than the table says (\"{want}\"): {f}",
                    r.feature, r.scenario
                )),
                Some(_) => {}
            },
            (Some(_), None) => {}
        }
    }
    for e in expected {
        if !ran
            .iter()
            .any(|r| r.feature == e.feature && r.scenario == e.scenario)
        {
            out.push(format!(
                "{}: \"{}\" is in the table but did not run",
                e.feature, e.scenario
            ));
        }
    }
    out
}

/// The comparison itself must catch each kind of difference (checked before the long run).
fn check_differences() -> Result<(), String> {
    let row = |s: &str, failure: Option<&str>| Expected {
        feature: "f.feature".into(),
        scenario: s.into(),
        failure: failure.map(Into::into),
    };
    let ran = |s: &str, failure: Option<&str>| Ran {
        feature: "f.feature".into(),
        scenario: s.into(),
        failure: failure.map(Into::into),
    };
    let expected = [
        row("passes", None),
        row("fails", Some("boom OR bang")),
        row("fails otherwise", Some("boom")),
        row("now passes", Some("boom")),
        row("now fails", None),
        row("gone", None),
    ];
    let got = [
        ran("passes", None),
        ran("fails", Some("it went bang")),
        ran("fails otherwise", Some("it went bang")),
        ran("now passes", None),
        ran("now fails", Some("boom")),
        ran("new", None),
    ];
    let d = differences(&expected, &got);
    let want = [
        "\"fails otherwise\" failed otherwise",
        "\"now passes\" PASSED",
        "\"now fails\" FAILED",
        "\"new\" is not in",
        "\"gone\" is in the table but did not run",
    ];
    if d.len() != want.len() || !want.iter().all(|w| d.iter().any(|x| x.contains(w))) {
        return Err(format!("the comparison with the table is broken: {d:#?}"));
    }
    Ok(())
}

/// The LXC module's lifecycle playbook against a fresh fake; what it did, from the fake's side.
async fn container_lifecycle(venv: &Path) -> Result<String, String> {
    let fake = fake_proxmox::FakeProxmox::builder()
        .auth_failure_delay(false)
        .start()
        .await
        .map_err(|e| format!("starting the fake: {e}"))?;
    let site = fake.site("site-1").ok_or("no site-1")?;
    let vars = serde_json::json!({
        "api_host": site.addr().ip().to_string(),
        "api_port": site.addr().port(),
        "api_user": "root@pam",
        "api_token_id": "harness",
        "api_token_secret": "3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a",
        "node": "ml110-01",
        "vmid": 4300,
    });
    let playbook = example_dir().join("container-lifecycle.yml");
    let run = tokio::process::Command::new(venv.join("bin/ansible-playbook"))
        .arg(&playbook)
        .arg("-e")
        .arg(vars.to_string())
        .env("ANSIBLE_CONFIG", example_dir().join("ansible.cfg"))
        .output()
        .await
        .map_err(|e| format!("running ansible-playbook: {e}"))?;
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    if !run.status.success() {
        return Err(format!(
            "{} exited {}:\n{out}",
            playbook.display(),
            run.status
        ));
    }
    let journal = site
        .control()
        .journal()
        .await
        .map_err(|e| format!("the journal: {e}"))?;
    let ok = |m: &str, p: &str| {
        journal
            .iter()
            .filter(|e| e.method == m && e.path == p && e.status == 200)
            .count()
    };
    let creates = ok("POST", "/nodes/ml110-01/lxc");
    let starts = ok("POST", "/nodes/ml110-01/lxc/4300/status/start");
    let deletes = ok("DELETE", "/nodes/ml110-01/lxc/4300");
    if (creates, starts, deletes) != (1, 1, 1) {
        return Err(format!(
            "expected one create, start and delete of CT 4300, the journal has {creates}, {starts}, {deletes}:\n{out}"
        ));
    }
    let state = site
        .control()
        .state()
        .await
        .map_err(|e| format!("the state: {e}"))?;
    let left: Vec<serde_json::Value> = state["sites"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["cts"].as_array().cloned().unwrap_or_default())
        .collect();
    if !left.is_empty() {
        return Err(format!("containers are left after state=absent: {left:?}"));
    }
    Ok(format!(
        "community.proxmox.proxmox: container lifecycle passed ({} API requests)",
        journal.len()
    ))
}

#[tokio::main]
async fn main() {
    let started = Instant::now();
    if let Err(e) = check_differences() {
        eprintln!("ansible_deployer: {e}");
        std::process::exit(1);
    }
    let expected = match expected_outcomes() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ansible_deployer: {e}");
            std::process::exit(1);
        }
    };
    let venv = match venv() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ansible_deployer: the playbook's venv could not be set up: {e}");
            std::process::exit(1);
        }
    };
    let setup = started.elapsed();
    match container_lifecycle(&venv).await {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("ansible_deployer: the container lifecycle playbook failed: {e}");
            std::process::exit(1);
        }
    }
    let parallel = std::env::var("ANSIBLE_DEPLOYER_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4usize)
        .max(1);
    let command = format!(
        "ANSIBLE_DEPLOYER_VENV='{}' '{}'",
        venv.display(),
        example_dir().join("harness-deployer").display()
    );
    let (mut ran, report) = run(command, parallel).await;
    ran.sort_by(|a, b| (&a.feature, &a.scenario).cmp(&(&b.feature, &b.scenario)));
    let passed = ran.iter().filter(|r| r.failure.is_none()).count();
    for r in &ran {
        match &r.failure {
            None => println!("  pass  {}: {}", r.feature, r.scenario),
            Some(f) => println!("  FAIL  {}: {}\n          {f}", r.feature, r.scenario),
        }
    }
    println!(
        "ansible playbook: {passed} of {} scenarios passed, {} failed ({:.0} s, venv {:.0} s, {parallel} at once)",
        ran.len(),
        ran.len() - passed,
        started.elapsed().as_secs_f64(),
        setup.as_secs_f64()
    );
    let diff = differences(&expected, &ran);
    if ran.is_empty() || !diff.is_empty() {
        eprintln!("{report}");
        eprintln!("the outcomes differ from examples/ansible-deployer/expected-outcomes.md:");
        for d in &diff {
            eprintln!("  {d}");
        }
        std::process::exit(1);
    }
    println!("ok: every outcome is the one expected-outcomes.md records");
}
