//! Clock faults: each node's wall clock offset from the host's, set at boot (the spec's
//! `clock_offset_s`, applied by the guest's init before any service starts) and changed at run
//! time. An offset is absolute (host time + offset), so setting it again is not cumulative,
//! and 0 puts the node back on the host's time. Only the wall clock moves: the guest's
//! monotonic clock (what Raft timers and timeouts use) keeps running.
//!
//! The offsets in force are kept in `clock.json` in the lab's run directory (the library and
//! the CLI share it) and in each snapshot, so a restore puts the clocks back as they were.
//! A node restarted after a run-time change boots with its spec's offset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::machine::Node;

const STATE_FILE: &str = "clock.json";

fn state_path(run_dir: &Path) -> PathBuf {
    run_dir.join(STATE_FILE)
}

/// Run-time offsets by node (nodes not listed run with their spec's boot offset).
pub fn load(run_dir: &Path) -> Result<BTreeMap<String, i64>> {
    let p = state_path(run_dir);
    match std::fs::read_to_string(&p) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| Error::Lab(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(Error::io(&p, e)),
    }
}

/// Write the run-time offsets (seconds, by node name) to `clock.json` in `run_dir`.
pub fn save(run_dir: &Path, offsets: &BTreeMap<String, i64>) -> Result<()> {
    let p = state_path(run_dir);
    let t = serde_json::to_string_pretty(offsets).map_err(|e| Error::Lab(e.to_string()))?;
    std::fs::write(&p, t).map_err(|e| Error::io(&p, e))
}

/// The offset `node` runs with: the last run-time change, else its boot offset.
pub fn offset_of(offsets: &BTreeMap<String, i64>, node: &Node) -> i64 {
    offsets
        .get(node.name())
        .copied()
        .unwrap_or(node.spec().clock_offset_s)
}

fn host_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The guest command that sets its wall clock to host time + `offset` seconds.
pub fn set_command(offset: i64) -> String {
    format!(
        "date -u -s @{} >/dev/null",
        host_now().saturating_add(offset)
    )
}

/// Set `node`'s wall clock to host time + `offset` seconds and record it.
pub async fn set_offset(run_dir: &Path, node: &Node, offset: i64) -> Result<()> {
    node.succeed(&set_command(offset)).await?;
    let mut all = load(run_dir)?;
    all.insert(node.name().to_string(), offset);
    save(run_dir, &all)
}

/// Put every node's wall clock at host time + its recorded offset (after a restore).
pub async fn resync(run_dir: &Path, nodes: &[&Node]) -> Result<()> {
    let offsets = load(run_dir)?;
    let jobs = nodes.iter().map(|n| {
        let cmd = set_command(offset_of(&offsets, n));
        async move { n.succeed(&cmd).await }
    });
    for r in futures::future::join_all(jobs).await {
        r?;
    }
    Ok(())
}

/// The guest's wall clock minus the host's, in seconds (rounded to whole seconds).
pub async fn measure_offset(node: &Node) -> Result<i64> {
    let before = host_now();
    let out = node.succeed("date -u +%s").await?;
    let after = host_now();
    let guest: i64 = out
        .trim()
        .parse()
        .map_err(|_| Error::Lab(format!("{}: date printed {out:?}", node.name())))?;
    Ok(guest - (before + after) / 2)
}

/// Parse an offset: `+90s`, `-3d`, `2y`, `15m`, `1h`, or bare seconds.
pub fn parse_offset(s: &str) -> Result<i64> {
    let t = s.trim();
    let (sign, rest) = match t.strip_prefix('-') {
        Some(r) => (-1, r),
        None => (1, t.strip_prefix('+').unwrap_or(t)),
    };
    let split = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (num, unit) = rest.split_at(split);
    let n: i64 = num
        .parse()
        .map_err(|_| Error::Lab(format!("{s:?} is not a clock offset (e.g. +2y, -3d, 90s)")))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "y" => 365 * 86_400,
        _ => return Err(Error::Lab(format!("{s:?}: unit must be s, m, h, d or y"))),
    };
    n.checked_mul(scale)
        .map(|v| sign * v)
        .ok_or_else(|| Error::Lab(format!("{s:?} is too large")))
}

impl crate::Lab {
    /// Set `node`'s wall clock to host time + `offset_s` seconds (negative: behind).
    pub async fn set_clock_offset(&self, node: &str, offset_s: i64) -> Result<()> {
        set_offset(self.run_dir(), self.node(node)?, offset_s).await
    }

    /// Every node's clock offset as recorded (boot offsets for nodes never changed).
    pub fn clock_offsets(&self) -> Result<BTreeMap<String, i64>> {
        let rec = load(self.run_dir())?;
        Ok(self
            .nodes()
            .iter()
            .map(|n| (n.name().to_string(), offset_of(&rec, n)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn offsets_parse_with_units_and_signs() {
        assert_eq!(parse_offset("90").unwrap(), 90);
        assert_eq!(parse_offset("+15m").unwrap(), 900);
        assert_eq!(parse_offset("-3d").unwrap(), -259_200);
        assert_eq!(parse_offset("2y").unwrap(), 63_072_000);
        assert!(parse_offset("soon").is_err());
        assert!(parse_offset("3w").is_err());
        assert!(parse_offset("99999999999999999y").is_err());
    }

    #[test]
    fn set_command_is_absolute() {
        let c = set_command(3600);
        let secs: i64 = c
            .trim_start_matches("date -u -s @")
            .trim_end_matches(" >/dev/null")
            .parse()
            .unwrap_or(0);
        assert!(secs >= host_now() + 3590, "{c}");
    }
}
