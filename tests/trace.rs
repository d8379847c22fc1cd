//! One trace per run, opened by a tool that is not ours: `rehearse --trace` writes a trace, a
//! rollout scenario with a known failure leaves a failure bundle, and both traces go through
//! `trace-lanefix` (PyPI), which reads Chrome trace-event JSON and applies Perfetto's import
//! rule to every (pid, tid) track — slices must be disjoint or strictly nested, else Perfetto
//! drops them — moving each crossing slice to a new lane. A trace whose spans nest comes out
//! with no slice moved and no lane added.
//!
//! Perfetto's own `trace_processor` fetches its binary from outside the package registries on
//! first use, so it cannot run here; the check runs in a venv under the target dir (made once,
//! kept). Python with the venv module and PyPI are needed; without them the test fails with
//! the reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/lanefix.rs"]
mod lanefix;
#[path = "rollout/mod.rs"]
mod rollout;

use std::path::{Path, PathBuf};
use std::process::Command;

use cucumber::{World as _, WriterExt as _, writer};
use serde_json::Value;

use lanefix::{assert_spans_nest, lanefix, run};
use rollout::RolloutWorld;

#[test]
fn the_checker_sees_spans_that_cross() {
    // The check of the other tests must be able to fail: a child outliving its parent.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crossing.json");
    let events = serde_json::json!({"traceEvents": [
        {"ph": "X", "name": "parent", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "name": "child", "ts": 50, "dur": 100, "pid": 1, "tid": 1},
    ]});
    std::fs::write(&file, events.to_string()).unwrap();
    let (report, _) = lanefix(&file);
    assert!(report.contains(", 1 new lanes"), "{report}");
}

fn process_names(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rehearse_writes_one_trace_whose_spans_nest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rehearse.json");
    run(Command::new(env!("CARGO_BIN_EXE_provision-harness"))
        .args(["rehearse", "--no-html", "--trace"])
        .arg(&file))
    .expect("rehearse --trace runs");
    let events = assert_spans_nest(&file);
    let procs = process_names(&events);
    for p in [
        "deployer",
        "PVE API site-1",
        "PVE API site-2",
        "tasks site-1",
    ] {
        assert!(procs.iter().any(|x| x == p), "no process {p} in {procs:?}");
    }
    // Timed events are in time order from one origin.
    let ts: Vec<i64> = events
        .iter()
        .filter(|e| e["ph"] != "M")
        .map(|e| e["ts"].as_i64().unwrap())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "events out of order");
    assert_eq!(ts.iter().min(), Some(&0));
    // Every request has its status and latency; the deployer's steps and tasks are there.
    let api: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"].as_str().unwrap().starts_with("api"))
        .collect();
    assert!(api.len() > 30, "only {} API requests", api.len());
    for e in &api {
        assert!(e["args"]["status"].as_u64().is_some(), "{e}");
        assert!(e["args"]["latency_ms"].as_f64().is_some(), "{e}");
    }
    assert!(api.iter().any(|e| e["name"] == "POST /nodes/ml110-01/qemu"));
    let tasks = events.iter().filter(|e| e["cat"] == "task");
    assert!(
        tasks
            .clone()
            .any(|e| e["args"]["type"] == "qmcreate" && e["args"]["exitstatus"] == "OK"),
        "no finished qmcreate task"
    );
    let steps: Vec<&str> = events
        .iter()
        .filter(|e| e["cat"] == "step")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(steps.contains(&"create"), "deployer steps: {steps:?}");
    // The seed rollout as written retries VMs whose image is an ISO: each retry says why.
    assert!(
        events.iter().any(|e| e["ph"] == "i"
            && e["cat"] == "retry"
            && e["args"]["error"]
                .as_str()
                .is_some_and(|r| r.contains("import-from"))),
        "no retry with its reason"
    );
}

const FEATURE: &str = r#"Feature: Traces of the rollout suite
  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"

  Scenario: The cluster refuses every create
    Given the first 500 requests "POST" "/nodes/ml110-01/qemu" to "site-1" fail with 507 "create failed: trace self-test quota exceeded"
    When the deployer runs
    Then VM "nginx-proxy-vm" is ready with a VMID

  Scenario: A create that works, slowly
    Given every create call on "ml110-01" takes 300 ms to arrive
    When the deployer runs
    Then VM "nginx-proxy-vm" is ready with a VMID
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_scenario_keeps_a_bundle_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let features = dir.path().join("features");
    std::fs::create_dir_all(&features).unwrap();
    std::fs::write(features.join("trace.feature"), FEATURE).unwrap();
    let reports = dir.path().join("reports");
    provision_harness::trace::install();
    rollout::trace_writer::configure(&reports, "rollout", true);
    let w = RolloutWorld::cucumber()
        .after(rollout::after_hook)
        .with_writer(
            writer::Basic::new(
                std::io::sink(),
                writer::Coloring::Never,
                writer::Verbosity::Default,
            )
            .summarized()
            .tee::<RolloutWorld, _>(
                rollout::trace_writer::StepTrace::default()
                    .discard_stats_writes()
                    .discard_arbitrary_writes(),
            )
            .normalized(),
        )
        .fail_on_skipped()
        // Not this test binary's own arguments (libtest's filter and flags).
        .with_default_cli()
        .run(&features)
        .await;
    use cucumber::writer::Stats as _;
    assert_eq!(
        w.failed_steps(),
        1,
        "the refused scenario's last step fails"
    );
    assert!(w.passed_steps() >= 10, "the other scenario passes");

    let suite = reports.join("rollout");
    let traces: Vec<PathBuf> = std::fs::read_dir(suite.join("traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(traces.len(), 2, "a trace per scenario: {traces:?}");
    for t in &traces {
        let events = assert_spans_nest(t);
        let procs = process_names(&events);
        assert_eq!(
            procs.first().map(String::as_str),
            Some("scenario"),
            "{procs:?}"
        );
        // Gherkin steps nest in their scenario's span (same track, so trace-lanefix checked it).
        assert!(
            events
                .iter()
                .any(|e| e["cat"] == "gherkin" && e["name"] == "When the deployer runs")
        );
    }

    // The latency a fault rule adds is in the journal's, so in the request's span.
    let slow = traces
        .iter()
        .find(|t| t.to_string_lossy().contains("a-create-that-works-slowly"))
        .expect("the passing scenario's trace");
    let slow: Value = serde_json::from_slice(&std::fs::read(slow).unwrap()).unwrap();
    let create = slow["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["cat"] == "api" && e["name"] == "POST /nodes/ml110-01/qemu")
        .expect("the create request");
    assert!(
        create["args"]["latency_ms"].as_f64().unwrap() >= 300.0,
        "{create}"
    );
    assert!(create["dur"].as_i64().unwrap() >= 300_000, "{create}");

    let failures: Vec<PathBuf> = std::fs::read_dir(suite.join("failures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        failures.len(),
        1,
        "only the failed scenario has a bundle: {failures:?}"
    );
    let bundle = &failures[0];
    assert!(
        bundle
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("the-cluster-refuses-every-create")
    );
    let cause = "create failed: trace self-test quota exceeded";
    let summary = std::fs::read_to_string(bundle.join("failure.txt")).unwrap();
    assert!(
        summary.contains("Then VM \"nginx-proxy-vm\" is ready with a VMID"),
        "{summary}"
    );
    let journal: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("journal.json")).unwrap()).unwrap();
    assert!(
        journal
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["status"] == 507
                && e["path"] == "/nodes/ml110-01/qemu"
                && e["status_text"].as_str().unwrap().contains(cause)),
        "the journal holds the refused create"
    );
    assert!(
        std::fs::read_dir(bundle).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("state-")),
        "the fake's state is kept"
    );
    let events = assert_spans_nest(&bundle.join("trace.json"));
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["cat"] == "api,error" && e["name"] == "POST /nodes/ml110-01/qemu")
        .collect();
    assert!(!refused.is_empty());
    for e in &refused {
        assert_eq!(e["args"]["status"], 507, "{e}");
        assert!(
            e["args"]["status_text"].as_str().unwrap().contains(cause),
            "{e}"
        );
        assert!(e["args"]["latency_ms"].as_f64().is_some(), "{e}");
    }
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "i" && e["cat"] == "fault" && e["name"] == "requests fail"),
        "the fault step is an instant"
    );
    assert!(
        events
            .iter()
            .any(|e| e["cat"] == "gherkin,error" && e["args"]["outcome"] == "failed"),
        "the failed step is marked"
    );
}

#[test]
fn a_lab_run_dir_gives_a_bundle_its_guest_logs_and_a_trace_its_qmp_events() {
    // The layout vm-lab keeps per guest (`<run dir>/<node>/…`), QMP events as vm-lab writes
    // them (qapi's Event: `event`, `data`, `timestamp`).
    let run = tempfile::tempdir().unwrap();
    let node = run.path().join("node01");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(node.join("serial.log"), "node01 login:").unwrap();
    std::fs::write(node.join("disk.qcow2"), "not kept").unwrap();
    std::fs::write(
        node.join("qmp-events.jsonl"),
        concat!(
            r#"{"event":"STOP","data":{},"timestamp":{"seconds":1790000000,"microseconds":250}}"#,
            "\n",
            r#"{"event":"RESET","data":{"guest":true,"reason":"guest-reset"},"timestamp":{"seconds":1790000001,"microseconds":0}}"#,
            "\n"
        ),
    )
    .unwrap();
    let (files, trace) = rollout::trace_writer::lab_files(run.path());
    let names: Vec<&str> = files.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["node01.qmp-events.jsonl", "node01.serial.log"]);
    let marks: Vec<(&str, &str, i64)> = trace
        .marks
        .iter()
        .map(|m| (m.lane.thread.as_str(), m.name.as_str(), m.at_us))
        .collect();
    assert_eq!(
        marks,
        [
            ("node01", "STOP", 1_790_000_000_000_250),
            ("node01", "RESET", 1_790_000_001_000_000)
        ]
    );
    assert_eq!(trace.marks[1].args["data"]["reason"], "guest-reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_writes_the_deployers_side_of_a_trace() {
    let mut scenario =
        fake_proxmox::Scenario::from_yaml_str(provision_harness::examples::SANKOFA_FIXED_SCENARIO)
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Each site's snippets share, where `deploy` writes the manifests' userData.
    let shares = scenario.share_snippets(&dir.path().join("shares")).unwrap();
    let fake = fake_proxmox::FakeProxmox::builder()
        .scenario(scenario)
        .auth_failure_delay(false)
        .clock(fake_proxmox::ClockMode::Scaled { factor: 2000.0 })
        .start()
        .await
        .unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Both sites at the fake, certificates pinned; the example's credentials Secret beside it.
    let mut provider = String::from(
        "apiVersion: proxmox.sankofa.nexus/v1alpha1\nkind: ProviderConfig\nmetadata:\n  name: trace\n\
         spec:\n  credentials:\n    source: Secret\n    secretRef:\n      name: proxmox-credentials\n  sites:\n",
    );
    for s in fake.sites() {
        provider.push_str(&format!(
            "    - name: {}\n      endpoint: {}\n      fingerprint: \"{}\"\n",
            s.name(),
            s.url(),
            s.fingerprint()
        ));
        if let Some(share) = shares.iter().find(|x| x.site == s.name()) {
            provider.push_str(&format!(
                "      snippets:\n        storage: {}\n        path: \"{}\"\n",
                share.storage,
                share.dir.display()
            ));
        }
    }
    let pc = dir.path().join("provider-config.yaml");
    std::fs::write(&pc, provider).unwrap();
    std::fs::copy(
        repo.join("examples/sankofa/proxmox-credentials.yaml"),
        dir.path().join("proxmox-credentials.yaml"),
    )
    .unwrap();
    let file = dir.path().join("deploy.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_provision-harness"));
    cmd.arg("deploy")
        .arg("--provider-config")
        .arg(&pc)
        .arg("--manifests")
        .arg(repo.join("examples/sankofa-fixed/production"))
        .arg("--state")
        .arg(dir.path().join("state.json"))
        .arg("--trace")
        .arg(&file);
    tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap()
        .expect("deploy --trace runs");
    fake.shutdown().await;
    let events = assert_spans_nest(&file);
    assert_eq!(process_names(&events), ["deployer"]);
    let creates: Vec<&Value> = events
        .iter()
        .filter(|e| e["cat"] == "client-request" && e["name"] == "POST /nodes/ml110-01/qemu")
        .collect();
    assert!(!creates.is_empty(), "the client's view of the creates");
    for e in creates {
        assert_eq!(e["args"]["status"], 200, "{e}");
    }
    let vms = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter(|e| e["args"]["name"].as_str().unwrap().starts_with("vm "))
        .count();
    assert_eq!(vms, 30, "a lane per VM of the fixed rollout");
}
