//! Debian packages through apt's ordinary clients: `apt-cache` to resolve names and versions,
//! `apt-get download` to fetch (no root needed), `dpkg-deb -x` to unpack into the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| Error::tool(what, format!("cannot run: {e}")))?;
    if !out.status.success() {
        return Err(Error::tool(
            what,
            format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The versioned kernel image package a meta package (e.g. `linux-image-cloud-amd64`) points at.
pub fn kernel_package(meta: &str) -> Result<String> {
    let text = run(
        Command::new("apt-cache").args(["depends", meta]),
        "apt-cache depends",
    )?;
    parse_kernel_dep(&text).ok_or_else(|| {
        Error::Image(format!("{meta} does not depend on a linux-image-* package (is apt's package list current? run apt-get update)"))
    })
}

/// The `linux-image-*` package a kernel meta-package depends on, from `apt-cache depends`
/// output; `None` when there is none.
pub fn parse_kernel_dep(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-") && !p.starts_with('<'))
        .map(str::to_string)
}

/// The roots plus every library package they (recursively) depend on.
pub fn closure(roots: &[String]) -> Result<BTreeSet<String>> {
    let mut cmd = Command::new("apt-cache");
    cmd.args([
        "depends",
        "--recurse",
        "--no-recommends",
        "--no-suggests",
        "--no-conflicts",
        "--no-breaks",
        "--no-replaces",
        "--no-enhances",
    ]);
    cmd.args(roots);
    let text = run(&mut cmd, "apt-cache depends")?;
    let mut set: BTreeSet<String> = roots.iter().cloned().collect();
    set.extend(parse_closure(&text));
    Ok(set)
}

/// Package names at the start of lines of `apt-cache depends --recurse`, keeping libraries
/// only (init-system helpers, perl and friends are not needed to run a binary).
pub fn parse_closure(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .map(str::trim)
        .filter(|n| !n.starts_with('<') && !n.contains(':'))
        .filter(|n| n.starts_with("lib") || n.starts_with("zlib"))
        .map(str::to_string)
        .collect()
}

/// Candidate versions; a package apt cannot provide is an error that names it.
pub fn candidate_versions(pkgs: &BTreeSet<String>) -> Result<BTreeMap<String, String>> {
    let mut cmd = Command::new("apt-cache");
    cmd.arg("policy").args(pkgs);
    let text = run(&mut cmd, "apt-cache policy")?;
    let found = parse_policy(&text);
    let mut out = BTreeMap::new();
    for p in pkgs {
        match found.get(p) {
            Some(v) if v != "(none)" => {
                out.insert(p.clone(), v.clone());
            }
            _ => {
                return Err(Error::Image(format!(
                    "package {p} is not available from apt here (run apt-get update?)"
                )));
            }
        }
    }
    Ok(out)
}

/// Candidate versions by package name, from `apt-cache policy` output; a package apt knows
/// no candidate for maps to `(none)`.
pub fn parse_policy(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            current = Some(line.trim_end_matches(':').to_string());
        } else if let (Some(name), Some(v)) = (&current, line.trim().strip_prefix("Candidate: ")) {
            out.insert(name.clone(), v.trim().to_string());
        }
    }
    out
}

/// The file name `apt-get download` gives a package (epoch colon escaped).
pub fn deb_prefix(name: &str, version: &str) -> String {
    format!("{name}_{}_", version.replace(':', "%3a"))
}

fn find_deb(dir: &Path, name: &str, version: &str) -> Option<PathBuf> {
    let prefix = deb_prefix(name, version);
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".deb"))
        })
}

/// Make sure every package's .deb is in `dir`; download only the missing ones.
pub fn fetch(pkgs: &BTreeMap<String, String>, dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let missing: Vec<String> = pkgs
        .iter()
        .filter(|(n, v)| find_deb(dir, n, v).is_none())
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    if !missing.is_empty() {
        tracing::info!("apt-get download {} package(s)", missing.len());
        run(
            Command::new("apt-get")
                .current_dir(dir)
                .args(["-q", "download"])
                .args(&missing),
            "apt-get download",
        )?;
    }
    let mut out = BTreeMap::new();
    for (n, v) in pkgs {
        let deb = find_deb(dir, n, v)
            .ok_or_else(|| Error::Image(format!("apt-get download did not produce {n} {v}")))?;
        out.insert(n.clone(), deb);
    }
    Ok(out)
}

/// Unpack a .deb into `root/<file stem>` once; later calls reuse it.
pub fn unpack(deb: &Path, root: &Path) -> Result<PathBuf> {
    let stem = deb
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| Error::Image(format!("odd package file name {}", deb.display())))?;
    let dest = root.join(stem);
    if dest.is_dir() {
        return Ok(dest);
    }
    std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
    let tmp = root.join(format!(".{stem}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    run(
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(&tmp),
        "dpkg-deb -x",
    )?;
    std::fs::rename(&tmp, &dest).map_err(|e| Error::io(&dest, e))?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_dep_is_found() {
        let t = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-57-cloud-amd64\n";
        assert_eq!(
            parse_kernel_dep(t).as_deref(),
            Some("linux-image-6.1.0-57-cloud-amd64")
        );
        assert_eq!(parse_kernel_dep("x\n  Depends: libc6\n"), None);
    }

    #[test]
    fn closure_keeps_libraries_only() {
        let t = "qemu-guest-agent\n  Depends: libc6\nzlib1g\nlibc6\n  Depends: libgcc-s1\nlibgcc-s1\ninit-system-helpers\n<debconf-2.0>\nlibc6:i386\n";
        let s = parse_closure(t);
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            ["libc6", "libgcc-s1", "zlib1g"]
        );
    }

    #[test]
    fn policy_candidates() {
        let t = "busybox-static:\n  Installed: (none)\n  Candidate: 1:1.35.0-4+deb12u1+b1\n  Version table:\nnothere:\n  Installed: (none)\n  Candidate: (none)\n";
        let m = parse_policy(t);
        assert_eq!(m["busybox-static"], "1:1.35.0-4+deb12u1+b1");
        assert_eq!(m["nothere"], "(none)");
    }

    #[test]
    fn deb_names_escape_the_epoch() {
        assert_eq!(
            deb_prefix("busybox-static", "1:1.35"),
            "busybox-static_1%3a1.35_"
        );
    }
}
