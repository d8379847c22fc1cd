//! SSH from the host to a guest's address on a segment: the system client run inside the
//! namespace (which holds an address on the bridge), bounded by a timeout.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::{GuestHost, net};
use crate::error::{Error, Result};
use crate::machine::ExecOutput;

impl GuestHost {
    /// A system `ssh` command reaching `user@addr` (a guest's address on a segment) from inside
    /// the namespace, with `key`. `remote` becomes the remote command.
    pub fn ssh_command(
        &self,
        key: &Path,
        user: &str,
        addr: Ipv4Addr,
        remote: &[&str],
    ) -> std::process::Command {
        let mut c = std::process::Command::new("nsenter");
        c.args(net::ssh_argv(self.init_pid, key, user, addr, remote));
        c
    }

    /// Run `command` over SSH and collect its output, killing the client after `timeout`.
    pub fn ssh(
        &self,
        key: &Path,
        user: &str,
        addr: Ipv4Addr,
        command: &str,
        timeout: Duration,
    ) -> Result<ExecOutput> {
        let mut cmd = self.ssh_command(key, user, addr, &[command]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().map_err(|e| Error::tool("ssh", e.to_string()))?;
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(timeout) {
            Ok(r) => r.map_err(|e| Error::tool("ssh", e.to_string()))?,
            Err(_) => {
                if let Ok(p) = i32::try_from(pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                return Err(Error::Timeout {
                    node: addr.to_string(),
                    what: format!("ssh `{command}`"),
                    after: timeout,
                    serial: String::new(),
                });
            }
        };
        Ok(ExecOutput {
            code: i64::from(out.status.code().unwrap_or(-1)),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}
