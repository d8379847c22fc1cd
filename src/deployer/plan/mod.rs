//! `plan`: what a rollout would do and where it would fail, before anything is created. Figures
//! are computed from the manifests and the live API (GET requests only), never copied.
//!
//! Capacity semantics: vCPUs compare with the node's logical CPU threads (what PVE checks at
//! start, per VM); totals compare with an overcommit limit. Memory is summed over VMs' `maxmem`.
//! Disk: thick storages (`lvm`) need the space free at create; thin ones (`lvmthin`, `rbd`, `zfs`,
//! `dir`) allocate on write, so over-provisioning is a warning with its ratio.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use crate::deployer::config::Provider;
use crate::deployer::errors::StepError;
use crate::deployer::manifest::{ManifestSet, Unreadable};
use crate::deployer::rollout::Rollout;
use crate::deployer::site::connect_named;

mod node;
pub mod schema;
use crate::deployer::validate::{ImageSpec, ValidSpec};
use node::{NodeCheck, SiteFacts, gather};

const GIB: u64 = 1024 * 1024 * 1024;
const MIB: u64 = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Total vCPUs per node may reach this multiple of its CPU threads.
    pub cpu_overcommit: f64,
    /// Memory above this fraction of a node's RAM is a warning (above 1.0 an error).
    pub memory_warn: f64,
    pub http_timeout: Duration,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            cpu_overcommit: 1.0,
            memory_warn: 0.9,
            http_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Finding {
    pub severity: Severity,
    /// What it is about: a manifest path, `node ml110-01`, `storage r630-01/ceph-fs`, …
    pub subject: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Ready,
    ReadyWithWarnings,
    WouldFail,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::ReadyWithWarnings => "ready with warnings",
            Verdict::WouldFail => "would fail",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PlannedVm {
    pub name: String,
    pub manifest: String,
    pub site: String,
    pub node: String,
    pub wave: String,
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gib: u64,
    pub storage: String,
    /// `create`, `adopt <vmid>`, or `invalid`.
    pub action: String,
    pub image: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeCapacity {
    pub site: String,
    pub node: String,
    pub online: bool,
    pub cpu_threads: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub existing_vms: usize,
    pub existing_cores: u64,
    pub existing_memory_mib: u64,
    pub new_vms: usize,
    pub requested_cores: u64,
    pub requested_memory_mib: u64,
    /// (existing + requested) / threads.
    pub cpu_ratio: Option<f64>,
    pub memory_ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StorageUse {
    pub site: String,
    pub node: String,
    pub storage: String,
    pub kind: Option<String>,
    pub holds_vm_disks: bool,
    pub thin: bool,
    pub total_gib: Option<u64>,
    pub avail_gib: Option<u64>,
    pub new_vms: usize,
    pub requested_gib: u64,
    /// requested / available.
    pub ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub verdict: Verdict,
    pub manifests: usize,
    pub vms: Vec<PlannedVm>,
    pub unreadable: Vec<Unreadable>,
    pub nodes: Vec<NodeCapacity>,
    pub storages: Vec<StorageUse>,
    pub findings: Vec<Finding>,
}

impl PlanReport {
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }
}

fn gib(bytes: u64) -> u64 {
    bytes / GIB
}

/// Plans `set` against the provider's sites. Only GET requests are sent.
pub async fn plan(provider: &Provider, set: &ManifestSet, options: &PlanOptions) -> PlanReport {
    plan_rollout(provider, &Rollout::new(set), options).await
}

/// A valid manifest's spec, by its index in the rollout.
type Specs<'a> = Vec<(usize, &'a ValidSpec)>;

/// Plans a rollout: the manifests' own problems, then every site and node the valid ones use.
pub async fn plan_rollout(
    provider: &Provider,
    rollout: &Rollout,
    options: &PlanOptions,
) -> PlanReport {
    let mut findings = Vec::new();
    let (mut vms, specs) = planned_vms(rollout, &mut findings);
    findings.extend(rollout.unreadable.iter().map(unreadable_finding));
    let sites = look_at_sites(provider, &specs, options, &mut findings).await;
    mark_adoptions(&specs, &sites, &mut vms);

    let mut nodes_out = Vec::new();
    let mut storages_out = Vec::new();
    for (site_name, sf) in &sites {
        let schema = schema::schema_for(sf.ctx.version_pair())
            .inspect_err(|why| {
                findings.push(warn(
                    &format!("site {site_name}"),
                    format!("requests not checked against PVE's API schema: {why}"),
                ))
            })
            .ok();
        for (node, nf) in &sf.nodes {
            let all_here: Specs<'_> = specs
                .iter()
                .filter(|(_, p)| &p.site == site_name && &p.node == node)
                .copied()
                .collect();
            let check = NodeCheck {
                site: site_name,
                node,
                facts: nf,
                version: sf.ctx.version_pair(),
                // The VMs this rollout would create here (adopted ones already exist).
                new: all_here
                    .iter()
                    .filter(|(i, _)| vms[*i].action == "create")
                    .copied()
                    .collect(),
                all: all_here,
            };
            let capacity = check.capacity(sf, options, rollout, &mut findings);
            check.bridges(capacity.online, &mut findings);
            check.images(capacity.online, &mut vms, &mut findings);
            check.user_data(sf, rollout, &mut findings);
            if let Some(schema) = schema {
                check.requests(schema, sf, &vms, rollout, &mut findings);
            }
            storages_out.extend(check.storages(capacity.online, &mut findings));
            nodes_out.push(capacity);
        }
    }
    findings.sort_by(|a, b| {
        a.severity
            .cmp(&b.severity)
            .then_with(|| a.subject.cmp(&b.subject))
    });
    PlanReport {
        verdict: verdict(&findings),
        manifests: rollout.manifest_count(),
        vms,
        unreadable: rollout.unreadable.clone(),
        nodes: nodes_out,
        storages: storages_out,
        findings,
    }
}

/// One row per manifest, and the specs that can be planned further (valid, properly ordered).
fn planned_vms<'a>(
    rollout: &'a Rollout,
    findings: &mut Vec<Finding>,
) -> (Vec<PlannedVm>, Specs<'a>) {
    let mut specs = Vec::new();
    let mut vms = Vec::new();
    for (i, vm) in rollout.vms.iter().enumerate() {
        let mut pv = PlannedVm {
            name: vm.name.clone(),
            manifest: vm.manifest.clone(),
            site: vm.site.clone(),
            node: vm.node.clone(),
            wave: vm.wave.clone(),
            cores: 0,
            memory_mib: 0,
            disk_gib: 0,
            storage: vm.storage.clone(),
            action: "invalid".into(),
            image: None,
        };
        match &vm.spec {
            Ok(p) => {
                pv.cores = p.cores;
                pv.memory_mib = p.memory_mib;
                pv.disk_gib = p.disk_gib;
                if let Some(why) = &vm.order_error {
                    findings.push(err(&vm.manifest, why.clone()));
                } else {
                    pv.action = "create".into();
                    specs.push((i, p));
                }
            }
            Err(e) => findings.push(err(&vm.manifest, e.clone())),
        }
        vms.push(pv);
    }
    (vms, specs)
}

fn unreadable_finding(u: &Unreadable) -> Finding {
    let at = match (u.line, u.column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    };
    err(&u.path, format!("unreadable manifest{at}: {}", u.error))
}

/// Connects to and looks at every site and node the valid manifests use.
async fn look_at_sites(
    provider: &Provider,
    specs: &Specs<'_>,
    options: &PlanOptions,
    findings: &mut Vec<Finding>,
) -> BTreeMap<String, SiteFacts> {
    let mut by_site: BTreeMap<String, (BTreeSet<String>, Vec<ImageSpec>)> = BTreeMap::new();
    for (_, p) in specs {
        let e = by_site.entry(p.site.clone()).or_default();
        e.0.insert(p.node.clone());
        if !e.1.contains(&p.image) {
            e.1.push(p.image.clone());
        }
    }
    let mut sites = BTreeMap::new();
    for (name, (nodes, images)) in &by_site {
        let subject = format!("site {name}");
        match connect_named(provider, name, options.http_timeout).await {
            Ok(ctx) => {
                sites.insert(name.clone(), gather(ctx, nodes, images).await);
            }
            Err(StepError::SiteUnknown(_)) => {
                findings.push(err(&subject, "not in the provider config".into()));
            }
            Err(e) => findings.push(err(&subject, e.to_string())),
        }
    }
    sites
}

/// Existing VMs with a manifest's name are adopted, not created.
fn mark_adoptions(specs: &Specs<'_>, sites: &BTreeMap<String, SiteFacts>, vms: &mut [PlannedVm]) {
    for (i, p) in specs {
        if let Some(sf) = sites.get(&p.site)
            && let Some(r) = sf
                .resources
                .iter()
                .find(|r| r.kind == p.kind.family() && r.name.as_deref() == Some(p.name.as_str()))
        {
            vms[*i].action = format!("adopt {}", r.vmid.unwrap_or(0));
        }
    }
}

fn verdict(findings: &[Finding]) -> Verdict {
    if findings.iter().any(|f| f.severity == Severity::Error) {
        Verdict::WouldFail
    } else if findings.iter().any(|f| f.severity == Severity::Warning) {
        Verdict::ReadyWithWarnings
    } else {
        Verdict::Ready
    }
}

fn err(subject: &str, message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        subject: subject.to_string(),
        message,
    }
}

fn warn(subject: &str, message: String) -> Finding {
    Finding {
        severity: Severity::Warning,
        subject: subject.to_string(),
        message,
    }
}
