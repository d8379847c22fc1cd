//! The site's verbs over its tasks: starting one from its plan, completing it when the clock
//! passes its end (applying its work to the world), killing and interrupting.

use crate::tasks::model::{Chunk, splice_copies};
use crate::tasks::upid::Upid;
use crate::world::Site;
use crate::world::work::{Task, TaskPlan};

impl Site {
    /// Start a task: returns its UPID. Offsets in the plan are relative to `now`.
    pub fn start_task(&mut self, mut plan: TaskPlan, now: f64) -> String {
        use rand::Rng;
        let pid: u32 = self.rng.random_range(2_000..4_000_000);
        let booted = self
            .nodes
            .get(&plan.node)
            .map_or(now - 1000.0, |n| n.booted_at);
        let pstart = ((now - booted).max(0.0) * 100.0) as u64;
        let upid = Upid {
            node: plan.node.clone(),
            pid,
            pstart,
            starttime: now as u64,
            ttype: plan.ttype.to_string(),
            id: plan.id.clone(),
            user: plan.user.clone(),
        }
        .encode();
        if let Some(node) = self.nodes.get_mut(&plan.node)
            && let Some(pos) = node
                .armed_failures
                .iter()
                .position(|f| f.task_type == plan.ttype)
        {
            let f = node.armed_failures.remove(pos);
            plan.planned_error = Some(f.exitstatus);
        }
        let timeline = plan
            .timeline
            .into_iter()
            .map(|(off, c)| {
                let c = match c {
                    Chunk::Transfer {
                        total,
                        until,
                        style,
                    } => Chunk::Transfer {
                        total,
                        until: now + until,
                        style,
                    },
                    l => l,
                };
                (now + off, c)
            })
            .collect();
        let end = now + plan.duration.max(0.05);
        self.tasks.push(Task {
            upid: upid.clone(),
            node: plan.node,
            pid,
            pstart,
            starttime: now as u64,
            ttype: plan.ttype.to_string(),
            id: plan.id,
            user: plan.user,
            start: now,
            end,
            timeline,
            tail: Vec::new(),
            work: plan.work,
            planned_error: plan.planned_error,
            exitstatus: None,
            endtime: None,
        });
        upid
    }

    pub(crate) fn complete_task(&mut self, seq: u64) {
        let Some(task) = self.tasks.by_seq(seq) else {
            return;
        };
        let work = task.work.clone();
        let planned = task.planned_error.clone();
        let end = task.end;
        let node = task.node.clone();
        let user = task.user.clone();
        let result = match planned {
            Some(e) => {
                self.rollback_work(&work, end);
                Err(e)
            }
            None => self.apply_work(&node, &user, &work, end),
        };
        let copies = std::mem::take(&mut self.copy_logs);
        let (lines, status) = match result {
            Ok(lines) => (lines, "OK".to_string()),
            Err(e) => (Vec::new(), e),
        };
        self.tasks.update(seq, |task| {
            if !copies.is_empty() {
                splice_copies(&mut task.timeline, copies);
            }
            task.tail.extend(lines);
            if status == "OK" {
                task.tail.push("TASK OK".into());
            } else {
                task.tail.push(format!("TASK ERROR: {status}"));
            }
            // exitstatus is the error text with newlines turned into spaces.
            task.exitstatus = Some(status.trim_end().replace('\n', " "));
            task.endtime = Some(end as u64);
        });
        self.share_storages();
    }

    /// The task with this UPID, running or done.
    pub fn task(&self, upid: &str) -> Option<&Task> {
        self.tasks.get(upid)
    }

    /// The tasks still running when the process that ran them died, as PVE shows a task
    /// whose worker died with its node: stopped, its log ending where the worker got to
    /// (here: the last state written, `at`) with no `TASK OK`/`TASK ERROR` line, so its
    /// exit status is `unexpected status` (pve-common `PVE/UPID.pm`, see pve-api-facts.md
    /// on task status). Nothing is rolled back: no worker is left to clean up, so a create
    /// leaves its VM with `lock: create` as `create_and_lock_config` wrote it, and a clone
    /// its `lock: clone`. Returns how many tasks were stopped.
    pub fn interrupt_running(&mut self, at: f64) -> usize {
        let seqs = self.tasks.running_seqs();
        for &seq in &seqs {
            self.tasks.update(seq, |t| {
                let end = at.max(t.start);
                t.timeline.retain(|(when, _)| *when <= end);
                t.end = end;
                t.exitstatus = Some("unexpected status".into());
                t.endtime = Some(end as u64);
            });
        }
        seqs.len()
    }

    /// Stop a running task (`DELETE /nodes/{node}/tasks/{upid}`).
    pub fn kill_task(&mut self, upid: &str, now: f64) -> bool {
        let Some((seq, task)) = self
            .tasks
            .seq_of(upid)
            .and_then(|seq| Some((seq, self.tasks.by_seq(seq)?)))
        else {
            return false;
        };
        if !task.running() {
            return true;
        }
        let work = task.work.clone();
        self.rollback_work(&work, now);
        self.tasks.update(seq, |t| {
            t.timeline.retain(|(at, _)| *at <= now);
            t.end = now;
            t.tail.push("TASK ERROR: interrupted by signal".into());
            t.exitstatus = Some("interrupted by signal".into());
            t.endtime = Some(now as u64);
        });
        true
    }
}
