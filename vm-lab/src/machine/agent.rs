//! Guest-agent verbs: commands, files, interfaces, orderly shutdown. Each opens a fresh,
//! synchronised agent connection (one at a time per node), so a timed-out exchange never
//! poisons the next.

use std::time::{Duration, Instant};

use qapi::qga;

use super::{ExecOutput, Interface, Node};
use crate::error::{Error, Result};
use crate::qga as qga_conn;

impl Node {
    /// Run `sh -c command` in the guest through the agent and collect its output.
    pub async fn exec(&self, command: &str) -> Result<ExecOutput> {
        self.exec_timeout(command, self.ctx.timeouts.command).await
    }

    /// [`Node::exec`] with an explicit bound: `timeout` covers connecting to the agent, the
    /// command and collecting its output. Only one agent exchange runs at a time per node.
    pub async fn exec_timeout(&self, command: &str, timeout: Duration) -> Result<ExecOutput> {
        let _one_at_a_time = self.qga_lock.lock().await;
        let start = Instant::now();
        let conn = self.qga_connect(timeout).await?;
        let left = timeout.saturating_sub(start.elapsed());
        match qga_conn::exec(&conn, command, left)
            .await
            .map_err(|e| self.control_error("guest agent", e))?
        {
            Some((code, out, err)) => Ok(ExecOutput {
                code,
                stdout: String::from_utf8_lossy(&out).into_owned(),
                stderr: String::from_utf8_lossy(&err).into_owned(),
            }),
            None => Err(self.timeout_error(format!("`{command}` to finish"), timeout)),
        }
    }

    /// Run a command that must succeed; returns its stdout.
    pub async fn succeed(&self, command: &str) -> Result<String> {
        let out = self.exec(command).await?;
        if out.success() {
            Ok(out.stdout)
        } else {
            Err(Error::CommandFailed {
                node: self.spec.name.clone(),
                command: command.into(),
                code: out.code,
                stdout: out.stdout,
                stderr: out.stderr,
            })
        }
    }

    /// Run a command that must fail; returns its output.
    pub async fn fail(&self, command: &str) -> Result<ExecOutput> {
        let out = self.exec(command).await?;
        if out.success() {
            Err(Error::CommandFailed {
                node: self.spec.name.clone(),
                command: format!("{command} (expected to fail)"),
                code: out.code,
                stdout: out.stdout,
                stderr: out.stderr,
            })
        } else {
            Ok(out)
        }
    }

    /// Read a whole file from the guest.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let _one_at_a_time = self.qga_lock.lock().await;
        let t = qga_conn::ATTEMPT_TIMEOUT;
        let conn = self.qga_connect(self.ctx.timeouts.command).await?;
        let h = conn
            .execute(
                qga::guest_file_open {
                    path: path.into(),
                    mode: Some("r".into()),
                },
                t,
            )
            .await
            .map_err(|e| self.control_error("guest-file-open", format!("{path}: {e}")))?;
        let mut out = Vec::new();
        let res = loop {
            match conn
                .execute(
                    qga::guest_file_read {
                        handle: h,
                        count: Some(1 << 20),
                    },
                    t,
                )
                .await
            {
                Ok(r) => {
                    out.extend_from_slice(&r.buf_b64);
                    if r.eof {
                        break Ok(());
                    }
                }
                Err(e) => break Err(self.control_error("guest-file-read", format!("{path}: {e}"))),
            }
        };
        let _ = conn.execute(qga::guest_file_close { handle: h }, t).await;
        res.map(|()| out)
    }

    /// Write (replace) a file in the guest.
    pub async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let _one_at_a_time = self.qga_lock.lock().await;
        let t = qga_conn::ATTEMPT_TIMEOUT;
        let conn = self.qga_connect(self.ctx.timeouts.command).await?;
        let h = conn
            .execute(
                qga::guest_file_open {
                    path: path.into(),
                    mode: Some("w".into()),
                },
                t,
            )
            .await
            .map_err(|e| self.control_error("guest-file-open", format!("{path}: {e}")))?;
        let mut res = Ok(());
        for chunk in data.chunks(1 << 20) {
            if let Err(e) = conn
                .execute(
                    qga::guest_file_write {
                        handle: h,
                        buf_b64: chunk.to_vec(),
                        count: None,
                    },
                    t,
                )
                .await
            {
                res = Err(self.control_error("guest-file-write", format!("{path}: {e}")));
                break;
            }
        }
        let closed = conn.execute(qga::guest_file_close { handle: h }, t).await;
        res?;
        closed.map_err(|e| self.control_error("guest-file-close", format!("{path}: {e}")))?;
        Ok(())
    }

    /// The guest's interfaces and addresses, as its agent reports them.
    pub async fn interfaces(&self) -> Result<Vec<Interface>> {
        let _one_at_a_time = self.qga_lock.lock().await;
        let conn = self.qga_connect(self.ctx.timeouts.command).await?;
        let list = conn
            .execute(
                qga::guest_network_get_interfaces {},
                qga_conn::ATTEMPT_TIMEOUT,
            )
            .await
            .map_err(|e| self.control_error("guest-network-get-interfaces", e))?;
        Ok(list
            .into_iter()
            .map(|i| Interface {
                name: i.name,
                mac: i.hardware_address,
                addresses: i
                    .ip_addresses
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| format!("{}/{}", a.ip_address, a.prefix))
                    .collect(),
            })
            .collect())
    }

    /// Orderly power-off through the guest agent; QEMU is killed if it has not exited within
    /// `timeout`.
    pub async fn shutdown(&self, timeout: Duration) -> Result<()> {
        {
            let _one_at_a_time = self.qga_lock.lock().await;
            if let Ok(conn) = self.qga_connect(qga_conn::ATTEMPT_TIMEOUT).await {
                // The agent does not answer a shutdown it carries out; the reply is not awaited.
                let _ = conn
                    .execute(
                        qga::guest_shutdown {
                            mode: Some(qga::GuestShutdownMode::Powerdown),
                        },
                        Duration::from_secs(1),
                    )
                    .await;
            }
        }
        let start = Instant::now();
        while start.elapsed() < timeout {
            if !self.is_running().await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.kill().await
    }
}
