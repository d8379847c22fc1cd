//! fake-proxmox's side of a trace: every journaled request as a span with its status and
//! latency (one process per site), and the tasks of the exported state as spans per node with
//! their UPID, type and exit status.
//!
//! Requests carry wall-clock time; tasks only simulated time (the fake's clock may run 100×
//! faster, or stand still). A task's times are put on the wall clock through the journal,
//! whose entries carry both: between two requests, linearly.

use serde_json::{Map, Value, json};

use fake_proxmox::{ControlClient, JournalEntry};

use super::chrome::{Lane, Span, Trace, args};

/// What a fake recorded of a run: its journal (all sites) and its exported state.
#[derive(Debug, Clone, Default)]
pub struct FakeRecord {
    pub journal: Vec<JournalEntry>,
    /// `GET /_fake/state/export`: the whole world, every site's tasks included.
    pub state: Vec<u8>,
}

impl FakeRecord {
    /// Reads the journal and the state through the control clients of a fake's sites (one
    /// server's sites share both; several servers' are merged).
    pub async fn read(
        controls: &[ControlClient],
    ) -> Result<FakeRecord, fake_proxmox::ControlError> {
        let mut rec = FakeRecord::default();
        for c in controls {
            rec.journal.extend(c.journal().await?);
            if rec.state.is_empty() {
                rec.state = c.export_state().await?;
            }
        }
        rec.journal
            .sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.site.cmp(&b.site)));
        rec.journal
            .dedup_by(|a, b| a.seq == b.seq && a.site == b.site && a.path == b.path);
        Ok(rec)
    }

    /// Adds the requests and the tasks to `trace`.
    pub fn add_to(&self, trace: &mut Trace) {
        add_requests(trace, &self.journal);
        if let Ok(state) = serde_json::from_slice::<Value>(&self.state) {
            add_tasks(trace, &state, &ClockMap::new(&self.journal));
        }
    }
}

/// The process of a site's API requests.
pub fn api_process(site: &str) -> String {
    format!("PVE API {site}")
}

/// The process of a site's tasks.
pub fn tasks_process(site: &str) -> String {
    format!("tasks {site}")
}

fn wall_us(e: &JournalEntry) -> Option<i64> {
    (e.received_at > 0.0).then_some((e.received_at * 1e6) as i64)
}

/// Adds one span per journaled request (entries of journals without wall-clock times are
/// left out).
pub fn add_requests(trace: &mut Trace, entries: &[JournalEntry]) {
    for e in entries {
        let Some(start_us) = wall_us(e) else { continue };
        let mut a = args([
            ("seq", json!(e.seq)),
            ("status", json!(e.status)),
            ("status_text", json!(e.status_text)),
            (
                "latency_ms",
                json!((e.duration_ms * 1000.0).round() / 1000.0),
            ),
            ("simulated_time", json!(e.time)),
        ]);
        if let Some(n) = &e.node {
            a.insert("node".into(), json!(n));
        }
        if !e.params.is_empty() {
            a.insert("params".into(), json!(e.params));
        }
        a.insert(
            "auth".into(),
            serde_json::to_value(&e.auth).unwrap_or(Value::Null),
        );
        trace.span(Span {
            lane: Lane::new(api_process(&e.site), "requests"),
            name: format!("{} {}", e.method, e.path),
            cat: if e.status >= 400 { "api,error" } else { "api" }.into(),
            start_us,
            dur_us: (e.duration_ms * 1000.0).max(0.0) as i64,
            args: a,
        });
    }
}

/// Simulated time → wall-clock microseconds, from the (simulated, wall) pairs of a journal.
pub struct ClockMap {
    /// (simulated seconds, wall µs), in wall order.
    pairs: Vec<(f64, i64)>,
    /// Simulated seconds per wall microsecond over the whole journal (0: a stopped clock).
    rate: f64,
}

impl ClockMap {
    pub fn new(entries: &[JournalEntry]) -> ClockMap {
        let mut pairs: Vec<(f64, i64)> = entries
            .iter()
            .filter_map(|e| wall_us(e).map(|w| (e.time, w)))
            .collect();
        pairs.sort_by_key(|p| p.1);
        let rate = match (pairs.first(), pairs.last()) {
            (Some(a), Some(b)) if b.1 > a.1 && b.0 > a.0 => (b.0 - a.0) / (b.1 - a.1) as f64,
            _ => 0.0,
        };
        ClockMap { pairs, rate }
    }

    /// The wall time at which the simulated clock showed `sim`; `None` without a journal.
    pub fn wall_us(&self, sim: f64) -> Option<i64> {
        let first = self.pairs.first()?;
        let last = self.pairs.last()?;
        let outside = |base: &(f64, i64)| {
            if self.rate > 0.0 {
                base.1 + ((sim - base.0) / self.rate) as i64
            } else {
                base.1
            }
        };
        if sim <= first.0 {
            return Some(outside(first));
        }
        if sim >= last.0 {
            return Some(outside(last));
        }
        // The first pair at or past `sim`, and the one before it.
        let i = self.pairs.iter().position(|p| p.0 >= sim)?;
        let (b, a) = (self.pairs[i], self.pairs[i.saturating_sub(1)]);
        if b.0 <= a.0 {
            return Some(b.1);
        }
        let f = (sim - a.0) / (b.0 - a.0);
        Some(a.1 + ((b.1 - a.1) as f64 * f) as i64)
    }
}

/// Adds one span per task in an exported state (`GET /_fake/state/export`), on its node's
/// lane in its site's tasks process. Running tasks end at the state's `saved_at`.
pub fn add_tasks(trace: &mut Trace, state: &Value, clock: &ClockMap) {
    let saved_at = state["saved_at"].as_f64();
    let Some(sites) = state["world"]["sites"].as_array() else {
        return;
    };
    for site in sites {
        let site_name = site["name"].as_str().unwrap_or("site");
        let Some(tasks) = site["tasks"]["tasks"].as_object() else {
            continue;
        };
        for t in tasks.values() {
            let (Some(start), Some(end)) = (t["start"].as_f64(), t["end"].as_f64()) else {
                continue;
            };
            let exit = t["exitstatus"].as_str();
            let end = match (exit, saved_at) {
                (None, Some(now)) => end.min(now),
                _ => end,
            };
            let (Some(ws), Some(we)) = (clock.wall_us(start), clock.wall_us(end)) else {
                continue;
            };
            let ttype = t["ttype"].as_str().unwrap_or("task");
            let node = t["node"].as_str().unwrap_or("node");
            let mut a = Map::new();
            a.insert("upid".into(), t["upid"].clone());
            a.insert("type".into(), json!(ttype));
            a.insert("id".into(), t["id"].clone());
            a.insert("user".into(), t["user"].clone());
            a.insert(
                "exitstatus".into(),
                exit.map_or(json!("running"), |e| json!(e)),
            );
            a.insert("simulated_start".into(), json!(start));
            a.insert("simulated_end".into(), json!(end));
            let failed = exit.is_some_and(|e| e != "OK" && !e.starts_with("WARNINGS"));
            trace.span(Span {
                lane: Lane::new(tasks_process(site_name), node),
                name: format!("{ttype} {}", t["id"].as_str().unwrap_or_default()),
                cat: if failed { "task,error" } else { "task" }.into(),
                start_us: ws,
                dur_us: (we - ws).max(0),
                args: a,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fake_proxmox::AuthKind;

    fn entry(seq: u64, sim: f64, wall: f64, status: u16) -> JournalEntry {
        JournalEntry {
            seq,
            time: sim,
            site: "site-1".into(),
            method: "POST".into(),
            path: "/nodes/n1/qemu".into(),
            params: Default::default(),
            auth: AuthKind::None,
            status,
            status_text: if status == 200 { "OK" } else { "boom" }.into(),
            node: Some("n1".into()),
            received_at: wall,
            duration_ms: 2.5,
        }
    }

    #[test]
    fn requests_carry_status_and_latency() {
        let mut t = Trace::default();
        add_requests(
            &mut t,
            &[entry(1, 100.0, 10.0, 500), entry(2, 0.0, 0.0, 200)],
        );
        assert_eq!(t.spans.len(), 1, "an entry without wall time is left out");
        let s = &t.spans[0];
        assert_eq!(s.args["status"], 500);
        assert_eq!(s.args["status_text"], "boom");
        assert_eq!(s.dur_us, 2500);
        assert_eq!(s.start_us, 10_000_000);
        assert_eq!(s.lane, Lane::new("PVE API site-1", "requests"));
    }

    #[test]
    fn simulated_time_maps_onto_the_wall_clock_between_requests() {
        // 100 simulated seconds per wall second.
        let c = ClockMap::new(&[entry(1, 1000.0, 1.0, 200), entry(2, 1100.0, 2.0, 200)]);
        assert_eq!(c.wall_us(1050.0), Some(1_500_000));
        assert_eq!(c.wall_us(1200.0), Some(3_000_000));
        assert_eq!(c.wall_us(900.0), Some(0));
    }
}
