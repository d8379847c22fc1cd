//! What one node looks like through the API ([`gather`]), and the checks `plan` runs on it
//! ([`NodeCheck`]): capacity, bridges, images and storages, with true figures.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Finding, GIB, MIB, NodeCapacity, PlanOptions, PlannedVm, Severity, Specs, StorageUse, err, gib,
    warn,
};
use fake_proxmox_schema::ApiSchema;

use super::schema::refusals;
use crate::deployer::guest::GuestKind;
use crate::deployer::image::{self, StorageView};
use crate::deployer::pipeline::{
    PipelineOptions, VmRequestInputs, ct_create_params, find_user_snippet, resolve_template,
    user_data, vm_requests,
};
use crate::deployer::pve::Request;
use crate::deployer::pve::api::{ClusterResource, NetworkIface, NodeStatus, StorageInfo};
use crate::deployer::rollout::Rollout;
use crate::deployer::site::SiteCtx;
use crate::deployer::validate::{ImageSpec, ValidSpec};

/// The VMID a planned create is checked with: PVE hands the real one out at create time
/// (`/cluster/nextid`, always within the schema's range), so any valid one checks the same.
const PLANNED_VMID: u32 = 100;

/// What one node looks like through the API.
pub(super) struct NodeFacts {
    pub(super) status: Result<NodeStatus, String>,
    pub(super) network: Vec<NetworkIface>,
    pub(super) storages: Vec<StorageInfo>,
    pub(super) views: Vec<StorageView>,
}

pub(super) struct SiteFacts {
    pub(super) ctx: SiteCtx,
    pub(super) resources: Vec<ClusterResource>,
    pub(super) nodes: BTreeMap<String, NodeFacts>,
}

pub(super) async fn gather(
    ctx: SiteCtx,
    nodes: &BTreeSet<String>,
    images: &[ImageSpec],
) -> SiteFacts {
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

/// The checks of one node, with the VMs the rollout puts on it.
pub(super) struct NodeCheck<'a> {
    pub(super) site: &'a str,
    pub(super) node: &'a str,
    pub(super) facts: &'a NodeFacts,
    pub(super) version: Option<(u32, u32)>,
    /// Every valid VM placed here.
    pub(super) all: Specs<'a>,
    /// Those of them this rollout would create.
    pub(super) new: Specs<'a>,
}

impl NodeCheck<'_> {
    fn subject(&self) -> String {
        format!("node {}", self.node)
    }

    /// CPU and memory against the node's size, counting what already runs there.
    pub(super) fn capacity(
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
            .filter(|r| matches!(r.kind.as_str(), "qemu" | "lxc"))
            .filter(|r| !r.template && r.node.as_deref() == Some(node))
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
    pub(super) fn bridges(&self, online: bool, findings: &mut Vec<Finding>) {
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
    pub(super) fn images(&self, online: bool, vms: &mut [PlannedVm], findings: &mut Vec<Finding>) {
        // A container's image is its OS template, found among the node's vztmpl volumes.
        for (i, p) in self
            .new
            .iter()
            .filter(|(_, p)| p.kind == GuestKind::Container)
        {
            match resolve_template(p, self.node, &self.facts.views) {
                Ok(volid) => vms[*i].image = Some(volid),
                Err(e) if online => {
                    findings.push(err(&self.subject(), format!("{e} (CT {})", p.name)))
                }
                Err(_) => {}
            }
        }
        let mut images: Vec<&ImageSpec> = Vec::new();
        for (_, p) in self.new.iter().filter(|(_, p)| p.kind == GuestKind::Vm) {
            if !images.contains(&&p.image) {
                images.push(&p.image);
            }
        }
        for spec in images {
            let users: Vec<usize> = self
                .new
                .iter()
                .filter(|(_, p)| p.kind == GuestKind::Vm && &p.image == spec)
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

    /// Where `p`'s userData would go (`None` without userData): the snippet's volid, or why
    /// it cannot reach the VM.
    fn snippet(&self, sf: &SiteFacts, p: &ValidSpec) -> Option<Result<String, String>> {
        let ud = p.user_data.as_deref()?;
        let placed = find_user_snippet(&self.facts.views, &p.name);
        Some(
            user_data::destination(
                p,
                ud,
                &PipelineOptions::default().ci_user,
                sf.ctx.snippets.as_ref(),
                &self.facts.storages,
                placed,
            )
            .map(|s| s.volid)
            .map_err(|e| e.to_string()),
        )
    }

    /// Each VM to create here whose userData has no way in (no snippets share, or its storage
    /// not on this node or without snippets content): an error, as the run would fail it.
    pub(super) fn user_data(&self, sf: &SiteFacts, rollout: &Rollout, findings: &mut Vec<Finding>) {
        for (i, p) in &self.new {
            if let Some(Err(e)) = self.snippet(sf, p) {
                findings.push(err(&rollout.vms[*i].manifest, e));
            }
        }
    }

    /// Every request the pipeline would send for each VM here, built by the pipeline's own
    /// builders, checked against the site's release: what PVE would refuse with a 400.
    pub(super) fn requests(
        &self,
        schema: &ApiSchema,
        sf: &SiteFacts,
        vms: &[PlannedVm],
        rollout: &Rollout,
        findings: &mut Vec<Finding>,
    ) {
        let pipeline = PipelineOptions::default();
        for (i, p) in &self.all {
            let existing = sf
                .resources
                .iter()
                .find(|r| r.kind == p.kind.family() && r.name.as_deref() == Some(p.name.as_str()))
                .and_then(|r| r.vmid)
                .and_then(|id| u32::try_from(id).ok());
            if p.kind == GuestKind::Container {
                let template = vms[*i].image.clone().unwrap_or_else(|| p.image.to_string());
                let vmid = existing.unwrap_or(PLANNED_VMID);
                let mut requests = Vec::new();
                if existing.is_none() {
                    requests.push(Request::create_ct(
                        self.node,
                        &ct_create_params(p, vmid, &template),
                    ));
                }
                if pipeline.start {
                    requests.push(Request::start_guest(GuestKind::Container, self.node, vmid));
                }
                self.report_refusals(schema, &requests, p, &rollout.vms[*i].manifest, findings);
                continue;
            }
            // The volume the image step resolved; a volid the manifest names also shows what
            // the create would carry where resolution failed (that failure is reported above).
            let import_from = vms[*i].image.clone().or_else(|| match &p.image {
                ImageSpec::Volid { .. } => Some(p.image.to_string()),
                ImageSpec::Name { .. } => None,
            });
            let snippet = self.snippet(sf, p).and_then(Result::ok);
            let inputs = VmRequestInputs {
                spec: p,
                vmid: existing.unwrap_or(PLANNED_VMID),
                listed_storages: image::storages_to_list(&p.image, &self.facts.storages)
                    .into_iter()
                    .map(|s| s.storage.clone())
                    .collect(),
                import_from: import_from.as_deref(),
                snippet: snippet.as_deref(),
                ci_user: &pipeline.ci_user,
                create: existing.is_none(),
                start: pipeline.start,
            };
            let requests = vm_requests(&inputs);
            self.report_refusals(schema, &requests, p, &rollout.vms[*i].manifest, findings);
        }
    }

    /// Each parameter of `requests` the site's release would refuse, as an error finding.
    fn report_refusals(
        &self,
        schema: &ApiSchema,
        requests: &[Request<'_>],
        p: &ValidSpec,
        manifest: &str,
        findings: &mut Vec<Finding>,
    ) {
        for request in requests {
            for r in refusals(schema, request) {
                findings.push(err(
                    manifest,
                    format!(
                        "{} {}: PVE {} would refuse {} (400 Parameter verification failed) — {}: {}",
                        p.kind.label(),
                        p.name,
                        schema.version(),
                        request.label(),
                        r.parameter,
                        r.message
                    ),
                ));
            }
        }
    }

    /// Each storage a VM here uses: exists, holds VM disks, has room (thick) or is over-provisioned (thin).
    pub(super) fn storages(&self, online: bool, findings: &mut Vec<Finding>) -> Vec<StorageUse> {
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
                Some(s)
                    if self.all.iter().any(|(_, p)| {
                        p.storage == st && p.kind == GuestKind::Container
                    }) && !s.has_content("rootdir") =>
                {
                    findings.push(err(
                        &subject,
                        format!(
                            "type {} with content [{}] cannot hold container root filesystems (needs 'rootdir'): {users} guests ({requested} GiB) would be refused",
                            s.kind, s.content
                        ),
                    ))
                }
                Some(s)
                    if self
                        .all
                        .iter()
                        .any(|(_, p)| p.storage == st && p.kind == GuestKind::Vm)
                        && !s.has_content("images") => findings.push(err(
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
