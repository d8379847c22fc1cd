//! The pluggable provisioner: instead of [`provision`](super::provision), run the user's own
//! command (their nixos-anywhere-style script) against the lab.
//!
//! Contract (also in docs/src/cluster.md, "Plugging in your own provisioner"):
//! - The command runs with `sh -c "$LAB_PROVISIONER_CMD"` on the host, in the harness's working
//!   directory (the workspace root under `cargo test`), after S1–S4 (nodes netbooted and reachable over SSH; TLS and node configs staged
//!   and checked).
//! - It gets, in its environment:
//!   `LAB_CLUSTER_NAME`; `LAB_NODES` (space-separated node names); per node `NAME` upper-cased,
//!   `LAB_NODE_<NAME>_ADDRESS` and `LAB_NODE_<NAME>_SSH` (a shell-ready `ssh …` prefix: append a
//!   remote command, or `sh -s` and a script on stdin); `LAB_SSH_KEY` (the lab's private key);
//!   `LAB_CONFIG_DIR` (the staged `<node>/{cluster-config.json,hosts,secrets/}` plus
//!   `nodes.json` with all of the above); `LAB_GUEST_MOUNT` (where the configs expect the disk),
//!   `LAB_DISK_LABEL` (the label the image's boot hook mounts) and `LAB_BOOT_SCRIPT` (the
//!   script on that disk the hook runs at boot).
//! - It must exit 0 once every node's disk holds what the next boot needs. The harness then
//!   restarts every node from the same netboot image with its disk attached and runs S6: the
//!   cluster must come up from the disks. A non-zero exit fails the bring-up with the command's
//!   last output lines.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::process::Command;

use super::error::ClusterError;
use super::provision::DISK_LABEL;
use super::topology::GuestLayout;
use super::transport::{SshTarget, last_lines};

/// The environment variable holding the user's command.
pub const ENV_CMD: &str = "LAB_PROVISIONER_CMD";

/// What the user's command is told about one node.
#[derive(Debug, Clone, Serialize)]
pub struct ExternalNode {
    pub name: String,
    pub address: String,
    pub ssh: String,
}

/// Everything handed to the user's command.
#[derive(Debug, Clone, Serialize)]
pub struct ExternalContext {
    pub cluster_name: String,
    pub nodes: Vec<ExternalNode>,
    pub ssh_key: PathBuf,
    pub config_dir: PathBuf,
    pub guest_mount: String,
    pub disk_label: String,
    pub boot_script: String,
}

impl ExternalContext {
    pub fn new(
        cluster_name: &str,
        targets: &[(SshTarget, String)],
        config_dir: &Path,
        layout: &GuestLayout,
    ) -> Self {
        Self {
            cluster_name: cluster_name.to_owned(),
            ssh_key: targets
                .first()
                .map(|(t, _)| t.key.clone())
                .unwrap_or_default(),
            nodes: targets
                .iter()
                .map(|(t, addr)| ExternalNode {
                    name: t.node.clone(),
                    address: addr.clone(),
                    ssh: t.command_line(),
                })
                .collect(),
            config_dir: config_dir.to_owned(),
            guest_mount: layout.mount.clone(),
            disk_label: DISK_LABEL.to_owned(),
            boot_script: layout.boot_script(),
        }
    }

    /// The environment of the command.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("LAB_CLUSTER_NAME".to_owned(), self.cluster_name.clone()),
            (
                "LAB_NODES".to_owned(),
                self.nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            ("LAB_SSH_KEY".to_owned(), self.ssh_key.display().to_string()),
            (
                "LAB_CONFIG_DIR".to_owned(),
                self.config_dir.display().to_string(),
            ),
            ("LAB_GUEST_MOUNT".to_owned(), self.guest_mount.clone()),
            ("LAB_DISK_LABEL".to_owned(), self.disk_label.clone()),
            ("LAB_BOOT_SCRIPT".to_owned(), self.boot_script.clone()),
        ];
        for n in &self.nodes {
            let key = env_name(&n.name);
            v.push((format!("LAB_NODE_{key}_ADDRESS"), n.address.clone()));
            v.push((format!("LAB_NODE_{key}_SSH"), n.ssh.clone()));
        }
        v
    }
}

/// `node-01` → `NODE_01`.
pub fn env_name(node: &str) -> String {
    node.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs the user's command under the contract above. Its output goes to
/// `<config_dir>/external-provisioner.log`.
pub async fn run(cmd: &str, ctx: &ExternalContext, timeout: Duration) -> Result<(), ClusterError> {
    let nodes_json = ctx.config_dir.join("nodes.json");
    let json = serde_json::to_string_pretty(ctx)
        .map_err(|e| ClusterError::External(format!("cannot render nodes.json: {e}")))?;
    std::fs::write(&nodes_json, json).map_err(|e| ClusterError::io(&nodes_json, e))?;
    let child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .envs(ctx.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ClusterError::External(format!("cannot start sh -c {cmd:?}: {e}")))?;
    let timeout = vm_lab::pace::scaled(timeout);
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| {
            ClusterError::External(format!(
                "{cmd:?} did not finish within {} s",
                timeout.as_secs()
            ))
        })?
        .map_err(|e| ClusterError::External(format!("{cmd:?}: {e}")))?;
    let log = ctx.config_dir.join("external-provisioner.log");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&log, &text).map_err(|e| ClusterError::io(&log, e))?;
    if !out.status.success() {
        return Err(ClusterError::External(format!(
            "{cmd:?} exited with {}: {}",
            out.status
                .code()
                .map_or("a signal".into(), |c| c.to_string()),
            last_lines(&text, 5)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ctx(dir: &Path) -> ExternalContext {
        let t = |n: &str, a: &str| {
            (
                SshTarget::new(n, &[], a, 22, "root", Path::new("/lab/key")),
                a.to_owned(),
            )
        };
        ExternalContext::new(
            "c1",
            &[
                t("node01", "192.168.100.11"),
                t("node-02", "192.168.100.12"),
            ],
            dir,
            &GuestLayout::default(),
        )
    }

    #[tokio::test]
    async fn command_sees_the_contract_environment() {
        let d = tempfile::tempdir().unwrap();
        let c = ctx(d.path());
        run(
            "test \"$LAB_NODES\" = 'node01 node-02' && test \"$LAB_NODE_NODE_02_ADDRESS\" = 192.168.100.12 \
             && test \"$LAB_SSH_KEY\" = /lab/key && test -f \"$LAB_CONFIG_DIR/nodes.json\" \
             && test \"$LAB_DISK_LABEL\" = cluster && test \"$LAB_BOOT_SCRIPT\" = /cluster/boot.sh \
             && case \"$LAB_NODE_NODE01_SSH\" in ssh\\ -F\\ /dev/null\\ -i\\ /lab/key*root@192.168.100.11) ;; *) exit 9;; esac",
            &c,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn failing_command_is_reported_with_its_output() {
        let d = tempfile::tempdir().unwrap();
        let e = run(
            "echo partitioning; echo 'disko: no such disk' >&2; exit 3",
            &ctx(d.path()),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("exited with 3"), "{e}");
        assert!(e.contains("disko: no such disk"), "{e}");
        let log = std::fs::read_to_string(d.path().join("external-provisioner.log")).unwrap();
        assert!(log.contains("partitioning"));
    }
}
