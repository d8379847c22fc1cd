//! A rollout: manifests → a [`Rollout`] (validated specs, waves in the seed's order), VMs
//! inside a wave with bounded concurrency (and `dependsOn` respected), each VM retried with
//! backoff while its error is retryable, cleaned up when it finally fails after this rollout
//! created it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde::Serialize;
use tokio::sync::{Semaphore, watch};
use tracing::Instrument as _;

use crate::deployer::config::Provider;
use crate::deployer::errors::StepError;
use crate::deployer::manifest::{ManifestSet, Unreadable};
use crate::deployer::pipeline::{Pipeline, PipelineOptions, Step, StepSink, VmJob};
use crate::deployer::retry::Backoff;
use crate::deployer::rollout::{Rollout, RolloutVm};
use crate::deployer::site::{SiteCtx, connect_named};
use crate::deployer::state::{Condition, ErrorRecord, Stage, StateStore, VmRecord};
use crate::deployer::validate::ValidSpec;

/// Called when a VM finishes: (name, ok).
pub type DoneHook = Arc<dyn Fn(&str, bool) + Send + Sync>;

type Signal = (watch::Sender<Option<bool>>, watch::Receiver<Option<bool>>);
type Signals = BTreeMap<String, Signal>;
/// Per site: the connection, or why it failed (retried on the VMs' schedule when retryable).
type SiteSlots = BTreeMap<String, tokio::sync::Mutex<Result<Arc<SiteCtx>, StepError>>>;

#[derive(Clone)]
pub struct DeployOptions {
    /// VMs in flight at once within a wave.
    pub concurrency: usize,
    pub backoff: Backoff,
    pub pipeline: PipelineOptions,
    /// Per HTTP call.
    pub http_timeout: Duration,
    /// Where the rollout's state lives; `None` keeps it in memory.
    pub state_path: Option<PathBuf>,
    pub on_step: Option<StepSink>,
    /// Called when a VM finishes (name, ok).
    pub on_done: Option<DoneHook>,
}

impl Default for DeployOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            backoff: Backoff::default(),
            pipeline: PipelineOptions::default(),
            http_timeout: Duration::from_secs(30),
            state_path: None,
            on_step: None,
            on_done: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ready,
    Failed,
    Skipped,
    Destroyed,
    Absent,
}

/// One VM's result — the status contract (`--json`), also for external deployer commands.
#[derive(Debug, Clone, Serialize)]
pub struct VmOutcome {
    pub name: String,
    pub site: String,
    pub node: String,
    pub manifest: String,
    pub wave: String,
    pub outcome: Outcome,
    pub vmid: Option<u32>,
    pub state: Option<String>,
    pub ip: Option<String>,
    pub attempts: u32,
    pub conditions: Vec<Condition>,
    pub error: Option<ErrorRecord>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub total: usize,
    pub ready: usize,
    pub failed: usize,
    pub skipped: usize,
    pub unreadable: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct RolloutResult {
    pub vms: Vec<VmOutcome>,
    pub unreadable: Vec<Unreadable>,
    pub summary: Summary,
    pub elapsed_ms: u128,
}

impl RolloutResult {
    pub fn all_ready(&self) -> bool {
        self.summary.failed == 0 && self.summary.skipped == 0 && self.summary.unreadable == 0
    }

    pub(crate) fn finish(
        vms: Vec<VmOutcome>,
        unreadable: Vec<Unreadable>,
        started: Instant,
    ) -> Self {
        let count = |o: Outcome| vms.iter().filter(|v| v.outcome == o).count();
        let summary = Summary {
            total: vms.len() + unreadable.len(),
            ready: count(Outcome::Ready),
            failed: count(Outcome::Failed),
            skipped: count(Outcome::Skipped),
            unreadable: unreadable.len(),
        };
        Self {
            vms,
            unreadable,
            summary,
            elapsed_ms: started.elapsed().as_millis(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error(transparent)]
    State(#[from] crate::deployer::state::StateError),
}

/// Cheap to clone (shared provider, options and state): each VM's attempts run as a task of
/// their own with a clone (see `deploy_rollout`).
#[derive(Clone)]
pub struct Deployer {
    provider: Arc<Provider>,
    options: Arc<DeployOptions>,
    state: StateStore,
}

/// What the VM tasks of one `deploy` run share: the rollout (a VM's spec) and the sites.
struct Run {
    rollout: Rollout,
    sites: SiteSlots,
}

/// A spawned task that is aborted when its handle is dropped: a `deploy` future dropped (a
/// killed run) takes its VMs' tasks with it, as it took their inline futures before.
struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Deployer {
    pub fn new(provider: Provider, options: DeployOptions) -> Result<Self, DeployError> {
        let state = StateStore::open(options.state_path.as_deref())?;
        Ok(Self {
            provider: Arc::new(provider),
            options: Arc::new(options),
            state,
        })
    }

    pub fn state(&self) -> &StateStore {
        &self.state
    }

    pub(crate) fn task_wait(&self) -> crate::deployer::pve::tasks::TaskWait {
        self.options.pipeline.task_wait
    }

    /// Connects every site a manifest names; a site that cannot be reached or refuses the
    /// credentials becomes the error of each of its VMs.
    pub(crate) async fn connect_sites(
        &self,
        names: impl Iterator<Item = String>,
    ) -> BTreeMap<String, Result<Arc<SiteCtx>, StepError>> {
        let mut wanted: Vec<String> = names.collect();
        wanted.sort();
        wanted.dedup();
        let futs = wanted
            .iter()
            .map(|name| async move { (name.clone(), self.connect_site(name).await) });
        join_all(futs).await.into_iter().collect()
    }

    /// Connects one site by name; a name the provider config lacks is `SiteUnknown`.
    async fn connect_site(&self, name: &str) -> Result<Arc<SiteCtx>, StepError> {
        connect_named(&self.provider, name, self.options.http_timeout)
            .await
            .map(Arc::new)
    }

    /// Deploys every readable manifest. Unreadable ones are reported, never guessed at.
    pub async fn deploy(&self, set: &ManifestSet) -> Result<RolloutResult, DeployError> {
        self.deploy_rollout(&Rollout::new(set)).await
    }

    /// Deploys a rollout wave by wave; inside a wave, VMs run with bounded concurrency and wait
    /// for the VMs they depend on.
    ///
    /// The gate (a VM's dependencies, then a permit of the semaphore) is polled here, in
    /// manifest order as before, so VMs take permits in the same order; what a VM does once it
    /// holds one (its attempts: the API calls, their encoding and decoding) runs as a task of
    /// its own, so a large rollout's work spreads over the runtime's threads instead of all
    /// running on the one polling this future.
    #[tracing::instrument(name = "deploy", skip_all, fields(vms = rollout.vms.len()))]
    pub async fn deploy_rollout(&self, rollout: &Rollout) -> Result<RolloutResult, DeployError> {
        let started = Instant::now();
        let deployable = || rollout.vms.iter().filter_map(|v| v.deployable().ok());
        let sites: SiteSlots = self
            .connect_sites(deployable().map(|p| p.site.clone()))
            .await
            .into_iter()
            .map(|(k, v)| (k, tokio::sync::Mutex::new(v)))
            .collect();
        // One "done" signal per VM name, for dependsOn.
        let signals: Signals = deployable()
            .map(|p| (p.name.clone(), watch::channel(None)))
            .collect();
        let run = Arc::new(Run {
            rollout: rollout.clone(),
            sites,
        });
        let semaphore = Semaphore::new(self.options.concurrency.max(1));
        for wave in &rollout.waves {
            let futs = wave.iter().map(|&i| {
                let vm = &rollout.vms[i];
                let run = &run;
                let sem = &semaphore;
                let signals = &signals;
                let span = tracing::info_span!("vm", vm = %vm.name);
                async move {
                    let ok = self.run_vm(i, run, signals, sem).await;
                    self.announce_done(vm, signals, ok);
                }
                .instrument(span)
            });
            join_all(futs).await;
        }
        self.state.checkpoint().await?;
        let outcomes = rollout
            .report_order()
            .into_iter()
            .map(|i| self.outcome(&rollout.vms[i]))
            .collect();
        Ok(RolloutResult::finish(
            outcomes,
            rollout.unreadable.clone(),
            started,
        ))
    }

    /// Tells the VMs that depend on `vm`, and the `on_done` hook, how it ended.
    fn announce_done(&self, vm: &RolloutVm, signals: &Signals, ok: bool) {
        let spec = vm.deployable().ok();
        if let Some(p) = spec
            && let Some((tx, _)) = signals.get(&p.name)
        {
            let _ = tx.send(Some(ok));
        }
        if let Some(f) = &self.options.on_done {
            f(spec.map(|p| p.name.as_str()).unwrap_or(&vm.manifest), ok);
        }
    }

    /// One VM: refused if invalid, failed if a dependency failed, else run through the pipeline
    /// until it is ready, fails for good, or runs out of attempts. Returns whether it is ready.
    async fn run_vm(&self, i: usize, run: &Arc<Run>, signals: &Signals, sem: &Semaphore) -> bool {
        let vm = &run.rollout.vms[i];
        let spec = match vm.deployable() {
            Ok(p) => p,
            Err(e) => {
                self.fail(vm, None, &e, 0);
                return false;
            }
        };
        if let Err(dep) = wait_for_dependencies(vm, signals).await {
            self.fail(vm, Some(spec), &StepError::DependencyFailed(dep), 0);
            return false;
        }
        let Ok(_permit) = sem.acquire().await else {
            return false;
        };
        let me = self.clone();
        let run = Arc::clone(run);
        let attempts = async move {
            let vm = &run.rollout.vms[i];
            // Deployable: checked above (the task owns the rollout, so it takes the spec again).
            match vm.deployable() {
                Ok(spec) => me.attempts(vm, spec, &run.sites).await,
                Err(_) => false,
            }
        };
        // The run's mutant scope too (the harness's self-test), which a task-local alone would
        // lose across the spawn.
        let attempts = crate::mutants::in_current_scope(attempts);
        let mut task = Task(tokio::spawn(attempts.in_current_span()));
        match (&mut task.0).await {
            Ok(ok) => ok,
            // A panic in a VM's attempts is a bug: surface it as the inline future did.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => false,
        }
    }

    /// The retry loop around the pipeline: backoff while the error is retryable, cleanup and
    /// failure when it is not (or attempts run out).
    async fn attempts(&self, vm: &RolloutVm, spec: &ValidSpec, sites: &SiteSlots) -> bool {
        let job = VmJob {
            key: vm.key.clone(),
            manifest: &vm.manifest,
            spec,
        };
        let mut last_site: Option<Arc<SiteCtx>> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.state.update(
                &vm.key,
                || blank(vm, spec),
                |r| {
                    r.attempts = attempt;
                    r.manifest = vm.manifest.clone();
                    if r.stage >= Stage::Failed {
                        r.stage = Stage::Pending;
                    }
                },
            );
            let span = tracing::info_span!("attempt", vm = %spec.name, attempt);
            let result = async {
                match self.site_for(sites, &spec.site).await {
                    Ok(site) => {
                        last_site = Some(Arc::clone(&site));
                        Pipeline {
                            site: &site,
                            state: &self.state,
                            options: &self.options.pipeline,
                            sink: self.options.on_step.as_ref(),
                        }
                        .run(&job)
                        .await
                    }
                    Err(e) => Err(e),
                }
            }
            .instrument(span)
            .await;
            match result {
                Ok(()) => return true,
                Err(e)
                    if (e.is_retryable()
                        || crate::mutants::active(crate::mutants::Mutant::RetriesFailFast))
                        && attempt < self.options.backoff.max_attempts =>
                {
                    self.back_off(vm, spec, attempt, &e).await;
                }
                Err(e) => {
                    tracing::info!(vm = %spec.name, attempt, error = %e, "failed");
                    if let Some(site) = &last_site {
                        self.cleanup(site, vm, spec).await;
                    }
                    self.fail(vm, Some(spec), &e, attempt);
                    let _ = self.state.persist().await;
                    return false;
                }
            }
        }
    }

    /// Records why attempt `attempt` failed and sleeps the backoff delay.
    #[tracing::instrument(name = "backoff", skip_all, fields(vm = %spec.name, attempt))]
    async fn back_off(&self, vm: &RolloutVm, spec: &ValidSpec, attempt: u32, e: &StepError) {
        let delay = self.options.backoff.delay(attempt);
        tracing::info!(vm = %spec.name, attempt, error = %e, delay_ms = delay.as_millis() as u64, "retrying");
        self.state.update(
            &vm.key,
            || blank(vm, spec),
            |r| {
                r.set_condition(Condition::new(
                    "Ready",
                    false,
                    e.reason(),
                    format!("attempt {attempt}: {e}"),
                ));
            },
        );
        // Observers (progress, the HTML timeline) see the wait as a step of its own.
        if let Some(sink) = &self.options.on_step {
            sink(&spec.name, Step::Backoff.name());
        }
        tokio::time::sleep(delay).await;
    }

    /// The site's connection; a retryable connect failure (site down at the start) is tried
    /// again, once per VM attempt, under the slot's lock so VMs share one reconnect.
    async fn site_for(&self, slots: &SiteSlots, name: &str) -> Result<Arc<SiteCtx>, StepError> {
        let Some(slot) = slots.get(name) else {
            return Err(StepError::SiteUnknown(name.to_string()));
        };
        let mut guard = slot.lock().await;
        match &*guard {
            Ok(s) => return Ok(Arc::clone(s)),
            Err(e) if !e.is_retryable() => return Err(e.clone()),
            Err(_) => {}
        }
        let r = self.connect_site(name).await;
        *guard = r.clone();
        r
    }

    /// Deletes (purge) a VM this rollout created and could not finish.
    #[tracing::instrument(name = "cleanup", skip_all, fields(vm = %spec.name))]
    async fn cleanup(&self, site: &SiteCtx, vm: &RolloutVm, spec: &ValidSpec) {
        let Some(rec) = self.state.get(&vm.key) else {
            return;
        };
        let (Some(vmid), true) = (rec.vmid, rec.created_here) else {
            return;
        };
        if crate::mutants::active(crate::mutants::Mutant::NoCleanupAfterFailedCreate) {
            return;
        }
        let c = &site.client;
        let wait = self.options.pipeline.task_wait;
        if let Ok(cur) = c.guest_current(spec.kind, &spec.node, vmid).await
            && cur.status == "running"
            && let Ok(upid) = c.stop_guest(spec.kind, &spec.node, vmid).await
        {
            let _ = c.await_task(&upid, wait).await;
        }
        match c.destroy_guest(spec.kind, &spec.node, vmid).await {
            Ok(upid) => match c.await_task(&upid, wait).await {
                Ok(_) => {
                    tracing::info!(vm = %spec.name, vmid, "cleaned up");
                    self.state.update(
                        &vm.key,
                        || blank(vm, spec),
                        |r| {
                            r.vmid = None;
                            r.created_here = false;
                            r.set_condition(Condition::new(
                                "CleanedUp",
                                true,
                                "Deleted",
                                format!("VM {vmid} deleted (purge) after the failure"),
                            ));
                        },
                    );
                }
                Err(e) => tracing::warn!(vm = %spec.name, vmid, error = %e, "cleanup task failed"),
            },
            Err(e) if e.text().contains("does not exist") => {
                self.state
                    .update(&vm.key, || blank(vm, spec), |r| r.vmid = None);
            }
            Err(e) => tracing::warn!(vm = %spec.name, vmid, error = %e, "cleanup failed"),
        }
    }

    fn fail(&self, vm: &RolloutVm, spec: Option<&ValidSpec>, e: &StepError, attempts: u32) {
        let init = || match spec {
            Some(p) => blank(vm, p),
            None => VmRecord {
                name: vm.key.rsplit('/').next().unwrap_or(&vm.key).to_string(),
                site: vm.key.split('/').next().unwrap_or("").to_string(),
                manifest: vm.manifest.clone(),
                ..VmRecord::default()
            },
        };
        self.state.update(&vm.key, init, |r| {
            r.stage = Stage::Failed;
            r.attempts = attempts;
            r.error = Some(ErrorRecord {
                reason: e.reason().to_string(),
                message: e.to_string(),
                retryable: e.is_retryable(),
            });
            r.set_condition(Condition::new("Ready", false, e.reason(), e.to_string()));
        });
    }

    fn outcome(&self, vm: &RolloutVm) -> VmOutcome {
        let rec = self.state.get(&vm.key).unwrap_or_default();
        let outcome = match rec.stage {
            Stage::Ready => Outcome::Ready,
            Stage::Failed => Outcome::Failed,
            Stage::Destroyed => Outcome::Destroyed,
            _ => Outcome::Skipped,
        };
        to_outcome(&rec, &vm.wave, outcome)
    }
}

/// Waits until every VM `vm` depends on has finished; the first that failed is the error.
async fn wait_for_dependencies(vm: &RolloutVm, signals: &Signals) -> Result<(), String> {
    for dep in &vm.depends_on {
        if let Some((_, rx)) = signals.get(dep) {
            let mut rx = rx.clone();
            let ok = match rx.wait_for(|v| v.is_some()).await {
                Ok(v) => v.unwrap_or(false),
                Err(_) => false,
            };
            if !ok {
                return Err(dep.clone());
            }
        }
    }
    Ok(())
}

fn blank(vm: &RolloutVm, p: &ValidSpec) -> VmRecord {
    VmRecord {
        kind: p.kind,
        name: p.name.clone(),
        site: p.site.clone(),
        node: p.node.clone(),
        manifest: vm.manifest.clone(),
        ..VmRecord::default()
    }
}

pub(crate) fn to_outcome(rec: &VmRecord, wave: &str, outcome: Outcome) -> VmOutcome {
    VmOutcome {
        name: rec.name.clone(),
        site: rec.site.clone(),
        node: rec.node.clone(),
        manifest: rec.manifest.clone(),
        wave: wave.to_string(),
        outcome,
        vmid: rec.vmid,
        state: rec.state.clone(),
        ip: rec.ip.clone(),
        attempts: rec.attempts,
        conditions: rec.conditions.clone(),
        error: rec.error.clone(),
    }
}
