//! One launched guest and its verbs, all blocking and bounded: QMP (status, power button,
//! reset, pause, continue, quit, link), the process (liveness, kill), the guest agent
//! (any command as JSON, `guest-exec`), the serial log.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use super::argv::GuestPaths;
use super::control::{self, Agent};
use super::net::NsProcess;
use super::spec::GuestSpec;
use crate::error::{Error, Result};
use crate::machine::ExecOutput;

/// Default bound on one QMP exchange.
pub const QMP_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on one guest agent exchange (connecting and synchronising included).
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(3);
/// Serial lines attached to errors.
const SERIAL_TAIL: usize = 30;

/// QEMU's run state as `query-status` names it (`running`, `paused`, `shutdown`, …).
pub type RunState = String;

/// One guest's QEMU, running inside a [`super::GuestHost`]'s namespace: its spec, files,
/// process, and the QMP and agent verbs. Made by [`super::GuestHost::launch`].
#[derive(Debug)]
pub struct Guest {
    pub(super) spec: GuestSpec,
    pub(super) paths: GuestPaths,
    pub(super) memory_mib: u64,
    pub(super) taps: Vec<String>,
    pub(super) argv: Vec<String>,
    pub(super) proc_: Mutex<NsProcess>,
    pub(super) agent: Mutex<Option<Agent>>,
    /// Serialises QMP: the monitor takes one client at a time.
    pub(super) qmp_lock: Mutex<()>,
    /// Whether the last agent ping (the watcher's or a caller's) was answered.
    pub(super) agent_seen: AtomicBool,
    /// The run state the watcher (or a verb that changes it) saw last.
    pub(super) run_state: Mutex<Option<RunState>>,
    pub(super) started: Instant,
}

impl Guest {
    /// The guest's name, from its spec.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The validated spec the guest was launched from.
    pub fn spec(&self) -> &GuestSpec {
        &self.spec
    }

    /// The memory QEMU was given (the spec's, capped).
    pub fn memory_mib(&self) -> u64 {
        self.memory_mib
    }

    /// QEMU's arguments (without the program name).
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The tap device of each NIC, in the spec's order (empty names for non-tap NICs).
    pub fn taps(&self) -> &[String] {
        &self.taps
    }

    /// The guest's directory in the host's run directory.
    pub fn dir(&self) -> &Path {
        &self.paths.dir
    }

    /// The file its first serial port is logged to.
    pub fn serial_log(&self) -> &Path {
        &self.paths.serial_log
    }

    /// When QEMU was launched.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Host PID of QEMU.
    pub fn pid(&self) -> u32 {
        self.proc_.lock().map(|p| p.pid).unwrap_or(0)
    }

    /// True while QEMU runs (a guest that powered itself off has ended it).
    pub fn is_running(&self) -> bool {
        self.proc_.lock().is_ok_and(|mut p| p.running())
    }

    /// QEMU's exit status once it has ended.
    pub fn exit_status(&self) -> Option<String> {
        self.proc_.lock().ok().and_then(|mut p| p.exit_status())
    }

    /// Wait until QEMU has ended; false when it still runs after `timeout`.
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_running() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL QEMU (a power cut).
    pub fn kill(&self) {
        if let Ok(mut p) = self.proc_.lock() {
            p.kill();
        }
        self.forget_agent();
    }

    /// One QMP command: its `return` value, waiting up to `timeout` at the host's pace
    /// ([`crate::pace::scaled`]).
    pub fn qmp(&self, command: &str, args: Option<Value>, timeout: Duration) -> Result<Value> {
        let timeout = crate::pace::scaled(timeout);
        let _one = self
            .qmp_lock
            .lock()
            .map_err(|_| self.control_err("qmp", "lock poisoned"))?;
        if !self.is_running() {
            return Err(self.exited());
        }
        control::qmp(&self.paths.qmp, command, args, timeout)
            .map_err(|e| self.control_err("qmp", format!("{command}: {e}")))
    }

    /// `query-status`'s `status`.
    pub fn status(&self) -> Result<RunState> {
        let r = self.qmp("query-status", None, QMP_TIMEOUT)?;
        r.get("status")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| self.control_err("qmp", format!("query-status: no status in {r}")))
    }

    /// The run state as last seen (at most about a second old; `None` before the first look),
    /// without asking QEMU: `running`, `paused`, `io-error` (a drive with `werror`/`rerror`
    /// `stop` failed), …
    pub fn last_run_state(&self) -> Option<RunState> {
        self.run_state.lock().ok().and_then(|s| s.clone())
    }

    /// Ask QEMU for its run state and remember it.
    pub(super) fn poll_run_state(&self) {
        if let Ok(state) = self.status() {
            self.remember_state(&state);
        }
    }

    fn remember_state(&self, state: &str) {
        if let Ok(mut s) = self.run_state.lock() {
            *s = Some(state.to_string());
        }
    }

    /// ACPI power button.
    pub fn powerdown(&self) -> Result<()> {
        self.qmp("system_powerdown", None, QMP_TIMEOUT).map(drop)
    }

    /// Hardware reset: the guest restarts inside the same QEMU.
    pub fn reset(&self) -> Result<()> {
        self.forget_agent();
        self.qmp("system_reset", None, QMP_TIMEOUT).map(drop)
    }

    /// Pause the vCPUs (`stop`).
    pub fn pause(&self) -> Result<()> {
        self.qmp("stop", None, QMP_TIMEOUT).map(drop)?;
        self.agent_seen.store(false, Ordering::Relaxed);
        self.remember_state("paused");
        Ok(())
    }

    /// Continue paused vCPUs (`cont`; after an `io-error` stop it retries the failed I/O).
    pub fn resume(&self) -> Result<()> {
        self.qmp("cont", None, QMP_TIMEOUT).map(drop)?;
        self.remember_state("running");
        Ok(())
    }

    /// Ask QEMU to exit (`quit`) and wait for it, killing it if it lingers.
    pub fn quit(&self) -> Result<()> {
        let r = self.qmp("quit", None, QMP_TIMEOUT);
        if !self.wait_exit(QMP_TIMEOUT) {
            self.kill();
        }
        self.forget_agent();
        r.map(drop)
    }

    /// Link of NIC `net{index}` up or down.
    pub fn set_link(&self, nic_index: u32, up: bool) -> Result<()> {
        self.qmp(
            "set_link",
            Some(json!({"name": format!("net{nic_index}"), "up": up})),
            QMP_TIMEOUT,
        )
        .map(drop)
    }

    /// One guest agent command (`guest-ping`, `guest-network-get-interfaces`, …) with its
    /// arguments: the agent's `return` value. A connection is kept and reused; one that timed
    /// out is dropped. `timeout` counts at the host's pace ([`crate::pace::scaled`]): on a slow,
    /// loaded host a running agent can take longer than a second to answer.
    pub fn agent(&self, command: &str, args: Option<Value>, timeout: Duration) -> Result<Value> {
        let timeout = crate::pace::scaled(timeout);
        if !self.spec.agent {
            return Err(self.control_err("agent", "the guest has no agent channel"));
        }
        if !self.is_running() {
            return Err(self.exited());
        }
        let deadline = Instant::now() + timeout;
        let mut slot = self
            .agent
            .lock()
            .map_err(|_| self.control_err("agent", "lock poisoned"))?;
        if slot.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match Agent::connect(&self.paths.qga, left) {
                Ok(a) => *slot = Some(a),
                Err(e) => {
                    self.agent_seen.store(false, Ordering::Relaxed);
                    return Err(self.control_err("agent", e));
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let res = match slot.as_mut() {
            Some(a) => a.call(command, args, left),
            None => Err("not connected".into()),
        };
        match res {
            Ok(v) => {
                self.agent_seen.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Err(e) => {
                // An answered error (unknown command, bad argument) keeps the connection.
                if e.contains("got timeout")
                    || e.contains("closed")
                    || e.starts_with("write")
                    || e.starts_with("bad JSON")
                {
                    *slot = None;
                    self.agent_seen.store(false, Ordering::Relaxed);
                }
                Err(self.control_err("agent", format!("{command}: {e}")))
            }
        }
    }

    /// Whether `guest-ping` is answered within `timeout`.
    pub fn agent_ping(&self, timeout: Duration) -> bool {
        self.agent("guest-ping", None, timeout).is_ok()
    }

    /// Whether the agent answered the last ping (kept fresh by the host's watcher, so this
    /// never blocks on the guest).
    pub fn agent_answering(&self) -> bool {
        self.agent_seen.load(Ordering::Relaxed) && self.is_running()
    }

    /// `sh -c command` in the guest through `guest-exec`, waiting up to `timeout` for it.
    pub fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput> {
        let deadline = Instant::now() + timeout;
        let started = self.agent(
            "guest-exec",
            Some(json!({"path": "/bin/sh", "arg": ["-c", command], "capture-output": true})),
            AGENT_TIMEOUT,
        )?;
        let pid = started
            .get("pid")
            .and_then(Value::as_i64)
            .ok_or_else(|| self.control_err("agent", format!("guest-exec: no pid in {started}")))?;
        let mut backoff = Duration::from_millis(50);
        loop {
            let st = self.agent(
                "guest-exec-status",
                Some(json!({"pid": pid})),
                AGENT_TIMEOUT,
            )?;
            if st.get("exited").and_then(Value::as_bool) == Some(true) {
                let code = st
                    .get("exitcode")
                    .and_then(Value::as_i64)
                    .or_else(|| st.get("signal").and_then(Value::as_i64).map(|s| 128 + s))
                    .unwrap_or(-1);
                return Ok(ExecOutput {
                    code,
                    stdout: decode(st.get("out-data")),
                    stderr: decode(st.get("err-data")),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    node: self.spec.name.clone(),
                    what: format!("guest-exec `{command}`"),
                    after: timeout,
                    serial: self.serial_tail(SERIAL_TAIL),
                });
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(400));
        }
    }

    /// The last `n` lines of the serial log.
    pub fn serial_tail(&self, n: usize) -> String {
        let text = std::fs::read(&self.paths.serial_log).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The whole serial log so far.
    pub fn serial_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.paths.serial_log).unwrap_or_default())
            .into_owned()
    }

    /// Wait until the serial log contains `marker`; false on timeout or when QEMU ends.
    pub fn wait_serial(&self, marker: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.serial_text().contains(marker) {
                return true;
            }
            if Instant::now() >= deadline || !self.is_running() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(super) fn forget_agent(&self) {
        self.agent_seen.store(false, Ordering::Relaxed);
        if let Ok(mut a) = self.agent.lock() {
            *a = None;
        }
    }

    fn control_err(&self, channel: &'static str, detail: impl Into<String>) -> Error {
        Error::Control {
            node: self.spec.name.clone(),
            channel,
            detail: detail.into(),
        }
    }

    /// The error of a verb on a guest whose QEMU has ended: its status, stderr, serial.
    pub fn exited(&self) -> Error {
        let stderr = std::fs::read_to_string(&self.paths.stderr).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        Error::QemuExited {
            node: self.spec.name.clone(),
            status: self.exit_status().unwrap_or_else(|| "running".into()),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            serial: self.serial_tail(SERIAL_TAIL),
        }
    }

    /// The file QEMU's stderr goes to.
    pub fn stderr_path(&self) -> PathBuf {
        self.paths.stderr.clone()
    }
}

fn decode(v: Option<&Value>) -> String {
    v.and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}
