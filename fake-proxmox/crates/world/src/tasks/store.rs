//! A site's tasks, indexed for the requests that touch them on every poll.
//!
//! A deployer polls `…/tasks/{upid}/status` in a loop and every request first completes
//! the tasks whose time has come, so both lookups must not scan the whole history: tasks
//! are kept in start order, with an index by UPID and the running ones ordered by end time.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::model::Task;

/// Only the newest tasks are kept, so a long rehearsal or benchmark stays bounded.
pub const MAX_TASKS: usize = 10_000;

/// An end time ordered totally (task end times are finite, but `total_cmp` needs no proof).
#[derive(Clone, Copy, Debug, PartialEq)]
struct EndTime(f64);

impl Eq for EndTime {}

impl PartialOrd for EndTime {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EndTime {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Tasks in start order (`seq`), by UPID, and the running ones by end time.
#[derive(Clone, Debug)]
pub struct TaskStore<W> {
    /// Tracked (`tracked`): the state file journals the tasks that changed.
    by_seq: crate::tracked::Tracked<u64, Task<W>>,
    by_upid: HashMap<String, u64>,
    running: BTreeSet<(EndTime, u64)>,
    next_seq: u64,
}

/// What a state file holds of a store: the tasks by sequence number and the next one; the
/// indexes are built again when it is read back.
#[derive(serde::Serialize)]
struct StoreRef<'a, W> {
    next_seq: u64,
    tasks: &'a BTreeMap<u64, Task<W>>,
}

#[derive(serde::Deserialize)]
struct StoreOwned<W> {
    next_seq: u64,
    tasks: BTreeMap<u64, Task<W>>,
}

impl<W: serde::Serialize> serde::Serialize for TaskStore<W> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StoreRef {
            next_seq: self.next_seq,
            tasks: &*self.by_seq,
        }
        .serialize(s)
    }
}

impl<'de, W: serde::Deserialize<'de>> serde::Deserialize<'de> for TaskStore<W> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let StoreOwned { next_seq, tasks } = StoreOwned::deserialize(d)?;
        TaskStore::from_parts(next_seq, tasks).map_err(serde::de::Error::custom)
    }
}

// By hand: a derived `Default` would ask the work type for one.
impl<W> Default for TaskStore<W> {
    fn default() -> Self {
        TaskStore {
            by_seq: crate::tracked::Tracked::default(),
            by_upid: HashMap::new(),
            running: BTreeSet::new(),
            next_seq: 0,
        }
    }
}

impl<W> TaskStore<W> {
    /// A store of these tasks (by sequence number), the next one numbered `next_seq`:
    /// what a state file holds, the indexes built again.
    pub fn from_parts(next_seq: u64, tasks: BTreeMap<u64, Task<W>>) -> Result<Self, String> {
        if let Some(last) = tasks.keys().next_back()
            && *last >= next_seq
        {
            return Err(format!(
                "task sequence {last} is not below next_seq {next_seq}"
            ));
        }
        let mut store = TaskStore {
            next_seq,
            ..TaskStore::default()
        };
        for (seq, task) in tasks {
            if task.running() {
                store.running.insert((EndTime(task.end), seq));
            }
            store.by_upid.insert(task.upid.clone(), seq);
            store.by_seq.insert(seq, task);
        }
        Ok(store)
    }

    /// The tasks by sequence number and the next number: what a state file holds.
    pub fn parts(&self) -> (u64, &BTreeMap<u64, Task<W>>) {
        (self.next_seq, &self.by_seq)
    }

    /// The tasks by sequence number and the next number, taken out of the store.
    pub fn into_parts(self) -> (u64, BTreeMap<u64, Task<W>>) {
        (self.next_seq, self.by_seq.into_inner())
    }

    /// The sequence numbers of the tasks added, changed or forgotten since the last call
    /// (for the state file's journal, see `tracked`).
    pub fn take_changes(&mut self) -> crate::tracked::Changes<u64> {
        self.by_seq.take_changes()
    }

    /// How many tasks are running.
    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// The sequence numbers of the running tasks.
    pub fn running_seqs(&self) -> Vec<u64> {
        self.running.iter().map(|(_, seq)| *seq).collect()
    }

    /// How many tasks are kept.
    pub fn len(&self) -> usize {
        self.by_seq.len()
    }

    /// Whether no task is kept.
    pub fn is_empty(&self) -> bool {
        self.by_seq.is_empty()
    }

    /// Tasks oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Task<W>> {
        self.by_seq.values()
    }

    /// Adds a task; past [`MAX_TASKS`] the oldest finished one is forgotten.
    pub fn push(&mut self, task: Task<W>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if task.running() {
            self.running.insert((EndTime(task.end), seq));
        }
        self.by_upid.insert(task.upid.clone(), seq);
        self.by_seq.insert(seq, task);
        if self.by_seq.len() > MAX_TASKS {
            // The oldest tasks are almost always finished: this stops after a step or two.
            let oldest_finished = self
                .by_seq
                .iter()
                .find(|(_, t)| !t.running())
                .map(|(s, _)| *s);
            if let Some(s) = oldest_finished
                && let Some(t) = self.by_seq.remove(&s)
            {
                self.by_upid.remove(&t.upid);
            }
        }
    }

    /// Forget the oldest finished tasks until at most `max` are kept (running tasks are
    /// never forgotten, so more may stay while they run); how many were forgotten.
    pub fn trim(&mut self, max: usize) -> usize {
        if self.by_seq.len() <= max {
            return 0;
        }
        let excess = self.by_seq.len() - max;
        let gone: Vec<u64> = self
            .by_seq
            .iter()
            .filter(|(_, t)| !t.running())
            .take(excess)
            .map(|(s, _)| *s)
            .collect();
        for s in &gone {
            if let Some(t) = self.by_seq.remove(s) {
                self.by_upid.remove(&t.upid);
            }
        }
        gone.len()
    }

    /// The task with this UPID, if kept.
    pub fn get(&self, upid: &str) -> Option<&Task<W>> {
        self.by_seq.get(self.by_upid.get(upid)?)
    }

    /// The sequence number of the task with this UPID.
    pub fn seq_of(&self, upid: &str) -> Option<u64> {
        self.by_upid.get(upid).copied()
    }

    /// The task with this sequence number, if kept.
    pub fn by_seq(&self, seq: u64) -> Option<&Task<W>> {
        self.by_seq.get(&seq)
    }

    /// Changes a task; its place among the running ones follows its new end and exit status.
    pub fn update<R>(&mut self, seq: u64, f: impl FnOnce(&mut Task<W>) -> R) -> Option<R> {
        let task = self.by_seq.get_mut(&seq)?;
        let before = (task.running(), EndTime(task.end));
        let out = f(task);
        let after = (task.running(), EndTime(task.end));
        if before != after {
            if before.0 {
                self.running.remove(&(before.1, seq));
            }
            if after.0 {
                self.running.insert((after.1, seq));
            }
        }
        Some(out)
    }

    /// The running task that ends first, if it ends by `now` (ties: the one started first).
    pub fn first_due(&self, now: f64) -> Option<u64> {
        self.running
            .first()
            .filter(|(end, _)| end.0 <= now)
            .map(|(_, seq)| *seq)
    }

    /// When the next running task ends (`INFINITY` when none runs).
    pub fn next_due(&self) -> f64 {
        self.running.first().map_or(f64::INFINITY, |(end, _)| end.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn task(upid: &str, end: f64) -> Task<()> {
        Task {
            upid: upid.into(),
            node: "pve".into(),
            pid: 1,
            pstart: 1,
            starttime: 0,
            ttype: "qmcreate".into(),
            id: "100".into(),
            user: "root@pam".into(),
            start: 0.0,
            end,
            timeline: Vec::new(),
            tail: Vec::new(),
            work: (),
            planned_error: None,
            exitstatus: None,
            endtime: None,
        }
    }

    fn finish(s: &mut TaskStore<()>, seq: u64) {
        s.update(seq, |t| t.exitstatus = Some("OK".into())).unwrap();
    }

    #[test]
    fn trim_forgets_the_oldest_finished_tasks_and_keeps_running_ones() {
        let mut s = TaskStore::default();
        for (i, upid) in ["a", "b", "c", "d"].iter().enumerate() {
            s.push(task(upid, 1.0 + i as f64));
        }
        // "a" runs on; "b", "c" and "d" are finished.
        for seq in 1..4 {
            finish(&mut s, seq);
        }
        assert_eq!(s.trim(2), 2);
        let kept: Vec<&str> = s.iter().map(|t| t.upid.as_str()).collect();
        assert_eq!(kept, ["a", "d"]);
        assert!(s.get("b").is_none() && s.get("d").is_some());
        assert_eq!(s.trim(2), 0);
        // Only running tasks: nothing to forget, more than the limit stay.
        assert_eq!(s.trim(0), 1);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn due_tasks_come_in_end_order_then_start_order() {
        let mut s = TaskStore::default();
        s.push(task("a", 5.0));
        s.push(task("b", 3.0));
        s.push(task("c", 3.0));
        assert_eq!(s.next_due(), 3.0);
        assert_eq!(s.first_due(2.0), None);
        let order: Vec<String> = std::iter::from_fn(|| {
            let seq = s.first_due(10.0)?;
            finish(&mut s, seq);
            Some(s.by_seq(seq).unwrap().upid.clone())
        })
        .collect();
        assert_eq!(order, ["b", "c", "a"]);
        assert_eq!(s.next_due(), f64::INFINITY);
    }

    #[test]
    fn changing_the_end_moves_a_running_task() {
        let mut s = TaskStore::default();
        s.push(task("a", 50.0));
        let seq = s.seq_of("a").unwrap();
        s.update(seq, |t| t.end = 1.0);
        assert_eq!(s.first_due(1.0), Some(seq));
    }

    #[test]
    fn the_oldest_finished_task_goes_first_when_full() {
        let mut s = TaskStore::default();
        s.push(task("running-old", 1e9));
        for i in 0..MAX_TASKS {
            s.push(task(&format!("t{i}"), 1.0));
            let seq = s.seq_of(&format!("t{i}")).unwrap();
            finish(&mut s, seq);
        }
        assert_eq!(s.len(), MAX_TASKS);
        assert!(s.get("running-old").is_some(), "a running task is kept");
        assert!(
            s.get("t0").is_none(),
            "the oldest finished one is forgotten"
        );
        assert!(s.get("t1").is_some());
        assert_eq!(s.iter().next().unwrap().upid, "running-old");
    }
}
