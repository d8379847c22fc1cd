//! The merged trace and its Chrome trace-event JSON form (what Perfetto and `chrome://tracing`
//! open): one origin, "M" events naming a process per source and a thread per lane, "X"
//! complete events for spans and "i" instants, ordered by time.
//!
//! Sources record wall-clock UNIX microseconds; [`Trace::to_json`] shifts them to the earliest
//! event. Spans of one lane that overlap without nesting (two concurrent requests of one
//! site, two tasks of one node) go to sibling threads (`requests`, `requests (2)`, …) so that
//! within every thread a child never outlives its parent — the rule Perfetto imports by.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// Where an event is drawn: a process (one per source: the scenario, the deployer, a site's
/// API, a site's tasks, a lab node) and a lane within it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lane {
    pub process: String,
    pub thread: String,
}

impl Lane {
    pub fn new(process: impl Into<String>, thread: impl Into<String>) -> Self {
        Lane {
            process: process.into(),
            thread: thread.into(),
        }
    }
}

/// Something that took time.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub lane: Lane,
    pub name: String,
    pub cat: String,
    /// Wall-clock UNIX microseconds.
    pub start_us: i64,
    pub dur_us: i64,
    pub args: Map<String, Value>,
}

/// Something that happened at one moment (a retry, a fault, a serial milestone).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub lane: Lane,
    pub name: String,
    pub cat: String,
    pub at_us: i64,
    pub args: Map<String, Value>,
}

/// Wall-clock UNIX microseconds of `t` (0 before the epoch).
pub fn unix_us(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Wall-clock UNIX microseconds now.
pub fn now_us() -> i64 {
    unix_us(SystemTime::now())
}

/// Everything one run recorded, from every source, not yet laid out.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    pub spans: Vec<Span>,
    pub marks: Vec<Mark>,
}

impl Trace {
    pub fn span(&mut self, s: Span) {
        self.spans.push(s);
    }

    pub fn mark(&mut self, m: Mark) {
        self.marks.push(m);
    }

    pub fn extend(&mut self, other: Trace) {
        self.spans.extend(other.spans);
        self.marks.extend(other.marks);
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty() && self.marks.is_empty()
    }

    /// The Chrome trace-event JSON object.
    pub fn to_json(&self) -> Value {
        let origin = self
            .spans
            .iter()
            .map(|s| s.start_us)
            .chain(self.marks.iter().map(|m| m.at_us))
            .min()
            .unwrap_or(0);
        let layout = Layout::new(self);
        let mut meta = Vec::new();
        for (pid, process) in layout.processes.iter().enumerate() {
            let pid = pid + 1;
            meta.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                "args": {"name": process}}),
            );
            meta.push(
                json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                "args": {"sort_index": pid}}),
            );
        }
        for ((pid, tid), name) in &layout.threads {
            meta.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": name}}),
            );
            meta.push(
                json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                "args": {"sort_index": tid}}),
            );
        }
        // (ts, -dur) puts a parent before the children that start with it.
        let mut timed: Vec<(i64, i64, Value)> = Vec::new();
        for (s, (pid, tid)) in self.spans.iter().zip(&layout.span_tids) {
            let ts = s.start_us - origin;
            timed.push((
                ts,
                -s.dur_us,
                json!({"ph": "X", "name": s.name, "cat": s.cat, "ts": ts, "dur": s.dur_us,
                    "pid": pid, "tid": tid, "args": s.args}),
            ));
        }
        for m in &self.marks {
            let (pid, tid) = layout.first_tid(&m.lane);
            let ts = m.at_us - origin;
            timed.push((
                ts,
                1,
                json!({"ph": "i", "s": "t", "name": m.name, "cat": m.cat, "ts": ts,
                    "pid": pid, "tid": tid, "args": m.args}),
            ));
        }
        timed.sort_by_key(|(ts, neg_dur, _)| (*ts, *neg_dur));
        let mut events = meta;
        events.extend(timed.into_iter().map(|(_, _, v)| v));
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"origin_unix_us": origin},
        })
    }

    /// Writes [`Trace::to_json`] to `path` (its directory made).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_vec(&self.to_json()).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }
}

/// Process and thread ids: processes in the order they first appear, each lane packed into as
/// few threads as keep its spans nested.
struct Layout {
    processes: Vec<String>,
    /// (pid, tid) → thread name.
    threads: BTreeMap<(usize, usize), String>,
    /// Per span of the trace, in its order.
    span_tids: Vec<(usize, usize)>,
    /// Lane → its first (pid, tid).
    lanes: BTreeMap<Lane, (usize, usize)>,
}

impl Layout {
    fn new(trace: &Trace) -> Layout {
        let mut processes: Vec<String> = Vec::new();
        let mut lane_order: Vec<Lane> = Vec::new();
        let lanes_in_order = trace
            .spans
            .iter()
            .map(|s| &s.lane)
            .chain(trace.marks.iter().map(|m| &m.lane));
        for lane in lanes_in_order {
            if !processes.contains(&lane.process) {
                processes.push(lane.process.clone());
            }
            if !lane_order.contains(lane) {
                lane_order.push(lane.clone());
            }
        }
        let pid_of = |p: &str| processes.iter().position(|x| x == p).unwrap_or(0) + 1;
        let mut next_tid: BTreeMap<usize, usize> = BTreeMap::new();
        let mut threads = BTreeMap::new();
        let mut lanes = BTreeMap::new();
        let mut span_tids = vec![(0, 0); trace.spans.len()];
        for lane in &lane_order {
            let pid = pid_of(&lane.process);
            let mut idx: Vec<usize> = (0..trace.spans.len())
                .filter(|&i| trace.spans[i].lane == *lane)
                .collect();
            idx.sort_by_key(|&i| (trace.spans[i].start_us, -trace.spans[i].dur_us));
            let intervals: Vec<(i64, i64)> = idx
                .iter()
                .map(|&i| {
                    let s = &trace.spans[i];
                    (s.start_us, s.start_us + s.dur_us.max(0))
                })
                .collect();
            let sub = pack(&intervals);
            let count = sub.iter().copied().max().map_or(1, |m| m + 1);
            let mut tids = Vec::with_capacity(count);
            for k in 0..count {
                let tid = next_tid.entry(pid).or_insert(0);
                *tid += 1;
                let name = if k == 0 {
                    lane.thread.clone()
                } else {
                    format!("{} ({})", lane.thread, k + 1)
                };
                threads.insert((pid, *tid), name);
                tids.push(*tid);
            }
            lanes.insert(lane.clone(), (pid, tids[0]));
            for (n, &i) in idx.iter().enumerate() {
                span_tids[i] = (pid, tids[sub[n]]);
            }
        }
        Layout {
            processes,
            threads,
            span_tids,
            lanes,
        }
    }

    fn first_tid(&self, lane: &Lane) -> (usize, usize) {
        self.lanes.get(lane).copied().unwrap_or((1, 1))
    }
}

/// For intervals sorted by (start, longest first): the sub-lane of each, so that within a
/// sub-lane every interval either ends before the next starts or contains it whole.
pub(crate) fn pack(intervals: &[(i64, i64)]) -> Vec<usize> {
    // Per sub-lane, the stack of intervals still open.
    let mut stacks: Vec<Vec<(i64, i64)>> = Vec::new();
    let mut out = Vec::with_capacity(intervals.len());
    for &(start, end) in intervals {
        let mut placed = None;
        for (k, stack) in stacks.iter_mut().enumerate() {
            while stack.last().is_some_and(|&(_, e)| e <= start) {
                stack.pop();
            }
            let fits = stack.last().is_none_or(|&(s, e)| s <= start && end <= e);
            if fits {
                stack.push((start, end));
                placed = Some(k);
                break;
            }
        }
        let k = placed.unwrap_or_else(|| {
            stacks.push(vec![(start, end)]);
            stacks.len() - 1
        });
        out.push(k);
    }
    out
}

/// `args` from pairs.
pub fn args<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn span(thread: &str, name: &str, start: i64, dur: i64) -> Span {
        Span {
            lane: Lane::new("p", thread),
            name: name.into(),
            cat: "c".into(),
            start_us: start,
            dur_us: dur,
            args: Map::new(),
        }
    }

    #[test]
    fn nested_spans_share_a_thread_and_crossing_ones_do_not() {
        // a contains b; c starts inside a and ends after it; d follows a.
        let got = pack(&[(0, 100), (10, 20), (50, 150), (100, 120)]);
        assert_eq!(got, vec![0, 0, 1, 0]);
    }

    #[test]
    fn the_json_is_ordered_from_one_origin_with_named_lanes() {
        let mut t = Trace::default();
        t.span(span("steps", "late", 1_000_500, 10));
        t.span(span("steps", "outer", 1_000_000, 1_000));
        t.span(span("steps", "crossing", 1_000_900, 500));
        t.mark(Mark {
            lane: Lane::new("p", "steps"),
            name: "retry".into(),
            cat: "c".into(),
            at_us: 1_000_200,
            args: Map::new(),
        });
        let v = t.to_json();
        let ev = v["traceEvents"].as_array().unwrap();
        let timed: Vec<&Value> = ev.iter().filter(|e| e["ph"] != "M").collect();
        let names: Vec<&str> = timed.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["outer", "retry", "late", "crossing"]);
        assert_eq!(timed[0]["ts"], 0);
        assert_ne!(timed[0]["tid"], timed[3]["tid"], "crossing span moved");
        let threads: Vec<&str> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(threads, ["steps", "steps (2)"]);
        assert_eq!(v["displayTimeUnit"], "ms");
    }
}
