//! Turns the built-in deployer's progress callbacks into a [`Timeline`].
//!
//! The pipeline announces each step as it starts (`on_step(vm, step)`) and the deployer each VM's
//! end (`on_done(vm, ok)`). A step therefore lasts until the VM's next event. A step seen again
//! within one attempt, or the deployer's `backoff` event, means the attempt failed at the step
//! that was open: that step is drawn as retried. Times are measured here, on the caller's clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::model::{Entry, StepOutcome, Timeline};
use crate::deployer::deploy::{DeployOptions, Outcome, RolloutResult};
use crate::deployer::pipeline::Step;

#[derive(Debug)]
struct Open {
    step: String,
    start_ms: u64,
}

#[derive(Debug, Default)]
struct Inner {
    open: BTreeMap<String, Open>,
    /// Steps seen in the VM's current attempt.
    attempt_steps: BTreeMap<String, Vec<String>>,
    entries: Vec<Entry>,
}

/// Records step events with their times; see the module doc.
#[derive(Debug)]
pub struct Recorder {
    started: Instant,
    started_wall: time::OffsetDateTime,
    inner: Mutex<Inner>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            started_wall: time::OffsetDateTime::now_utc(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The wall-clock time `offset_ms` after this recorder was made, RFC 3339 to the second.
    fn wall(&self, offset_ms: u64) -> String {
        let offset = time::Duration::milliseconds(i64::try_from(offset_ms).unwrap_or(i64::MAX));
        (self.started_wall + offset)
            .format(time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
            ))
            .unwrap_or_default()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic in another recording thread leaves plain data behind; keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A step of `vm` starts now.
    pub fn step(&self, vm: &str, step: &str) {
        let now = self.now_ms();
        let mut g = self.lock();
        let inner = &mut *g;
        let backoff = step == Step::Backoff.name();
        let restarted = backoff
            || inner
                .attempt_steps
                .get(vm)
                .is_some_and(|seen| seen.iter().any(|s| s == step));
        if let Some(open) = inner.open.remove(vm) {
            let outcome = if open.step == Step::Backoff.name() {
                StepOutcome::Backoff
            } else if restarted {
                StepOutcome::Retried
            } else {
                StepOutcome::Ok
            };
            inner.entries.push(Entry {
                vm: vm.to_string(),
                group: String::new(),
                step: open.step,
                start_ms: open.start_ms,
                end_ms: now,
                outcome,
                detail: String::new(),
            });
        }
        let seen = inner.attempt_steps.entry(vm.to_string()).or_default();
        if restarted {
            seen.clear();
        }
        if !backoff {
            seen.push(step.to_string());
        }
        inner.open.insert(
            vm.to_string(),
            Open {
                step: step.to_string(),
                start_ms: now,
            },
        );
    }

    /// `vm` finished: its open step ends now, ok or failed.
    pub fn done(&self, vm: &str, ok: bool) {
        let now = self.now_ms();
        let mut g = self.lock();
        let outcome = if ok {
            StepOutcome::Ok
        } else {
            StepOutcome::Failed
        };
        match g.open.remove(vm) {
            Some(open) => g.entries.push(Entry {
                vm: vm.to_string(),
                group: String::new(),
                step: open.step,
                start_ms: open.start_ms,
                end_ms: now,
                outcome,
                detail: String::new(),
            }),
            // Failed before any step (invalid spec, unknown site, failed dependency).
            None if !ok => g.entries.push(Entry {
                vm: vm.to_string(),
                group: String::new(),
                step: "prepare".into(),
                start_ms: now,
                end_ms: now,
                outcome,
                detail: String::new(),
            }),
            None => {}
        }
        g.attempt_steps.remove(vm);
    }

    /// Hooks this recorder into a deployer's options, keeping any callbacks already set.
    pub fn attach(self: &Arc<Self>, options: &mut DeployOptions) {
        let prev_step = options.on_step.take();
        let me = Arc::clone(self);
        options.on_step = Some(Arc::new(move |vm: &str, step: &str| {
            me.step(vm, step);
            if let Some(p) = &prev_step {
                p(vm, step);
            }
        }));
        let prev_done = options.on_done.take();
        let me = Arc::clone(self);
        options.on_done = Some(Arc::new(move |vm: &str, ok: bool| {
            me.done(vm, ok);
            if let Some(p) = &prev_done {
                p(vm, ok);
            }
        }));
    }

    /// The timeline so far, without a rollout result (still-open steps end now).
    pub fn timeline(&self, title: &str) -> Timeline {
        let now = self.now_ms();
        let g = self.lock();
        let mut entries = g.entries.clone();
        for (vm, open) in &g.open {
            entries.push(Entry {
                vm: vm.clone(),
                group: String::new(),
                step: open.step.clone(),
                start_ms: open.start_ms,
                end_ms: now,
                outcome: StepOutcome::Ok,
                detail: "still running when the report was written".into(),
            });
        }
        Timeline {
            title: title.to_string(),
            started_at: self.wall(0),
            elapsed_ms: now,
            entries,
            notes: Vec::new(),
        }
    }

    /// The timeline completed with the rollout's result: time 0 is the start of the deploy (work
    /// before it, such as a plan, is cut off), sites as groups, the final error on each failed VM's
    /// last step, a skipped bar for VMs that never started, unreadable manifests as notes.
    pub fn finish(&self, title: &str, result: &RolloutResult) -> Timeline {
        let mut t = self.timeline(title);
        let deploy_ms = u64::try_from(result.elapsed_ms).unwrap_or(u64::MAX);
        let offset = t.elapsed_ms.saturating_sub(deploy_ms);
        for e in &mut t.entries {
            e.start_ms = e.start_ms.saturating_sub(offset);
            e.end_ms = e.end_ms.saturating_sub(offset);
        }
        t.started_at = self.wall(offset);
        t.elapsed_ms = t.elapsed_ms.saturating_sub(offset).max(deploy_ms);
        let end = t.elapsed_ms;
        for vm in &result.vms {
            let mine: Vec<usize> = (0..t.entries.len())
                .filter(|&i| t.entries[i].vm == vm.name)
                .collect();
            for &i in &mine {
                t.entries[i].group = vm.site.clone();
            }
            let message = vm
                .error
                .as_ref()
                .map(|e| format!("{}: {}", e.reason, e.message));
            match (mine.last(), vm.outcome) {
                (None, Outcome::Skipped | Outcome::Absent) => t.entries.push(Entry {
                    vm: vm.name.clone(),
                    group: vm.site.clone(),
                    step: "not started".into(),
                    start_ms: end,
                    end_ms: end,
                    outcome: StepOutcome::Skipped,
                    detail: message.unwrap_or_else(|| "never attempted".into()),
                }),
                (Some(&i), Outcome::Failed) => {
                    t.entries[i].outcome = StepOutcome::Failed;
                    if let Some(m) = message {
                        t.entries[i].detail = m;
                    }
                }
                (None, Outcome::Failed) => t.entries.push(Entry {
                    vm: vm.name.clone(),
                    group: vm.site.clone(),
                    step: "prepare".into(),
                    start_ms: end,
                    end_ms: end,
                    outcome: StepOutcome::Failed,
                    detail: message.unwrap_or_default(),
                }),
                _ => {}
            }
        }
        for u in &result.unreadable {
            let at = u.line.map(|l| format!(" (line {l})")).unwrap_or_default();
            t.notes
                .push(format!("unreadable manifest {}{at}: {}", u.path, u.error));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn steps_chain_and_a_repeated_step_marks_the_open_one_retried() {
        let r = Recorder::new();
        r.step("a", "node-health");
        r.step("a", "create");
        r.step("a", Step::Backoff.name());
        r.step("a", "node-health");
        r.step("a", "create");
        r.done("a", true);
        r.step("b", "node-health");
        r.step("b", "node-health");
        r.done("b", false);
        r.done("c", false);
        let t = r.timeline("t");
        let by = |vm: &str| {
            t.entries
                .iter()
                .filter(|e| e.vm == vm)
                .map(|e| (e.step.as_str(), e.outcome))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            by("a"),
            vec![
                ("node-health", StepOutcome::Ok),
                ("create", StepOutcome::Retried),
                ("backoff", StepOutcome::Backoff),
                ("node-health", StepOutcome::Ok),
                ("create", StepOutcome::Ok),
            ]
        );
        assert_eq!(
            by("b"),
            vec![
                ("node-health", StepOutcome::Retried),
                ("node-health", StepOutcome::Failed)
            ]
        );
        assert_eq!(by("c"), vec![("prepare", StepOutcome::Failed)]);
        for e in &t.entries {
            assert!(e.start_ms <= e.end_ms);
        }
    }
}
