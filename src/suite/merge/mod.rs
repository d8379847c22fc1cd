//! `provision-harness report merge DIR… --out DIR`: the reports of a sharded run's shards (one
//! directory each, as the CI artifacts hold them) joined into one set.
//!
//! In every input directory, files are taken by name: `*.durations.json` are durations files
//! (joined), other `*.json` are cucumber JSON reports, `*.xml` JUnit reports. A report named in
//! one shard's directory and missing or unreadable in another's becomes a failed scenario in the
//! merged report ("Shard reports" / "shard-2-of-3: lab-junit.xml"), so a shard that died before
//! writing its report cannot pass unnoticed. The output directory gets each report under its
//! own name, the joined durations files, and `summary.html`.

pub mod cucumber_json;
pub mod html;
pub mod junit;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::durations::Durations;
use junit::{Outcome, Suite};

/// The HTML summary's file name in the output directory.
pub const SUMMARY_HTML: &str = "summary.html";

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("no shard directory given")]
    NoInputs,
    #[error("{0}: not a directory")]
    NotADir(PathBuf),
    #[error("{0}: the output directory is also an input")]
    OutIsInput(PathBuf),
    #[error("no report (*.xml, *.json) in any of the shard directories")]
    NothingToMerge,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MergeError + '_ {
    move |source| MergeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One shard's share of the merged run, from its JUnit reports.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardStat {
    pub label: String,
    pub scenarios: usize,
    pub failed: usize,
    /// The sum of its scenarios' times.
    pub seconds: f64,
}

/// What `merge` wrote and found.
#[derive(Debug, Clone)]
pub struct Merged {
    pub written: Vec<PathBuf>,
    pub html: PathBuf,
    pub shards: Vec<ShardStat>,
    pub scenarios: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Reports missing or unreadable in a shard (each also a failed scenario), and durations
    /// files that could not be read (not a failure).
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Junit,
    CucumberJson,
    Durations,
}

fn kind_of(name: &str) -> Option<Kind> {
    if name.ends_with(".durations.json") {
        Some(Kind::Durations)
    } else if name.ends_with(".json") {
        Some(Kind::CucumberJson)
    } else if name.ends_with(".xml") {
        Some(Kind::Junit)
    } else {
        None
    }
}

/// A shard's label: its directory's name, or the path as given when two names collide.
fn labels(dirs: &[PathBuf]) -> Vec<String> {
    let names: Vec<String> = dirs
        .iter()
        .map(|d| {
            d.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| d.display().to_string())
        })
        .collect();
    names
        .iter()
        .zip(dirs)
        .map(|(n, d)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                d.display().to_string()
            } else {
                n.clone()
            }
        })
        .collect()
}

fn report_names(dirs: &[PathBuf]) -> Result<BTreeSet<(Kind, String)>, MergeError> {
    let mut names = BTreeSet::new();
    for d in dirs {
        for entry in std::fs::read_dir(d).map_err(io(d))? {
            let entry = entry.map_err(io(d))?;
            if !entry.file_type().map_err(io(d))?.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(k) = kind_of(&name) {
                names.insert((k, name));
            }
        }
    }
    Ok(names)
}

fn check_inputs(dirs: &[PathBuf], out: &Path) -> Result<(), MergeError> {
    if dirs.is_empty() {
        return Err(MergeError::NoInputs);
    }
    let out_abs = std::fs::canonicalize(out).ok();
    for d in dirs {
        if !d.is_dir() {
            return Err(MergeError::NotADir(d.clone()));
        }
        if out_abs.is_some() && std::fs::canonicalize(d).ok() == out_abs {
            return Err(MergeError::OutIsInput(d.clone()));
        }
    }
    Ok(())
}

/// Merges the reports of the shard directories `dirs` into `out` (created).
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, MergeError> {
    check_inputs(dirs, out)?;
    let names = report_names(dirs)?;
    if !names.iter().any(|(k, _)| *k != Kind::Durations) {
        return Err(MergeError::NothingToMerge);
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    let labels = labels(dirs);
    let mut problems = Vec::new();
    let mut written = Vec::new();
    let mut junit_files: Vec<(String, Vec<Suite>)> = Vec::new();
    let mut durations: Vec<(String, Durations)> = Vec::new();
    for (kind, name) in &names {
        let target = out.join(name);
        let text = match kind {
            Kind::Junit => {
                let suites = join_junit(dirs, &labels, name, &mut problems);
                let text = junit::render(&suites);
                junit_files.push((name.clone(), suites));
                text
            }
            Kind::CucumberJson => {
                let features = join_json(dirs, &labels, name, &mut problems);
                serde_json::to_string_pretty(&features).unwrap_or_default()
            }
            Kind::Durations => {
                durations.push((name.clone(), join_durations(dirs, name, &mut problems)));
                continue;
            }
        };
        std::fs::write(&target, text).map_err(io(&target))?;
        written.push(target);
    }
    for (name, d) in durations {
        let target = out.join(name);
        d.write(&target).map_err(|e| MergeError::Io {
            path: target.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        written.push(target);
    }
    let all_cases = || {
        junit_files
            .iter()
            .flat_map(|(_, s)| s)
            .flat_map(|s| &s.cases)
    };
    let count = |o: Outcome| all_cases().filter(|c| c.outcome == o).count();
    let merged = Merged {
        shards: shard_stats(&labels, &junit_files),
        scenarios: all_cases().count(),
        failed: count(Outcome::Failed) + count(Outcome::Errored),
        skipped: count(Outcome::Skipped),
        html: out.join(SUMMARY_HTML),
        written,
        problems,
    };
    let page = html::render(&merged, &junit_files);
    std::fs::write(&merged.html, page).map_err(io(&merged.html))?;
    Ok(merged)
}

fn read(path: &Path) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("not written".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn join_junit(
    dirs: &[PathBuf],
    labels: &[String],
    name: &str,
    problems: &mut Vec<String>,
) -> Vec<Suite> {
    let parts = dirs
        .iter()
        .zip(labels)
        .map(|(d, label)| {
            match read(&d.join(name))
                .and_then(|t| junit::parse(&t, label).map_err(|e| e.to_string()))
            {
                Ok(suites) => suites,
                Err(why) => {
                    problems.push(format!("{label}: {name}: {why}"));
                    vec![junit::missing(label, name, &why)]
                }
            }
        })
        .collect();
    junit::join(parts)
}

fn join_json(
    dirs: &[PathBuf],
    labels: &[String],
    name: &str,
    problems: &mut Vec<String>,
) -> Vec<serde_json::Value> {
    let parts = dirs
        .iter()
        .zip(labels)
        .map(
            |(d, label)| match read(&d.join(name)).and_then(|t| cucumber_json::parse(&t)) {
                Ok(features) => features,
                Err(why) => {
                    problems.push(format!("{label}: {name}: {why}"));
                    vec![cucumber_json::missing(label, name, &why)]
                }
            },
        )
        .collect();
    cucumber_json::join(parts)
}

/// Every shard's durations joined; a shard without one (it did not finish) is skipped.
fn join_durations(dirs: &[PathBuf], name: &str, problems: &mut Vec<String>) -> Durations {
    let mut all = Durations::new(Default::default());
    for d in dirs {
        let path = d.join(name);
        if !path.exists() {
            continue;
        }
        match Durations::read(&path) {
            Ok(x) => all.extend(x),
            Err(e) => problems.push(format!("{e} (left out of the joined durations)")),
        }
    }
    all
}

fn shard_stats(labels: &[String], files: &[(String, Vec<Suite>)]) -> Vec<ShardStat> {
    labels
        .iter()
        .map(|label| {
            let cases: Vec<_> = files
                .iter()
                .flat_map(|(_, s)| s)
                .flat_map(|s| &s.cases)
                .filter(|c| &c.shard == label)
                .collect();
            ShardStat {
                label: label.clone(),
                scenarios: cases.len(),
                failed: cases
                    .iter()
                    .filter(|c| matches!(c.outcome, Outcome::Failed | Outcome::Errored))
                    .count(),
                seconds: cases.iter().map(|c| c.seconds).sum(),
            }
        })
        .collect()
}
