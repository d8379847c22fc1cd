//! The neutral timeline model the HTML report draws: one entry per VM per step, with its time span
//! (milliseconds since the rollout started) and how it ended. Any deployer can produce one — the
//! built-in one through [`super::Recorder`], an external one as JSON.

use serde::{Deserialize, Serialize};

/// How one step of one VM ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepOutcome {
    /// The step finished and the VM moved on.
    Ok,
    /// The step failed with a retryable error; the VM's next attempt started over.
    Retried,
    /// Waiting out the backoff delay before the next attempt.
    Backoff,
    /// The step failed and the VM's rollout stopped there.
    Failed,
    /// Never attempted (an earlier failure or a dependency stopped it).
    Skipped,
}

impl StepOutcome {
    pub const ALL: [StepOutcome; 5] = [
        Self::Ok,
        Self::Retried,
        Self::Backoff,
        Self::Failed,
        Self::Skipped,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Retried => "retried",
            Self::Backoff => "backoff",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }

    /// Fill colour of the bars; distinct for colour-blind readers too (hue and lightness differ).
    pub fn colour(self) -> &'static str {
        match self {
            Self::Ok => "#2e9d4f",
            Self::Retried => "#e8a317",
            Self::Backoff => "#f6dc8a",
            Self::Failed => "#d23f31",
            Self::Skipped => "#9aa0a6",
        }
    }
}

/// One bar of the picture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub vm: String,
    /// Where the VM goes (the site), shown next to its name; may be empty.
    #[serde(default)]
    pub group: String,
    pub step: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub outcome: StepOutcome,
    /// The error or note behind the outcome; shown on hover and in the table.
    #[serde(default)]
    pub detail: String,
}

impl Entry {
    pub fn duration_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }
}

/// A whole rollout, ready to render.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub title: String,
    /// Wall-clock start, RFC 3339 UTC, shown as given.
    pub started_at: String,
    /// Total wall time; at least the end of the last entry.
    pub elapsed_ms: u64,
    pub entries: Vec<Entry>,
    /// Lines shown above the picture (e.g. unreadable manifests, the verdict).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One row of the picture: a VM and its entries in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row<'a> {
    pub vm: &'a str,
    pub group: &'a str,
    pub entries: Vec<&'a Entry>,
}

impl Row<'_> {
    /// The VM's final word: failed if its last entry failed, skipped if never started, else ok
    /// (retried when it needed more than one attempt).
    pub fn outcome(&self) -> StepOutcome {
        let last = self
            .entries
            .iter()
            .filter(|e| e.outcome != StepOutcome::Backoff)
            .max_by_key(|e| (e.end_ms, e.start_ms));
        match last.map(|e| e.outcome) {
            None | Some(StepOutcome::Skipped) => StepOutcome::Skipped,
            Some(StepOutcome::Failed) => StepOutcome::Failed,
            Some(_)
                if self
                    .entries
                    .iter()
                    .any(|e| e.outcome == StepOutcome::Retried) =>
            {
                StepOutcome::Retried
            }
            Some(_) => StepOutcome::Ok,
        }
    }
}

impl Timeline {
    /// The end of the time axis: the elapsed time or the last entry's end, whichever is later.
    pub fn span_ms(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| e.end_ms)
            .max()
            .unwrap_or(0)
            .max(self.elapsed_ms)
    }

    /// Rows in the order VMs started (ties by name), each VM's entries by start time.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let mut rows: Vec<Row<'_>> = Vec::new();
        for e in &self.entries {
            match rows.iter_mut().find(|r| r.vm == e.vm && r.group == e.group) {
                Some(r) => r.entries.push(e),
                None => rows.push(Row {
                    vm: &e.vm,
                    group: &e.group,
                    entries: vec![e],
                }),
            }
        }
        for r in &mut rows {
            r.entries.sort_by_key(|e| (e.start_ms, e.end_ms));
        }
        rows.sort_by(|a, b| {
            let first = |r: &Row<'_>| r.entries.first().map(|e| e.start_ms).unwrap_or(u64::MAX);
            first(a)
                .cmp(&first(b))
                .then_with(|| a.vm.cmp(b.vm))
                .then_with(|| a.group.cmp(b.group))
        });
        rows
    }

    /// Each VM's first row (its rollout's; a VM may have more rows, such as its guest side).
    pub fn vm_rows(&self) -> Vec<Row<'_>> {
        let mut seen = std::collections::BTreeSet::new();
        self.rows()
            .into_iter()
            .filter(|r| seen.insert(r.vm))
            .collect()
    }

    /// How many VMs ended in each outcome (ok, retried-then-ok, failed, skipped), by each VM's
    /// first row.
    pub fn vm_counts(&self) -> Vec<(StepOutcome, usize)> {
        let rows = self.vm_rows();
        StepOutcome::ALL
            .iter()
            .filter(|o| **o != StepOutcome::Backoff)
            .map(|o| (*o, rows.iter().filter(|r| r.outcome() == *o).count()))
            .collect()
    }
}
