//! A test of the harness itself: the specs must catch a broken deployer, name the cause, and
//! refuse to pass on undefined steps.
//!
//! The same binary is also the two deployers it drives through the external-command adapter
//! (chosen by `HARNESS_SELFTEST_ROLE`):
//! * `contract-builtin`: the built-in deployer behind the documented contract (reads the
//!   ProviderConfig YAML the harness writes, writes the status JSON) — the positive control;
//! * `cookie-deployer`: a small deployer with the seed's bug, the API token sent as a
//!   `PVEAuthCookie` cookie.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "rollout/mod.rs"]
mod rollout;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cucumber::writer::{self, Coloring, Verbosity};
use cucumber::{World as _, WriterExt as _};

use rollout::RolloutWorld;
use rollout::adapter::{self, Action, BuiltIn, Creds, RunRequest, SiteTarget};

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
    adapter::set_command_override(command);
    let buf = SharedBuf::default();
    let w = RolloutWorld::cucumber()
        .with_default_cli()
        .after(rollout::after_hook)
        .with_writer(
            writer::Basic::new(buf.clone(), Coloring::Never, Verbosity::Default).summarized(),
        )
        .fail_on_skipped()
        .filter_run(feature, move |_, _, sc| sc.name.contains(name))
        .await;
    adapter::set_command_override(None);
    use cucumber::writer::Stats as _;
    Outcome {
        failed: w.execution_has_failed(),
        passed_scenarios: w.scenarios_stats().passed,
        output: buf.text(),
    }
}

fn self_cmd(role: &str) -> String {
    let exe = std::env::current_exe().expect("own path");
    format!("HARNESS_SELFTEST_ROLE={role} '{}'", exe.display())
}

const TOKEN_SCENARIO: &str = "the API token in the Authorization header is accepted";

async fn checks() -> Result<(), String> {
    rollout::journal::check_globs()?;
    rollout::claims::check_rules()?;
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
    let ext = run_scenario(
        auth.clone(),
        TOKEN_SCENARIO,
        Some(self_cmd("contract-builtin")),
    )
    .await;
    if ext.failed || ext.passed_scenarios != 1 {
        return Err(format!(
            "the built-in deployer behind the external contract should pass:\n{}",
            ext.output
        ));
    }
    println!("ok: the external-command adapter runs a contract-conforming deployer");

    // 3. A deployer with the seed's bug fails that scenario, and the message names the cause.
    let bad = run_scenario(
        auth.clone(),
        TOKEN_SCENARIO,
        Some(self_cmd("cookie-deployer")),
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
    println!("ok: the cookie deployer fails and the report names the cause");

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
    })
}

async fn contract_builtin() -> Result<(), String> {
    let req = request_from_env()?;
    let provider = provision_harness::config::load_provider(
        std::path::Path::new(&env("HARNESS_PROVIDER_CONFIG")),
        None,
    )
    .map_err(|e| format!("the harness's provider config: {e}"))?;
    let set =
        provision_harness::manifest::load_dir(&req.manifests_dir).map_err(|e| e.to_string())?;
    let d = provision_harness::deploy::Deployer::new(provider, BuiltIn::options(&req))
        .map_err(|e| e.to_string())?;
    let result = match req.action {
        Action::Deploy => d.deploy(&set).await,
        Action::Status => d.status(&set).await,
        Action::Destroy => d.destroy(&set).await,
        Action::Plan => {
            let report =
                provision_harness::plan::plan(&provider_for_plan()?, &set, &Default::default())
                    .await;
            let json = serde_json::to_string(&report).map_err(|e| e.to_string())?;
            return std::fs::write(env("HARNESS_STATUS_FILE"), json).map_err(|e| e.to_string());
        }
    }
    .map_err(|e| e.to_string())?;
    let json = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    std::fs::write(env("HARNESS_STATUS_FILE"), json).map_err(|e| e.to_string())
}

fn provider_for_plan() -> Result<provision_harness::config::Provider, String> {
    provision_harness::config::load_provider(
        std::path::Path::new(&env("HARNESS_PROVIDER_CONFIG")),
        None,
    )
    .map_err(|e| e.to_string())
}

/// The seed's client: `Cookie: PVEAuthCookie=<tokenid>=<secret>`, then the seed's first steps.
async fn cookie_deployer() -> Result<(), String> {
    let req = request_from_env()?;
    let set =
        provision_harness::manifest::load_dir(&req.manifests_dir).map_err(|e| e.to_string())?;
    let http = rollout::pve::raw_client().map_err(|e| e.to_string())?;
    let Creds::Token { id, secret } = &req.creds else {
        unreachable!("token credentials")
    };
    let mut vms = Vec::new();
    for l in &set.vms {
        let fp = &l.vm.spec.for_provider;
        let site = req
            .sites
            .iter()
            .find(|s| s.name == fp.site)
            .ok_or("unknown site")?;
        let mut error = None;
        for path in [
            format!("/nodes/{}/status", fp.node),
            format!("/nodes/{}/network", fp.node),
            "/cluster/nextid".to_string(),
        ] {
            let resp = http
                .get(format!("{}/api2/json{path}", site.url))
                .header("Cookie", format!("PVEAuthCookie={id}={secret}"))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                error = Some(
                    serde_json::json!({"reason": "AuthRefused", "message": format!("GET {path}: {}", resp.status()), "retryable": false}),
                );
                break;
            }
        }
        vms.push(serde_json::json!({
            "name": fp.name, "site": fp.site, "node": fp.node,
            // This deployer stops after the seed's first steps: it never creates anything.
            "outcome": "failed", "attempts": 1,
            "error": error.unwrap_or_else(|| serde_json::json!({"reason": "NotImplemented", "message": "the cookie deployer stops after nextid", "retryable": false})),
        }));
    }
    let status = serde_json::json!({"vms": vms, "unreadable": []});
    std::fs::write(env("HARNESS_STATUS_FILE"), status.to_string()).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() {
    let role = env("HARNESS_SELFTEST_ROLE");
    let result = match role.as_str() {
        "contract-builtin" => contract_builtin().await,
        "cookie-deployer" => cookie_deployer().await,
        _ => checks().await,
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
