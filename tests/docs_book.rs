//! The book under `docs/` and the README that points into it keep their links whole, without a
//! network or mdbook: every entry of `docs/src/SUMMARY.md` is a page that exists, every page is
//! in the summary, and every relative link of a page or of the README names a file that exists
//! (a book page stays inside `docs/src/`, as mdbook renders nothing else) and, with `#anchor`, a
//! heading of that page under the id mdbook gives it. CI also runs `mdbook build docs`. And every
//! command a page's `sh` blocks show that this repository defines (cargo targets, the three
//! binaries' arguments, `scripts/test`, the variables set before them) is one it accepts
//! (`docs_book/commands.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

#[path = "docs_book/commands.rs"]
mod commands;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book_src() -> PathBuf {
    repo().join("docs/src")
}

/// Every `.md` file below `dir`, as paths relative to it.
fn markdown_files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// The lines of a markdown text outside fenced code blocks, with their 1-based numbers.
fn prose_lines(markdown: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// A line without its inline code spans (a link shown as code is not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links `[text](target)` of a markdown text, with their line.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let re = regex::Regex::new(r"\]\(([^()\s]+)(?:\s+\x22[^\x22]*\x22)?\)").unwrap();
    let mut out = Vec::new();
    for (n, line) in prose_lines(markdown) {
        for c in re.captures_iter(&without_code_spans(line)) {
            out.push((n, c[1].to_owned()));
        }
    }
    out
}

/// mdbook's id for a heading's text: its text content, lowercased; letters, digits, `_` and `-`
/// kept, whitespace made `-`, everything else dropped.
fn heading_id(text: &str) -> String {
    let link = regex::Regex::new(r"\[([^\]]*)\]\([^)]*\)").unwrap();
    let text = link.replace_all(text, "$1");
    text.replace(['`', '*'], "")
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a page's headings, made unique as mdbook makes them (`-1`, `-2`, … on repeats).
fn heading_ids(markdown: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for (_, line) in prose_lines(markdown) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let text = line[hashes..].trim().trim_end_matches('#');
        let id = heading_id(text);
        let mut unique = id.clone();
        let mut n = 0;
        while !ids.insert(unique.clone()) {
            n += 1;
            unique = format!("{id}-{n}");
        }
    }
    ids
}

/// `base/rel` with `.` and `..` resolved, without touching the file system.
fn resolve(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every broken link of the markdown file `file` (absolute), as `file:line: target: why`.
fn broken_links(file: &Path, must_stay_in: Option<&Path>) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let shown = file.strip_prefix(repo()).unwrap().display().to_string();
    let mut ids_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for (line, target) in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let dest = if path.is_empty() {
            file.to_path_buf()
        } else {
            resolve(file.parent().unwrap(), path)
        };
        let why = if !dest.exists() {
            Some("no such file".to_owned())
        } else if must_stay_in.is_some_and(|root| !dest.starts_with(root)) {
            Some("outside the book's src (mdbook does not render it)".to_owned())
        } else if let Some(anchor) = anchor {
            if dest.extension().is_some_and(|x| x == "md") {
                let ids = ids_of
                    .entry(dest.clone())
                    .or_insert_with(|| heading_ids(&std::fs::read_to_string(&dest).unwrap()));
                (!ids.contains(anchor)).then(|| {
                    format!(
                        "no heading with id `{anchor}` there (ids: {})",
                        ids.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
            } else {
                Some("an anchor into a file that is not markdown".to_owned())
            }
        } else {
            None
        };
        if let Some(why) = why {
            broken.push(format!("{shown}:{line}: {target}: {why}"));
        }
    }
    broken
}

#[test]
fn summary_lists_every_page_and_only_pages_that_exist() {
    let src = book_src();
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let listed: Vec<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    assert!(!listed.is_empty(), "SUMMARY.md lists no chapter");
    let mut seen = BTreeSet::new();
    for target in &listed {
        assert!(
            !target.contains('#') && target.ends_with(".md"),
            "SUMMARY.md entry {target}: a chapter is a page, without an anchor"
        );
        assert!(
            src.join(target).is_file(),
            "SUMMARY.md lists {target}, which docs/src does not have"
        );
        assert!(
            seen.insert(PathBuf::from(target)),
            "SUMMARY.md lists {target} twice"
        );
    }
    let mut pages = markdown_files(&src);
    pages.remove(Path::new("SUMMARY.md"));
    let orphans: Vec<_> = pages.difference(&seen).collect();
    assert!(
        orphans.is_empty(),
        "pages mdbook would not render (not in SUMMARY.md): {orphans:?}"
    );
    let toml = std::fs::read_to_string(repo().join("docs/book.toml")).expect("docs/book.toml");
    assert!(
        toml.contains("[book]"),
        "docs/book.toml has no [book] table"
    );
}

#[test]
fn every_relative_link_of_the_book_and_the_readme_resolves() {
    let src = book_src();
    let mut broken = Vec::new();
    for page in markdown_files(&src) {
        broken.extend(broken_links(&src.join(page), Some(&src)));
    }
    for other in ["README.md", "fake-proxmox/README.md", "vm-lab/README.md"] {
        broken.extend(broken_links(&repo().join(other), None));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short_and_points_into_the_book() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the guide belongs in the book (docs/src)"
    );
    assert!(
        readme.contains("](docs/src/"),
        "README.md no longer links into the book"
    );
}

#[test]
fn heading_ids_follow_mdbook() {
    assert_eq!(
        heading_id(
            "Control API (`/_fake/…` on every listener, JSON; typed client `ControlClient`)"
        ),
        "control-api-_fake-on-every-listener-json-typed-client-controlclient"
    );
    assert_eq!(
        heading_id("vm-lab — rootless QEMU labs"),
        "vm-lab--rootless-qemu-labs"
    );
    assert_eq!(heading_id("The [lab](x.md) **backend**"), "the-lab-backend");
    let ids = heading_ids("# A\n```sh\n# not a heading\n```\n## A\n### B\n");
    assert_eq!(
        ids,
        BTreeSet::from(["a".to_owned(), "a-1".to_owned(), "b".to_owned()])
    );
    assert_eq!(
        links("see [x](a.md#b) and `[y](c.md)` and [z](https://e.org)\n```\n[w](d.md)\n```\n"),
        vec![(1, "a.md#b".to_owned()), (1, "https://e.org".to_owned())]
    );
    assert_eq!(
        resolve(Path::new("/r/docs/src/x"), "../y.md"),
        PathBuf::from("/r/docs/src/y.md")
    );
}

/// Every file of the repository that is not documentation or a build product, as one text: what
/// an environment variable a page names must appear in.
fn code_corpus() -> String {
    let mut text = String::new();
    let mut todo: Vec<PathBuf> = [
        "src",
        "tests",
        "benches",
        "scripts",
        "examples",
        "features",
        "fake-proxmox",
        "vm-lab",
        ".ci",
        ".github",
    ]
    .iter()
    .map(|d| repo().join(d))
    .collect();
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target" || n == "docs") {
                continue;
            }
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                todo.push(e.path());
            }
        } else if p.extension().is_none_or(|x| x != "md")
            && let Ok(t) = std::fs::read_to_string(&p)
        {
            text.push_str(&t);
            text.push('\n');
        }
    }
    text
}

/// Variables the environment or the toolchain defines, which a page may set for any program.
const STANDARD_ENV: &[&str] = &[
    "RUST_LOG",
    "RUST_BACKTRACE",
    "CARGO_TARGET_DIR",
    "PATH",
    "HOME",
    "TMPDIR",
    "NO_COLOR",
];

/// A built binary of the workspace (`cargo build` first when this test target ran alone).
fn workspace_binary(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_provision-harness"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = dir.join(name);
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = std::process::Command::new(cargo)
            .args(["build", "-p", name, "--bin", name])
            .current_dir(repo())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cargo build -p {name} failed");
    }
    path
}

#[test]
fn every_command_the_pages_show_is_one_this_repository_accepts() {
    let ws = commands::Workspace::load(&repo());
    let corpus = code_corpus();
    let env_known = |name: &str| STANDARD_ENV.contains(&name) || corpus.contains(name);
    let mut parsed: BTreeMap<(String, Vec<String>), Result<(), String>> = BTreeMap::new();
    let mut run_binary = |bin: &str, args: &[String]| {
        parsed
            .entry((bin.to_string(), args.to_vec()))
            .or_insert_with(|| commands::parses(&workspace_binary(bin), args))
            .clone()
    };
    let mut pages: Vec<(String, PathBuf)> =
        ["README.md", "fake-proxmox/README.md", "vm-lab/README.md"]
            .iter()
            .map(|p| (p.to_string(), repo().join(p)))
            .collect();
    for page in markdown_files(&book_src()) {
        pages.push((
            format!("docs/src/{}", page.display()),
            book_src().join(&page),
        ));
    }
    let (mut checked, mut other) = (0, 0);
    let mut wrong = Vec::new();
    for (name, path) in &pages {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for line in commands::shell_lines(&text, name) {
            for command in commands::simple_commands(&line.text) {
                match commands::check_command(&command, &ws, &env_known, &mut run_binary) {
                    commands::Verdict::Checked => checked += 1,
                    commands::Verdict::Other => other += 1,
                    commands::Verdict::Wrong(why) => {
                        wrong.push(format!("{}: `{command}`: {why}", line.place))
                    }
                }
            }
        }
    }
    println!(
        "commands on the pages: {checked} checked against this repository, {other} of other programs, {} wrong",
        wrong.len()
    );
    assert!(checked > 50, "only {checked} commands found to check");
    assert!(
        wrong.is_empty(),
        "commands the pages show that this repository refuses:\n{}",
        wrong.join("\n")
    );
}
