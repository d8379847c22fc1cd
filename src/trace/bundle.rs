//! A failure bundle: what a failed run leaves beside its reports so its cause can be read
//! without running it again — the trace, the fake's journal and state, and (lab runs) the
//! guests' serial logs and QMP events.

use std::path::{Path, PathBuf};

use fake_proxmox::JournalEntry;

use super::chrome::Trace;

/// What goes into one bundle.
#[derive(Default)]
pub struct Bundle<'a> {
    /// What failed and why (the scenario, the failed step and its error): `failure.txt`.
    pub summary: String,
    pub trace: Option<&'a Trace>,
    /// The fake's request journal (all sites): `journal.json`.
    pub journal: &'a [JournalEntry],
    /// Per site: the fake's exported state, `state-<site>.json`.
    pub states: Vec<(String, Vec<u8>)>,
    /// Files copied as they are (serial logs, QMP event logs), under `files/` by the given name.
    pub files: Vec<(PathBuf, String)>,
}

/// Writes `bundle` into `dir` (emptied first); returns the files written.
pub fn write(dir: &Path, bundle: &Bundle<'_>) -> std::io::Result<Vec<PathBuf>> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut put = |name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, bytes)?;
        written.push(p);
        Ok(())
    };
    put("failure.txt", bundle.summary.as_bytes())?;
    if let Some(t) = bundle.trace {
        let text = serde_json::to_vec(&t.to_json()).map_err(std::io::Error::other)?;
        put("trace.json", &text)?;
    }
    let journal = serde_json::to_vec_pretty(bundle.journal).map_err(std::io::Error::other)?;
    put("journal.json", &journal)?;
    for (site, state) in &bundle.states {
        put(&format!("state-{}.json", slug(site)), state)?;
    }
    for (src, name) in &bundle.files {
        // A log the run never wrote is not an error of the bundle.
        if let Ok(bytes) = std::fs::read(src) {
            put(&format!("files/{name}"), &bytes)?;
        }
    }
    Ok(written)
}

/// A file-name-safe form of `s`: lower-case letters, digits and single dashes, at most 80
/// characters.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 80 {
            break;
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "run".into() } else { out }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(
            slug("A create fails: 500 \"no space\""),
            "a-create-fails-500-no-space"
        );
        assert_eq!(slug("///"), "run");
    }

    #[test]
    fn a_bundle_holds_the_summary_journal_states_and_copied_files() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("serial.log");
        std::fs::write(&log, "login:").unwrap();
        let out = dir.path().join("b");
        let files = write(
            &out,
            &Bundle {
                summary: "step failed".into(),
                states: vec![("site-1".into(), b"{}".to_vec())],
                files: vec![
                    (log, "node1.serial.log".into()),
                    (dir.path().join("none"), "x".into()),
                ],
                ..Bundle::default()
            },
        )
        .unwrap();
        assert_eq!(files.len(), 4);
        assert_eq!(
            std::fs::read_to_string(out.join("files/node1.serial.log")).unwrap(),
            "login:"
        );
        assert!(out.join("state-site-1.json").exists());
    }
}
