//! `provision-harness cleanup --prefix P`: removes every VM whose name starts with `P` on every
//! site of a provider config — what a test run against a shared cluster left behind when it was
//! interrupted (the suite names every VM `<run prefix><scenario>-<name>`, see
//! docs/src/real-pve.md, "Targeting a real PVE test cluster").
//!
//! The prefix is the only thing that selects a VM, so it must be specific: at least
//! [`MIN_PREFIX_LEN`] characters, ending in `-` (a run's prefix, e.g. `ph-3fa9c1d2-`). A VM that
//! is running is stopped first (a running VM cannot be destroyed); the delete asks PVE to purge
//! the VM from jobs and ACLs and to remove unreferenced disks, as `destroy` does.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::deployer::config::Provider;
use crate::deployer::guest::GuestKind;
use crate::deployer::pve::PveError;
use crate::deployer::pve::tasks::{TaskWait, exitstatus_ok};
use crate::deployer::site::{SiteCtx, connect};

/// A prefix shorter than this could match VMs nobody meant (`a`, `vm-`).
pub const MIN_PREFIX_LEN: usize = 6;

#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(
        "refusing prefix {0:?}: it must be at least {MIN_PREFIX_LEN} characters and end with '-' (a run's prefix, e.g. ph-3fa9c1d2-)"
    )]
    UnsafePrefix(String),
    #[error("site {site}: {message}")]
    Site { site: String, message: String },
}

/// One VM the cleanup found, and what became of it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Removed {
    pub site: String,
    pub node: String,
    pub vmid: u32,
    pub name: String,
    /// `removed`, `would remove` (dry run) or `failed: <why>`.
    pub outcome: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CleanupReport {
    pub prefix: String,
    pub vms: Vec<Removed>,
}

impl CleanupReport {
    pub fn failed(&self) -> usize {
        self.vms
            .iter()
            .filter(|v| v.outcome.starts_with("failed"))
            .count()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CleanupOptions {
    pub dry_run: bool,
    pub http_timeout: Duration,
    pub task_wait: TaskWait,
}

impl Default for CleanupOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            http_timeout: Duration::from_secs(30),
            task_wait: TaskWait {
                poll: Duration::from_millis(500),
                timeout: Duration::from_secs(10 * 60),
            },
        }
    }
}

pub fn check_prefix(prefix: &str) -> Result<(), CleanupError> {
    let ok = prefix.len() >= MIN_PREFIX_LEN
        && prefix.ends_with('-')
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(CleanupError::UnsafePrefix(prefix.to_string()))
    }
}

/// Removes every VM named `prefix…` on every site of `provider`. Sites that share an endpoint
/// (several names for one cluster) are visited once. A VM that cannot be removed is reported
/// as failed and the others are still tried.
pub async fn cleanup(
    provider: &Provider,
    prefix: &str,
    options: &CleanupOptions,
) -> Result<CleanupReport, CleanupError> {
    check_prefix(prefix)?;
    let mut report = CleanupReport {
        prefix: prefix.to_string(),
        vms: Vec::new(),
    };
    let mut seen = BTreeSet::new();
    for site in &provider.sites {
        if !seen.insert(site.endpoint.trim_end_matches('/').to_string()) {
            continue;
        }
        let ctx = connect(site, &provider.credentials, options.http_timeout)
            .await
            .map_err(|e| CleanupError::Site {
                site: site.name.clone(),
                message: e.to_string(),
            })?;
        let vms = ctx
            .client
            .vm_resources()
            .await
            .map_err(|e| CleanupError::Site {
                site: site.name.clone(),
                message: e.to_string(),
            })?;
        for r in vms {
            let (Some(name), Some(node), Some(vmid)) = (&r.name, &r.node, r.vmid) else {
                continue;
            };
            let kind = match r.kind.as_str() {
                "qemu" => GuestKind::Vm,
                "lxc" => GuestKind::Container,
                _ => continue,
            };
            if !name.starts_with(prefix) {
                continue;
            }
            let Ok(vmid) = u32::try_from(vmid) else {
                continue;
            };
            let outcome = if options.dry_run {
                "would remove".to_string()
            } else {
                let seen = Seen {
                    status: r.status.clone().unwrap_or_default(),
                    locked: r.lock.is_some(),
                };
                match remove(&ctx, kind, node, vmid, seen, options).await {
                    Ok(()) => "removed".to_string(),
                    Err(e) => format!("failed: {e}"),
                }
            };
            tracing::info!(site = %site.name, %node, vmid, %name, %outcome, "cleanup");
            report.vms.push(Removed {
                site: site.name.clone(),
                node: node.clone(),
                vmid,
                name: name.clone(),
                outcome,
            });
        }
    }
    Ok(report)
}

/// A VM as the resource list showed it.
struct Seen {
    status: String,
    locked: bool,
}

async fn remove(
    ctx: &SiteCtx,
    kind: GuestKind,
    node: &str,
    vmid: u32,
    seen: Seen,
    options: &CleanupOptions,
) -> Result<(), String> {
    let task = |r: Result<String, PveError>| async move {
        let upid = r.map_err(|e| e.to_string())?;
        let exit = ctx
            .client
            .await_task(&upid, options.task_wait)
            .await
            .map_err(|e| e.to_string())?;
        if exitstatus_ok(&exit) {
            Ok(())
        } else {
            Err(exit)
        }
    };
    // An interrupted run may leave a create or an import still running: PVE refuses to stop or
    // delete a VM while its lock is held, so wait for the task that holds it to end.
    let status = if seen.locked {
        match wait_unlocked(ctx, vmid, options).await? {
            Some(status) => status,
            // The task that held the lock removed the VM (a failed create cleans up after itself).
            None => return Ok(()),
        }
    } else {
        seen.status
    };
    if status != "stopped" {
        task(ctx.client.stop_guest(kind, node, vmid).await)
            .await
            .map_err(|e| format!("stopping {} {vmid}: {e}", kind.label()))?;
    }
    task(ctx.client.destroy_guest(kind, node, vmid).await)
        .await
        .map_err(|e| format!("deleting {} {vmid}: {e}", kind.label()))
}

/// Polls the cluster's resources until VM `vmid` holds no lock: its status then, or `None` if
/// it is gone.
async fn wait_unlocked(
    ctx: &SiteCtx,
    vmid: u32,
    options: &CleanupOptions,
) -> Result<Option<String>, String> {
    let deadline = std::time::Instant::now() + options.task_wait.timeout;
    loop {
        let vms = ctx
            .client
            .vm_resources()
            .await
            .map_err(|e| format!("listing VMs: {e}"))?;
        let Some(vm) = vms.iter().find(|r| r.vmid == Some(u64::from(vmid))) else {
            return Ok(None);
        };
        if vm.lock.is_none() {
            return Ok(Some(vm.status.clone().unwrap_or_default()));
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "VM {vmid} is still locked ({}) after {:?}",
                vm.lock.as_deref().unwrap_or("?"),
                options.task_wait.timeout
            ));
        }
        tokio::time::sleep(options.task_wait.poll).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_specific_prefixes_are_accepted() {
        assert!(check_prefix("ph-3fa9c1d2-").is_ok());
        assert!(check_prefix("ph-3fa9c1d2-s07-").is_ok());
        for bad in ["", "vm-", "ph-3fa9c1d2", "a-b-", "ph 3fa9c1-", "ph-*-----"] {
            assert!(check_prefix(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
