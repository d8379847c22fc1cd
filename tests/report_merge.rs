//! `provision-harness report merge` on real shard reports: `tests/data/merge/` holds what
//! `cargo test --test rollout -- --tags @auth --shard I/2` wrote (JUnit, cucumber JSON,
//! durations), and shard 2 once more run with a deployer that does nothing
//! (`HARNESS_DEPLOYER_CMD=true`), so its scenarios really failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use provision_harness::suite::durations::{Durations, Status, recorded_scenarios};
use provision_harness::suite::merge::junit::{self, Outcome};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/merge")
        .join(name)
}

/// Copies fixture shard dirs into a temp dir under the names shard-1-of-2, shard-2-of-2.
fn shards(second: &str) -> (tempfile::TempDir, Vec<PathBuf>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for (from, to) in [("shard-1-of-2", "shard-1-of-2"), (second, "shard-2-of-2")] {
        let dir = tmp.path().join(to);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(data(from)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
            }
        }
        dirs.push(dir);
    }
    (tmp, dirs)
}

fn merge(dirs: &[PathBuf], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_provision-harness"))
        .args(["report", "merge"])
        .args(dirs)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn junit_cases(dir: &Path) -> Vec<junit::Case> {
    junit::parse(&read(&dir.join("rollout.junit.xml")), "x")
        .unwrap()
        .into_iter()
        .flat_map(|s| s.cases)
        .collect()
}

#[test]
fn two_passing_shards_merge_into_one_report_with_every_scenario_once() {
    let (tmp, dirs) = shards("shard-2-of-2");
    let out = tmp.path().join("merged");
    let o = merge(&dirs, &out);
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // JUnit: every case of both shards, once; the feature split over the shards is one suite.
    let (a, b) = (junit_cases(&dirs[0]), junit_cases(&dirs[1]));
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both fixture shards ran scenarios"
    );
    let merged_xml = read(&out.join("rollout.junit.xml"));
    let suites = junit::parse(&merged_xml, "merged").unwrap();
    let names: Vec<&str> = suites.iter().map(|s| s.name.as_str()).collect();
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(
        names.len(),
        unique.len(),
        "one suite per feature: {names:?}"
    );
    let mut merged: Vec<String> = suites
        .iter()
        .flat_map(|s| &s.cases)
        .map(|c| c.name.clone())
        .collect();
    let mut expected: Vec<String> = a.iter().chain(&b).map(|c| c.name.clone()).collect();
    merged.sort();
    expected.sort();
    assert_eq!(merged, expected);
    assert!(
        suites
            .iter()
            .flat_map(|s| &s.cases)
            .all(|c| c.outcome == Outcome::Passed)
    );
    assert!(
        merged_xml.contains(&format!("tests=\"{}\" failures=\"0\"", expected.len())),
        "{merged_xml}"
    );

    // Cucumber JSON: the same scenarios, one feature entry per feature.
    let recorded = recorded_scenarios(&read(&out.join("rollout.cucumber.json"))).unwrap();
    assert_eq!(recorded.len(), expected.len());
    assert!(recorded.iter().all(|r| r.status == Status::Passed));

    // Durations: both shards' scenarios.
    let d = Durations::read(&out.join("rollout.durations.json")).unwrap();
    let d1 = Durations::read(&dirs[0].join("rollout.durations.json")).unwrap();
    let d2 = Durations::read(&dirs[1].join("rollout.durations.json")).unwrap();
    assert_eq!(d.scenarios.len(), d1.scenarios.len() + d2.scenarios.len());
    assert_eq!(d.scenarios.len(), expected.len());

    // The summary names every scenario and both shards.
    let html = read(&out.join("summary.html"));
    assert!(html.contains("Merged test report: passed"));
    for label in ["shard-1-of-2", "shard-2-of-2"] {
        assert!(html.contains(label), "{label}");
    }
    for c in a.iter().chain(&b) {
        let shown = provision_harness::report_html::esc(&c.name);
        assert!(html.contains(&shown), "{} missing from the summary", c.name);
    }
}

#[test]
fn a_failed_shards_failures_stay_visible_in_every_merged_file() {
    let (tmp, dirs) = shards("shard-2-of-2-failed");
    let failed: Vec<junit::Case> = junit_cases(&dirs[1])
        .into_iter()
        .filter(|c| c.outcome == Outcome::Failed)
        .collect();
    assert!(!failed.is_empty(), "the fixture shard has real failures");
    let out = tmp.path().join("merged");
    let o = merge(&dirs, &out);
    assert_eq!(
        o.status.code(),
        Some(4),
        "a failed scenario fails the merge: {o:?}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("{} failed", failed.len())),
        "{stdout}"
    );

    let merged = junit::parse(&read(&out.join("rollout.junit.xml")), "m").unwrap();
    let merged_failed: Vec<&junit::Case> = merged
        .iter()
        .flat_map(|s| &s.cases)
        .filter(|c| c.outcome == Outcome::Failed)
        .collect();
    assert_eq!(merged_failed.len(), failed.len());
    for (m, f) in merged_failed.iter().zip(&failed) {
        assert_eq!(m.name, f.name);
        assert_eq!(m.message, f.message, "the failure's message is kept");
    }
    let json_failed = recorded_scenarios(&read(&out.join("rollout.cucumber.json")))
        .unwrap()
        .into_iter()
        .filter(|r| r.status == Status::Failed)
        .count();
    assert_eq!(json_failed, failed.len());

    let html = read(&out.join("summary.html"));
    assert!(html.contains("Merged test report: FAILED"));
    assert!(html.contains(&format!("Failures ({})", failed.len())));
    let first = failed[0].message.as_deref().unwrap();
    let shown: String = provision_harness::report_html::esc(first)
        .chars()
        .take(60)
        .collect();
    assert!(
        html.contains(&shown),
        "the failure message is in the summary: {shown}"
    );
}

#[test]
fn a_shard_that_left_no_report_or_half_a_report_fails_the_merge() {
    for damage in ["missing", "truncated"] {
        let (tmp, dirs) = shards("shard-2-of-2");
        let junit_path = dirs[1].join("rollout.junit.xml");
        let json_path = dirs[1].join("rollout.cucumber.json");
        match damage {
            "missing" => {
                for e in std::fs::read_dir(&dirs[1]).unwrap() {
                    std::fs::remove_file(e.unwrap().path()).unwrap();
                }
            }
            _ => {
                let x = read(&junit_path);
                std::fs::write(&junit_path, &x[..x.len() / 2]).unwrap();
                std::fs::write(&json_path, "").unwrap();
            }
        }
        let out = tmp.path().join("merged");
        let o = merge(&dirs, &out);
        assert_eq!(o.status.code(), Some(4), "{damage}: {o:?}");
        let xml = read(&out.join("rollout.junit.xml"));
        let suites = junit::parse(&xml, "m").unwrap();
        let shard_suite = suites
            .iter()
            .find(|s| s.name == "Shard reports")
            .expect(damage);
        assert_eq!(shard_suite.cases[0].outcome, Outcome::Failed);
        assert!(
            shard_suite.cases[0]
                .name
                .contains("shard-2-of-2: rollout.junit.xml")
        );
        // Shard 1's scenarios are all still there.
        let kept = suites
            .iter()
            .flat_map(|s| &s.cases)
            .filter(|c| c.outcome == Outcome::Passed)
            .count();
        assert_eq!(kept, junit_cases(&dirs[0]).len(), "{damage}");
        let json = recorded_scenarios(&read(&out.join("rollout.cucumber.json"))).unwrap();
        assert!(
            json.iter()
                .any(|r| r.status == Status::Failed && r.name.contains("shard-2-of-2"))
        );
        let html = read(&out.join("summary.html"));
        assert!(
            html.contains("Shard problems") && html.contains("shard-2-of-2: rollout.junit.xml")
        );
    }
}

#[test]
fn bad_inputs_are_refused_with_a_reason() {
    let (tmp, dirs) = shards("shard-2-of-2");
    let o = merge(&[tmp.path().join("nope")], &tmp.path().join("m"));
    assert_eq!(o.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a directory"));
    let o = merge(&dirs, &dirs[0]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = merge(&[empty], &tmp.path().join("m"));
    assert_eq!(o.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no report"));
    let o = Command::new(env!("CARGO_BIN_EXE_provision-harness"))
        .args(["report", "merge"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "no directory is a usage error");
}
