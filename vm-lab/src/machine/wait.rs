//! Waits: the one retry loop every `wait_*` verb runs on, and the conditions built on it —
//! console text, open and closed ports, files, processes, commands.
//!
//! [`Node::retry`] polls a probe until it reports done, fails fast when the probe reports a
//! terminal error (QEMU exited, the agent connection broke for good), and otherwise ends with
//! [`Error::Timeout`] naming the node and the condition and carrying the last serial lines.

use std::future::Future;
use std::time::{Duration, Instant};

use regex::Regex;

use super::{ExecOutput, Node};
use crate::error::{Error, Result};

/// Pause between two probes.
const POLL: Duration = Duration::from_millis(300);

/// What a probe saw.
pub(crate) enum Probe<T> {
    Done(T),
    /// Not yet; the text says what was seen (it ends up in the timeout error).
    NotYet(String),
}

impl Node {
    /// Poll `probe` (given the time left) until it is done, `timeout` passes, or it errors.
    /// One last probe runs at the deadline, so a condition that became true just then counts.
    pub(crate) async fn retry<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: F,
    ) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<Probe<T>>>,
    {
        let start = Instant::now();
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            let last = match probe(left.max(Duration::from_secs(1))).await? {
                Probe::Done(v) => return Ok(v),
                Probe::NotYet(seen) => seen,
            };
            if start.elapsed() >= timeout {
                let what = if last.is_empty() {
                    what.to_string()
                } else {
                    format!("{what} (last seen: {})", last.trim())
                };
                return Err(self.timeout_error(what, timeout));
            }
            tokio::time::sleep(POLL.min(timeout.saturating_sub(start.elapsed()))).await;
        }
    }

    /// Wait until the serial console of the current boot prints `needle`.
    pub async fn wait_for_serial(&self, needle: &str, timeout: Duration) -> Result<()> {
        self.retry(&format!("serial output {needle:?}"), timeout, |_| async {
            if self.current_boot_serial().await.contains(needle) {
                return Ok(Probe::Done(()));
            }
            self.ensure_running().await?;
            Ok(Probe::NotYet(String::new()))
        })
        .await
    }

    /// Wait until a line of the current boot's serial console matches `pattern` (a regular
    /// expression); returns the first matching line.
    pub async fn wait_for_console_text(&self, pattern: &str, timeout: Duration) -> Result<String> {
        let re = Regex::new(pattern)
            .map_err(|e| Error::Lab(format!("console pattern {pattern:?}: {e}")))?;
        self.retry(&format!("console text /{pattern}/"), timeout, |_| {
            let re = re.clone();
            async move {
                let log = self.current_boot_serial().await;
                if let Some(line) = log.lines().find(|l| re.is_match(l)) {
                    return Ok(Probe::Done(line.to_string()));
                }
                self.ensure_running().await?;
                Ok(Probe::NotYet(String::new()))
            }
        })
        .await
    }

    /// Retry `command` until it exits 0, at most `timeout`; returns its stdout.
    pub async fn wait_until_succeeds(&self, command: &str, timeout: Duration) -> Result<String> {
        self.wait_for_exit(command, timeout, true, &format!("`{command}` to succeed"))
            .await
            .map(|o| o.stdout)
    }

    /// Retry `command` until it exits non-zero, at most `timeout`.
    pub async fn wait_until_fails(&self, command: &str, timeout: Duration) -> Result<ExecOutput> {
        self.wait_for_exit(command, timeout, false, &format!("`{command}` to fail"))
            .await
    }

    /// Wait until something in the guest listens on TCP `port` (any address, IPv4 or IPv6).
    pub async fn wait_for_open_port(&self, port: u16, timeout: Duration) -> Result<()> {
        let what = format!("TCP port {port} to be listened on");
        self.wait_for_exit(&listening_probe(port), timeout, true, &what)
            .await
            .map(|_| ())
    }

    /// Wait until nothing in the guest listens on TCP `port`.
    pub async fn wait_for_closed_port(&self, port: u16, timeout: Duration) -> Result<()> {
        let what = format!("TCP port {port} to be closed");
        self.wait_for_exit(&listening_probe(port), timeout, false, &what)
            .await
            .map(|_| ())
    }

    /// Wait until `path` exists in the guest.
    pub async fn wait_for_file(&self, path: &str, timeout: Duration) -> Result<()> {
        let what = format!("file {path} to exist");
        self.wait_for_exit(
            &format!("test -e {}", shell_quote(path)),
            timeout,
            true,
            &what,
        )
        .await
        .map(|_| ())
    }

    /// Wait until a process named `name` runs in the guest; returns its PIDs.
    pub async fn wait_for_process(&self, name: &str, timeout: Duration) -> Result<Vec<u32>> {
        let what = format!("a process named {name}");
        let out = self
            .wait_for_exit(
                &format!("pidof {}", shell_quote(name)),
                timeout,
                true,
                &what,
            )
            .await?;
        Ok(out
            .stdout
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect())
    }

    /// Wait until no process named `name` runs in the guest.
    pub async fn wait_for_no_process(&self, name: &str, timeout: Duration) -> Result<()> {
        let what = format!("no process named {name}");
        self.wait_for_exit(
            &format!("pidof {}", shell_quote(name)),
            timeout,
            false,
            &what,
        )
        .await
        .map(|_| ())
    }

    async fn wait_for_exit(
        &self,
        command: &str,
        timeout: Duration,
        want_ok: bool,
        what: &str,
    ) -> Result<ExecOutput> {
        self.retry(what, timeout, |left| async move {
            let out = self.exec_timeout(command, left).await?;
            if out.success() == want_ok {
                Ok(Probe::Done(out))
            } else {
                Ok(Probe::NotYet(format!(
                    "exit {}: {}{}",
                    out.code, out.stdout, out.stderr
                )))
            }
        })
        .await
    }
}

/// A guest command that exits 0 iff a TCP socket listens on `port`: it reads the kernel's
/// socket tables directly (state 0A is LISTEN), so it needs no `ss` or `netstat` in the image.
pub fn listening_probe(port: u16) -> String {
    format!(
        "awk 'FNR > 1 && $4 == \"0A\" && $2 ~ /:{port:04X}$/ {{ found = 1 }} END {{ exit !found }}' /proc/net/tcp /proc/net/tcp6"
    )
}

/// Quote `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_probe_matches_the_port_in_hex() {
        let p = listening_probe(2379);
        assert!(p.contains(":094B$/"), "{p}");
        assert!(p.contains("/proc/net/tcp6"));
        assert!(listening_probe(22).contains(":0016$/"));
    }

    #[test]
    fn shell_quote_survives_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
