//! How the provisioner reaches a node: run a shell script, write a file. [`NodeShell`] is all the
//! provisioner and the validation use, so they run against a recording fake in unit tests and
//! against the lab over SSH ([`SshShell`]) for real.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

use super::error::ClusterError;

/// The result of a script run on a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn ok(&self) -> bool {
        self.code == 0
    }

    /// Turns a non-zero exit into [`ClusterError::Remote`] naming the node and the step.
    pub fn check(self, node: &str, step: &str) -> Result<Self, ClusterError> {
        if self.ok() {
            Ok(self)
        } else {
            let detail = last_lines(
                if self.stderr.trim().is_empty() {
                    &self.stdout
                } else {
                    &self.stderr
                },
                6,
            );
            Err(ClusterError::Remote {
                node: node.to_owned(),
                step: step.to_owned(),
                code: self.code,
                detail,
            })
        }
    }
}

pub(crate) fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.trim().lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// A way to run commands on one node and put files on it.
pub trait NodeShell: Send + Sync {
    /// The node's name (used in every error).
    fn node(&self) -> &str;

    /// Runs `script` with `/bin/sh` on the node. A script that runs and exits non-zero is an
    /// `Ok` with that code; only failing to reach the node is an error.
    fn run(
        &self,
        script: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<CommandOutput, ClusterError>> + Send;

    /// Writes `contents` to `path` on the node with `mode`, creating parent directories.
    fn write_file(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
}

/// How to reach a node's SSH server with the system `ssh` client: the whole invocation up to
/// (not including) the remote command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    pub node: String,
    /// `ssh … user@host`, possibly behind a prefix such as `nsenter …` that enters the lab's
    /// network namespace.
    pub base: Vec<String>,
    /// The private key the invocation uses (handed to a user's own provisioner).
    pub key: PathBuf,
}

impl SshTarget {
    /// The target a ready-made `ssh` command reaches (the remote command left off): how the lab
    /// path builds its targets, from vm-lab's own SSH argument builder
    /// ([`vm_lab::Node::ssh_command`]), so the provisioner keeps no second copy of it.
    pub fn from_command(
        node: &str,
        command: &std::process::Command,
        key: &std::path::Path,
    ) -> Self {
        let mut base = vec![command.get_program().to_string_lossy().into_owned()];
        base.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
        Self {
            node: node.to_owned(),
            base,
            key: key.to_owned(),
        }
    }

    /// A target reached with `prefix ssh -i key -p port user@host`, for the unit tests, which
    /// need a host and port of their own (outside any lab). Host keys are not checked.
    #[cfg(test)]
    pub fn new(
        node: &str,
        prefix: &[String],
        host: &str,
        port: u16,
        user: &str,
        key: &std::path::Path,
    ) -> Self {
        let mut base = prefix.to_vec();
        base.extend(
            [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                &key.to_string_lossy(),
                "-p",
                &port.to_string(),
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "ConnectTimeout=10",
                "-o",
                "ServerAliveInterval=5",
                "-o",
                "ServerAliveCountMax=3",
                &format!("{user}@{host}"),
            ]
            .map(str::to_owned),
        );
        Self {
            node: node.to_owned(),
            base,
            key: key.to_owned(),
        }
    }

    /// The full argv running `remote` on the node.
    pub fn argv(&self, remote: &str) -> Vec<String> {
        let mut v = self.base.clone();
        v.push(remote.to_owned());
        v
    }

    /// A shell command line a user's script can prefix to a remote command (the pluggable
    /// provisioner gets this).
    pub fn command_line(&self) -> String {
        self.base
            .iter()
            .map(|a| sh_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn destination(&self) -> &str {
        self.base.last().map_or("", String::as_str)
    }
}

/// [`NodeShell`] over the system `ssh`.
#[derive(Debug, Clone)]
pub struct SshShell {
    pub target: SshTarget,
}

impl SshShell {
    pub fn new(target: SshTarget) -> Self {
        Self { target }
    }

    async fn ssh(
        &self,
        remote: &str,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<CommandOutput, ClusterError> {
        let argv = self.target.argv(remote);
        let (prog, args) = argv.split_first().ok_or_else(|| ClusterError::Transport {
            node: self.target.node.clone(),
            cause: "empty ssh command".into(),
        })?;
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ClusterError::Transport {
                node: self.target.node.clone(),
                cause: format!("cannot start {prog}: {e}"),
            })?;
        let mut input = child.stdin.take();
        let body = stdin.to_vec();
        let feed = async move {
            if let Some(mut i) = input.take() {
                // The remote side may exit before reading everything; that shows in its exit code.
                let _ = i.write_all(&body).await;
                let _ = i.shutdown().await;
            }
        };
        let run = async {
            let (_, out) = tokio::join!(feed, child.wait_with_output());
            out
        };
        // The bound at the host's pace: on a slow or shared machine a TCG guest answers later.
        let timeout = vm_lab::pace::scaled(timeout);
        let out = tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| ClusterError::Transport {
                node: self.target.node.clone(),
                cause: format!("no answer over SSH within {} s", timeout.as_secs()),
            })?
            .map_err(|e| ClusterError::Transport {
                node: self.target.node.clone(),
                cause: format!("ssh: {e}"),
            })?;
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // ssh exits 255 for its own failures (refused, auth, unreachable): not the script's.
        if code == 255 {
            return Err(ClusterError::Transport {
                node: self.target.node.clone(),
                cause: ssh_failure(self.target.destination(), &stderr),
            });
        }
        Ok(CommandOutput {
            code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        })
    }
}

impl NodeShell for SshShell {
    fn node(&self) -> &str {
        &self.target.node
    }

    async fn run(&self, script: &str, timeout: Duration) -> Result<CommandOutput, ClusterError> {
        self.ssh("sh -s", script.as_bytes(), timeout).await
    }

    async fn write_file(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let remote = write_file_command(path, mode);
        self.ssh(&remote, contents, timeout)
            .await?
            .check(&self.target.node, &format!("write {path}"))
            .map(|_| ())
    }
}

/// Names the likely cause of an `ssh` failure (the seed lost hours to "connection refused").
fn ssh_failure(dest: &str, stderr: &str) -> String {
    let hint = if stderr.contains("Permission denied (publickey") {
        " — the node does not accept the lab's SSH key (was it booted without it?)"
    } else if stderr.contains("Connection refused") {
        " — nothing listens on the node's SSH port (not booted, or no SSH server)"
    } else if stderr.contains("timed out") {
        " — the node does not answer on its SSH port"
    } else {
        ""
    };
    format!("ssh to {dest} failed: {}{hint}", last_lines(stderr, 3))
}

/// The remote command that receives a file on stdin: written next to its place, moded, then
/// renamed, so a reader never sees half a file or a key with a wide mode.
pub fn write_file_command(path: &str, mode: u32) -> String {
    let dir = match path.rsplit_once('/') {
        Some(("", _)) => "/".to_owned(),
        Some((d, _)) => d.to_owned(),
        None => ".".to_owned(),
    };
    let tmp = format!("{path}.part");
    format!(
        "mkdir -p {d} && cat > {t} && chmod {mode:o} {t} && mv -f {t} {p}",
        d = sh_quote(&dir),
        t = sh_quote(&tmp),
        p = sh_quote(path),
    )
}

/// Quotes a word for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::Path;

    use super::*;

    fn target() -> SshTarget {
        SshTarget::new(
            "node01",
            &["nsenter".into(), "-t".into(), "42".into(), "-n".into()],
            "192.168.100.11",
            22,
            "root",
            Path::new("/tmp/lab/id_ed25519"),
        )
    }

    #[test]
    fn argv_enters_the_prefix_and_uses_only_the_lab_key() {
        let a = target().argv("sh -s");
        assert_eq!(&a[..4], ["nsenter", "-t", "42", "-n"]);
        assert_eq!(a[4], "ssh");
        assert!(a.windows(2).any(|w| w == ["-i", "/tmp/lab/id_ed25519"]));
        assert!(a.iter().any(|x| x == "BatchMode=yes"));
        assert!(a.iter().any(|x| x == "IdentitiesOnly=yes"));
        assert_eq!(a[a.len() - 2], "root@192.168.100.11");
        assert_eq!(a[a.len() - 1], "sh -s");
    }

    #[test]
    fn target_from_vm_labs_command_keeps_its_argv_and_appends_the_remote_command() {
        let key = Path::new("/tmp/lab/id_ed25519");
        let mut cmd = std::process::Command::new("nsenter");
        cmd.args(vm_lab::machine::ssh_argv(42, key, 2201, &[]));
        let t = SshTarget::from_command("node01", &cmd, key);
        assert_eq!(t.node, "node01");
        assert_eq!(t.key, key);
        let a = t.argv("sh -s");
        assert_eq!(a[0], "nsenter");
        assert_eq!(
            a[1..a.len() - 1],
            vm_lab::machine::ssh_argv(42, key, 2201, &[])[..]
        );
        assert_eq!(a[a.len() - 1], "sh -s");
        assert_eq!(t.destination(), "root@127.0.0.1");
    }

    #[test]
    fn command_line_is_shell_ready_without_a_remote_command() {
        let c = target().command_line();
        assert!(
            c.starts_with("nsenter -t 42 -n ssh -F /dev/null -i /tmp/lab/id_ed25519 -p 22"),
            "{c}"
        );
        assert!(c.ends_with("root@192.168.100.11"), "{c}");
    }

    #[test]
    fn write_file_command_is_atomic_and_moded() {
        assert_eq!(
            write_file_command("/cluster/secrets/node01.key", 0o400),
            "mkdir -p /cluster/secrets && cat > /cluster/secrets/node01.key.part && chmod 400 \
             /cluster/secrets/node01.key.part && mv -f /cluster/secrets/node01.key.part \
             /cluster/secrets/node01.key"
        );
    }

    #[test]
    fn failed_output_names_node_step_and_last_stderr() {
        let e = CommandOutput {
            code: 3,
            stdout: String::new(),
            stderr: "a\nb\nmke2fs: bad\n".into(),
        }
        .check("node02", "format disk")
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "node02: step format disk failed (exit 3): a | b | mke2fs: bad"
        );
    }

    #[tokio::test]
    async fn unreachable_node_is_a_transport_error() {
        // A key that does not exist and a port nobody listens on: ssh itself fails (255).
        let shell = SshShell::new(SshTarget::new(
            "node09",
            &[],
            "127.0.0.1",
            1,
            "root",
            Path::new("/nonexistent/key"),
        ));
        let e = shell
            .run("true", Duration::from_secs(20))
            .await
            .unwrap_err();
        assert!(matches!(e, ClusterError::Transport { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.starts_with("node09: transport: ssh to root@127.0.0.1 failed"),
            "{e}"
        );
        assert!(e.contains("nothing listens on the node's SSH port"), "{e}");
    }
}
