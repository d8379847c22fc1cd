//! The `provision-harness` binary: exit codes, `--json`, and that secrets never reach its output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use fake_proxmox::{ClockMode, FakeProxmox, Scenario};

const BIN: &str = env!("CARGO_BIN_EXE_provision-harness");
const SECRET: &str = "6f1c2b9e-4d3a-4b8f-a1e7-5c0d9e8f7a61";

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("PVE_TOKEN_ID")
        .env_remove("PVE_TOKEN_SECRET")
        .env("PROVISION_HARNESS_LOG", "debug")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn repo(p: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(p)
        .display()
        .to_string()
}

/// A provider config pointing both sites at the fake, certificates pinned, each site's
/// snippets share named (where `deploy` writes the manifests' userData).
fn provider_for(fake: &FakeProxmox, dir: &Path) -> String {
    let mut y = String::from(
        "apiVersion: proxmox.sankofa.nexus/v1alpha1\nkind: ProviderConfig\nmetadata:\n  name: test\nspec:\n  credentials:\n    source: Secret\n    secretRef:\n      name: proxmox-credentials\n  sites:\n",
    );
    for s in fake.sites() {
        y.push_str(&format!(
            "    - name: {}\n      endpoint: {}\n      fingerprint: \"{}\"\n",
            s.name(),
            s.url(),
            s.fingerprint()
        ));
        let share = dir.join("shares").join(s.name()).join("local");
        if share.is_dir() {
            y.push_str(&format!(
                "      snippets:\n        storage: local\n        path: \"{}\"\n",
                share.display()
            ));
        }
    }
    let path = dir.join("provider-config.yaml");
    std::fs::write(&path, y).unwrap();
    std::fs::copy(
        repo("examples/sankofa/proxmox-credentials.yaml"),
        dir.join("proxmox-credentials.yaml"),
    )
    .unwrap();
    path.display().to_string()
}

/// A fake of `scenario` whose snippets storages are shared under `<dir>/shares`.
async fn fake(mut scenario: Scenario, dir: &Path) -> FakeProxmox {
    scenario.share_snippets(&dir.join("shares")).unwrap();
    FakeProxmox::builder()
        .scenario(scenario)
        .auth_failure_delay(false)
        .clock(ClockMode::Scaled { factor: 2000.0 })
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_exits_3_when_the_rollout_would_fail() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(Scenario::embedded_default(), dir.path()).await;
    let pc = provider_for(&fake, dir.path());
    let manifests = repo("examples/sankofa/production");
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        run(&[
            "plan",
            "--provider-config",
            &pc,
            "--manifests",
            &manifests,
            "--json",
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 3, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "would-fail");
    assert!(
        !out.contains(SECRET) && !err.contains(SECRET),
        "the token secret leaked"
    );
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_status_destroy_on_the_fixed_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::from_yaml_str(provision_harness::examples::SANKOFA_FIXED_SCENARIO);
    let fake = fake(scenario.unwrap(), dir.path()).await;
    let pc = provider_for(&fake, dir.path());
    let state = dir.path().join("state.json").display().to_string();
    let manifests = repo("examples/sankofa-fixed/production");
    let args = move |cmd: &'static str| {
        let (pc, state, manifests) = (pc.clone(), state.clone(), manifests.clone());
        move || {
            run(&[
                cmd,
                "--provider-config",
                &pc,
                "--manifests",
                &manifests,
                "--state",
                &state,
                "--json",
            ])
        }
    };
    let (code, out, err) = tokio::task::spawn_blocking(args("deploy")).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["ready"], 30, "{out}");
    assert!(
        !out.contains(SECRET) && !err.contains(SECRET),
        "the token secret leaked"
    );
    let (code, out, _) = tokio::task::spawn_blocking(args("status")).await.unwrap();
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["vms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|vm| vm["state"] == "running")
    );
    let (code, out, err) = tokio::task::spawn_blocking(args("destroy")).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["vms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|vm| vm["outcome"] == "destroyed"),
        "{out}"
    );
    fake.shutdown().await;
}

#[test]
fn bad_input_exits_5_and_rehearse_exits_0_unless_strict() {
    let (code, _, err) = run(&["plan", "--provider-config", "/nonexistent/pc.yaml"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("/nonexistent/pc.yaml"));
    let (code, out, _) = run(&["rehearse", "--seed-only"]);
    assert_eq!(code, 0);
    assert!(out.contains("verdict: WOULD FAIL"), "{out}");
    let (code, _, _) = run(&["rehearse", "--seed-only", "--strict"]);
    assert_eq!(code, 3);
    let (code, _, _) = run(&["deploy", "--bogus-flag"]);
    assert_eq!(code, 2);
}
