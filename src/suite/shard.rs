//! Which scenarios shard I of N runs.
//!
//! Every shard of a run computes the same assignment from the same inputs (the selected
//! scenarios in run order, N, and the durations file if one is given) and keeps its own part;
//! there is no coordinator. Scenarios are grouped into *units* first: a run of consecutive
//! scenarios tagged `@reuses-lab` is one unit (at run time each hands its booted lab to the
//! next), every other scenario is a unit of its own. A unit is never split.
//!
//! Two modes, with these guarantees:
//!
//! - **By count** (no durations file, or none of the selected scenarios is in it). Units are
//!   placed on a hash ring (SHA-256 of the unit's key) and the ring is cut into N arcs holding
//!   equal numbers of scenarios: a unit goes to the arc its midpoint falls in. Guarantees:
//!   every shard holds `total / N` scenarios give or take less than the largest unit (with no
//!   groups: shard sizes differ by at most one); adding, removing or renaming one scenario
//!   changes the shard of at most N − 1 *other* units — an arc boundary moves by less than one
//!   position — whatever the number of scenarios (checked by property tests).
//! - **By durations** (`--durations FILE` from a previous run). Longest processing time first:
//!   units sorted by recorded duration, longest first (ties by key), each given to the shard
//!   with the least work so far (ties to the lowest index). Units with a scenario the file does
//!   not know come after all known ones, each counted as the median recorded duration.
//!   Guarantees: the longest shard is at most `ideal + (1 − 1/N) × longest unit`, where
//!   `ideal = total / N` (Graham's bound for list scheduling; with every unit known, LPT is
//!   also within `4/3 − 1/(3N)` of the best possible split); adding a scenario (outside a
//!   `@reuses-lab` run) moves no other scenario. Renaming or removing one can move any number:
//!   balance wins, and every run writes a fresh durations file.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// The tag of scenarios that share one booted lab with their neighbours.
pub const TOGETHER_TAG: &str = "reuses-lab";

/// `I/N`: this run is shard I (1-based) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSpec {
    index: usize,
    count: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShardSpecError {
    #[error("shard {0:?}: expected I/N, e.g. 2/3")]
    Format(String),
    #[error("shard {index}/{count}: I must be between 1 and N, and N at least 1")]
    Range { index: usize, count: usize },
}

impl ShardSpec {
    pub fn new(index: usize, count: usize) -> Result<Self, ShardSpecError> {
        if count == 0 || index == 0 || index > count {
            return Err(ShardSpecError::Range { index, count });
        }
        Ok(Self { index, count })
    }

    /// 1-based, as written on the command line.
    pub fn index(self) -> usize {
        self.index
    }

    pub fn count(self) -> usize {
        self.count
    }

    /// A directory name for this shard's reports: `shard-2-of-3`.
    pub fn dir_name(self) -> String {
        format!("shard-{}-of-{}", self.index, self.count)
    }
}

impl FromStr for ShardSpec {
    type Err = ShardSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ShardSpecError::Format(s.to_owned());
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let i = i.trim().parse().map_err(|_| bad())?;
        let n = n.trim().parse().map_err(|_| bad())?;
        Self::new(i, n)
    }
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// One selected scenario, as the runner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioRef {
    /// Stable across runs and machines: see [`scenario_keys`].
    pub key: String,
    /// Tagged [`TOGETHER_TAG`] (on the scenario, its rule or its feature).
    pub together: bool,
}

/// Scenarios that always run on the same shard, in run order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The key of its first scenario.
    pub key: String,
    /// Indices into the scenario list.
    pub members: Vec<usize>,
}

/// Runs of consecutive `together` scenarios become one unit; every other scenario is alone.
pub fn units(scenarios: &[ScenarioRef]) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    let mut prev_together = false;
    for (i, s) in scenarios.iter().enumerate() {
        match out.last_mut() {
            Some(u) if s.together && prev_together => u.members.push(i),
            _ => out.push(Unit {
                key: s.key.clone(),
                members: vec![i],
            }),
        }
        prev_together = s.together;
    }
    out
}

/// How an assignment was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Count,
    Durations,
}

/// Every selected scenario's shard.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub mode: Mode,
    /// Per scenario (same order as the input), the shard, 0-based.
    pub shard_of: Vec<usize>,
    /// Per shard, its expected work: scenarios (count mode) or seconds (durations mode).
    pub loads: Vec<f64>,
    /// Keys of selected scenarios the durations file did not know (durations mode only).
    pub estimated: Vec<String>,
}

impl Assignment {
    /// Indices of the scenarios shard `spec` runs.
    pub fn members(&self, spec: ShardSpec) -> Vec<usize> {
        let k = spec.index() - 1;
        (0..self.shard_of.len())
            .filter(|&i| self.shard_of[i] == k)
            .collect()
    }
}

/// Assigns every scenario to one of `n` shards (`n` ≥ 1), by `durations` (seconds per key)
/// when it knows at least one of them, by count otherwise. Deterministic: the same inputs give
/// the same answer on every machine.
pub fn assign(
    scenarios: &[ScenarioRef],
    n: usize,
    durations: Option<&BTreeMap<String, f64>>,
) -> Assignment {
    let n = n.max(1);
    let units = units(scenarios);
    let known = durations.filter(|d| scenarios.iter().any(|s| d.contains_key(&s.key)));
    let (mode, unit_shard, unit_load, estimated) = match known {
        Some(d) => {
            let (weights, estimated) = unit_weights_ms(scenarios, &units, d);
            let load: Vec<f64> = weights.iter().map(|&w| w as f64 / 1000.0).collect();
            let known: Vec<bool> = units
                .iter()
                .map(|u| u.members.iter().all(|&m| d.contains_key(&scenarios[m].key)))
                .collect();
            let shards = by_durations(&units, &weights, &known, n);
            (Mode::Durations, shards, load, estimated)
        }
        None => {
            let load: Vec<f64> = units.iter().map(|u| u.members.len() as f64).collect();
            (Mode::Count, by_count(&units, n), load, Vec::new())
        }
    };
    let mut shard_of = vec![0; scenarios.len()];
    let mut loads = vec![0.0; n];
    for ((u, &k), l) in units.iter().zip(&unit_shard).zip(unit_load) {
        loads[k] += l;
        for &m in &u.members {
            shard_of[m] = k;
        }
    }
    Assignment {
        mode,
        shard_of,
        loads,
        estimated,
    }
}

/// A unit's position on the ring: the first 8 bytes of SHA-256 of its key.
fn ring_position(key: &str) -> u64 {
    let digest = Sha256::digest(key.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(b)
}

/// Count mode: the ring cut into `n` arcs of equal scenario counts; a unit goes to the arc its
/// midpoint is in. Returns each unit's shard.
fn by_count(units: &[Unit], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| {
        (ring_position(&units[a].key), &units[a].key)
            .cmp(&(ring_position(&units[b].key), &units[b].key))
    });
    let total: usize = units.iter().map(|u| u.members.len()).sum();
    let mut out = vec![0; units.len()];
    let mut before = 0usize;
    for u in order {
        let w = units[u].members.len();
        // floor(N × (before + w/2) / total), in integers.
        let k = (2 * before + w) * n / (2 * total.max(1));
        out[u] = k.min(n - 1);
        before += w;
    }
    out
}

/// Durations mode: longest processing time first, the units the file knows (every member
/// recorded) before the others, so a new scenario never moves a known one.
fn by_durations(units: &[Unit], weights_ms: &[u64], known: &[bool], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| {
        known[b]
            .cmp(&known[a])
            .then_with(|| weights_ms[b].cmp(&weights_ms[a]))
            .then_with(|| units[a].key.cmp(&units[b].key))
    });
    let mut load = vec![0u64; n];
    let mut out = vec![0; units.len()];
    for u in order {
        let (k, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(k, l)| (*l, k))
            .unwrap_or((0, &0));
        out[u] = k;
        load[k] += weights_ms[u];
    }
    out
}

/// Each unit's recorded duration in ms (unknown scenarios count as the median), and the keys
/// that were unknown.
fn unit_weights_ms(
    scenarios: &[ScenarioRef],
    units: &[Unit],
    d: &BTreeMap<String, f64>,
) -> (Vec<u64>, Vec<String>) {
    let median = median_secs(scenarios, d);
    let mut estimated = Vec::new();
    let weights = units
        .iter()
        .map(|u| {
            u.members
                .iter()
                .map(|&m| {
                    let key = &scenarios[m].key;
                    let secs = d.get(key).copied().unwrap_or_else(|| {
                        estimated.push(key.clone());
                        median
                    });
                    secs_to_ms(secs)
                })
                .sum()
        })
        .collect();
    (weights, estimated)
}

fn secs_to_ms(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        (secs * 1000.0).round() as u64
    } else {
        0
    }
}

/// The median recorded duration of the selected scenarios the file knows (1 s if none).
fn median_secs(scenarios: &[ScenarioRef], d: &BTreeMap<String, f64>) -> f64 {
    let mut known: Vec<u64> = scenarios
        .iter()
        .filter_map(|s| d.get(&s.key))
        .map(|&s| secs_to_ms(s))
        .collect();
    if known.is_empty() {
        return 1.0;
    }
    known.sort_unstable();
    known[known.len() / 2] as f64 / 1000.0
}

/// Stable keys for the scenarios of one feature: `Feature name :: Scenario name` (a rule's
/// name and a space before the scenario's, as cucumber's JSON report writes it). Scenarios of
/// one feature with the same name (e.g. a Scenario Outline's examples without a placeholder
/// in the name) also get ` (line N)`. `scenarios` are (name, line) pairs.
pub fn scenario_keys(feature: &str, scenarios: &[(String, usize)]) -> Vec<String> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, _) in scenarios {
        *seen.entry(name.as_str()).or_default() += 1;
    }
    scenarios
        .iter()
        .map(|(name, line)| {
            if seen.get(name.as_str()).copied().unwrap_or(0) > 1 {
                format!("{feature} :: {name} (line {line})")
            } else {
                format!("{feature} :: {name}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
