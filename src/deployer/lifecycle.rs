//! `status` (read-only: what each manifest's VM is right now) and `destroy` (delete, with purge,
//! the VMs this rollout created — never adopted ones).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::deployer::deploy::{DeployError, Deployer, Outcome, RolloutResult, to_outcome};
use crate::deployer::errors::StepError;
use crate::deployer::guest::GuestKind;
use crate::deployer::manifest::ManifestSet;
use crate::deployer::rollout::{Rollout, RolloutVm};
use crate::deployer::site::{GuestsByName, SiteCtx};
use crate::deployer::state::{Condition, Stage, VmRecord};

impl Deployer {
    /// Every site a manifest or the state file names, connected.
    async fn sites_for(
        &self,
        rollout: &Rollout,
    ) -> BTreeMap<String, Result<Arc<SiteCtx>, StepError>> {
        let recorded: Vec<String> = self
            .state()
            .snapshot()
            .vms
            .values()
            .map(|r| r.site.clone())
            .collect();
        let names = rollout.sites().into_iter().chain(recorded);
        self.connect_sites(names).await
    }

    /// What exists for each manifest, from the live API (the state file only supplies VMIDs).
    /// Each site's guests are listed once per run (`/cluster/resources`, when its first VM
    /// needs it), not once per VM.
    pub async fn status(&self, set: &ManifestSet) -> Result<RolloutResult, DeployError> {
        let started = Instant::now();
        let rollout = Rollout::new(set);
        let sites = self.sites_for(&rollout).await;
        let mut listings = Listings::new();
        let mut out = Vec::new();
        for vm in &rollout.vms {
            let mut rec = self.state().get(&vm.key).unwrap_or_else(|| VmRecord {
                kind: vm.kind,
                name: vm.name.clone(),
                site: vm.site.clone(),
                node: vm.node.clone(),
                manifest: vm.manifest.clone(),
                ..VmRecord::default()
            });
            let outcome = status_of(vm, sites.get(&vm.site), &mut listings, &mut rec).await;
            out.push(to_outcome(&rec, "", outcome));
        }
        Ok(RolloutResult::finish(out, rollout.unreadable, started))
    }

    /// Deletes, with purge, every VM the state says this rollout created.
    pub async fn destroy(&self, set: &ManifestSet) -> Result<RolloutResult, DeployError> {
        let started = Instant::now();
        let sites = self.sites_for(&Rollout::new(set)).await;
        let records: Vec<(String, VmRecord)> = self.state().snapshot().vms.into_iter().collect();
        let mut out = Vec::new();
        for (k, mut rec) in records {
            let outcome = match (rec.vmid, rec.created_here, sites.get(&rec.site)) {
                (None, _, _) => Outcome::Absent,
                (Some(_), false, _) => {
                    rec.set_condition(Condition::new(
                        "Destroyed",
                        false,
                        "Adopted",
                        "not created by this rollout; left alone",
                    ));
                    Outcome::Skipped
                }
                (Some(vmid), true, Some(Ok(site))) => {
                    match destroy_one(site, rec.kind, &rec.node, vmid, &rec.name, self).await {
                        Ok(()) => {
                            rec.vmid = None;
                            rec.stage = Stage::Destroyed;
                            rec.state = None;
                            rec.ip = None;
                            rec.set_condition(Condition::new(
                                "Destroyed",
                                true,
                                "Deleted",
                                format!("{} {vmid} deleted with purge", rec.kind.label()),
                            ));
                            Outcome::Destroyed
                        }
                        Err(e) => {
                            rec.set_condition(Condition::new(
                                "Destroyed",
                                false,
                                e.reason(),
                                e.to_string(),
                            ));
                            Outcome::Failed
                        }
                    }
                }
                (Some(_), true, _) => {
                    rec.set_condition(Condition::new(
                        "Destroyed",
                        false,
                        "SiteUnavailable",
                        "site not reachable",
                    ));
                    Outcome::Failed
                }
            };
            let r2 = rec.clone();
            self.state().update(&k, || r2.clone(), |r| *r = r2.clone());
            out.push(to_outcome(&rec, "", outcome));
        }
        self.state().checkpoint().await?;
        Ok(RolloutResult::finish(out, set.unreadable.clone(), started))
    }
}

/// Each site's guest listing as `status` read it, by site name (the error text if the read
/// failed: every VM of that site reports it).
type Listings = HashMap<String, Result<Arc<GuestsByName>, String>>;

/// One manifest's status: invalid spec, unreachable or unknown site, or what the API shows.
async fn status_of(
    vm: &RolloutVm,
    site: Option<&Result<Arc<SiteCtx>, StepError>>,
    listings: &mut Listings,
    rec: &mut VmRecord,
) -> Outcome {
    if let Err(e) = &vm.spec {
        rec.set_condition(Condition::new("Valid", false, "InvalidSpec", e.clone()));
        return Outcome::Failed;
    }
    let e = match site {
        Some(Ok(site)) => {
            let listing = match listings.get(&site.name) {
                Some(l) => l.clone(),
                None => {
                    let read = site
                        .client
                        .vm_resources()
                        .await
                        .map(|rows| Arc::new(GuestsByName::new(rows)))
                        .map_err(|e| e.to_string());
                    listings.insert(site.name.clone(), read.clone());
                    read
                }
            };
            return live(site, listing, rec).await;
        }
        Some(Err(e)) => e.clone(),
        None => StepError::SiteUnknown(vm.site.clone()),
    };
    rec.set_condition(Condition::new(
        "Reachable",
        false,
        e.reason(),
        e.to_string(),
    ));
    Outcome::Failed
}

/// What the site's listing (read once per run) and the VM's agent show of `rec`'s VM.
async fn live(
    site: &SiteCtx,
    listing: Result<Arc<GuestsByName>, String>,
    rec: &mut VmRecord,
) -> Outcome {
    let c = &site.client;
    let resources = match listing {
        Ok(r) => r,
        Err(e) => {
            rec.set_condition(Condition::new("Reachable", false, "ApiError", e));
            return Outcome::Failed;
        }
    };
    let found = resources
        .named(&rec.name)
        .iter()
        .filter(|r| r.kind == rec.kind.family() && r.name.as_deref() == Some(rec.name.as_str()))
        .min_by_key(|r| (r.vmid.map(|v| Some(v as u32) != rec.vmid), r.vmid));
    let Some(found) = found else {
        rec.vmid = None;
        rec.state = None;
        rec.ip = None;
        return Outcome::Absent;
    };
    let vmid = found.vmid.and_then(|v| u32::try_from(v).ok());
    rec.vmid = vmid;
    rec.state = found.status.clone();
    if let (Some(vmid), Some(node)) = (vmid, found.node.as_deref()) {
        rec.node = node.to_string();
        if found.status.as_deref() == Some("running") {
            rec.ip = match rec.kind {
                GuestKind::Vm => c
                    .agent_interfaces(node, vmid)
                    .await
                    .ok()
                    .and_then(|ifs| ifs.primary_ipv4()),
                GuestKind::Container => c
                    .ct_interfaces(node, vmid)
                    .await
                    .ok()
                    .and_then(|ifs| crate::deployer::pve::guests::ct_primary_ipv4(&ifs)),
            };
        }
    }
    let running = rec.state.as_deref() == Some("running");
    rec.set_condition(Condition::new(
        "Ready",
        running,
        if running { "Running" } else { "NotRunning" },
        format!(
            "{} {} is {}",
            rec.kind.label(),
            vmid.unwrap_or(0),
            rec.state.clone().unwrap_or_default()
        ),
    ));
    if running {
        Outcome::Ready
    } else {
        Outcome::Failed
    }
}

async fn destroy_one(
    site: &SiteCtx,
    kind: GuestKind,
    node: &str,
    vmid: u32,
    name: &str,
    d: &Deployer,
) -> Result<(), StepError> {
    let c = &site.client;
    let wait = d.task_wait();
    let err = |e: &crate::deployer::pve::PveError| {
        crate::deployer::errors::classify(&site.name, node, None, e)
    };
    let cur = match c.guest_current(kind, node, vmid).await {
        Ok(cur) => cur,
        Err(e) if e.text().contains("does not exist") => return Ok(()),
        Err(e) => return Err(err(&e)),
    };
    if cur.name.as_deref().is_some_and(|n| n != name) {
        return Err(StepError::Api(format!(
            "{} {vmid} is now named {:?}, not {name}; not deleting it",
            kind.label(),
            cur.name
        )));
    }
    if cur.status == "running" {
        let upid = c.stop_guest(kind, node, vmid).await.map_err(|e| err(&e))?;
        c.await_task(&upid, wait).await.map_err(|e| err(&e))?;
    }
    let upid = c
        .destroy_guest(kind, node, vmid)
        .await
        .map_err(|e| err(&e))?;
    c.await_task(&upid, wait).await.map_err(|e| err(&e))?;
    Ok(())
}
