//! How long each scenario took: read from a run's cucumber JSON report, kept in a small JSON
//! file that the next run's `--durations FILE` balances its shards with.
//!
//! ```json
//! { "version": 1, "scenarios": { "Feature name :: Scenario name": 41.302 } }
//! ```
//! Seconds per scenario key (see [`super::shard::scenario_keys`]): its steps, its background
//! steps and its hooks, as the report times them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum DurationsError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a durations file: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: durations file version {found}, this harness reads version {VERSION}")]
    Version { path: String, found: u32 },
    #[error("not a cucumber JSON report: {0}")]
    Report(String),
}

/// Seconds per scenario key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Durations {
    pub version: u32,
    pub scenarios: BTreeMap<String, f64>,
}

impl Durations {
    pub fn new(scenarios: BTreeMap<String, f64>) -> Self {
        Self {
            version: VERSION,
            scenarios,
        }
    }

    pub fn read(path: &Path) -> Result<Self, DurationsError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| DurationsError::Io {
            path: shown.clone(),
            source,
        })?;
        let d: Self = serde_json::from_str(&text).map_err(|source| DurationsError::Parse {
            path: shown.clone(),
            source,
        })?;
        if d.version != VERSION {
            return Err(DurationsError::Version {
                path: shown,
                found: d.version,
            });
        }
        Ok(d)
    }

    pub fn write(&self, path: &Path) -> Result<(), DurationsError> {
        let io = |source| DurationsError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| io(e.into()))?;
        std::fs::write(path, text + "\n").map_err(io)
    }

    /// Adds `other`'s scenarios; a key in both keeps `other`'s value.
    pub fn extend(&mut self, other: Durations) {
        self.scenarios.extend(other.scenarios);
    }
}

/// One scenario as a cucumber JSON report records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The feature file as the report names it (relative to the workspace).
    pub uri: Option<String>,
    pub feature: String,
    /// As the report writes it: a rule's name, a space, then the scenario's.
    pub name: String,
    pub line: usize,
    pub seconds: f64,
    pub status: Status,
    /// The first failed step's or hook's error message.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Passed,
    Skipped,
    Failed,
}

/// Every scenario of a cucumber JSON report (cucumber-rs's `writer::Json`), its background
/// element folded into it, in report order.
pub fn recorded_scenarios(report: &str) -> Result<Vec<Recorded>, DurationsError> {
    let v: Value =
        serde_json::from_str(report).map_err(|e| DurationsError::Report(e.to_string()))?;
    let features = v
        .as_array()
        .ok_or_else(|| DurationsError::Report("the top level is not an array".into()))?;
    let mut out: Vec<Recorded> = Vec::new();
    for f in features {
        let feature = str_of(f, "name");
        let uri = f.get("uri").and_then(Value::as_str).map(str::to_owned);
        for el in f
            .get("elements")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = str_of(el, "name");
            let line = el.get("line").and_then(Value::as_u64).unwrap_or(0) as usize;
            let (nanos, status, error) = element_result(el);
            let pos = out.iter().position(|r| {
                r.uri == uri && r.feature == feature && r.name == name && r.line == line
            });
            match pos {
                Some(i) => {
                    let r = &mut out[i];
                    r.seconds += nanos as f64 / 1e9;
                    r.status = r.status.max(status);
                    r.error = r.error.take().or(error);
                }
                None => out.push(Recorded {
                    uri: uri.clone(),
                    feature: feature.clone(),
                    name,
                    line,
                    seconds: nanos as f64 / 1e9,
                    status,
                    error,
                }),
            }
        }
    }
    Ok(out)
}

fn str_of(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Total nanoseconds of an element's steps and hooks, its worst status, its first error.
fn element_result(el: &Value) -> (u128, Status, Option<String>) {
    let results = ["before", "steps", "after"]
        .iter()
        .flat_map(|k| el.get(*k).and_then(Value::as_array).into_iter().flatten())
        .filter_map(|s| s.get("result"));
    let mut nanos = 0u128;
    let mut status = Status::Passed;
    let mut error = None;
    for r in results {
        nanos += r.get("duration").and_then(Value::as_u64).unwrap_or(0) as u128;
        let s = match r.get("status").and_then(Value::as_str).unwrap_or("") {
            "passed" => Status::Passed,
            "skipped" => Status::Skipped,
            _ => Status::Failed,
        };
        if s == Status::Failed && error.is_none() {
            error = r
                .get("error_message")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        status = status.max(s);
    }
    (nanos, status, error)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_scenario_is_its_background_steps_and_hooks_and_its_worst_status() {
        let report = r#"[{"uri":"features/x.feature","keyword":"Feature","name":"X","tags":[],"elements":[
          {"keyword":"Background","type":"background","id":"x/a","line":5,"name":"a","tags":[],
           "steps":[{"keyword":"Given ","line":3,"name":"g","result":{"status":"passed","duration":1000000000}}]},
          {"keyword":"Scenario","type":"scenario","id":"x/a","line":5,"name":"a","tags":[],
           "before":[{"result":{"status":"passed","duration":250000000}}],
           "steps":[{"keyword":"When ","line":6,"name":"w","result":{"status":"failed","duration":500000000,"error_message":"boom"}}]},
          {"keyword":"Scenario","type":"scenario","id":"x/b","line":9,"name":"b","tags":[],
           "steps":[{"keyword":"When ","line":10,"name":"w","result":{"status":"skipped","duration":0}}]}
        ]}]"#;
        let r = recorded_scenarios(report).unwrap();
        assert_eq!(r.len(), 2);
        assert!((r[0].seconds - 1.75).abs() < 1e-9);
        assert_eq!(
            (r[0].status, r[0].error.as_deref()),
            (Status::Failed, Some("boom"))
        );
        assert_eq!(r[1].status, Status::Skipped);
        assert!(recorded_scenarios("{}").is_err());
    }

    #[test]
    fn a_durations_file_round_trips_and_refuses_another_version() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.durations.json");
        let d = Durations::new([("F :: s".to_string(), 1.5)].into());
        d.write(&p).unwrap();
        assert_eq!(Durations::read(&p).unwrap(), d);
        std::fs::write(&p, r#"{"version":2,"scenarios":{}}"#).unwrap();
        assert!(matches!(
            Durations::read(&p),
            Err(DurationsError::Version { found: 2, .. })
        ));
        std::fs::write(&p, "[]").unwrap();
        assert!(matches!(
            Durations::read(&p),
            Err(DurationsError::Parse { .. })
        ));
    }
}
