//! Finding what a manifest already has before creating anything: the recorded VMID, a VM of
//! that name to adopt, or a create an earlier (killed) run started. This is what makes re-runs
//! and resumed runs converge instead of creating duplicates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Pipeline, VmJob};
use crate::deployer::errors::StepError;
use crate::deployer::pve::api::ClusterResource;
use crate::deployer::site::GuestsByName;
use crate::deployer::state::{Condition, Stage};

impl Pipeline<'_> {
    /// The VM this manifest already has: the recorded VMID if it still carries the name, else
    /// the lowest VMID with that name (adoption). Never a VM of another name.
    pub(super) async fn find_existing(&self, job: &VmJob<'_>) -> Result<Option<u32>, StepError> {
        let spec = job.spec;
        let seen = self.named_after_our_create(job).await?;
        let named: Vec<&ClusterResource> = seen
            .iter()
            .filter(|r| r.kind == spec.kind.family() && !r.template)
            .collect();
        let rec = self.state.get(&job.key);
        let recorded = rec.as_ref().and_then(|r| r.vmid);
        let pick = named
            .iter()
            .find(|r| r.vmid.is_some() && r.vmid.map(|v| v as u32) == recorded)
            .or_else(|| named.iter().min_by_key(|r| r.vmid))
            .copied();
        let Some(found) = pick else {
            return Ok(None);
        };
        let Some(vmid) = found.vmid.and_then(|v| u32::try_from(v).ok()) else {
            return Ok(None);
        };
        let on = found.node.clone().unwrap_or_default();
        if on != spec.node {
            return Err(StepError::Api(format!(
                "a VM named '{}' already exists as {vmid} on node {on}, but the manifest places it on {}; refusing to create a duplicate",
                spec.name, spec.node
            )));
        }
        let ours = recorded == Some(vmid) && rec.as_ref().is_some_and(|r| r.created_here);
        let duplicates = named.len();
        self.record(job, |r| {
            r.vmid = Some(vmid);
            r.created_here = ours || (recorded == Some(vmid) && r.stage >= Stage::Creating);
            r.stage = r.stage.max(Stage::Creating);
            let how = if r.created_here { "Resumed" } else { "Adopted" };
            r.set_condition(Condition::new(
                "Synced",
                true,
                how,
                format!("VM {vmid} named {} found on {on}", spec.name),
            ));
            if duplicates > 1 {
                r.set_condition(Condition::new(
                    "UniqueName",
                    false,
                    "DuplicateName",
                    format!("{duplicates} VMs are named {}; using {vmid}", spec.name),
                ));
            }
        });
        Ok(Some(vmid))
    }

    /// The guests named like this VM, once a create this rollout started (and was killed
    /// during) has finished. PVE lists a VM under creation with `lock: create` and without its
    /// name, so matching by name alone would miss it and create a duplicate: the VMID recorded
    /// before the create call wins.
    ///
    /// The VM's own node is read afresh (`/nodes/{node}/qemu`, as often as the wait needs);
    /// the other nodes come from the site listing this run read first (`/cluster/resources`,
    /// once per run): a VM of the same name there means the manifest moved, and refusing it
    /// does not take a site listing per VM. With `listing_max_age` and nothing recorded, the
    /// recent site listing stands for every node.
    pub(super) async fn named_after_our_create(
        &self,
        job: &VmJob<'_>,
    ) -> Result<Vec<ClusterResource>, StepError> {
        let name = job.spec.name.as_str();
        let rec = self.state.get(&job.key);
        let ours = rec
            .as_ref()
            .filter(|r| r.created_here)
            .and_then(|r| r.vmid)
            .map(u64::from);
        if self.may_reuse(job) {
            return Ok(self.recent_listing(job).await?.named(name).to_vec());
        }
        let node = job.spec.node.as_str();
        let kind = job.spec.kind;
        let elsewhere = self.run_listing(job).await?;
        let started = Instant::now();
        loop {
            let here = self
                .client()
                .node_guests(kind, node)
                .await
                .map_err(|e| self.err(job, &e))?;
            let creating = here.iter().find(|r| {
                ours.is_some()
                    && r.vmid == ours
                    && r.lock.as_deref() == Some("create")
                    && r.name.as_deref() != Some(name)
            });
            let Some(vm) = creating else {
                return Ok(named_here_and_elsewhere(
                    here,
                    elsewhere.named(name),
                    node,
                    name,
                ));
            };
            if started.elapsed() >= self.options.task_wait.timeout {
                return Err(StepError::Locked(format!(
                    "VM {} (recorded by an earlier run for {}) is still being created after {:?}",
                    vm.vmid.unwrap_or_default(),
                    job.spec.name,
                    self.options.task_wait.timeout
                )));
            }
            tracing::info!(vm = %job.spec.name, vmid = ?vm.vmid, "waiting out the create an earlier run started");
            tokio::time::sleep(self.options.task_wait.poll).await;
        }
    }

    /// The site's listing if this run asked for it at most `listing_max_age` ago, else a new
    /// one, read once for every VM that waits on it.
    async fn recent_listing(&self, job: &VmJob<'_>) -> Result<Arc<GuestsByName>, StepError> {
        let read = async { self.client().vm_resources().await.map(GuestsByName::new) };
        self.site
            .recent
            .resources
            .get_or_read("", self.options.listing_max_age, read)
            .await
            .map_err(|e| self.err(job, &e))
    }

    /// The site's listing as this run first read it (read by the first VM that asks; the
    /// others wait for it, and a failed read is tried again by the next).
    async fn run_listing(&self, job: &VmJob<'_>) -> Result<Arc<GuestsByName>, StepError> {
        let read = async { self.client().vm_resources().await.map(GuestsByName::new) };
        self.site
            .recent
            .run_resources
            .get_or_read("", Duration::MAX, read)
            .await
            .map_err(|e| self.err(job, &e))
    }

    /// Waits out a create still running from an earlier run; removes a half-made VM (no boot
    /// disk) that this rollout created. `Ok(false)` means the VM is gone and must be created.
    pub(super) async fn settle_existing(
        &self,
        job: &VmJob<'_>,
        vmid: u32,
    ) -> Result<bool, StepError> {
        let node = job.spec.node.as_str();
        let kind = job.spec.kind;
        let started = Instant::now();
        loop {
            let cur = self
                .client()
                .guest_current(kind, node, vmid)
                .await
                .map_err(|e| self.err(job, &e))?;
            match cur.lock.as_deref() {
                None | Some("") => break,
                Some("create") if started.elapsed() < self.options.task_wait.timeout => {
                    tokio::time::sleep(self.options.task_wait.poll).await;
                }
                Some(other) => {
                    return Err(StepError::Locked(format!(
                        "{} {vmid} holds lock '{other}'",
                        kind.label()
                    )));
                }
            }
        }
        let cfg = match self.client().guest_config(kind, node, vmid).await {
            Ok(c) => c,
            // The earlier create failed and PVE removed the VM while we waited.
            Err(e) if e.text().contains("does not exist") => return Ok(false),
            Err(e) => return Err(self.err(job, &e)),
        };
        let boot_key = match kind {
            crate::deployer::guest::GuestKind::Vm => "scsi0",
            crate::deployer::guest::GuestKind::Container => "rootfs",
        };
        let has_disk = cfg
            .get(boot_key)
            .and_then(|v| v.as_str())
            .is_some_and(|v| !v.starts_with("none"));
        if has_disk {
            return Ok(true);
        }
        let ours = self.state.get(&job.key).is_some_and(|r| r.created_here);
        if !ours {
            return Err(StepError::Api(format!(
                "VM {vmid} named {} exists without a boot disk and was not created by this rollout; not touching it",
                job.spec.name
            )));
        }
        tracing::warn!(vm = %job.spec.name, vmid, "removing half-created VM");
        let upid = self
            .client()
            .destroy_guest(kind, node, vmid)
            .await
            .map_err(|e| self.err(job, &e))?;
        self.wait(job, &upid).await?;
        self.record(job, |r| {
            r.vmid = None;
            r.stage = Stage::Pending;
        });
        self.persist().await?;
        Ok(false)
    }
}

/// The guests named `name`: those of `node` as read afresh (`here`), and those of an
/// earlier site listing (`site_named`) on other nodes; a VMID in both is where the fresh read
/// puts it.
fn named_here_and_elsewhere(
    here: Vec<ClusterResource>,
    site_named: &[ClusterResource],
    node: &str,
    name: &str,
) -> Vec<ClusterResource> {
    let mut named: Vec<ClusterResource> = site_named
        .iter()
        .filter(|r| r.node.as_deref() != Some(node))
        .filter(|r| !here.iter().any(|h| h.vmid == r.vmid))
        .cloned()
        .collect();
    named.extend(here.into_iter().filter(|r| r.name.as_deref() == Some(name)));
    named
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn row(vmid: u64, node: &str, name: &str) -> ClusterResource {
        ClusterResource {
            id: format!("qemu/{vmid}"),
            kind: "qemu".into(),
            vmid: Some(vmid),
            node: Some(node.into()),
            name: Some(name.into()),
            status: None,
            lock: None,
            template: false,
            maxcpu: None,
            maxmem: None,
            maxdisk: None,
        }
    }

    #[test]
    fn the_fresh_node_read_wins_over_the_run_listing() {
        // The run's listing: web on n1 (now gone from n1), web on n2, and 102 named web on n3
        // that has since moved to n1 and been renamed.
        let site = [
            row(100, "n1", "web"),
            row(101, "n2", "web"),
            row(102, "n3", "web"),
        ];
        let here = vec![row(102, "n1", "db"), row(103, "n1", "web")];
        let named = named_here_and_elsewhere(here, &site, "n1", "web");
        let ids: Vec<(u64, &str)> = named
            .iter()
            .map(|r| (r.vmid.unwrap(), r.node.as_deref().unwrap()))
            .collect();
        assert_eq!(ids, [(101, "n2"), (103, "n1")]);
    }
}
