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
use crate::deployer::image::{self, StorageView};
use crate::deployer::manifest::{ManifestSet, Unreadable};
use crate::deployer::pve::api::{ClusterResource, NetworkIface, NodeStatus, StorageInfo};
use crate::deployer::rollout::Rollout;
use crate::deployer::site::{SiteCtx, connect_named};
use crate::deployer::validate::{ImageSpec, ValidSpec};

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

/// What one node looks like through the API.
struct NodeFacts {
    status: Result<NodeStatus, String>,
    network: Vec<NetworkIface>,
    storages: Vec<StorageInfo>,
    views: Vec<StorageView>,
}

struct SiteFacts {
    ctx: SiteCtx,
    resources: Vec<ClusterResource>,
    nodes: BTreeMap<String, NodeFacts>,
}

async fn gather(ctx: SiteCtx, nodes: &BTreeSet<String>, images: &[ImageSpec]) -> SiteFacts {
    let c = &ctx.client;
    let resources = c.vm_resources().await.unwrap_or_default();
    let mut facts = BTreeMap::new();
    for node in nodes {
        let status = c.node_status(node).await.map_err(|e| e.to_string());
        let network = c.network(node).await.unwrap_or_default();
        let storages = c.storages(node).await.unwrap_or_default();
        let mut listed: BTreeSet<String> = BTreeSet::new();
        for spec in images {
            for s in image::storages_to_list(spec, &storages) {
                listed.insert(s.storage.clone());
            }
        }
        let mut views = Vec::new();
        for s in storages.iter().filter(|s| listed.contains(&s.storage)) {
            let content = c
                .storage_content(node, &s.storage)
                .await
                .unwrap_or_default();
            views.push(StorageView {
                info: s.clone(),
                content,
            });
        }
        facts.insert(
            node.clone(),
            NodeFacts {
                status,
                network,
                storages,
                views,
            },
        );
    }
    SiteFacts {
        ctx,
        resources,
        nodes: facts,
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
                .find(|r| r.kind == "qemu" && r.name.as_deref() == Some(p.name.as_str()))
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

/// The checks of one node, with the VMs the rollout puts on it.
struct NodeCheck<'a> {
    site: &'a str,
    node: &'a str,
    facts: &'a NodeFacts,
    version: Option<(u32, u32)>,
    /// Every valid VM placed here.
    all: Specs<'a>,
    /// Those of them this rollout would create.
    new: Specs<'a>,
}

impl NodeCheck<'_> {
    fn subject(&self) -> String {
        format!("node {}", self.node)
    }

    /// CPU and memory against the node's size, counting what already runs there.
    fn capacity(
        &self,
        sf: &SiteFacts,
        options: &PlanOptions,
        rollout: &Rollout,
        findings: &mut Vec<Finding>,
    ) -> NodeCapacity {
        let node = self.node;
        let subject = self.subject();
        let existing: Vec<&ClusterResource> = sf
            .resources
            .iter()
            .filter(|r| r.kind == "qemu" && !r.template && r.node.as_deref() == Some(node))
            .collect();
        let (online, threads, mem_total) = match &self.facts.status {
            Ok(s) => (true, s.cpuinfo.cpus, s.memory.total.map(|b| b / MIB)),
            Err(e) => {
                findings.push(err(&subject, format!("not reachable or unhealthy: {e}")));
                (false, None, None)
            }
        };
        let existing_cores: u64 = existing.iter().filter_map(|r| r.maxcpu).sum();
        let existing_mem: u64 = existing.iter().filter_map(|r| r.maxmem).sum::<u64>() / MIB;
        let req_cores: u64 = self.new.iter().map(|(_, p)| u64::from(p.cores)).sum();
        let req_mem: u64 = self.new.iter().map(|(_, p)| p.memory_mib).sum();
        let cpu_ratio = threads
            .filter(|t| *t > 0)
            .map(|t| (existing_cores + req_cores) as f64 / t as f64);
        let memory_ratio = mem_total
            .filter(|t| *t > 0)
            .map(|t| (existing_mem + req_mem) as f64 / t as f64);
        if let (Some(r), Some(t)) = (cpu_ratio, threads)
            && r > options.cpu_overcommit
        {
            findings.push(err(
                &subject,
                format!(
                    "CPU over capacity: {req_cores} vCPUs requested + {existing_cores} existing on {t} CPU threads = {r:.2}× (limit {:.2}×)",
                    options.cpu_overcommit
                ),
            ));
        }
        if let (Some(r), Some(t)) = (memory_ratio, mem_total) {
            let text = format!(
                "memory: {} GiB requested + {} GiB existing of {} GiB = {:.0}%",
                req_mem / 1024,
                existing_mem / 1024,
                t / 1024,
                r * 100.0
            );
            if r > 1.0 {
                findings.push(err(&subject, format!("{text} — over capacity")));
            } else if r > options.memory_warn {
                findings.push(warn(&subject, text));
            }
        }
        if let Some(t) = threads {
            for (i, p) in &self.all {
                if u64::from(p.cores) > t {
                    findings.push(err(
                        &rollout.vms[*i].manifest,
                        format!("{} vCPUs > {t} CPU threads on {node}: PVE refuses to start it (MAX {t} vcpus allowed per VM)", p.cores),
                    ));
                }
            }
        }
        NodeCapacity {
            site: self.site.to_string(),
            node: node.to_string(),
            online,
            cpu_threads: threads,
            memory_total_mib: mem_total,
            existing_vms: existing.len(),
            existing_cores,
            existing_memory_mib: existing_mem,
            new_vms: self.new.len(),
            requested_cores: req_cores,
            requested_memory_mib: req_mem,
            cpu_ratio,
            memory_ratio,
        }
    }

    /// Every bridge a VM here names must exist on the node.
    fn bridges(&self, online: bool, findings: &mut Vec<Finding>) {
        let bridges: BTreeSet<&str> = self.all.iter().map(|(_, p)| p.bridge.as_str()).collect();
        for b in bridges {
            if online
                && !self
                    .facts
                    .network
                    .iter()
                    .any(|i| i.iface == b && i.is_bridge())
            {
                let users = self.all.iter().filter(|(_, p)| p.bridge == b).count();
                findings.push(err(
                    &self.subject(),
                    format!("bridge '{b}' does not exist ({users} VMs use it)"),
                ));
            }
        }
    }

    /// Which volume each new VM would import, resolved as the pipeline will.
    fn images(&self, online: bool, vms: &mut [PlannedVm], findings: &mut Vec<Finding>) {
        let mut images: Vec<&ImageSpec> = Vec::new();
        for (_, p) in &self.new {
            if !images.contains(&&p.image) {
                images.push(&p.image);
            }
        }
        for spec in images {
            let users: Vec<usize> = self
                .new
                .iter()
                .filter(|(_, p)| &p.image == spec)
                .map(|(i, _)| *i)
                .collect();
            match image::resolve(spec, self.node, &self.facts.views, self.version) {
                Ok(r) => {
                    for i in &users {
                        vms[*i].image = Some(r.volid.clone());
                    }
                    if let Some(n) = r.note {
                        findings.push(Finding {
                            severity: Severity::Info,
                            subject: self.subject(),
                            message: n,
                        });
                    }
                }
                Err(e) if online => {
                    findings.push(err(&self.subject(), format!("{e} ({} VMs)", users.len())))
                }
                Err(_) => {}
            }
        }
    }

    /// Each storage a VM here uses: exists, holds VM disks, has room (thick) or is over-provisioned (thin).
    fn storages(&self, online: bool, findings: &mut Vec<Finding>) -> Vec<StorageUse> {
        let node = self.node;
        let used: BTreeSet<&str> = self.all.iter().map(|(_, p)| p.storage.as_str()).collect();
        let mut rows = Vec::new();
        for st in used {
            let new: Vec<&(usize, &ValidSpec)> =
                self.new.iter().filter(|(_, p)| p.storage == st).collect();
            let requested: u64 = new.iter().map(|(_, p)| p.disk_gib).sum();
            let info = self.facts.storages.iter().find(|s| s.storage == st);
            let subject = format!("storage {node}/{st}");
            let users = self.all.iter().filter(|(_, p)| p.storage == st).count();
            let mut row = StorageUse {
                site: self.site.to_string(),
                node: node.to_string(),
                storage: st.to_string(),
                kind: info.map(|s| s.kind.clone()),
                holds_vm_disks: info.is_some_and(|s| s.has_content("images")),
                thin: info.is_some_and(StorageInfo::is_thin),
                total_gib: info.and_then(|s| s.total).map(gib),
                avail_gib: info.and_then(|s| s.avail).map(gib),
                new_vms: new.len(),
                requested_gib: requested,
                ratio: None,
            };
            match info {
                None if online => findings.push(err(&subject, format!("does not exist on {node} ({users} VMs, {requested} GiB)"))),
                None => {}
                Some(s) if !s.has_content("images") => findings.push(err(
                    &subject,
                    format!(
                        "type {} with content [{}] cannot hold VM disks: {users} VMs ({requested} GiB) would be refused{}",
                        s.kind,
                        s.content,
                        if s.kind == "cephfs" { " — CephFS stores files; put VM disks on an RBD storage" } else { "" }
                    ),
                )),
                Some(s) => row.ratio = free_space(s, requested, &subject, findings),
            }
            rows.push(row);
        }
        rows
    }
}

/// `requested` GiB against the storage's free space: an error on thick storage, a warning on
/// thin. Returns requested / available when the storage reports its free space.
fn free_space(
    s: &StorageInfo,
    requested: u64,
    subject: &str,
    findings: &mut Vec<Finding>,
) -> Option<f64> {
    let avail = s.avail?;
    let ratio = if avail > 0 {
        requested as f64 * GIB as f64 / avail as f64
    } else {
        f64::INFINITY
    };
    if requested * GIB > avail {
        let text = format!(
            "{requested} GiB requested, {} GiB free ({:.2}×)",
            gib(avail),
            ratio
        );
        if s.is_thin() {
            findings.push(warn(
                subject,
                format!(
                    "{text}: thin-provisioned, so creates succeed but writes fail once it fills"
                ),
            ));
        } else {
            findings.push(err(
                subject,
                format!("{text}: thick storage, creates would fail"),
            ));
        }
    }
    Some(ratio)
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
