//! `rehearse`: the seed's rollout against an embedded fake-proxmox (TLS on, certificate pinned,
//! tasks on a fast clock) — plan, then deploy — and the same for the fixed rollout, so the report
//! shows both what goes wrong as written and that the fixes make it green.

use std::path::Path;
use std::time::{Duration, Instant};

use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
use serde::Serialize;
use tracing::Instrument as _;

use crate::deployer::config::{Provider, parse_provider, parse_secret};
use crate::deployer::deploy::{DeployOptions, Deployer, RolloutResult};
use crate::deployer::examples;
use crate::deployer::manifest::{ManifestSet, load_texts};
use crate::deployer::pipeline::PipelineOptions;
use crate::deployer::plan::{PlanOptions, PlanReport, Verdict, plan};
use crate::deployer::pve::tasks::TaskWait;
use crate::deployer::pve::tls::{TlsMode, parse_fingerprint};
use crate::deployer::retry::Backoff;

/// A rollout to rehearse: manifests, provider config and the fake's scenario.
pub struct Rollout {
    pub label: String,
    pub manifests: ManifestSet,
    pub provider: Provider,
    pub scenario: Scenario,
}

#[derive(Clone)]
pub struct RehearseOptions {
    pub concurrency: usize,
    /// Simulated seconds per real second for the fake's tasks and guest boots.
    pub clock_factor: f64,
    pub deploy: DeployOptions,
    pub plan: PlanOptions,
    /// How a lab-backed site of the scenario runs its real guests.
    pub lab: LabOptions,
    /// Where the fake's requests and tasks go before it shuts down (`rehearse --trace`).
    pub trace: Option<crate::trace::Capture>,
}

impl RehearseOptions {
    /// For a rollout on real guests: the deployer waits in real time (a guest boots in tens
    /// of seconds under TCG; the fake's tasks stay on the fast clock), and each guest's QEMU
    /// gets at most 512 MiB whatever the manifest asks (PVE-side figures keep the manifest's).
    pub fn lab() -> Self {
        let mut o = Self::default();
        o.deploy.pipeline.ip_wait = Duration::from_secs(600);
        o.deploy.pipeline.ip_poll = Duration::from_secs(1);
        o.deploy.pipeline.task_wait = TaskWait {
            poll: Duration::from_millis(50),
            timeout: Duration::from_secs(600),
        };
        o.deploy.http_timeout = Duration::from_secs(60);
        o.lab.memory_cap_mib = 512;
        o
    }
}

impl Default for RehearseOptions {
    fn default() -> Self {
        let deploy = DeployOptions {
            concurrency: 8,
            backoff: Backoff {
                base: Duration::from_millis(20),
                cap: Duration::from_millis(200),
                max_attempts: 3,
            },
            pipeline: PipelineOptions {
                task_wait: TaskWait {
                    poll: Duration::from_millis(5),
                    timeout: Duration::from_secs(60),
                },
                ip_wait: Duration::from_secs(5),
                ip_poll: Duration::from_millis(10),
                ..PipelineOptions::default()
            },
            http_timeout: Duration::from_secs(10),
            ..DeployOptions::default()
        };
        Self {
            concurrency: 8,
            clock_factor: 2000.0,
            deploy,
            plan: PlanOptions::default(),
            lab: LabOptions::default(),
            trace: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub label: String,
    pub plan: PlanReport,
    pub deploy: RolloutResult,
    /// The deploy's steps over time, for the HTML report (`report_html`).
    #[serde(skip)]
    pub timeline: crate::deployer::report_html::Timeline,
}

#[derive(Debug, Clone, Serialize)]
pub struct RehearseReport {
    pub runs: Vec<RunReport>,
    pub elapsed_ms: u128,
}

impl RehearseReport {
    /// Whether any run's plan would fail or any VM failed (for `--strict`).
    pub fn has_problems(&self) -> bool {
        self.runs
            .iter()
            .any(|r| r.plan.verdict == Verdict::WouldFail || !r.deploy.all_ready())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RehearseError {
    #[error("embedded example: {0}")]
    Example(String),
    #[error("scenario: {0}")]
    Scenario(#[from] fake_proxmox::ScenarioError),
    #[error("cannot start fake-proxmox: {0}")]
    Fake(#[from] fake_proxmox::Error),
    #[error("fake-proxmox fingerprint: {0}")]
    Fingerprint(String),
    #[error("site '{0}' of the provider config is not in the scenario")]
    SiteMissing(String),
    #[error("the cloud image for the lab rollout: {0}")]
    Image(String),
    #[error(transparent)]
    Deploy(#[from] crate::deployer::deploy::DeployError),
    #[error("the cluster on the deployer's VMs: {0}")]
    Stack(String),
}

fn embedded_provider(config: &str, secret: &str) -> Result<Provider, RehearseError> {
    let (sites, secret_name) = parse_provider(config, "provider-config.yaml", Path::new("."))
        .map_err(|e| RehearseError::Example(e.to_string()))?;
    let credentials = parse_secret(secret, "proxmox-credentials.yaml", secret_name.as_deref())
        .map_err(|e| RehearseError::Example(e.to_string()))?
        .ok_or_else(|| RehearseError::Example("no credentials Secret".into()))?;
    Ok(Provider { sites, credentials })
}

/// The seed's rollout as written, on the seed's two sites.
pub fn seed_rollout(scenario: Option<Scenario>) -> Result<Rollout, RehearseError> {
    Ok(Rollout {
        label: "seed rollout as written (examples/sankofa)".into(),
        manifests: load_texts(examples::SANKOFA_MANIFESTS.iter().copied()),
        provider: embedded_provider(
            examples::SANKOFA_PROVIDER_CONFIG,
            examples::SANKOFA_CREDENTIALS,
        )?,
        scenario: scenario.unwrap_or_else(Scenario::embedded_default),
    })
}

/// The rollout with its storage, image and capacity problems fixed.
pub fn fixed_rollout() -> Result<Rollout, RehearseError> {
    Ok(Rollout {
        label: "fixed rollout (examples/sankofa-fixed)".into(),
        manifests: load_texts(examples::SANKOFA_FIXED_MANIFESTS.iter().copied()),
        provider: embedded_provider(
            examples::SANKOFA_FIXED_PROVIDER_CONFIG,
            examples::SANKOFA_FIXED_CREDENTIALS,
        )?,
        scenario: Scenario::from_yaml_str(examples::SANKOFA_FIXED_SCENARIO)?,
    })
}

/// Seed 002's three PhotonCloud nodes on a lab-backed site (`backend: lab`): each VM is a real
/// QEMU guest booting `image` (the project's cloud image as qcow2), which the site's `local`
/// storage holds as the `import` volume the manifests name.
pub fn lab_rollout(image: &Path) -> Result<Rollout, RehearseError> {
    let mut scenario = Scenario::from_yaml_str(examples::PHOTONCLOUD_SCENARIO)?;
    let (sid, volname) = examples::PHOTONCLOUD_IMAGE_VOLUME;
    let volume = scenario
        .sites
        .iter_mut()
        .flat_map(|s| &mut s.nodes)
        .flat_map(|n| &mut n.storages)
        .filter(|s| s.name == sid)
        .flat_map(|s| &mut s.volumes)
        .find(|v| v.volname == volname)
        .ok_or_else(|| {
            RehearseError::Example(format!("the lab scenario has no volume {sid}:{volname}"))
        })?;
    volume.file = Some(image.to_path_buf());
    Ok(Rollout {
        label: "seed 002's PhotonCloud nodes on real guests (examples/photoncloud-t036/rollout)"
            .into(),
        manifests: load_texts(examples::PHOTONCLOUD_MANIFESTS.iter().copied()),
        provider: embedded_provider(
            examples::PHOTONCLOUD_PROVIDER_CONFIG,
            examples::PHOTONCLOUD_CREDENTIALS,
        )?,
        scenario,
    })
}

/// The project's cloud image (built from Debian packages, or vm-lab's cached build) converted
/// to qcow2 in `dir`, as cloud images ship. Blocking.
pub fn cloud_image_qcow2(dir: &Path) -> Result<std::path::PathBuf, RehearseError> {
    cloud_image_qcow2_with(dir, &vm_lab::image::cloud::CloudImageRequest::default())
}

/// [`cloud_image_qcow2`] of the image `req` asks for (a golden image with the cluster's
/// packages baked in, say).
pub fn cloud_image_qcow2_with(
    dir: &Path,
    req: &vm_lab::image::cloud::CloudImageRequest,
) -> Result<std::path::PathBuf, RehearseError> {
    let img = vm_lab::image::cloud::build(&vm_lab::image::default_cache_dir(), req)
        .map_err(|e| RehearseError::Image(e.to_string()))?;
    let out = dir.join("provision-harness-cloud.qcow2");
    let run = std::process::Command::new("qemu-img")
        .args(["convert", "-O", "qcow2"])
        .arg(&img.path)
        .arg(&out)
        .output()
        .map_err(|e| RehearseError::Image(format!("running qemu-img (install qemu-utils): {e}")))?;
    if !run.status.success() {
        return Err(RehearseError::Image(format!(
            "qemu-img convert: {}",
            String::from_utf8_lossy(&run.stderr).trim()
        )));
    }
    Ok(out)
}

/// Starts a fake for the rollout's scenario, points every site at it (pinned certificate),
/// plans, deploys, and shuts the fake down.
pub async fn run(
    mut rollout: Rollout,
    options: &RehearseOptions,
) -> Result<RunReport, RehearseError> {
    let shares_dir = tempfile::tempdir()
        .map_err(|e| RehearseError::Example(format!("a directory for snippets: {e}")))?;
    share_snippets(&mut rollout, shares_dir.path())?;
    let fake = FakeProxmox::builder()
        .scenario(rollout.scenario)
        .lab_options(options.lab.clone())
        .tls(true)
        .auth_failure_delay(false)
        .clock(ClockMode::Scaled {
            factor: options.clock_factor,
        })
        .start()
        .await?;
    let span = tracing::info_span!("rehearsal", label = %rollout.label);
    let result = run_against(
        &fake,
        rollout.label,
        rollout.manifests,
        rollout.provider,
        options,
    )
    .instrument(span)
    .await;
    if let Some(capture) = &options.trace {
        let controls: Vec<_> = fake.sites().map(|s| s.control()).collect();
        match crate::trace::fake::FakeRecord::read(&controls).await {
            Ok(rec) => {
                let mut t = crate::trace::Trace::default();
                rec.add_to(&mut t);
                capture.add(t);
            }
            Err(e) => tracing::warn!(error = %e, "the fake's journal for the trace"),
        }
    }
    fake.shutdown().await;
    result
}

/// Each site's snippets storage gets a directory under `root` that the deployer writes
/// `userData` snippets into (PVE's API cannot upload them; a real deployer mounts a share):
/// the scenario's `backing_dir`, and the provider config's `snippets` where it names none.
pub fn share_snippets(rollout: &mut Rollout, root: &Path) -> Result<(), RehearseError> {
    let shares = rollout
        .scenario
        .share_snippets(root)
        .map_err(|e| RehearseError::Example(format!("a directory for snippets: {e}")))?;
    for share in shares {
        if let Some(site) = rollout
            .provider
            .sites
            .iter_mut()
            .find(|s| s.name == share.site && s.snippets.is_none())
        {
            site.snippets = Some(crate::deployer::config::SnippetShare {
                storage: share.storage,
                path: share.dir,
            });
        }
    }
    Ok(())
}

/// Plans and deploys against an already running fake.
pub async fn run_against(
    fake: &FakeProxmox,
    label: String,
    manifests: ManifestSet,
    mut provider: Provider,
    options: &RehearseOptions,
) -> Result<RunReport, RehearseError> {
    let names: Vec<String> = provider.sites.iter().map(|s| s.name.clone()).collect();
    for name in names {
        let site = fake
            .site(&name)
            .ok_or_else(|| RehearseError::SiteMissing(name.clone()))?;
        let pin = parse_fingerprint(site.fingerprint()).map_err(RehearseError::Fingerprint)?;
        provider.override_endpoint(&name, site.url(), TlsMode::Pinned(pin));
    }
    let plan = plan(&provider, &manifests, &options.plan).await;
    let mut deploy = options.deploy.clone();
    deploy.concurrency = options.concurrency;
    let recorder = std::sync::Arc::new(crate::deployer::report_html::Recorder::new());
    recorder.attach(&mut deploy);
    let deployer = Deployer::new(provider, deploy)?;
    let result = deployer.deploy(&manifests).await?;
    let timeline = recorder.finish(&label, &result);
    Ok(RunReport {
        label,
        plan,
        deploy: result,
        timeline,
    })
}

/// The seed rollout (or `scenario` instead of the seed's sites), then the fixed one.
pub async fn rehearse(
    scenario: Option<Scenario>,
    include_fixed: bool,
    options: &RehearseOptions,
) -> Result<RehearseReport, RehearseError> {
    let started = Instant::now();
    let mut runs = vec![run(seed_rollout(scenario)?, options).await?];
    if include_fixed {
        runs.push(run(fixed_rollout()?, options).await?);
    }
    Ok(RehearseReport {
        runs,
        elapsed_ms: started.elapsed().as_millis(),
    })
}

/// The PhotonCloud nodes deployed onto real guests ([`lab_rollout`]): needs QEMU, qemu-img and
/// the Debian packages the cloud image is made of (see vm-lab's README).
pub async fn rehearse_lab(options: &RehearseOptions) -> Result<RehearseReport, RehearseError> {
    let started = Instant::now();
    let dir = tempfile::tempdir()
        .map_err(|e| RehearseError::Image(format!("making a temporary directory: {e}")))?;
    let path = dir.path().to_path_buf();
    let image = tokio::task::spawn_blocking(move || cloud_image_qcow2(&path))
        .await
        .map_err(|e| RehearseError::Image(e.to_string()))??;
    let runs = vec![run(lab_rollout(&image)?, options).await?];
    Ok(RehearseReport {
        runs,
        elapsed_ms: started.elapsed().as_millis(),
    })
}
