//! SSH from the host. The host cannot route into the lab's network namespace, so each node's
//! management NIC forwards a port *inside* the namespace to the guest's SSH server, and the
//! system `ssh` client runs inside the namespace through `nsenter`, with the lab's key.

use std::path::Path;
use std::process::Stdio;

use super::{ExecOutput, Node};
use crate::error::{Error, Result};
use crate::namespace;

impl Node {
    /// A system `ssh` command reaching this node's SSH server with the lab key, run inside the
    /// lab's network namespace (the host cannot route into it). `args` become the remote command.
    pub fn ssh_command(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new("nsenter");
        c.args(ssh_argv(
            self.ctx.ns_init_pid,
            &self.ctx.ssh_key,
            self.ssh_port,
            args,
        ));
        c
    }

    /// Run a command over SSH (system `ssh`, the lab key) and collect its output.
    pub async fn ssh(&self, command: &str) -> Result<ExecOutput> {
        let std_cmd = self.ssh_command(&[command]);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        let out = tokio::time::timeout(self.ctx.timeouts.command, cmd.output())
            .await
            .map_err(|_| self.timeout_error(format!("ssh `{command}`"), self.ctx.timeouts.command))?
            .map_err(|e| Error::tool("ssh", e.to_string()))?;
        Ok(ExecOutput {
            code: i64::from(out.status.code().unwrap_or(-1)),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// `nsenter` arguments running the system `ssh` client inside a lab's network namespace,
/// against a node's forwarded SSH port, with the lab's key and no host-key bookkeeping.
pub fn ssh_argv(ns_init_pid: u32, key: &Path, port: u16, remote: &[&str]) -> Vec<String> {
    let mut v = namespace::nsenter_argv(ns_init_pid, false, "ssh");
    v.extend(
        [
            "-F",
            "/dev/null",
            "-i",
            &key.display().to_string(),
            "-p",
            &port.to_string(),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=20",
            "root@127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v.extend(remote.iter().map(|s| s.to_string()));
    v
}

/// The port in the lab namespace forwarded to node `index`'s SSH server.
pub fn ssh_port_for(index: usize) -> u16 {
    2201 + u16::try_from(index).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_runs_the_system_client_in_the_namespace() {
        let v = ssh_argv(7, Path::new("/k/id"), 2202, &["hostname"]);
        let j = v.join(" ");
        assert!(j.starts_with("--target 7 --user --net --preserve-credentials -- ssh"));
        assert!(j.contains("-i /k/id -p 2202"));
        assert!(j.ends_with("root@127.0.0.1 hostname"));
    }

    #[test]
    fn ssh_ports_are_per_node() {
        assert_eq!(ssh_port_for(0), 2201);
        assert_eq!(ssh_port_for(2), 2203);
    }
}
