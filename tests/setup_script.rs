//! The README's test command (`scripts/test`) sets up what the tests need, and when it cannot
//! (a prerequisite missing, no way to install it) it stops at once with one line naming what to
//! install — before any test runs. These tests run it on a PATH made for each case: this
//! machine's own commands, minus the one a user would be missing.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every command `scripts/test` runs or looks for.
const COMMANDS: &[&str] = &[
    "bash",
    "dirname",
    "sed",
    "mktemp",
    "rm",
    "id",
    "cat",
    "awk",
    "sudo",
    "apt-get",
    "apt-cache",
    "docker",
    "cargo",
    "python3",
    "qemu-system-x86_64",
    "qemu-img",
    "ip",
    "ssh",
    "ssh-keygen",
    "chromium",
    "curl",
    "mformat",
    "mcopy",
    "genisoimage",
    "isoinfo",
];

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test")
}

/// Where `cmd` is on this machine's PATH (python3 resolved past pyenv-style shims, which need
/// their own directory on PATH).
fn locate(cmd: &str) -> Option<PathBuf> {
    if cmd == "python3" {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()?;
        let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        return (!p.is_empty()).then(|| PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// A directory of links to this machine's commands, without `hidden`, plus `extra` scripts.
fn bin_dir(hidden: &[&str], extra: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for cmd in COMMANDS.iter().filter(|c| !hidden.contains(c)) {
        if let Some(real) = locate(cmd) {
            symlink(real, dir.path().join(cmd)).expect("link a command");
        }
    }
    for (name, body) in extra {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write a stand-in");
        Command::new("chmod")
            .arg("+x")
            .arg(&p)
            .status()
            .expect("chmod");
    }
    dir
}

fn run(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(script());
    c.args(args)
        .env("PATH", bin)
        .env_remove("HARNESS_SETUP_NO_INSTALL")
        .env_remove("HARNESS_SETUP_SKIP_DOCKER");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run scripts/test")
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_prerequisite_of_this_machine_is_found() {
    let bin = bin_dir(&[], &[]);
    let out = run(bin.path(), &["--check"], &[]);
    assert!(
        out.status.success(),
        "scripts/test --check on this (set-up) machine: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("every prerequisite is here"));
}

#[test]
fn missing_qemu_that_cannot_be_installed_stops_the_run_with_one_line_naming_the_package() {
    // A stand-in cargo leaves a mark: no test may start when a prerequisite is missing.
    let marks = tempfile::tempdir().expect("temp dir");
    let mark = marks.path().join("cargo-ran");
    let bin = bin_dir(
        &["qemu-system-x86_64", "cargo"],
        &[("cargo", &format!("touch {}", mark.display()))],
    );
    let out = run(bin.path(), &[], &[("HARNESS_SETUP_NO_INSTALL", "1")]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "one line, got {lines:?}");
    assert!(
        lines[0].contains("qemu-system-x86") && lines[0].contains("apt-get install"),
        "{}",
        lines[0]
    );
    assert!(
        !lines[0].contains("qemu-utils"),
        "qemu-img is here, so qemu-utils is not missing: {}",
        lines[0]
    );
    assert!(!mark.exists(), "cargo test ran although QEMU is missing");
}

#[test]
fn missing_chromium_is_named_too() {
    let bin = bin_dir(&["chromium"], &[]);
    let out = run(bin.path(), &["--check"], &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("missing system packages: chromium;"),
        "{}",
        lines[0]
    );
}

#[test]
fn a_missing_docker_is_named_with_how_to_get_it() {
    let bin = bin_dir(&["docker"], &[]);
    let out = run(bin.path(), &["--check"], &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("missing Docker"), "{}", lines[0]);
}

#[test]
fn a_docker_engine_that_does_not_answer_is_named() {
    let bin = bin_dir(
        &["docker"],
        &[(
            "docker",
            "echo 'Cannot connect to the Docker daemon' >&2; exit 1",
        )],
    );
    let out = run(bin.path(), &["--check"], &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("Docker engine is not running"),
        "{}",
        lines[0]
    );
}

#[test]
fn an_unknown_argument_is_refused_before_anything_runs() {
    let bin = bin_dir(&[], &[]);
    let out = run(bin.path(), &["--chek"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument '--chek'"));
}

#[test]
fn the_package_list_names_every_package_ci_installs() {
    let bin = bin_dir(&[], &[]);
    let out = run(bin.path(), &["--list"], &[]);
    assert!(out.status.success(), "{out:?}");
    let list = String::from_utf8_lossy(&out.stdout);
    for p in [
        "qemu-system-x86",
        "qemu-utils",
        "ipxe-qemu",
        "chromium",
        "python3-venv",
    ] {
        assert!(list.lines().any(|l| l == p), "{p} missing from {list}");
    }
}
