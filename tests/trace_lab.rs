//! One trace of a real lab: a one-node cluster lab brought up by the cluster provisioner (S1,
//! under TCG unless a probe proves KVM works), its spans captured by the trace layer, its
//! guest's boot and console milestones read from what vm-lab keeps, all written as one
//! Chrome trace and opened with `trace-lanefix` (PyPI) as tests/trace.rs does. Needs QEMU and
//! the lab's tools (the nightly job installs them) and PyPI for the checker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/lanefix.rs"]
mod lanefix;

use std::time::Instant;

use provision_harness::cluster::lab::Bringup;
use provision_harness::trace::{self, Capture, Lane};
use serde_json::Value;
use tracing::Instrument as _;
use vm_lab::{LabOptions, LabSpec};

/// One small node on its own multicast group (inside the lab's namespace, loopback only, as
/// vm-lab always does).
const ONE_NODE: &str = r#"
name: trclab
network:
  mcast_group: 239.77.0.9
  mcast_port: 47009
nodes:
  - name: trc01
    mac: "52:54:00:00:09:01"
    address: 192.168.100.91/24
"#;

fn pid_tid(e: &Value) -> (i64, i64) {
    (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap())
}

/// The (pid, tid) of the thread named `thread` in the process named `process`.
fn thread_of(events: &[Value], process: &str, thread: &str) -> (i64, i64) {
    let pid = events
        .iter()
        .find(|e| e["name"] == "process_name" && e["args"]["name"] == process)
        .unwrap_or_else(|| panic!("no process {process}"))["pid"]
        .as_i64()
        .unwrap();
    let tid = events
        .iter()
        .find(|e| {
            e["name"] == "thread_name"
                && e["pid"].as_i64() == Some(pid)
                && e["args"]["name"] == thread
        })
        .unwrap_or_else(|| panic!("no thread {thread} in {process}"))["tid"]
        .as_i64()
        .unwrap();
    (pid, tid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_guest_s_boot_and_console_milestones_are_in_the_trace() {
    let started = Instant::now();
    trace::install();
    let capture = Capture::new();
    let spec = LabSpec::from_yaml(ONE_NODE).unwrap();
    let opts = LabOptions {
        keep_on_failure: true,
        ..LabOptions::default()
    };
    let b = Bringup::start_lab(spec, opts)
        .instrument(capture.span_on("trace lab", &Lane::new(trace::CLUSTER, "bring-up")))
        .await
        .unwrap_or_else(|e| panic!("lab up: {e}"));
    eprintln!("lab up after {:?}", started.elapsed());
    // A power cycle: a second boot, its console appended to the same log.
    let node = b.lab.node("trc01").unwrap();
    node.restart().await.unwrap();
    node.wait_ready().await.unwrap();
    eprintln!("restarted after {:?}", started.elapsed());
    let mut t = capture.take();
    let (files, lab) = trace::lab::collect(b.lab.run_dir());
    t.extend(lab);
    let names: Vec<&str> = files.iter().map(|(_, n)| n.as_str()).collect();
    assert!(
        names.contains(&"trc01.serial.times.jsonl"),
        "the lab keeps no serial stamps: {names:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.json");
    t.write(&file).unwrap();
    let events = lanefix::assert_spans_nest(&file);

    // The guest's lane: a span per boot that reached the ready line, and each boot's
    // milestones inside it in boot order.
    let guest = thread_of(&events, "lab", "trc01");
    let on_guest: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] != "M" && pid_tid(e) == guest)
        .collect();
    let boots: Vec<(&str, i64, i64)> = on_guest
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "boot")
        .map(|e| {
            assert_eq!(e["args"]["ready"], true, "{e}");
            let ts = e["ts"].as_i64().unwrap();
            (
                e["name"].as_str().unwrap(),
                ts,
                ts + e["dur"].as_i64().unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = boots.iter().map(|b| b.0).collect();
    assert_eq!(names, ["boot 1", "boot 2"], "{on_guest:?}");
    let milestones: Vec<(&str, i64)> = on_guest
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "serial")
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_i64().unwrap()))
        .collect();
    for &(boot, b0, b1) in &boots {
        assert!(b1 > b0, "a boot takes time: {boots:?}");
        let inside: Vec<&(&str, i64)> = milestones
            .iter()
            .filter(|(_, ts)| (b0..=b1).contains(ts))
            .collect();
        let order: Vec<&str> = inside.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            order,
            ["init runs", "network up", "ready"],
            "{boot}: {milestones:?}"
        );
        assert!(inside.windows(2).all(|w| w[0].1 <= w[1].1), "{inside:?}");
        assert_eq!(inside[2].1, b1, "{boot} ends at its ready line");
    }
    assert_eq!(
        milestones.len(),
        6,
        "a milestone outside a boot: {milestones:?}"
    );
    let (b0, b1) = (boots[0].1, boots[0].2);

    // The bring-up's span, in the cluster's process, holds the guest's first boot.
    let bringup = thread_of(&events, "cluster", "bring-up");
    let up = events
        .iter()
        .find(|e| e["ph"] == "X" && pid_tid(e) == bringup && e["name"] == "lab up (S1)")
        .expect("the cluster's lab-up span");
    let (u0, u1) = (
        up["ts"].as_i64().unwrap(),
        up["ts"].as_i64().unwrap() + up["dur"].as_i64().unwrap(),
    );
    assert!(
        u0 <= b0 && b1 <= u1,
        "boot {b0}..{b1} not in lab up {u0}..{u1}"
    );
    assert_eq!(up["args"]["nodes"], 1);
    // The harness's root span, on the same lane, holds the bring-up's.
    let root = events
        .iter()
        .find(|e| e["ph"] == "X" && pid_tid(e) == bringup && e["name"] == "trace lab")
        .expect("the harness's root span on the cluster's lane");
    assert!(root["ts"].as_i64().unwrap() <= u0, "{root}");
    drop(b);
    eprintln!("done after {:?}", started.elapsed());
}
