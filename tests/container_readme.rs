//! The README's commands cannot rot: every fenced block marked `sh ci` runs here, verbatim, in
//! order, with bash from the repository root, and must succeed — the README's first, then the
//! book's (`docs/src/`, page by page in `SUMMARY.md`'s order). The built binaries
//! (`fake-proxmox`, `provision-harness`) are put on `PATH` first, as `cargo install` would. The
//! main-job command of "The two commands" (`cargo run --release -- rehearse`) runs as the debug
//! build of the same binary, so CI does not build the workspace a second time in release mode.
//! Needs Docker and curl (the container blocks): fails without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `sh ci` blocks of a markdown text, with the line each starts on.
fn ci_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match current.take() {
            Some(block) if fence => blocks.push(block),
            Some((start, mut text)) => {
                text.push_str(line);
                text.push('\n');
                current = Some((start, text));
            }
            None if fence => {
                let info: Vec<&str> = line
                    .trim_start()
                    .trim_start_matches('`')
                    .split_whitespace()
                    .collect();
                if info.first() == Some(&"sh") && info.contains(&"ci") {
                    current = Some((i + 1, String::new()));
                }
            }
            None => {}
        }
    }
    blocks
}

/// `target/<profile>`, where cargo put this test's sibling binaries.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_provision-harness"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `script` with bash (errexit, pipefail) and kills its background jobs when it ends.
fn run_block(script: &str, place: &str) {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let wrapped =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}");
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&wrapped)
        .current_dir(repo())
        .env("PATH", path)
        .stdin(Stdio::null())
        .spawn()
        .expect("bash");
    let deadline = Instant::now() + Duration::from_secs(900);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the block at {place} did not finish within 15 min:\n{script}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "the block at {place} failed ({status}):\n{script}"
    );
}

/// The book's pages (paths below `docs/src/`) in the order `SUMMARY.md` lists them.
fn book_pages() -> Vec<String> {
    let summary = std::fs::read_to_string(repo().join("docs/src/SUMMARY.md")).unwrap();
    let link = regex::Regex::new(r"\]\(([^)#]+\.md)\)").unwrap();
    link.captures_iter(&summary)
        .map(|c| c[1].to_owned())
        .collect()
}

/// Every `sh ci` block to run, in order, each with where it is (`README.md:LINE`).
fn all_ci_blocks() -> Vec<(String, String)> {
    let mut files = vec!["README.md".to_owned()];
    files.extend(book_pages().into_iter().map(|p| format!("docs/src/{p}")));
    let mut out = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(repo().join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        for (line, script) in ci_blocks(&text) {
            out.push((format!("{file}:{line}"), script));
        }
    }
    out
}

#[test]
fn readme_blocks_marked_sh_ci_run() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        !ci_blocks(&readme).is_empty(),
        "the README lost its `sh ci` example"
    );
    let blocks = all_ci_blocks();
    assert!(
        blocks.len() >= 2,
        "the README and the book lost their `sh ci` blocks"
    );
    // A block may leave a container behind when it fails half-way; remove it however this ends.
    struct Cleanup;
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("docker")
                .args(["rm", "-f", "readme-fake-pve"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let _cleanup = Cleanup;
    for (place, script) in &blocks {
        eprintln!("{place}:\n{script}");
        run_block(script, place);
    }
}

#[test]
fn the_main_job_command_is_in_the_readme_and_runs() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let top = readme.split("<!-- section:").next().unwrap();
    assert!(
        top.contains("cargo run --release -- rehearse"),
        "the main-job command left the README's top"
    );
    assert!(
        top.contains("scripts/test ") && top.contains("cargo test --workspace"),
        "the test command (scripts/test, which runs cargo test --workspace) left the README's top"
    );
    let script = std::fs::read_to_string(repo().join("scripts/test")).unwrap();
    assert!(
        script.contains("python3 scripts/test-lanes.py")
            && script.contains("cargo test --workspace \"${cargo_args[@]}\""),
        "scripts/test no longer runs every test"
    );
    // The lanes run what `cargo test --workspace` would: the targets cargo lists, doc tests too.
    let lanes = std::fs::read_to_string(repo().join("scripts/test-lanes.py")).unwrap();
    assert!(
        lanes.contains("\"cargo\", \"test\", \"--workspace\", \"--no-run\"")
            && lanes.contains("\"cargo\", \"test\", \"--workspace\", \"--doc\""),
        "scripts/test-lanes.py must take its targets from cargo test --workspace"
    );
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(
        // The command itself, maybe after environment assignments (`VAR=value scripts/test`).
        ci.lines().any(|l| {
            let mut words = l.split_whitespace().skip_while(|w| {
                w.split_once('=')
                    .is_some_and(|(k, _)| !k.is_empty() && !k.contains('/'))
            });
            words.next() == Some("scripts/test") && words.next().is_none()
        }),
        ".ci/run must call the README's test command"
    );
    let report = repo().join("target/rehearse-report.html");
    let _ = std::fs::remove_file(&report);
    let out = Command::new(env!("CARGO_BIN_EXE_provision-harness"))
        .arg("rehearse")
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "provision-harness rehearse failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The README promises the timeline next to the tables.
    let html = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("rehearse wrote no {}: {e}", report.display()));
    assert!(
        html.contains("<svg") && html.contains("class=\"bar "),
        "no timeline in the report"
    );
    assert!(html.contains("seed rollout as written") && html.contains("fixed rollout"));
}

#[test]
fn ci_blocks_are_found_and_other_blocks_ignored() {
    let md =
        "text\n```sh\nnot me\n```\n```sh ci\necho one\necho two\n```\n```rust\nfn x() {}\n```\n";
    assert_eq!(ci_blocks(md), vec![(5, "echo one\necho two\n".to_string())]);
}
