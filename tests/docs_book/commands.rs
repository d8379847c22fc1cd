//! The commands the README and the book show cannot rot: every line of a `sh` block is split into
//! simple commands, and each one this repository defines is checked against the real thing.
//!
//! - `cargo test|bench|run|build` with `-p`, `--test`, `--bench`, `--bin`: the package and target
//!   exist (from `cargo metadata`);
//! - `cargo run … -- ARGS`, `provision-harness ARGS`, `fake-proxmox ARGS`, `vm-lab ARGS`: the built
//!   binary parses ARGS (they are run with `--help` added, which clap answers only once every
//!   argument before it parsed, and which runs nothing);
//! - `scripts/test ARGS`: its options;
//! - `VAR=value` before a command: some file of the repository outside the docs reads `VAR`.
//!
//! Other programs (curl, docker, python, mdbook, …) are counted, not checked. Blocks marked
//! `sh ci` also run verbatim in `tests/container_readme.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A shell line of a page: where it is and its text (continuations joined).
pub struct ShellLine {
    pub place: String,
    pub text: String,
}

/// The lines of the `sh`/`bash` blocks of `markdown`, continuation lines joined, comments and
/// blank lines left out.
pub fn shell_lines(markdown: &str, page: &str) -> Vec<ShellLine> {
    let mut out = Vec::new();
    let mut in_shell: Option<bool> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            in_shell = match in_shell {
                Some(_) => None,
                None => {
                    let lang = info.split_whitespace().next().unwrap_or("");
                    Some(matches!(lang, "sh" | "bash" | "shell"))
                }
            };
            continue;
        }
        if in_shell != Some(true) {
            continue;
        }
        let text = strip_comment(line);
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = text.trim_end().strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(&text);
        if !joined.trim().is_empty() {
            out.push(ShellLine {
                place: format!("{page}:{start}"),
                text: joined.trim().to_string(),
            });
        }
    }
    out
}

/// The line without its `# comment` (a `#` that starts a word outside quotes).
fn strip_comment(line: &str) -> String {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

/// The simple commands of a line: split at `&&`, `||`, `;` and `|` outside quotes.
pub fn simple_commands(line: &str) -> Vec<String> {
    let (mut single, mut double) = (false, false);
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            // A lone `&` (a background job) ends a command too.
            ';' | '|' | '&' if !single && !double => {
                out.push(std::mem::take(&mut cur));
                while i + 1 < chars.len() && matches!(chars[i + 1], '|' | '&') {
                    i += 1;
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        i += 1;
    }
    out.push(cur);
    out.into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

/// The workspace's packages: name → (its directory, its targets by kind).
pub struct Workspace {
    pub root_package: String,
    pub packages: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Workspace {
    pub fn load(repo: &Path) -> Workspace {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "metadata",
                "--no-deps",
                "--format-version",
                "1",
                "--offline",
            ])
            .current_dir(repo)
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut packages = BTreeMap::new();
        let mut root_package = String::new();
        for p in meta["packages"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap().to_string();
            let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
            if manifest.parent() == Some(repo) {
                root_package = name.clone();
            }
            let mut kinds: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for t in p["targets"].as_array().unwrap() {
                for k in t["kind"].as_array().unwrap() {
                    kinds
                        .entry(k.as_str().unwrap().to_string())
                        .or_default()
                        .insert(t["name"].as_str().unwrap().to_string());
                }
            }
            packages.insert(name, kinds);
        }
        Workspace {
            root_package,
            packages,
        }
    }

    fn has(&self, package: &str, kind: &str, name: &str) -> bool {
        self.packages
            .get(package)
            .and_then(|k| k.get(kind))
            .is_some_and(|n| n.contains(name))
    }
}

/// Runs a built binary of the workspace (by name) with arguments; the error text if it refused
/// them.
pub type RunBinary<'a> = dyn FnMut(&str, &[String]) -> Result<(), String> + 'a;

/// What a check of one command found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Checked,
    /// A program this repository does not define.
    Other,
    Wrong(String),
}

/// Checks one simple command. `run_binary(name, args)` runs a built binary of the workspace with
/// `args` and returns its error text if it refused them.
pub fn check_command(
    command: &str,
    ws: &Workspace,
    env_known: &dyn Fn(&str) -> bool,
    run_binary: &mut RunBinary,
) -> Verdict {
    let Some(words) = shlex::split(command) else {
        return Verdict::Wrong(format!("unbalanced quotes in `{command}`"));
    };
    let mut words = words.into_iter().peekable();
    let mut wrong = Vec::new();
    // `VAR=value` assignments before the command.
    while let Some(w) = words.peek() {
        let Some((name, _)) = w.split_once('=') else {
            break;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            break;
        }
        if !env_known(name) {
            wrong.push(format!("nothing in the repository reads {name}"));
        }
        words.next();
    }
    let words = without_redirections(words.collect());
    let Some(program) = words.first() else {
        return verdict(wrong, true);
    };
    let args = &words[1..];
    let program_name = program.rsplit('/').next().unwrap_or(program);
    let checked = match program_name {
        "cargo" => check_cargo(args, ws, &mut wrong, run_binary),
        "provision-harness" | "fake-proxmox" | "vm-lab" if !program.starts_with("$") => {
            if let Err(e) = run_binary(program_name, args) {
                wrong.push(e);
            }
            true
        }
        "test" if program == "scripts/test" => {
            let known = ["--check", "--setup", "--list", "--", "-h", "--help"];
            if let Some(a) = args.first().filter(|a| !known.contains(&a.as_str())) {
                wrong.push(format!("scripts/test has no option {a}"));
            }
            true
        }
        _ => false,
    };
    verdict(wrong, checked)
}

/// The words without the shell's redirections (`> file`, `2>&1`, `<in`), which the program
/// never sees.
fn without_redirections(words: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for w in words {
        if skip_next {
            skip_next = false;
            continue;
        }
        let op = w.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
        if op.starts_with('>') || op.starts_with('<') {
            // `>` alone takes the next word as its file; `>file` and `2>&1` do not.
            skip_next = op.trim_start_matches(['>', '<']).is_empty();
            continue;
        }
        out.push(w);
    }
    out
}

fn verdict(wrong: Vec<String>, checked: bool) -> Verdict {
    if !wrong.is_empty() {
        Verdict::Wrong(wrong.join("; "))
    } else if checked {
        Verdict::Checked
    } else {
        Verdict::Other
    }
}

/// `cargo SUB …`: the package and targets named exist; `cargo run`'s arguments parse.
fn check_cargo(
    args: &[String],
    ws: &Workspace,
    wrong: &mut Vec<String>,
    run_binary: &mut RunBinary,
) -> bool {
    let Some(sub) = args.first().map(String::as_str) else {
        return false;
    };
    if !matches!(sub, "test" | "bench" | "run" | "build") {
        return false;
    }
    let (ours, rest) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[1..i], Some(&args[i + 1..])),
        None => (&args[1..], None),
    };
    let mut package = None;
    let mut targets: Vec<(&str, &str)> = Vec::new();
    let mut it = ours.iter();
    while let Some(a) = it.next() {
        let kind = match a.as_str() {
            "-p" | "--package" => {
                package = it.next().map(String::as_str);
                continue;
            }
            "--test" => "test",
            "--bench" => "bench",
            "--bin" => "bin",
            "--example" => "example",
            _ => continue,
        };
        match it.next() {
            Some(name) => targets.push((kind, name)),
            None => wrong.push(format!("cargo {sub} {a} without a name")),
        }
    }
    let package = package.unwrap_or(&ws.root_package);
    if !ws.packages.contains_key(package) {
        wrong.push(format!("no package {package} in the workspace"));
        return true;
    }
    for (kind, name) in &targets {
        if !ws.has(package, kind, name) {
            wrong.push(format!("package {package} has no {kind} target {name}"));
        }
    }
    if sub == "run" {
        let bin = targets
            .iter()
            .find(|(k, _)| *k == "bin")
            .map(|(_, n)| n.to_string())
            .or_else(|| {
                ws.packages
                    .get(package)
                    .and_then(|k| k.get("bin"))
                    .filter(|b| b.len() == 1)
                    .and_then(|b| b.first().cloned())
            });
        match bin {
            Some(bin) => {
                if let Err(e) = run_binary(&bin, rest.unwrap_or(&[])) {
                    wrong.push(e);
                }
            }
            None => wrong.push(format!("cargo run: which binary of {package}?")),
        }
    }
    true
}

/// Runs a built binary of the workspace with `args` and `--help` (before a `--`, so it still
/// counts as an option): clap answers help only after every argument before it parsed.
pub fn parses(binary: &Path, args: &[String]) -> Result<(), String> {
    let mut with_help: Vec<String> = Vec::new();
    let mut added = false;
    for a in args {
        if a == "--" && !added {
            with_help.push("--help".into());
            added = true;
        }
        with_help.push(a.clone());
    }
    if !added {
        with_help.push("--help".into());
    }
    let out = Command::new(binary)
        .args(&with_help)
        .env("NO_COLOR", "1")
        .output()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "`{} {}` is refused: {}",
            binary.file_name().unwrap_or_default().to_string_lossy(),
            args.join(" "),
            err.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_join_and_drop_comments() {
        let md = "x\n```sh\na --b \\\n  c   # note\n# only a comment\n\nd 'x # y'\n```\n```text\nnot shell\n```\n";
        let lines = shell_lines(md, "p.md");
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, vec!["a --b    c", "d 'x # y'"]);
        assert_eq!(lines[0].place, "p.md:3");
    }

    #[test]
    fn unknown_targets_packages_and_variables_are_named() {
        let ws = Workspace {
            root_package: "root".into(),
            packages: BTreeMap::from([(
                "root".into(),
                BTreeMap::from([("test".into(), BTreeSet::from(["rollout".into()]))]),
            )]),
        };
        let known = |n: &str| n == "HARNESS_X";
        let mut ran = Vec::new();
        let mut binary = |b: &str, a: &[String]| {
            ran.push(format!("{b} {}", a.join(" ")));
            Ok(())
        };
        let mut check = |c: &str| check_command(c, &ws, &known, &mut binary);
        assert_eq!(
            check("HARNESS_X=1 cargo test --test rollout -- --tags @a"),
            Verdict::Checked
        );
        let wrong = |v: Verdict, what: &str| matches!(v, Verdict::Wrong(w) if w.contains(what));
        assert!(wrong(
            check("HARNESS_Y=1 cargo test --test rollout"),
            "HARNESS_Y"
        ));
        assert!(wrong(check("cargo test --test rollot"), "rollot"));
        assert!(wrong(check("cargo bench -p nope"), "nope"));
        assert!(wrong(check("scripts/test --fast"), "--fast"));
        assert_eq!(check("curl -k https://127.0.0.1:8006"), Verdict::Other);
        assert_eq!(check("vm-lab up lab.yaml > log"), Verdict::Checked);
        assert_eq!(ran, vec!["vm-lab up lab.yaml"]);
    }

    #[test]
    fn redirections_are_not_arguments() {
        let words = |s: &str| without_redirections(shlex::split(s).unwrap());
        assert_eq!(words("a b > f 2>&1"), vec!["a", "b"]);
        assert_eq!(words("a >>log <in c"), vec!["a", "c"]);
    }

    #[test]
    fn commands_split_outside_quotes() {
        assert_eq!(
            simple_commands("a && b 'x|y' | c; d &"),
            vec!["a", "b 'x|y'", "c", "d"]
        );
    }
}
