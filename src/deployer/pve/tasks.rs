//! Awaiting PVE worker tasks: poll `GET /nodes/{node}/tasks/{upid}/status` until `stopped`, then
//! read `exitstatus` (`OK` and `WARNINGS: N` succeed); on failure keep the log's last lines.

use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{PveClient, PveError};

#[derive(Debug, Clone, Copy)]
pub struct TaskWait {
    pub poll: Duration,
    pub timeout: Duration,
}

impl Default for TaskWait {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(500),
            timeout: Duration::from_secs(15 * 60),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct TaskStatus {
    pub status: String,
    #[serde(default)]
    pub exitstatus: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct LogLine {
    #[serde(default)]
    t: String,
}

/// The node a UPID belongs to (`UPID:<node>:…`).
pub fn upid_node(upid: &str) -> Option<&str> {
    let mut parts = upid.split(':');
    (parts.next()? == "UPID").then_some(())?;
    parts.next().filter(|n| !n.is_empty())
}

/// `OK` and `WARNINGS: N` are successes (PVE's `status_is_error`).
pub fn exitstatus_ok(exit: &str) -> bool {
    exit == "OK" || exit.starts_with("WARNINGS")
}

impl PveClient {
    pub async fn task_status(&self, node: &str, upid: &str) -> Result<TaskStatus, PveError> {
        self.get(&format!("/nodes/{node}/tasks/{upid}/status"), &[])
            .await
    }

    /// The last `n` lines of a task's log.
    pub async fn task_log_tail(
        &self,
        node: &str,
        upid: &str,
        n: usize,
    ) -> Result<Vec<String>, PveError> {
        let lines: Vec<LogLine> = self
            .get(
                &format!("/nodes/{node}/tasks/{upid}/log"),
                &[("limit", "0".to_string())],
            )
            .await?;
        let skip = lines.len().saturating_sub(n);
        Ok(lines.into_iter().skip(skip).map(|l| l.t).collect())
    }

    /// Waits for the task to stop; `Ok(exitstatus)` when it succeeded.
    pub async fn await_task(&self, upid: &str, wait: TaskWait) -> Result<String, PveError> {
        if crate::mutants::active(crate::mutants::Mutant::NeverWaitsForTasks) {
            return Ok("OK".into());
        }
        let node = upid_node(upid).ok_or_else(|| PveError::Decode {
            method: "GET".into(),
            path: "tasks".into(),
            detail: format!("'{upid}' is not a UPID"),
        })?;
        let started = Instant::now();
        loop {
            let st = self.task_status(node, upid).await?;
            if st.status == "stopped" {
                let exit = st
                    .exitstatus
                    .unwrap_or_else(|| "unexpected status".to_string());
                if exitstatus_ok(&exit) {
                    return Ok(exit);
                }
                let log = self.task_log_tail(node, upid, 20).await.unwrap_or_default();
                return Err(PveError::Task {
                    upid: upid.to_string(),
                    exitstatus: exit,
                    log,
                });
            }
            if started.elapsed() >= wait.timeout {
                return Err(PveError::TaskTimeout {
                    upid: upid.to_string(),
                    waited_ms: started.elapsed().as_millis(),
                });
            }
            tokio::time::sleep(wait.poll).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upid_parsing() {
        assert_eq!(
            upid_node("UPID:r630-01:000F1A2B:0ABC1234:66B0C1D2:qmcreate:100:root@pam:"),
            Some("r630-01")
        );
        assert_eq!(upid_node("nope"), None);
        assert!(exitstatus_ok("WARNINGS: 2"));
        assert!(!exitstatus_ok("unable to create VM 100 - x"));
    }
}
