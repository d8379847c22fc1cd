//! The CI definitions users copy: `.github/workflows/{ci,nightly}.yml` and the Kubernetes
//! example in `examples/k8s/`. Checked as far as this machine allows: valid YAML, every command
//! they run exists in this repository (packages, test targets, binaries and their subcommands,
//! scripts), every test target runs somewhere, and the shard count agrees everywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;
use serde_norway::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_docs(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: invalid YAML: {e}")))
        .collect()
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_mapping()?.get(Value::String(key.into()))
}

/// The workspace: package name → (test targets, binaries).
#[derive(Debug, Default)]
struct Package {
    tests: BTreeSet<String>,
    bins: BTreeSet<String>,
    benches: BTreeSet<String>,
}

fn targets(dir: &Path, kind: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(dir.join(kind))
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "rs") {
            out.insert(p.file_stem().unwrap().to_string_lossy().into_owned());
        } else if p.join("main.rs").is_file() {
            out.insert(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}

fn workspace() -> BTreeMap<String, Package> {
    let mut out = BTreeMap::new();
    for dir in [
        root(),
        root().join("fake-proxmox"),
        root().join("fake-proxmox/crates/world"),
        root().join("fake-proxmox/crates/schema"),
        root().join("vm-lab"),
    ] {
        let manifest: toml_like::Manifest = toml_like::read(&dir.join("Cargo.toml"));
        let mut p = Package {
            tests: targets(&dir, "tests"),
            bins: targets(&dir.join("src"), "bin"),
            benches: targets(&dir, "benches"),
        };
        if dir.join("src/main.rs").is_file() {
            p.bins.insert(manifest.name.clone());
        }
        p.tests.extend(manifest.tests);
        p.bins.extend(manifest.bins);
        out.insert(manifest.name, p);
    }
    out
}

/// Just enough of Cargo.toml: the package name and the `[[test]]`/`[[bin]]` names.
mod toml_like {
    use std::path::Path;

    pub struct Manifest {
        pub name: String,
        pub tests: Vec<String>,
        pub bins: Vec<String>,
    }

    pub fn read(path: &Path) -> Manifest {
        let text = std::fs::read_to_string(path).unwrap();
        let mut m = Manifest {
            name: String::new(),
            tests: vec![],
            bins: vec![],
        };
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_owned();
                continue;
            }
            let Some(v) = line.strip_prefix("name = ") else {
                continue;
            };
            let v = v.trim_matches('"').to_owned();
            match section.as_str() {
                "[package]" => m.name = v,
                "[[test]]" => m.tests.push(v),
                "[[bin]]" => m.bins.push(v),
                _ => {}
            }
        }
        m
    }
}

/// Every `run:` script of a workflow, with its job's name.
fn run_scripts(workflow: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let jobs = get(workflow, "jobs").and_then(Value::as_mapping).unwrap();
    for (name, job) in jobs {
        let name = name.as_str().unwrap().to_owned();
        let steps = get(job, "steps").and_then(Value::as_sequence);
        let steps = steps.unwrap_or_else(|| panic!("job {name} has no steps"));
        for s in steps {
            assert!(
                get(s, "run").is_some() ^ get(s, "uses").is_some(),
                "job {name}: a step needs exactly one of run/uses: {s:?}"
            );
            if let Some(r) = get(s, "run").and_then(Value::as_str) {
                out.push((name.clone(), r.to_owned()));
            }
        }
    }
    out
}

/// A script cut into commands (on newlines, `&&`, `||`, `;`, `|`), each into words; quotes
/// dropped, `${{ expr }}` kept as one word.
fn commands(script: &str) -> Vec<Vec<String>> {
    let expr = regex::Regex::new(r"\$\{\{\s*([^}]*?)\s*\}\}").unwrap();
    let script = expr.replace_all(script, "$${{$1}}").replace("\\\n", " ");
    script
        .split(['\n', ';', '|'])
        .flat_map(|c| c.split("&&"))
        .map(|c| {
            c.split_whitespace()
                .map(|w| w.trim_matches(['"', '\'']).to_owned())
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

fn flag_values<'a>(cmd: &'a [String], flag: &str) -> Vec<&'a str> {
    cmd.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].as_str())
        .collect()
}

/// What one command line needs from the repository; adds the test targets it runs to `seen`
/// (`pkg/*` for a whole package).
fn check_command(cmd: &[String], ws: &BTreeMap<String, Package>, seen: &mut BTreeSet<String>) {
    let before_dashdash: Vec<String> = cmd.iter().take_while(|w| *w != "--").cloned().collect();
    if cmd[0] == "cargo"
        && matches!(
            cmd.get(1).map(String::as_str),
            Some("test" | "run" | "build" | "bench")
        )
    {
        let pkgs = flag_values(&before_dashdash, "-p");
        let pkgs: Vec<&str> = if pkgs.is_empty() {
            ws.keys().map(String::as_str).collect()
        } else {
            pkgs
        };
        for p in &pkgs {
            assert!(ws.contains_key(*p), "{cmd:?}: no package {p}");
        }
        let has = |f: fn(&Package) -> &BTreeSet<String>, name: &str| {
            pkgs.iter().any(|p| f(&ws[*p]).contains(name))
        };
        let tests = flag_values(&before_dashdash, "--test");
        for t in &tests {
            assert!(has(|p| &p.tests, t), "{cmd:?}: no test target {t}");
            for p in &pkgs {
                if ws[*p].tests.contains(*t) {
                    seen.insert(format!("{p}/{t}"));
                }
            }
        }
        for b in flag_values(&before_dashdash, "--bin") {
            assert!(has(|p| &p.bins, b), "{cmd:?}: no binary {b}");
        }
        for b in flag_values(&before_dashdash, "--bench") {
            assert!(has(|p| &p.benches, b), "{cmd:?}: no bench {b}");
        }
        let selective = ["--lib", "--bins", "--test", "--bin", "--bench", "--doc"]
            .iter()
            .any(|f| before_dashdash.iter().any(|w| w == f));
        if cmd[1] == "test" && !selective {
            for p in &pkgs {
                seen.insert(format!("{p}/*"));
            }
        }
        if cmd[1] == "run" && before_dashdash.iter().any(|w| w == "provision-harness") {
            let args: Vec<String> = cmd
                .iter()
                .skip_while(|w| *w != "--")
                .skip(1)
                .cloned()
                .collect();
            check_cli(&args);
        }
    }
    if cmd[0].ends_with("/provision-harness") {
        check_cli(&cmd[1..]);
    }
    for w in cmd {
        let w = w.trim_end_matches('/');
        let in_repo = [
            ".ci/",
            "examples/",
            "fake-proxmox/",
            "vm-lab/",
            "tests/",
            "src/",
            "features/",
            "scripts/",
        ]
        .iter()
        .any(|d| w.starts_with(d));
        if in_repo {
            assert!(
                root().join(w).exists(),
                "{cmd:?}: {w} does not exist in the repository"
            );
        }
    }
}

/// The CLI's subcommand words (up to the first option or path) accept `--help`.
fn check_cli(args: &[String]) {
    let words: Vec<&String> = args
        .iter()
        .take_while(|a| !a.starts_with('-') && !a.contains('/'))
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_provision-harness"))
        .args(&words)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "provision-harness {words:?} --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn check_workflow(rel: &str, ws: &BTreeMap<String, Package>, seen: &mut BTreeSet<String>) -> Value {
    let docs = yaml_docs(rel);
    assert_eq!(docs.len(), 1, "{rel}: one YAML document");
    let wf = docs.into_iter().next().unwrap();
    assert!(get(&wf, "on").is_some(), "{rel}: no `on:` trigger");
    for (job, script) in run_scripts(&wf) {
        for cmd in commands(&script) {
            check_command(&cmd, ws, seen);
        }
        assert!(
            !script.contains("--workspace --exclude"),
            "{rel} {job}: keep targets explicit"
        );
    }
    wf
}

#[test]
fn workflows_are_valid_and_run_only_what_exists_and_every_test_target_runs() {
    let ws = workspace();
    assert!(
        ws["provision-harness"].tests.contains("lab"),
        "workspace read: {ws:?}"
    );
    let mut seen = BTreeSet::new();
    check_workflow(".github/workflows/ci.yml", &ws, &mut seen);
    check_workflow(".github/workflows/nightly.yml", &ws, &mut seen);
    for (pkg, p) in &ws {
        for t in &p.tests {
            let covered =
                seen.contains(&format!("{pkg}/{t}")) || seen.contains(&format!("{pkg}/*"));
            assert!(
                covered,
                "test target {pkg}/{t} runs in neither ci.yml nor nightly.yml"
            );
        }
    }
}

/// The numbers N in `${{ matrix.shard }}/N`, `--shard X/N` and `shard-X-of-N` in a text.
fn shard_counts(text: &str) -> BTreeSet<usize> {
    let re = regex::Regex::new(r"(?:\}\}/|-of-|--shard \S+/)(\d+)").unwrap();
    re.captures_iter(text)
        .map(|c| c[1].parse().unwrap())
        .collect()
}

#[test]
fn nightly_shard_count_matches_its_matrix_and_its_merge() {
    let wf = yaml_docs(".github/workflows/nightly.yml").remove(0);
    let lab = get(get(&wf, "jobs").unwrap(), "lab").unwrap();
    let matrix = get(get(lab, "strategy").unwrap(), "matrix").unwrap();
    let shards: Vec<u64> = get(matrix, "shard")
        .and_then(Value::as_sequence)
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let n = shards.len();
    assert_eq!(
        shards,
        (1..=n as u64).collect::<Vec<_>>(),
        "matrix is 1..=N"
    );
    let text = std::fs::read_to_string(root().join(".github/workflows/nightly.yml")).unwrap();
    assert_eq!(
        shard_counts(&text),
        BTreeSet::from([n]),
        "every /N and -of-N says {n}"
    );
    let merge = run_scripts(&wf)
        .into_iter()
        .filter(|(job, _)| job == "merge")
        .flat_map(|(_, s)| commands(&s))
        .find(|c| c.iter().any(|w| w == "merge"))
        .expect("a report merge command in the merge job");
    let dirs = merge
        .iter()
        .skip_while(|w| *w != "merge")
        .skip(1)
        .take_while(|w| !w.starts_with("--"))
        .count();
    assert_eq!(dirs, n, "the merge job merges every shard: {merge:?}");
    let merge_job = get(get(&wf, "jobs").unwrap(), "merge").unwrap();
    assert_eq!(get(merge_job, "needs").and_then(Value::as_str), Some("lab"));
    assert_eq!(
        get(merge_job, "if").and_then(Value::as_str),
        Some("always()")
    );
}

#[test]
fn k8s_indexed_job_matches_its_shard_count_and_merge() {
    let ws = workspace();
    let docs = yaml_docs("examples/k8s/lab-shards.yaml");
    let job = docs
        .iter()
        .find(|d| get(d, "kind").and_then(Value::as_str) == Some("Job"))
        .expect("a Job");
    let spec = get(job, "spec").unwrap();
    assert_eq!(
        get(spec, "completionMode").and_then(Value::as_str),
        Some("Indexed")
    );
    let n = get(spec, "completions").and_then(Value::as_u64).unwrap() as usize;
    assert_eq!(
        get(spec, "parallelism").and_then(Value::as_u64),
        Some(n as u64)
    );
    let container = &get(
        get(get(spec, "template").unwrap(), "spec").unwrap(),
        "containers",
    )
    .and_then(Value::as_sequence)
    .unwrap()[0];
    let env: BTreeMap<&str, &str> = get(container, "env")
        .and_then(Value::as_sequence)
        .unwrap()
        .iter()
        .map(|e| {
            (
                get(e, "name").and_then(Value::as_str).unwrap(),
                get(e, "value").and_then(Value::as_str).unwrap(),
            )
        })
        .collect();
    assert_eq!(env["SHARDS"], n.to_string(), "SHARDS = completions");
    let command: Vec<String> = get(container, "command")
        .and_then(Value::as_sequence)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    check_command(&command, &ws, &mut BTreeSet::new());

    let merge = yaml_docs("examples/k8s/merge-job.yaml").remove(0);
    let text = std::fs::read_to_string(root().join("examples/k8s/merge-job.yaml")).unwrap();
    assert_eq!(shard_counts(&text), BTreeSet::from([n]));
    let script = get(
        get(
            get(get(&merge, "spec").unwrap(), "template").unwrap(),
            "spec",
        )
        .unwrap(),
        "containers",
    )
    .and_then(Value::as_sequence)
    .unwrap()[0]
        .clone();
    let words = get(&script, "command")
        .and_then(Value::as_sequence)
        .unwrap();
    let line = words.last().and_then(Value::as_str).unwrap();
    let mut merged_dirs = 0;
    for cmd in commands(line) {
        check_command(&cmd, &ws, &mut BTreeSet::new());
        if cmd.iter().any(|w| w == "merge") {
            merged_dirs = cmd
                .iter()
                .skip_while(|w| *w != "merge")
                .skip(1)
                .take_while(|w| !w.starts_with("--"))
                .count();
        }
    }
    assert_eq!(merged_dirs, n, "the merge Job merges every shard");
    let dockerfile = std::fs::read_to_string(root().join("examples/k8s/Dockerfile")).unwrap();
    for line in dockerfile.lines().filter(|l| l.contains("cargo ")) {
        for cmd in commands(line.trim_start_matches("RUN ")) {
            check_command(&cmd, &ws, &mut BTreeSet::new());
        }
    }
}

/// The pod script turns JOB_COMPLETION_INDEX k into `--shard k+1/N` and copies that shard's
/// reports; an index outside the Job is refused.
#[test]
fn k8s_pod_script_maps_the_completion_index_to_its_shard() {
    let reports = tempfile::tempdir().unwrap();
    let run = |index: &str, durations: bool| {
        if durations {
            std::fs::write(reports.path().join("lab.durations.json"), "{}").unwrap();
        }
        Command::new("sh")
            .arg(root().join("examples/k8s/run-shard.sh"))
            .current_dir(root())
            .env("JOB_COMPLETION_INDEX", index)
            .env("SHARDS", "3")
            .env("REPORTS", reports.path())
            .env("DRY_RUN", "1")
            .output()
            .unwrap()
    };
    let out = run("1", false);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cargo test -p provision-harness --test lab -- --shard 2/3\n"),
        "{text}"
    );
    assert!(text.contains("target/cucumber/shard-2-of-3/."), "{text}");
    let out = run("0", true);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--shard 1/3 --durations"), "{text}");
    let out = run("3", false);
    assert_eq!(
        out.status.code(),
        Some(2),
        "index 3 of a 3-pod Job: {out:?}"
    );
}
