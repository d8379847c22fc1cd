//! Layering check: no crate of the workspace has a file-level import cycle.
//!
//! Each crate's layers are only real if lower files never import higher ones, so this reads
//! every path the compiler follows from one file to another — `use crate::…`, `use super::…`,
//! `use self::…` (brace trees expanded) and the same paths written inline, doc links included —
//! resolves each to the deepest file it names (`a::b::Item` → `a/b.rs`, `a/b/mod.rs`, `a.rs` or
//! `a/mod.rs`), and fails listing every strongly connected set of two or more files.
//!
//! It reads text, not the compiler's name resolution. A file's inline unit tests
//! (`#[cfg(test)] mod tests { … }`, to the end of the file) are left out: they are not part of
//! the layers. Crates are discovered (every `Cargo.toml` with a `src/` beside it), so a crate
//! added to the workspace is checked without being listed here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

static USE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\buse\s+((?:crate|super|self)::[^;]+);").unwrap());
static UNIT_TESTS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)#\[cfg\(test\)\]\s*mod\s+tests\s*\{.*").unwrap());
static INLINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b((?:crate|self|super)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)").unwrap()
});

/// The crate's `.rs` files, relative to its `src/`, with `/` separators.
fn rust_files(src: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, src, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap();
                let parts: Vec<_> = rel
                    .iter()
                    .map(|c| c.to_string_lossy().into_owned())
                    .collect();
                out.insert(parts.join("/"));
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(src, src, &mut out);
    out
}

/// The module path of a file: `a/b.rs` and `a/b/mod.rs` are `[a, b]`; `lib.rs` is `[]`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// `a::{b, c::{d, e as f}, self}` → `a::b`, `a::c::d`, `a::c::e`, `a`.
fn expand_use_tree(tree: &str) -> Vec<String> {
    // `x as y` keeps `x`: mark the renaming before dropping whitespace.
    static RENAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+as\s+").unwrap());
    let tree = RENAME.replace_all(tree, "@");
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand_into("", &tree, &mut out);
    out
}

fn expand_into(prefix: &str, s: &str, out: &mut Vec<String>) {
    for item in split_top_level(s) {
        match item.find('{') {
            None => {
                let name = item.split('@').next().unwrap_or(&item);
                if name == "self" {
                    out.push(prefix.trim_end_matches("::").to_string());
                } else if !name.is_empty() {
                    out.push(format!("{prefix}{name}"));
                }
            }
            Some(open) => {
                let head = &item[..open];
                let inner = item[open + 1..]
                    .strip_suffix('}')
                    .unwrap_or(&item[open + 1..]);
                expand_into(&format!("{prefix}{head}"), inner, out);
            }
        }
    }
}

/// Splits on commas outside braces.
fn split_top_level(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in s.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

/// A `crate::`/`super::`/`self::` path as written in `file`, from the crate root.
fn absolute(file: &str, path: &str) -> Vec<String> {
    let mut segs: Vec<&str> = path
        .split("::")
        .filter(|s| !s.is_empty() && *s != "*")
        .collect();
    if segs.first() == Some(&"crate") {
        return segs[1..].iter().map(|s| s.to_string()).collect();
    }
    let mut here = module_of(file);
    while let Some(first) = segs.first() {
        match *first {
            "self" => {}
            "super" => {
                here.pop();
            }
            _ => break,
        }
        segs.remove(0);
    }
    here.extend(segs.iter().map(|s| s.to_string()));
    here
}

/// The deepest file a module path names, if any.
fn resolve(files: &BTreeSet<String>, parts: &[String]) -> Option<String> {
    (1..=parts.len()).rev().find_map(|n| {
        let base = parts[..n].join("/");
        [format!("{base}.rs"), format!("{base}/mod.rs")]
            .into_iter()
            .find(|cand| files.contains(cand))
    })
}

/// File → the files it imports, for one crate's `src/`.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let mut graph = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(src.join(file)).unwrap_or_default();
        let text = UNIT_TESTS.replace(&text, "");
        let mut paths: Vec<String> = USE
            .captures_iter(&text)
            .flat_map(|c| expand_use_tree(&c[1]))
            .collect();
        paths.extend(INLINE.captures_iter(&text).map(|c| c[1].to_string()));
        let targets: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| resolve(&files, &absolute(file, p)))
            .filter(|t| t != file)
            .collect();
        graph.insert(file.clone(), targets);
    }
    graph
}

/// Strongly connected sets of two or more files (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.found.push(set);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found.sort();
    s.found
}

/// Every crate source dir of the repository: a `Cargo.toml` with a `src/` beside it.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            out.push(dir.join("src"));
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && !name.starts_with('.') && !matches!(name.as_str(), "target" | "src") {
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

#[test]
fn no_crate_of_the_workspace_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates = crate_sources(root);
    // The workspace's own crates must all be found, or the check would pass vacuously.
    for expected in [
        "src",
        "vm-lab/src",
        "fake-proxmox/src",
        "fake-proxmox/crates/world/src",
    ] {
        assert!(
            crates.contains(&root.join(expected)),
            "{expected} not discovered: {crates:?}"
        );
    }
    let mut report = String::new();
    for src in &crates {
        for set in cycles(&import_graph(src)) {
            let rel = src.strip_prefix(root).unwrap_or(src).display().to_string();
            report.push_str(&format!("{rel}: {}\n", set.join(", ")));
        }
    }
    assert!(
        report.is_empty(),
        "file-level import cycles (lower files must not import higher ones):\n{report}"
    );
}

/// A throwaway crate `src/` with the given files.
fn synthetic(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn cycles_of(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    let dir = synthetic(files);
    cycles(&import_graph(dir.path()))
}

#[test]
fn a_two_file_cycle_through_crate_paths_is_found() {
    let found = cycles_of(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B(crate::a::A);"),
    ]);
    assert_eq!(found, vec![vec!["a.rs".to_string(), "b.rs".to_string()]]);
}

#[test]
fn super_from_a_child_and_braced_trees_are_followed() {
    let found = cycles_of(&[
        ("lib.rs", "pub mod fam;"),
        ("fam/mod.rs", "pub mod model; pub mod verbs;"),
        ("fam/model.rs", "use super::{verbs::{self, plan as p}};"),
        ("fam/verbs.rs", "use super::model::Thing;"),
    ]);
    assert_eq!(
        found,
        vec![vec!["fam/model.rs".to_string(), "fam/verbs.rs".to_string()]]
    );
}

#[test]
fn a_mod_declaration_alone_makes_no_cycle() {
    let found = cycles_of(&[
        ("lib.rs", "pub mod fam;"),
        ("fam/mod.rs", "pub mod model;\npub mod verbs;"),
        ("fam/model.rs", "pub struct Thing;"),
        (
            "fam/verbs.rs",
            "use super::model::Thing;\nuse crate::fam::model;",
        ),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn inline_unit_tests_are_not_part_of_the_layers_but_other_inline_modules_are() {
    let tests_only = cycles_of(&[
        ("lib.rs", "pub mod fam;"),
        ("fam/mod.rs", "pub use self::child::C;\npub mod child;"),
        (
            "fam/child.rs",
            "pub struct C;\n#[cfg(test)]\nmod tests { use crate::fam::C; }",
        ),
    ]);
    assert!(tests_only.is_empty(), "{tests_only:?}");
    let helper = cycles_of(&[
        ("lib.rs", "pub mod fam;"),
        ("fam/mod.rs", "pub use self::child::C;\npub mod child;"),
        (
            "fam/child.rs",
            "pub struct C;\nmod helper { use crate::fam::C; }",
        ),
    ]);
    assert_eq!(
        helper,
        vec![vec!["fam/child.rs".to_string(), "fam/mod.rs".to_string()]]
    );
}
