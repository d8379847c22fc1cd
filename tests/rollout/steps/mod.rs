//! Step definitions, one module per domain concept. Each step is a few lines over World verbs.

mod auth;
mod faults;
mod journal;
mod resume;
mod rollout;
mod storage;
mod user_data;
mod vm;

use std::time::Duration;

/// How long a step waits for something the fake's fast clock makes happen in well under a second
/// (60 s, at the host's pace: an external deployer such as a playbook starts slowly on a slow,
/// loaded machine).
pub fn wait() -> Duration {
    vm_lab::pace::scaled(Duration::from_secs(60))
}

/// `| key | value |` rows of a step's table (a header row, if any, is just another row).
pub fn rows(step: &cucumber::gherkin::Step) -> Vec<Vec<String>> {
    step.table
        .as_ref()
        .map(|t| {
            t.rows
                .iter()
                .map(|r| r.iter().map(|c| c.trim().to_string()).collect())
                .collect()
        })
        .unwrap_or_default()
}
