//! The trace checker the trace tests share: `trace-lanefix` (PyPI) in a venv under the target
//! dir (made once, kept), which applies Perfetto's import rule to every (pid, tid) track —
//! slices must be disjoint or strictly nested — and moves each crossing slice to a new lane.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The pinned version of the checker.
pub const LANEFIX: &str = "trace-lanefix==0.1.1";

pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{cmd:?} exited {}: {text}", out.status))
    }
}

/// A venv with trace-lanefix, under the target dir (made once, kept between runs).
///
/// Several tests of one binary (and the trace tests of other binaries, in other lanes) ask at
/// once: one makes it while the others wait on a lock file (a thread lock within the binary),
/// so nobody uses or removes a half-made venv; `.installed` marks it whole.
pub fn checker() -> PathBuf {
    static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _in_process = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join("trace-lanefix-venv");
    let python = dir.join("bin/python");
    let ready = dir.join(".installed");
    if ready.exists() {
        return python;
    }
    std::fs::create_dir_all(tmp).unwrap();
    let lock = std::fs::File::create(tmp.join("trace-lanefix-venv.lock")).unwrap();
    lock.lock().expect("locking the trace-lanefix venv");
    if !ready.exists() {
        // A venv's scripts name its own path, so it is made in place (not renamed into it).
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir))
            .expect("python3 -m venv (python3 with the venv module is needed; .ci/run installs python3-venv)");
        run(Command::new(dir.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            LANEFIX,
        ]))
        .expect("pip install trace-lanefix (PyPI must be reachable)");
        std::fs::write(&ready, LANEFIX).unwrap();
    }
    python
}

/// What trace-lanefix made of `trace`: its report and the rewritten trace.
pub fn lanefix(trace: &Path) -> (String, Value) {
    let out = trace.with_extension("lanefix.json");
    let report = run(Command::new(checker())
        .args(["-m", "trace_lanefix.cli", "--snap-threshold-us", "0"])
        .arg(trace)
        .arg(&out))
    .expect("trace-lanefix reads the trace");
    let fixed = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (report, fixed)
}

/// Checks that trace-lanefix found every track properly nested (it moved, snapped or
/// changed no slice) and returns the trace's events as written (trace-lanefix regroups them).
pub fn assert_spans_nest(trace: &Path) -> Vec<Value> {
    let (report, fixed) = lanefix(trace);
    assert!(
        report.contains(", 0 new lanes") && !report.contains("slice(s) moved"),
        "trace-lanefix found crossing spans in {}:\n{report}",
        trace.display()
    );
    let original: Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    let slices = |v: &Value| {
        let mut s: Vec<(i64, i64, i64, i64)> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                (
                    e["pid"].as_i64().unwrap(),
                    e["tid"].as_i64().unwrap(),
                    e["ts"].as_i64().unwrap(),
                    e["dur"].as_i64().unwrap(),
                )
            })
            .collect();
        s.sort();
        s
    };
    assert_eq!(
        slices(&original),
        slices(&fixed),
        "trace-lanefix changed a slice"
    );
    original["traceEvents"].as_array().unwrap().clone()
}
