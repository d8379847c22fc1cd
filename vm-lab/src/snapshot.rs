//! Whole-lab snapshots: every node's memory, devices and disks saved at one moment and put
//! back together.
//!
//! Taking one pauses every node first (so no node runs on while another is being saved),
//! saves each with QEMU's `savevm` (internal qcow2 snapshots: each node has a small
//! `state.qcow2` that holds the memory image, plus its disk if it has one), then resumes them
//! all. Restoring pauses every node (powering on any that was off), loads each with `loadvm`,
//! restores the network faults recorded with the snapshot, resumes them all, and sets every
//! guest's wall clock to the host's plus the node's clock offset at the snapshot (the guests
//! would otherwise wake up at the snapshot's time). The snapshot's metadata lives in `snapshots/NAME.json` in the run directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::machine::Node;
use crate::netfault::NetFaults;

/// What a snapshot recorded besides the nodes' own state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// The snapshot's name, as given to take and restore it.
    pub name: String,
    /// Unix seconds when it was taken.
    pub taken_at: u64,
    /// The nodes whose memory and disks were saved.
    pub nodes: Vec<String>,
    /// The network faults in force when it was taken; a restore puts them back.
    pub net: NetFaults,
    /// Run-time clock offsets in force (see `clock`).
    #[serde(default)]
    pub clock: std::collections::BTreeMap<String, i64>,
    /// How long the nodes were paused while saving.
    pub paused_ms: u64,
}

/// Snapshot names become QEMU monitor arguments and file names: keep them plain.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::Lab(format!(
            "snapshot name {name:?}: use 1-64 letters, digits, '-', '_' or '.'"
        )))
    }
}

fn info_path(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join("snapshots").join(format!("{name}.json"))
}

/// Snapshots of the lab in `run_dir`, oldest first.
pub fn list(run_dir: &Path) -> Vec<SnapshotInfo> {
    let mut v: Vec<SnapshotInfo> = std::fs::read_dir(run_dir.join("snapshots"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok())
        .collect();
    v.sort_by_key(|s: &SnapshotInfo| s.taken_at);
    v
}

async fn all<'a, F, Fut>(nodes: &'a [&'a Node], f: F) -> Result<()>
where
    F: Fn(&'a Node) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    for r in futures::future::join_all(nodes.iter().map(|n| f(n))).await {
        r?;
    }
    Ok(())
}

/// Pause every node, save each under `name`, resume them all.
pub async fn take(run_dir: &Path, nodes: &[&Node], name: &str) -> Result<SnapshotInfo> {
    check_name(name)?;
    for n in nodes {
        if !n.is_running().await {
            return Err(Error::Lab(format!(
                "node {} is not running; a lab snapshot needs every node up",
                n.name()
            )));
        }
    }
    let t = Instant::now();
    all(nodes, |n| n.pause()).await?;
    let saved = all(nodes, |n| n.save_vm(name)).await;
    let paused_ms = t.elapsed().as_millis() as u64;
    // Resume even when a save failed: the lab must not stay frozen.
    let resumed = all(nodes, |n| n.resume()).await;
    saved?;
    resumed?;
    let info = SnapshotInfo {
        name: name.to_string(),
        taken_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        nodes: nodes.iter().map(|n| n.name().to_string()).collect(),
        net: NetFaults::load(run_dir)?,
        clock: crate::clock::load(run_dir)?,
        paused_ms,
    };
    let p = info_path(run_dir, name);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let text = serde_json::to_string_pretty(&info).map_err(|e| Error::Lab(e.to_string()))?;
    std::fs::write(&p, text).map_err(|e| Error::io(&p, e))?;
    tracing::info!(
        "snapshot {name}: {} node(s) paused {paused_ms} ms",
        nodes.len()
    );
    Ok(info)
}

/// Put every node back to the snapshot `name` together; returns how long it took.
pub async fn restore(run_dir: &Path, nodes: &[&Node], name: &str) -> Result<Duration> {
    check_name(name)?;
    let p = info_path(run_dir, name);
    let text = std::fs::read_to_string(&p)
        .map_err(|_| Error::Lab(format!("no snapshot named {name:?} in this lab")))?;
    let info: SnapshotInfo =
        serde_json::from_str(&text).map_err(|e| Error::Lab(format!("{}: {e}", p.display())))?;
    let t = Instant::now();
    for n in nodes {
        if !info.nodes.iter().any(|x| x == n.name()) {
            return Err(Error::Lab(format!(
                "snapshot {name} has no state for node {}",
                n.name()
            )));
        }
        // A node that was powered off since: power it on, then overwrite what it boots.
        if !n.is_running().await {
            n.start().await?;
            n.wait_for_monitor(n.timeouts().boot).await?;
        }
    }
    all(nodes, |n| n.pause()).await?;
    let loaded = all(nodes, |n| n.load_vm(name)).await;
    if loaded.is_err() {
        let _ = all(nodes, |n| n.resume()).await;
        return loaded.map(|()| Duration::ZERO);
    }
    info.net.save(run_dir)?;
    crate::clock::save(run_dir, &info.clock)?;
    all(nodes, |n| n.resume()).await?;
    crate::clock::resync(run_dir, nodes).await?;
    let took = t.elapsed();
    tracing::info!("restored snapshot {name} in {took:.2?}");
    Ok(took)
}

impl crate::Lab {
    /// Save the whole lab (every node's memory, devices and disks) under `name`.
    pub async fn snapshot(&self, name: &str) -> Result<SnapshotInfo> {
        let nodes: Vec<&Node> = self.nodes().iter().collect();
        take(self.run_dir(), &nodes, name).await
    }

    /// Put the whole lab back to the snapshot `name`; returns how long it took.
    pub async fn restore(&self, name: &str) -> Result<Duration> {
        let nodes: Vec<&Node> = self.nodes().iter().collect();
        restore(self.run_dir(), &nodes, name).await
    }

    /// The lab's snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        list(self.run_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain() {
        assert!(check_name("provisioned").is_ok());
        assert!(check_name("after-s6.v2").is_ok());
        for bad in ["", "a b", "x;quit", ".hidden", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
