//! The per-VM pipeline: the seed's steps, done the way real PVE needs them. Every step first looks
//! at what exists, so running it again (a retry, a re-run, a resumed run) changes nothing that is
//! already right.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::deployer::errors::{StepError, classify};
use crate::deployer::guest::GuestKind;
use crate::deployer::image::{self, StorageView};
use crate::deployer::pve::api::{StorageInfo, disk_size_mib};
use crate::deployer::pve::tasks::TaskWait;
use crate::deployer::pve::{PveClient, PveError};
use crate::deployer::site::{Recent, SiteCtx};
use crate::deployer::state::{Condition, Stage, StateStore, VmRecord};
use crate::deployer::validate::ValidSpec;

mod container;
mod existing;
mod requests;
mod rules;
mod steps;
pub mod user_data;
pub use container::{check_ct_storage, ct_create_params, resolve_template};
pub use requests::{VmRequestInputs, vm_requests};
use rules::create_refused;
pub use rules::{
    check_free_space, check_vm_storage, cloud_init_params, create_params, find_user_snippet,
    resize_size,
};
pub use steps::Step;

/// Knobs of one run that the pipeline needs.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub task_wait: TaskWait,
    /// How long to wait for the guest agent to report an address after start.
    pub ip_wait: Duration,
    pub ip_poll: Duration,
    /// How many fresh VMIDs to try when another creator takes ours.
    pub nextid_retries: u32,
    pub start: bool,
    /// `ciuser` for cloud-init (the seed's `admin`).
    pub ci_user: String,
    /// How old what this run read of a site may be for a VM with nothing recorded to use it:
    /// `/cluster/resources` (to adopt by name) and its node's status, network, storages and
    /// image storage content. Zero (the default) reads the VM's node afresh for every VM —
    /// its guests (`/nodes/{node}/qemu`, to adopt by name), status, network, storages and
    /// image storage content — and the site listing, which only the other nodes' guests come
    /// from, once per run. A VM with a recorded VMID or on a retry always reads its node
    /// afresh. What a reused read can miss is what changed in the last `listing_max_age`: a
    /// VM of the same name another creator made, or space other VMs took (PVE's own refusal
    /// then applies); the once-per-run listing misses only a VM of the same name another
    /// creator makes on another node during the run.
    pub listing_max_age: Duration,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        Self {
            task_wait: TaskWait::default(),
            ip_wait: Duration::from_secs(120),
            ip_poll: Duration::from_secs(2),
            nextid_retries: 5,
            start: true,
            ci_user: "admin".into(),
            listing_max_age: Duration::ZERO,
        }
    }
}

/// Observes pipeline progress: (VM name, [`Step::name`]) as each step starts.
pub type StepSink = std::sync::Arc<dyn Fn(&str, &str) + Send + Sync>;

pub struct VmJob<'a> {
    pub key: String,
    pub manifest: &'a str,
    pub spec: &'a ValidSpec,
}

pub struct Pipeline<'a> {
    pub site: &'a SiteCtx,
    pub state: &'a StateStore,
    pub options: &'a PipelineOptions,
    pub sink: Option<&'a StepSink>,
}

impl Pipeline<'_> {
    fn client(&self) -> &PveClient {
        &self.site.client
    }

    fn step(&self, job: &VmJob<'_>, step: Step) {
        tracing::debug!(vm = %job.spec.name, step = step.name(), "step");
        if let Some(s) = self.sink {
            s(&job.spec.name, step.name());
        }
    }

    fn err(&self, job: &VmJob<'_>, e: &PveError) -> StepError {
        classify(&self.site.name, &job.spec.node, Some(&job.spec.storage), e)
    }

    fn record(&self, job: &VmJob<'_>, f: impl FnOnce(&mut VmRecord)) {
        let spec = job.spec;
        self.state.update(
            &job.key,
            || VmRecord {
                kind: spec.kind,
                name: spec.name.clone(),
                site: spec.site.clone(),
                node: spec.node.clone(),
                manifest: job.manifest.to_string(),
                ..VmRecord::default()
            },
            f,
        );
    }

    /// Whether this VM may take what this run read of its site at most `listing_max_age` ago:
    /// only with nothing recorded (no VMID an earlier run may have used) on its first attempt.
    fn may_reuse(&self, job: &VmJob<'_>) -> bool {
        !self.options.listing_max_age.is_zero()
            && self
                .state
                .get(&job.key)
                .is_none_or(|r| r.vmid.is_none() && r.attempts <= 1)
    }

    /// A read through `cache` when `reuse`, else straight from the API.
    async fn read<T, F>(
        &self,
        reuse: bool,
        cache: &Recent<T>,
        key: &str,
        read: F,
    ) -> Result<Arc<T>, PveError>
    where
        F: std::future::Future<Output = Result<T, PveError>>,
    {
        if reuse {
            cache
                .get_or_read(key, self.options.listing_max_age, read)
                .await
        } else {
            read.await.map(Arc::new)
        }
    }

    async fn persist(&self) -> Result<(), StepError> {
        self.state
            .persist()
            .await
            .map_err(|e| StepError::Api(format!("cannot save state: {e}")))
    }

    async fn wait(&self, job: &VmJob<'_>, upid: &str) -> Result<(), StepError> {
        self.client()
            .await_task(upid, self.options.task_wait)
            .await
            .map(|_| ())
            .map_err(|e| self.err(job, &e))
    }

    /// Runs every step; `Ok` means the VM exists, is configured, and (unless disabled) runs.
    pub async fn run(&self, job: &VmJob<'_>) -> Result<(), StepError> {
        let spec = job.spec;
        let node = spec.node.as_str();
        let reuse = self.may_reuse(job);
        let recent = &self.site.recent;
        self.step(job, Step::NodeHealth);
        let status = match self
            .read(
                reuse,
                &recent.node_status,
                node,
                self.client().node_status(node),
            )
            .await
        {
            Ok(s) => s,
            Err(e) => return Err(self.node_problem(job, &e).await),
        };
        if let Some(threads) = status.cpuinfo.cpus
            && u64::from(spec.cores) > threads
        {
            return Err(StepError::TooManyVcpus {
                node: node.to_string(),
                cores: spec.cores,
                threads,
            });
        }

        self.step(job, Step::Bridge);
        let ifaces = self
            .read(reuse, &recent.network, node, self.client().network(node))
            .await
            .map_err(|e| self.err(job, &e))?;
        let bridges: Vec<&str> = ifaces
            .iter()
            .filter(|i| i.is_bridge())
            .map(|i| i.iface.as_str())
            .collect();
        if !bridges.contains(&spec.bridge.as_str()) {
            return Err(StepError::BridgeMissing {
                node: node.to_string(),
                bridge: spec.bridge.clone(),
                known: if bridges.is_empty() {
                    "none".into()
                } else {
                    bridges.join(", ")
                },
            });
        }

        self.step(job, Step::Storage);
        let storages = self
            .read(reuse, &recent.storages, node, self.client().storages(node))
            .await
            .map_err(|e| self.err(job, &e))?;
        let target = storages
            .iter()
            .find(|s| s.storage == spec.storage)
            .ok_or_else(|| StepError::StorageMissing {
                node: node.to_string(),
                storage: spec.storage.clone(),
            })?;
        match spec.kind {
            GuestKind::Vm => check_vm_storage(node, target)?,
            GuestKind::Container => container::check_ct_storage(node, target)?,
        }

        self.step(job, Step::Adopt);
        let mut vmid = if crate::mutants::active(crate::mutants::Mutant::DuplicateOnRerun) {
            None
        } else {
            self.find_existing(job).await?
        };
        if let Some(id) = vmid
            && !self.settle_existing(job, id).await?
        {
            vmid = None;
        }
        let vmid = match vmid {
            Some(id) => id,
            None => {
                check_free_space(node, target, spec.disk_gib)?;
                match spec.kind {
                    GuestKind::Vm => self.create(job, &storages, reuse).await?,
                    GuestKind::Container => self.create_ct(job, &storages, reuse).await?,
                }
            }
        };

        if spec.kind == GuestKind::Vm {
            self.step(job, Step::Resize);
            self.resize_and_configure(job, vmid).await?;
        } else {
            // A container's rootfs is made at its size and it has no cloud-init to configure.
            self.record(job, |r| r.stage = r.stage.max(Stage::Configured));
        }

        if self.options.start {
            self.step(job, Step::Start);
            let cur = self
                .client()
                .guest_current(spec.kind, node, vmid)
                .await
                .map_err(|e| self.err(job, &e))?;
            if cur.status != "running" {
                self.start(job, vmid).await?;
            }
            self.record(job, |r| r.stage = r.stage.max(Stage::Started));
            self.step(job, Step::Monitor);
            self.monitor(job, vmid).await?;
        } else {
            self.record(job, |r| {
                r.state = Some("stopped".into());
                r.stage = Stage::Ready;
            });
        }
        self.persist().await
    }

    /// Starts the VM. A start that finds it already running is a success: a run killed during
    /// its own start leaves that start task going, and the resumed run sees the VM `stopped`
    /// until QEMU is up.
    async fn start(&self, job: &VmJob<'_>, vmid: u32) -> Result<(), StepError> {
        let node = job.spec.node.as_str();
        let kind = job.spec.kind;
        let started = match self.client().start_guest(kind, node, vmid).await {
            Ok(upid) => self
                .client()
                .await_task(&upid, self.options.task_wait)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        match started {
            Ok(()) => Ok(()),
            Err(e)
                if e.text()
                    .contains(&format!("{} {vmid} already running", kind.label())) =>
            {
                tracing::info!(vm = %job.spec.name, vmid, "already running (an earlier run's start)");
                Ok(())
            }
            Err(e) => Err(self.err(job, &e)),
        }
    }

    /// Tells an unknown node (fail fast) from an unreachable one (retry).
    async fn node_problem(&self, job: &VmJob<'_>, e: &PveError) -> StepError {
        let node = job.spec.node.as_str();
        let first = self.err(job, e);
        if matches!(first, StepError::AuthRefused { .. }) {
            return first;
        }
        match self.client().nodes().await {
            Ok(nodes) if !nodes.iter().any(|n| n.node == node) => StepError::NodeUnknown {
                site: self.site.name.clone(),
                node: node.to_string(),
                known: nodes
                    .iter()
                    .map(|n| n.node.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            Ok(nodes) => {
                let st = nodes
                    .iter()
                    .find(|n| n.node == node)
                    .and_then(|n| n.status.clone())
                    .unwrap_or_else(|| "unknown".into());
                StepError::NodeUnreachable {
                    node: node.to_string(),
                    detail: format!("node status '{st}': {e}"),
                }
            }
            Err(_) => StepError::NodeUnreachable {
                node: node.to_string(),
                detail: e.to_string(),
            },
        }
    }

    async fn create(
        &self,
        job: &VmJob<'_>,
        storages: &[StorageInfo],
        reuse: bool,
    ) -> Result<u32, StepError> {
        let spec = job.spec;
        let node = spec.node.as_str();
        self.step(job, Step::Image);
        let views = self
            .storage_views(job, image::storages_to_list(&spec.image, storages), reuse)
            .await?;
        let resolved = image::resolve(&spec.image, node, &views, self.site.version_pair())?;
        let user_data = spec
            .user_data
            .as_deref()
            .filter(|_| !crate::mutants::active(crate::mutants::Mutant::IgnoresUserData));
        let snippet = match user_data {
            Some(ud) => {
                let placed = find_user_snippet(&views, &spec.name);
                let s = user_data::destination(
                    spec,
                    ud,
                    &self.options.ci_user,
                    self.site.snippets.as_ref(),
                    storages,
                    placed,
                )?;
                user_data::write(spec, &s)?;
                Some(s)
            }
            None => None,
        };
        self.record(job, |r| {
            if let Some(n) = &resolved.note {
                r.set_condition(Condition::new(
                    "ImageResolved",
                    true,
                    "ImportVolume",
                    n.clone(),
                ));
            }
            r.set_condition(match &snippet {
                None => Condition::new(
                    "UserData",
                    true,
                    "NotRequested",
                    "no userData in the manifest",
                ),
                Some(s) if s.path.is_some() => Condition::new(
                    "UserData",
                    true,
                    "SnippetWritten",
                    format!("cicustom user={}", s.volid),
                ),
                Some(s) => Condition::new(
                    "UserData",
                    true,
                    "SnippetPlaced",
                    format!(
                        "cicustom user={} (placed before this run; not rewritten)",
                        s.volid
                    ),
                ),
            });
        });
        let snippet = snippet.map(|s| s.volid);

        let params = |vmid: u32| {
            create_params(
                spec,
                vmid,
                &resolved.volid,
                snippet.as_deref(),
                &self.options.ci_user,
            )
        };
        self.create_guest(job, &resolved.volid, params).await
    }

    /// The content of each storage of `list` on the job's node (a recent read when `reuse`).
    pub(super) async fn storage_views(
        &self,
        job: &VmJob<'_>,
        list: Vec<&StorageInfo>,
        reuse: bool,
    ) -> Result<Vec<StorageView>, StepError> {
        let node = job.spec.node.as_str();
        let mut views = Vec::new();
        for s in list {
            let key = format!("{node}/{}", s.storage);
            let content = self
                .read(
                    reuse,
                    &self.site.recent.content,
                    &key,
                    self.client().storage_content(node, &s.storage),
                )
                .await
                .map_err(|e| self.err(job, &e))?;
            views.push(StorageView {
                info: s.clone(),
                content: content.as_ref().clone(),
            });
        }
        Ok(views)
    }

    /// The create call with a fresh VMID (`nextid`), recorded before the call so a run killed
    /// right after it finds the guest by this id; another creator taking the id means asking
    /// again. `source` is the image or template the guest is made from.
    pub(super) async fn create_guest(
        &self,
        job: &VmJob<'_>,
        source: &str,
        params: impl Fn(u32) -> Vec<(&'static str, String)>,
    ) -> Result<u32, StepError> {
        let spec = job.spec;
        let node = spec.node.as_str();
        let kind = spec.kind;
        self.step(job, Step::Create);
        let mut last_race = String::new();
        for _ in 0..self.options.nextid_retries.max(1) {
            let guard = self.site.create_lock.lock().await;
            let vmid = self
                .client()
                .next_id()
                .await
                .map_err(|e| self.err(job, &e))?;
            self.record(job, |r| {
                r.vmid = Some(vmid);
                r.stage = Stage::Creating;
                r.created_here = true;
            });
            self.persist().await?;
            let params = params(vmid);
            let created = match kind {
                GuestKind::Vm => self.client().create_vm(node, &params).await,
                GuestKind::Container => self.client().create_ct(node, &params).await,
            };
            match created {
                Ok(upid) => {
                    drop(guard);
                    if let Err(e) = self
                        .client()
                        .await_task(&upid, self.options.task_wait)
                        .await
                    {
                        return Err(self.create_failed(job, vmid, &e).await);
                    }
                    self.record(job, |r| {
                        r.stage = Stage::Created;
                        r.set_condition(Condition::new(
                            "Synced",
                            true,
                            "Created",
                            format!("{} {vmid} created on {node} from {source}", kind.label()),
                        ));
                    });
                    self.persist().await?;
                    return Ok(vmid);
                }
                Err(e) if e.text().contains("already exists") => {
                    tracing::info!(vm = %spec.name, vmid, "VMID taken by another creator; asking nextid again");
                    last_race = e.to_string();
                    self.record(job, |r| r.vmid = None);
                    continue;
                }
                Err(e) => {
                    self.record(job, |r| r.vmid = None);
                    return Err(create_refused(node, spec, &e).unwrap_or_else(|| self.err(job, &e)));
                }
            }
        }
        Err(StepError::Locked(format!(
            "every VMID tried was taken concurrently: {last_race}"
        )))
    }

    /// PVE frees what a failed create allocated; make sure nothing is left anyway. The VMID is
    /// forgotten only once the VM is known to be gone: when the create's end could not be read
    /// (its node unreachable for a moment, say), the create may well have succeeded, and the
    /// VM must stay recorded as this rollout's, for the next attempt to resume it and the final
    /// cleanup or `destroy` to delete it.
    async fn create_failed(&self, job: &VmJob<'_>, vmid: u32, e: &PveError) -> StepError {
        let node = job.spec.node.as_str();
        let mapped = create_refused(node, job.spec, e).unwrap_or_else(|| self.err(job, e));
        let kind = job.spec.kind;
        let gone = if crate::mutants::active(crate::mutants::Mutant::NoCleanupAfterFailedCreate) {
            true
        } else {
            let c = self.client();
            match c.guest_config(kind, node, vmid).await {
                Err(e) => e.text().contains("does not exist"),
                Ok(_) => match c.destroy_guest(kind, node, vmid).await {
                    Ok(upid) => c.await_task(&upid, self.options.task_wait).await.is_ok(),
                    Err(e) => e.text().contains("does not exist"),
                },
            }
        };
        self.record(job, |r| {
            if gone {
                r.vmid = None;
            }
            r.stage = Stage::Pending;
        });
        mapped
    }

    async fn resize_and_configure(&self, job: &VmJob<'_>, vmid: u32) -> Result<(), StepError> {
        let spec = job.spec;
        let node = spec.node.as_str();
        let cfg = self
            .client()
            .vm_config(node, vmid)
            .await
            .map_err(|e| self.err(job, &e))?;
        let want_mib = spec.disk_gib * 1024;
        let current = cfg
            .get("scsi0")
            .and_then(|v| v.as_str())
            .and_then(disk_size_mib);
        match current {
            Some(cur) if cur > want_mib => self.record(job, |r| {
                r.set_condition(Condition::new(
                    "DiskSize",
                    false,
                    "LargerThanRequested",
                    format!("the imported disk is {cur} MiB, more than the {want_mib} MiB requested; PVE cannot shrink disks"),
                ))
            }),
            Some(cur) if cur == want_mib => {}
            _ => {
                let upid = self
                    .client()
                    .resize(node, vmid, "scsi0", &resize_size(spec.disk_gib))
                    .await
                    .map_err(|e| self.err(job, &e))?;
                // PVE < 8.0 resizes synchronously and answers null.
                if let Some(upid) = upid {
                    self.wait(job, &upid).await?;
                }
            }
        }
        let has_cloudinit = cfg
            .values()
            .filter_map(|v| v.as_str())
            .any(|v| v.contains("cloudinit"));
        if !has_cloudinit {
            self.step(job, Step::CloudInit);
            let params = rules::cloud_init_params(spec, &self.options.ci_user);
            if let Some(upid) = self
                .client()
                .update_config(node, vmid, &params)
                .await
                .map_err(|e| self.err(job, &e))?
            {
                self.wait(job, &upid).await?;
            }
        }
        self.record(job, |r| r.stage = r.stage.max(Stage::Configured));
        self.persist().await
    }

    async fn monitor(&self, job: &VmJob<'_>, vmid: u32) -> Result<(), StepError> {
        let node = job.spec.node.as_str();
        let kind = job.spec.kind;
        let cur = self
            .client()
            .guest_current(kind, node, vmid)
            .await
            .map_err(|e| self.err(job, &e))?;
        let started = Instant::now();
        let mut ip = None;
        let mut last = String::new();
        let running = cur.status == "running";
        while running && ip.is_none() {
            if kind == GuestKind::Container {
                match self.client().ct_interfaces(node, vmid).await {
                    Ok(ifs) => {
                        ip = crate::deployer::pve::guests::ct_primary_ipv4(&ifs);
                        if ip.is_some() {
                            break;
                        }
                        last = "the container reports no IPv4 address yet".into();
                    }
                    Err(e) => {
                        last = e.text().trim().to_string();
                        break;
                    }
                }
                if started.elapsed() >= self.options.ip_wait {
                    break;
                }
                tokio::time::sleep(self.options.ip_poll).await;
                continue;
            }
            match self.client().agent_interfaces(node, vmid).await {
                Ok(ifs) => {
                    ip = ifs.primary_ipv4();
                    if ip.is_some() {
                        break;
                    }
                    last = "the agent reports no IPv4 address yet".into();
                }
                Err(e) => {
                    let text = e.text();
                    last = text.trim().to_string();
                    let waiting = text.contains("not running") || text.contains("got timeout");
                    if !waiting {
                        break;
                    }
                }
            }
            if started.elapsed() >= self.options.ip_wait {
                break;
            }
            tokio::time::sleep(self.options.ip_poll).await;
        }
        self.record(job, |r| {
            r.state = Some(cur.status.clone());
            r.ip = ip.clone();
            r.stage = Stage::Ready;
            r.error = None;
            r.set_condition(Condition::new(
                "Ready",
                running,
                if running { "Running" } else { "NotRunning" },
                format!("{} {vmid} is {}", kind.label(), cur.status),
            ));
            let via = match kind {
                GuestKind::Vm => "GuestAgent",
                GuestKind::Container => "Interfaces",
            };
            r.set_condition(match &ip {
                Some(ip) => Condition::new("IPAssigned", true, via, ip.clone()),
                None => Condition::new("IPAssigned", false, "NoAddress", last.clone()),
            });
        });
        Ok(())
    }
}
