//! The rollout's state file: one JSON document, written atomically (temp file + rename), so a run
//! killed at any moment leaves either the previous or the next state, never half of one.
//!
//! The record that matters for resuming is written *before* the create call: the VMID about to be
//! used. A resumed run looks for that VMID (and for the name) before creating anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

pub const STATE_VERSION: u32 = 1;

/// How far a VM got. Ordered: a later stage implies the earlier ones happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    #[default]
    Pending,
    /// The VMID is chosen and the create call may have been sent.
    Creating,
    /// The create task finished OK (disk imported).
    Created,
    /// Disk resized, cloud-init in place.
    Configured,
    Started,
    /// Running, monitored.
    Ready,
    Failed,
    Destroyed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// "True" or "False", as Kubernetes conditions.
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(kind: &str, ok: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_string(),
            status: if ok { "True" } else { "False" }.to_string(),
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    pub name: String,
    pub site: String,
    pub node: String,
    #[serde(default)]
    pub manifest: String,
    #[serde(default)]
    pub vmid: Option<u32>,
    #[serde(default)]
    pub stage: Stage,
    /// This rollout created the VM (so it may delete it on failure or `destroy`).
    #[serde(default)]
    pub created_here: bool,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub error: Option<ErrorRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub reason: String,
    pub message: String,
    pub retryable: bool,
}

impl VmRecord {
    /// Replaces the condition of the same type.
    pub fn set_condition(&mut self, c: Condition) {
        self.conditions.retain(|x| x.kind != c.kind);
        self.conditions.push(c);
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    pub version: u32,
    /// Keyed `site/name`.
    pub vms: BTreeMap<String, VmRecord>,
}

pub fn key(site: &str, name: &str) -> String {
    format!("{site}/{name}")
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state file {path} is not a provision-harness state: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

struct Inner {
    state: StateFile,
    /// Bumped on every change.
    generation: u64,
}

/// Shared, persisted state. Writers coalesce: a `persist` that finds its change already on disk
/// (written by a concurrent caller) returns without writing again.
#[derive(Clone)]
pub struct StateStore {
    path: Option<PathBuf>,
    inner: Arc<std::sync::Mutex<Inner>>,
    writer: Arc<Mutex<u64>>,
}

impl StateStore {
    /// Opens (or starts) the state at `path`; `None` keeps state in memory only.
    pub fn open(path: Option<&Path>) -> Result<Self, StateError> {
        let state = match path {
            Some(p) if p.exists() => {
                let text = std::fs::read_to_string(p).map_err(|source| StateError::Io {
                    path: p.to_path_buf(),
                    source,
                })?;
                let s: StateFile =
                    serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
                        path: p.to_path_buf(),
                        detail: e.to_string(),
                    })?;
                if s.version != STATE_VERSION {
                    return Err(StateError::Corrupt {
                        path: p.to_path_buf(),
                        detail: format!("version {} (expected {STATE_VERSION})", s.version),
                    });
                }
                s
            }
            _ => StateFile {
                version: STATE_VERSION,
                vms: BTreeMap::new(),
            },
        };
        Ok(Self {
            path: path.map(Path::to_path_buf),
            inner: Arc::new(std::sync::Mutex::new(Inner {
                state,
                generation: 0,
            })),
            writer: Arc::new(Mutex::new(0)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated (each update is one
        // insert), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<VmRecord> {
        self.lock().state.vms.get(key).cloned()
    }

    pub fn snapshot(&self) -> StateFile {
        self.lock().state.clone()
    }

    /// Changes one record in memory (creating it from `init` if absent).
    pub fn update(
        &self,
        key: &str,
        init: impl FnOnce() -> VmRecord,
        f: impl FnOnce(&mut VmRecord),
    ) {
        let mut g = self.lock();
        let rec = g.state.vms.entry(key.to_string()).or_insert_with(init);
        f(rec);
        g.generation += 1;
    }

    pub fn remove(&self, key: &str) {
        let mut g = self.lock();
        g.state.vms.remove(key);
        g.generation += 1;
    }

    /// Makes every change made so far durable.
    pub async fn persist(&self) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let wanted = self.lock().generation;
        let mut written = self.writer.lock().await;
        if *written >= wanted {
            return Ok(());
        }
        let (text, generation) = {
            let g = self.lock();
            let text = serde_json::to_vec_pretty(&g.state).map_err(|e| StateError::Corrupt {
                path: path.clone(),
                detail: e.to_string(),
            })?;
            (text, g.generation)
        };
        let path2 = path.clone();
        tokio::task::spawn_blocking(move || write_atomic(&path2, &text))
            .await
            .map_err(|e| StateError::Io {
                path: path.clone(),
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(|source| StateError::Io {
                path: path.clone(),
                source,
            })?;
        *written = generation;
        Ok(())
    }
}

/// Write to a sibling temp file, flush it to disk, then rename over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn persists_and_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/state.json");
        let s = StateStore::open(Some(&path)).expect("open");
        s.update(&key("site-1", "a"), VmRecord::default, |r| {
            r.name = "a".into();
            r.vmid = Some(100);
            r.stage = Stage::Creating;
        });
        s.persist().await.expect("persist");
        let again = StateStore::open(Some(&path)).expect("reopen");
        let r = again.get("site-1/a").expect("record");
        assert_eq!((r.vmid, r.stage), (Some(100), Stage::Creating));
        // Only the state file is left in the directory: the temp file was renamed.
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn corrupt_state_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{not json").expect("write");
        assert!(matches!(
            StateStore::open(Some(&path)),
            Err(StateError::Corrupt { .. })
        ));
    }
}
