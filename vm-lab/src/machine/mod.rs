//! A lab node and its verbs: wait for boot markers and the guest agent, run commands, move
//! files, read interfaces, and the faults (link down/up, pause/resume, kill, restart).
//! Every blocking verb is bounded; the `_timeout` variants take an explicit bound, the others
//! use [`Timeouts`] (scaled for TCG). Timeouts carry the node's last serial lines.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qapi::qga;
use serde::{Deserialize, Serialize};

use crate::accel::Accel;
use crate::error::{Error, Result};
use crate::namespace;
use crate::qemu_args::{NodePaths, READY_MARKER};
use crate::spec::NodeSpec;
use crate::{qga as qga_conn, qmp as qmp_conn};

mod agent;
mod faults;
mod ssh;
mod wait;

use wait::Probe;
pub use wait::{listening_probe, shell_quote};

pub use ssh::{ssh_argv, ssh_port_for};

/// Serial lines attached to timeout errors.
pub const SERIAL_TAIL_LINES: usize = 40;

/// Default bounds, before scaling for the accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Power-on to `VMLAB-READY` plus the guest agent answering.
    pub boot: Duration,
    /// One guest command (`exec`, `succeed`, file transfers).
    pub command: Duration,
    /// One QMP exchange.
    pub qmp: Duration,
}

impl Timeouts {
    /// The default timeouts under `accel`: boot 60 s and commands 30 s under KVM, four times that
    /// under TCG; QMP [`crate::qmp::QMP_TIMEOUT`] either way; all of them at the host's pace
    /// ([`crate::pace::scaled`]).
    pub fn for_accel(accel: Accel) -> Timeouts {
        let s = accel.timeout_scale();
        Timeouts {
            boot: crate::pace::scaled(Duration::from_secs(60) * s),
            command: crate::pace::scaled(Duration::from_secs(30) * s),
            qmp: crate::pace::scaled(qmp_conn::QMP_TIMEOUT),
        }
    }
}

/// What the lab shares with its nodes.
#[derive(Debug)]
pub(crate) struct LabCtx {
    pub name: String,
    pub accel: Accel,
    pub timeouts: Timeouts,
    pub ns_init_pid: u32,
    pub ssh_key: PathBuf,
}

/// Output of a guest command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// Exit code; a command killed by a signal reports 128 + signal.
    pub code: i64,
    /// What the command wrote to stdout, lossily decoded as UTF-8.
    pub stdout: String,
    /// What the command wrote to stderr, lossily decoded as UTF-8.
    pub stderr: String,
}

impl ExecOutput {
    /// True when the command exited with code 0.
    pub fn success(&self) -> bool {
        self.code == 0
    }
}

/// A network interface as the guest agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// The interface name in the guest, e.g. `eth0`.
    pub name: String,
    /// Its hardware address, when the agent reports one.
    pub mac: Option<String>,
    /// `ip/prefix` strings.
    pub addresses: Vec<String>,
}

struct Running {
    child: tokio::process::Child,
    qemu_pid: u32,
    serial_offset: u64,
    events: tokio::task::JoinHandle<()>,
    /// Stamps each serial line as it arrives (ends by itself once QEMU is gone).
    serial_stamps: std::thread::JoinHandle<()>,
}

/// One VM of a lab.
pub struct Node {
    spec: NodeSpec,
    paths: NodePaths,
    argv: Vec<String>,
    ssh_port: u16,
    ctx: Arc<LabCtx>,
    proc_: tokio::sync::Mutex<Option<Running>>,
    qga_lock: tokio::sync::Mutex<()>,
    /// Attached from another process (the CLI) to a lab a supervisor owns: the QEMU is known
    /// only by its pid file, and a QEMU this handle starts is left running when it is dropped
    /// (it still dies with the lab's namespace).
    attached: bool,
    /// Serial log length at the last power-on by an attached handle (its current boot's start).
    attached_offset: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.spec.name)
            .field("dir", &self.paths.dir)
            .finish()
    }
}

impl Node {
    pub(crate) fn new(
        spec: NodeSpec,
        paths: NodePaths,
        argv: Vec<String>,
        ssh_port: u16,
        ctx: Arc<LabCtx>,
    ) -> Node {
        Node {
            spec,
            paths,
            argv,
            ssh_port,
            ctx,
            proc_: tokio::sync::Mutex::new(None),
            qga_lock: tokio::sync::Mutex::new(()),
            attached: false,
            attached_offset: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A handle on a node of a lab that another process started (see `LabState::attach`).
    pub(crate) fn attached(
        spec: NodeSpec,
        paths: NodePaths,
        argv: Vec<String>,
        ssh_port: u16,
        ctx: Arc<LabCtx>,
    ) -> Node {
        let mut n = Node::new(spec, paths, argv, ssh_port, ctx);
        n.attached = true;
        n
    }

    /// The QEMU pid recorded in the node's pid file, if that process is alive.
    fn recorded_pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.paths.pid)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .filter(|p| namespace::alive(*p))
    }

    /// The node's name, from its spec.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The node's spec (CPUs, memory, MAC, address, boot mode).
    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    /// The node's address on the lab network.
    pub fn ip(&self) -> std::net::Ipv4Addr {
        self.spec.address.ip
    }

    /// Where the node's files are (sockets, serial log, argv, disk).
    pub fn paths(&self) -> &NodePaths {
        &self.paths
    }

    /// The QEMU arguments the node runs with (also in `argv.json`).
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The port in the lab's namespace forwarded to the guest's SSH server.
    pub fn ssh_port(&self) -> u16 {
        self.ssh_port
    }

    /// The timeouts the node's verbs use, already scaled for the accelerator.
    pub fn timeouts(&self) -> Timeouts {
        self.ctx.timeouts
    }

    /// Host PID of the node's QEMU, if it runs.
    pub async fn qemu_pid(&self) -> Option<u32> {
        if self.attached {
            return self.recorded_pid();
        }
        self.proc_.lock().await.as_ref().map(|r| r.qemu_pid)
    }

    /// Power on: start QEMU inside the lab's namespaces (the disk, MAC and boot are unchanged
    /// from the previous run). Does not wait for boot; see [`Node::wait_ready`].
    pub async fn start(&self) -> Result<()> {
        let mut guard = self.proc_.lock().await;
        let running = match guard.as_mut() {
            Some(r) => r.child.try_wait().ok().flatten().is_none(),
            None => self.attached && self.recorded_pid().is_some(),
        };
        if running {
            return Err(Error::Lab(format!(
                "node {} is already running",
                self.spec.name
            )));
        }
        let serial_offset = std::fs::metadata(&self.paths.serial_log)
            .map(|m| m.len())
            .unwrap_or(0);
        for sock in [
            &self.paths.qmp,
            &self.paths.qmp_ctl,
            &self.paths.qga,
            &self.paths.serial_sock,
        ] {
            let _ = std::fs::remove_file(sock);
        }
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.paths.stderr)
            .map_err(|e| Error::io(&self.paths.stderr, e))?;
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.args(namespace::nsenter_argv(
            self.ctx.ns_init_pid,
            true,
            "qemu-system-x86_64",
        ))
        .args(&self.argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .kill_on_drop(!self.attached);
        if self.attached {
            // Not in the caller's process group: a Ctrl-C of the CLI must not reach it.
            cmd.process_group(0);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::tool("nsenter", format!("cannot start QEMU: {e}")))?;
        let nsenter_pid = child.id().unwrap_or(0);
        let mut qemu_pid = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(p) = namespace::first_child(nsenter_pid, Duration::ZERO) {
                qemu_pid = Some(p);
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(self.exited_error(status.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let qemu_pid = qemu_pid
            .ok_or_else(|| Error::Lab(format!("node {}: QEMU did not start", self.spec.name)))?;
        std::fs::write(&self.paths.pid, format!("{qemu_pid}\n"))
            .map_err(|e| Error::io(&self.paths.pid, e))?;
        if self.attached {
            self.attached_offset
                .store(serial_offset, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        let events = qmp_conn::spawn_event_log(self.paths.qmp.clone(), self.paths.events.clone());
        let serial_stamps = crate::serial_stamps::spawn(
            self.paths.serial_log.clone(),
            self.paths.serial_times.clone(),
            serial_offset,
            qemu_pid,
        );
        *guard = Some(Running {
            child,
            qemu_pid,
            serial_offset,
            events,
            serial_stamps,
        });
        Ok(())
    }

    /// True while QEMU runs.
    pub async fn is_running(&self) -> bool {
        if self.attached {
            return self.recorded_pid().is_some();
        }
        let mut guard = self.proc_.lock().await;
        match guard.as_mut() {
            Some(r) => r.child.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    async fn ensure_running(&self) -> Result<()> {
        if self.attached {
            return match self.recorded_pid() {
                Some(_) => Ok(()),
                None => Err(self.exited_error("not running".into())),
            };
        }
        let mut guard = self.proc_.lock().await;
        match guard.as_mut() {
            None => Err(Error::Lab(format!(
                "node {} is not running",
                self.spec.name
            ))),
            Some(r) => match r.child.try_wait() {
                Ok(Some(status)) => Err(self.exited_error(status.to_string())),
                _ => Ok(()),
            },
        }
    }

    fn exited_error(&self, status: String) -> Error {
        let stderr = std::fs::read_to_string(&self.paths.stderr).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        Error::QemuExited {
            node: self.spec.name.clone(),
            status,
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            serial: self.serial_tail(SERIAL_TAIL_LINES),
        }
    }

    fn timeout_error(&self, what: impl Into<String>, after: Duration) -> Error {
        Error::Timeout {
            node: self.spec.name.clone(),
            what: what.into(),
            after,
            serial: self.serial_tail(SERIAL_TAIL_LINES),
        }
    }

    /// Everything the serial console printed (all boots of this node).
    pub fn serial_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.paths.serial_log).unwrap_or_default())
            .into_owned()
    }

    /// The last `n` lines of the serial console.
    pub fn serial_tail(&self, n: usize) -> String {
        let log = self.serial_log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// What the serial console printed since the current boot's power-on (the whole log for a
    /// node attached from another process).
    pub(crate) async fn current_boot_serial(&self) -> String {
        let offset = self
            .proc_
            .lock()
            .await
            .as_ref()
            .map(|r| r.serial_offset)
            .unwrap_or_else(|| {
                self.attached_offset
                    .load(std::sync::atomic::Ordering::Relaxed)
            });
        let bytes = std::fs::read(&self.paths.serial_log).unwrap_or_default();
        let tail = bytes
            .get(usize::try_from(offset).unwrap_or(0)..)
            .unwrap_or(&[]);
        String::from_utf8_lossy(tail).into_owned()
    }

    /// Wait for the boot marker and for the guest agent to answer.
    pub async fn wait_ready(&self) -> Result<()> {
        self.wait_ready_timeout(self.ctx.timeouts.boot).await
    }

    /// [`Node::wait_ready`] with an explicit bound: the serial console prints `VMLAB-READY` and
    /// the guest agent answers a ping within `timeout`, else [`crate::Error::Timeout`].
    pub async fn wait_ready_timeout(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        self.wait_for_serial(READY_MARKER, timeout).await?;
        let rest = timeout.saturating_sub(start.elapsed());
        let conn = self.qga_connect(rest).await?;
        conn.execute(qga::guest_ping {}, qga_conn::ATTEMPT_TIMEOUT)
            .await
            .map_err(|e| self.control_error("guest agent", e))?;
        Ok(())
    }

    fn control_error(&self, channel: &'static str, detail: String) -> Error {
        Error::Control {
            node: self.spec.name.clone(),
            channel,
            detail,
        }
    }

    /// A synchronised guest-agent connection, retrying fresh connections until `timeout`.
    async fn qga_connect(&self, timeout: Duration) -> Result<qga_conn::QgaConn> {
        self.retry("the guest agent", timeout, |left| async move {
            self.ensure_running().await?;
            match qga_conn::connect(&self.paths.qga, left.min(qga_conn::ATTEMPT_TIMEOUT)).await {
                Ok(c) => Ok(Probe::Done(c)),
                Err(e) => Ok(Probe::NotYet(e)),
            }
        })
        .await
    }

    /// Sudden power loss: SIGKILL the node's QEMU and wait until it is gone. The disk keeps
    /// what the guest had flushed (`sync`).
    pub async fn kill(&self) -> Result<()> {
        if self.attached {
            if let Some(pid) = self.recorded_pid() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let start = Instant::now();
                while namespace::alive(pid) && start.elapsed() < Duration::from_secs(10) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let _ = std::fs::remove_file(&self.paths.pid);
            }
            return Ok(());
        }
        let mut guard = self.proc_.lock().await;
        if let Some(mut r) = guard.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(r.qemu_pid).unwrap_or(0)),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = tokio::time::timeout(Duration::from_secs(10), r.child.wait()).await;
            let _ = r.child.kill().await;
            // The event log ends by itself when QEMU's socket closes; let it write the last events.
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut r.events).await;
            r.events.abort();
            // So does the serial tail, within one poll, after a last read of the log.
            let stamps = r.serial_stamps;
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::task::spawn_blocking(move || stamps.join()),
            )
            .await;
            let _ = std::fs::remove_file(&self.paths.pid);
        }
        Ok(())
    }

    /// SIGKILL QEMU without waiting (used when the lab is dropped).
    pub(crate) fn kill_now(&self) {
        if let Ok(mut guard) = self.proc_.try_lock()
            && let Some(r) = guard.as_mut()
            // A QEMU that already exited may have had its pid reused.
            && r.child.try_wait().ok().flatten().is_none()
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(r.qemu_pid).unwrap_or(0)),
                nix::sys::signal::Signal::SIGKILL,
            );
            r.events.abort();
        }
    }

    /// The name of the lab the node belongs to.
    pub fn lab_name(&self) -> &str {
        &self.ctx.name
    }
}

/// The exact QEMU program line for logs and `argv.json`.
pub fn program_line(argv: &[String]) -> Vec<String> {
    let mut v = vec!["qemu-system-x86_64".to_string()];
    v.extend(argv.iter().cloned());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_timeouts_are_longer() {
        assert!(Timeouts::for_accel(Accel::Tcg).boot > Timeouts::for_accel(Accel::Kvm).boot);
    }

    #[test]
    fn program_line_starts_with_qemu() {
        assert_eq!(program_line(&["-m".into()])[0], "qemu-system-x86_64");
    }
}
