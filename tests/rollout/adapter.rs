//! How the steps drive a deployer: one small trait, two implementations.
//!
//! * [`BuiltIn`] calls this repository's deployer library (`provision_harness::deploy`).
//! * [`External`] runs the command named by `HARNESS_DEPLOYER_CMD` with the contract below, so the
//!   same features can judge another deployer.
//!
//! ## The external-command contract
//! The harness runs `sh -c "$HARNESS_DEPLOYER_CMD \"\$@\"" sh <action>` where `<action>` is
//! `deploy`, `status` or `destroy`, with these environment variables:
//!
//! | variable | value |
//! |---|---|
//! | `HARNESS_ACTION` | the action again |
//! | `HARNESS_PROVIDER_CONFIG` | a ProviderConfig + credentials Secret YAML (the seed's shape) naming every site |
//! | `HARNESS_MANIFESTS_DIR` | the directory of ProxmoxVM manifests (`*.yaml`, recursive) |
//! | `HARNESS_STATE_DIR` | a directory that is the deployer's own between runs of one scenario |
//! | `HARNESS_STATUS_FILE` | where the deployer writes its status JSON |
//! | `HARNESS_SITES` | JSON `[{"name","url","node","fingerprint","snippets"}]`: the same sites, for deployers without a config parser; `snippets` is `{"storage","path"}` or null |
//! | `HARNESS_PVE_URL`, `HARNESS_PVE_FINGERPRINT` | the first site's base URL (no `/api2/json`) and SHA-256 certificate fingerprint |
//! | `HARNESS_PVE_TOKEN_ID`, `HARNESS_PVE_TOKEN_SECRET` | API token credentials, or … |
//! | `HARNESS_PVE_USERNAME`, `HARNESS_PVE_PASSWORD` | … password credentials |
//! | `HARNESS_CONCURRENCY` | VMs in flight at once |
//! | `HARNESS_FAST` | `1`: poll tasks and back off in tens of milliseconds (the fake's clock runs fast) |
//!
//! A site's `snippets` (also in the provider config: `snippets: {storage, path}`) is a storage
//! with `snippets` content whose directory is mounted at `path` where the deployer runs: PVE's
//! API cannot upload snippets, so a manifest's `userData` reaches its VM only as a file written
//! to `<path>/snippets/` and named in the VM's `cicustom`.
//!
//! The deployer writes to `HARNESS_STATUS_FILE` (or, if it does not, prints on stdout) a JSON
//! object in the deployer's status format: `{"vms":[{"name","site","node","outcome":
//! "ready|failed|skipped|destroyed|absent","vmid","state","ip","attempts","conditions":[…],
//! "error":{"reason","message","retryable"}}],"unreadable":[{"path","error","line"}]}`. Its exit
//! status is not judged (a rollout with a failed VM may exit non-zero); a missing or unparsable
//! status is a harness error that quotes the command's stderr.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};

use provision_harness::config::{Provider, Site, SnippetShare};
use provision_harness::deploy::{DeployOptions, Deployer as BuiltInDeployer};
use provision_harness::mutants::{Reached, run_as};
use provision_harness::pipeline::PipelineOptions;
use provision_harness::pve::tasks::TaskWait;
use provision_harness::pve::{Credentials, TlsMode};
use provision_harness::report_html::{self, Recorder};
use provision_harness::retry::Backoff;

use super::mutants::Mutant;
use super::status::Status;

pub type RunFuture = Pin<Box<dyn Future<Output = anyhow::Result<Status>> + Send>>;
/// A plan report in the deployer's `plan --json` format (`provision_harness::plan::PlanReport`).
pub type PlanFuture = Pin<Box<dyn Future<Output = anyhow::Result<serde_json::Value>> + Send>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Deploy,
    Status,
    Destroy,
    /// Read-only: the plan report, not a status.
    Plan,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deploy => "deploy",
            Action::Status => "status",
            Action::Destroy => "destroy",
            Action::Plan => "plan",
        }
    }
}

/// One site as the deployer must see it.
#[derive(Debug, Clone)]
pub struct SiteTarget {
    pub name: String,
    /// Base URL, without `/api2/json`.
    pub url: String,
    pub node: String,
    /// SHA-256 fingerprint (`AB:CD:…`); `None` with `insecure` or a publicly trusted cert.
    pub fingerprint: Option<String>,
    pub insecure: bool,
    /// The site's snippets share: the storage id and the directory it is mounted at here.
    pub snippets: Option<(String, PathBuf)>,
}

#[derive(Clone)]
pub enum Creds {
    Token { id: String, secret: String },
    Password { username: String, password: String },
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Creds::Token { id, .. } => write!(f, "Token({id}, <redacted>)"),
            Creds::Password { username, .. } => write!(f, "Password({username}, <redacted>)"),
        }
    }
}

/// Everything one deployer run gets.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub action: Action,
    pub sites: Vec<SiteTarget>,
    pub creds: Creds,
    pub manifests_dir: PathBuf,
    pub state_dir: PathBuf,
    pub concurrency: usize,
    /// Where the built-in deployer records the mutation points it reaches (the self-test).
    pub reached: Option<Reached>,
}

pub trait Deployer: std::fmt::Debug + Send + Sync {
    fn describe(&self) -> String;
    /// The future owns everything it needs, so a step can run it in the background and a
    /// "kill" is dropping it.
    fn run(&self, req: RunRequest) -> RunFuture;
    /// `plan`: what the rollout would do, before anything is created.
    fn plan(&self, req: RunRequest) -> PlanFuture;
}

tokio::task_local! {
    /// A deployer that wins over the environment for the scenarios run inside
    /// [`with_deployer`] (the harness self-test runs several suites at once, each with its own).
    static DEPLOYER: Arc<dyn Deployer>;
}

/// Runs `f` (a cucumber run) with every World's deployer being `d`.
pub async fn with_deployer<F: Future>(d: Arc<dyn Deployer>, f: F) -> F::Output {
    DEPLOYER.scope(d, f).await
}

/// Chooses the deployer for this run: the one of [`with_deployer`], else `HARNESS_DEPLOYER_CMD`
/// if set, else the built-in one.
pub fn from_env() -> Arc<dyn Deployer> {
    if let Ok(d) = DEPLOYER.try_with(Arc::clone) {
        return d;
    }
    match std::env::var("HARNESS_DEPLOYER_CMD") {
        Ok(cmd) if !cmd.trim().is_empty() => Arc::new(External { command: cmd }),
        _ => Arc::new(BuiltIn::default()),
    }
}

/// The deployer of this repository, called as a library, tuned for the fake's fast clock; or one
/// of its mutants (the harness self-test).
#[derive(Debug, Default, Clone, Copy)]
pub struct BuiltIn {
    pub mutant: Option<Mutant>,
}

impl BuiltIn {
    pub fn options(req: &RunRequest) -> DeployOptions {
        let mut o = Self::fast_options(req);
        if super::target::RealPve::current().is_some() {
            // A real cluster imports and boots in minutes, not in the fake's fast milliseconds.
            o.pipeline.task_wait = TaskWait {
                poll: Duration::from_millis(100),
                timeout: Duration::from_secs(15 * 60),
            };
            o.pipeline.ip_wait = Duration::from_secs(5 * 60);
            o.pipeline.ip_poll = Duration::from_millis(200);
            o.http_timeout = Duration::from_secs(60);
        }
        o
    }

    fn fast_options(req: &RunRequest) -> DeployOptions {
        DeployOptions {
            concurrency: req.concurrency.max(1),
            backoff: Backoff {
                base: Duration::from_millis(40),
                cap: Duration::from_millis(300),
                max_attempts: 30,
            },
            pipeline: PipelineOptions {
                task_wait: TaskWait {
                    poll: Duration::from_millis(15),
                    timeout: Duration::from_secs(60),
                },
                ip_wait: Duration::from_secs(20),
                ip_poll: Duration::from_millis(25),
                ..PipelineOptions::default()
            },
            http_timeout: Duration::from_secs(20),
            state_path: Some(req.state_dir.join("state.json")),
            ..DeployOptions::default()
        }
    }

    pub fn provider(req: &RunRequest) -> anyhow::Result<Provider> {
        let mut sites = Vec::new();
        for s in &req.sites {
            let tls = match (&s.fingerprint, s.insecure) {
                (Some(fp), _) => TlsMode::Pinned(
                    provision_harness::pve::tls::parse_fingerprint(fp).map_err(|e| anyhow!(e))?,
                ),
                (None, true) => TlsMode::Insecure,
                (None, false) => TlsMode::Verify,
            };
            sites.push(Site {
                name: s.name.clone(),
                endpoint: s.url.clone(),
                node: Some(s.node.clone()),
                tls,
                snippets: s.snippets.as_ref().map(|(storage, path)| SnippetShare {
                    storage: storage.clone(),
                    path: path.clone(),
                }),
            });
        }
        let credentials = match &req.creds {
            Creds::Token { id, secret } => Credentials::Token {
                token_id: id.clone(),
                secret: secret.clone(),
            },
            Creds::Password { username, password } => Credentials::Password {
                username: username.clone(),
                password: password.clone(),
            },
        };
        Ok(Provider { sites, credentials })
    }
}

/// Each built-in deploy leaves its HTML timeline in `<target>/cucumber/html/`, named after the
/// scenario's temp dir and numbered, so a re-run in the same scenario does not overwrite the first.
fn write_timeline(
    req: &RunRequest,
    recorder: &Recorder,
    result: &provision_harness::deploy::RolloutResult,
) -> anyhow::Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let scenario = req
        .state_dir
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rollout".into());
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let names: Vec<&str> = result.vms.iter().map(|v| v.name.as_str()).collect();
    let title = format!("rollout of {} VM(s): {}", names.len(), names.join(", "));
    let path = super::reports_dir()
        .join("html")
        .join(format!("{scenario}-{n}.html"));
    report_html::write(&path, &recorder.finish(&title, result))
        .with_context(|| format!("writing the HTML timeline {}", path.display()))
}

impl BuiltIn {
    /// One run of the library on `req` against `provider`: the status JSON (the plan report for
    /// `plan`). The unmutated deployer also leaves its HTML timeline for a deploy.
    pub async fn execute(
        self,
        provider: Provider,
        req: &RunRequest,
    ) -> anyhow::Result<serde_json::Value> {
        let mut set = provision_harness::manifest::load_dir(&req.manifests_dir)
            .with_context(|| format!("loading manifests from {}", req.manifests_dir.display()))?;
        let mut options = Self::options(req);
        if let Some(r) = &req.reached {
            Mutant::record_input_points(r, &set, req);
        }
        if let Some(m) = self.mutant {
            if m == Mutant::DoesNothing {
                return Ok(super::mutants::claim_everything(&set, req.action));
            }
            m.adjust_manifests(&mut set);
            m.adjust_options(&mut options);
            if req.action == Action::Deploy {
                m.before_run(&req.state_dir.join("state.json"))?;
            }
        }
        let hook = self.mutant.and_then(Mutant::hook);
        if req.action == Action::Plan {
            let options = provision_harness::plan::PlanOptions {
                http_timeout: Duration::from_secs(20),
                ..Default::default()
            };
            let report = run_as(
                hook,
                req.reached.clone(),
                provision_harness::plan::plan(&provider, &set, &options),
            )
            .await;
            return serde_json::to_value(&report).context("serializing the plan report");
        }
        let recorder = Arc::new(Recorder::new());
        let timeline = self.mutant.is_none() && req.action == Action::Deploy;
        if timeline {
            recorder.attach(&mut options);
        }
        let deployer =
            BuiltInDeployer::new(provider, options).context("opening the deployer state")?;
        let result = run_as(hook, req.reached.clone(), async {
            match req.action {
                Action::Deploy => deployer.deploy(&set).await,
                Action::Status => deployer.status(&set).await,
                Action::Destroy => deployer.destroy(&set).await,
                Action::Plan => unreachable!("answered above"),
            }
        })
        .await
        .context("the built-in deployer failed")?;
        if timeline {
            write_timeline(req, &recorder, &result)?;
        }
        if let Some(r) = &req.reached
            && result.vms.iter().any(|v| v.attempts > 1)
        {
            r.record(Mutant::NeverRetries.name());
        }
        serde_json::to_value(&result).context("serializing the rollout result")
    }
}

impl Deployer for BuiltIn {
    fn describe(&self) -> String {
        match self.mutant {
            None => "the built-in deployer (provision_harness::deploy)".into(),
            Some(m) => format!("the built-in deployer's mutant {}", m.name()),
        }
    }

    fn run(&self, req: RunRequest) -> RunFuture {
        let this = *self;
        Box::pin(async move {
            let provider = Self::provider(&req)?;
            let json = this.execute(provider, &req).await?;
            serde_json::from_value(json).context("reading the rollout result as a status")
        })
    }

    fn plan(&self, req: RunRequest) -> PlanFuture {
        let this = *self;
        let req = RunRequest {
            action: Action::Plan,
            ..req
        };
        Box::pin(async move {
            let provider = Self::provider(&req)?;
            this.execute(provider, &req).await
        })
    }
}

/// A deployer outside this process, run through the documented contract.
#[derive(Debug, Clone)]
pub struct External {
    pub command: String,
}

impl External {
    pub fn provider_yaml(req: &RunRequest) -> String {
        let mut y = String::from(
            "apiVersion: proxmox.sankofa.nexus/v1alpha1\nkind: ProviderConfig\nmetadata:\n  name: harness-provider-config\nspec:\n  credentials:\n    source: Secret\n    secretRef:\n      name: harness-credentials\n  sites:\n",
        );
        for s in &req.sites {
            y.push_str(&format!(
                "    - name: {}\n      endpoint: {}\n      node: {}\n",
                s.name, s.url, s.node
            ));
            if let Some(fp) = &s.fingerprint {
                y.push_str(&format!("      fingerprint: \"{fp}\"\n"));
            } else if s.insecure {
                y.push_str("      insecureSkipTLSVerify: true\n");
            }
            if let Some((storage, path)) = &s.snippets {
                y.push_str(&format!(
                    "      snippets:\n        storage: {storage}\n        path: {}\n",
                    serde_json::to_string(&path.display().to_string()).unwrap_or_default()
                ));
            }
        }
        y.push_str("---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: harness-credentials\nstringData:\n");
        match &req.creds {
            Creds::Token { id, secret } => {
                y.push_str(&format!("  tokenid: \"{id}\"\n  token: \"{secret}\"\n"))
            }
            Creds::Password { username, password } => y.push_str(&format!(
                "  username: \"{username}\"\n  password: \"{password}\"\n"
            )),
        }
        y
    }

    pub fn env(
        req: &RunRequest,
        provider_file: &Path,
        status_file: &Path,
    ) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "HARNESS_ACTION".to_string(),
                req.action.as_str().to_string(),
            ),
            (
                "HARNESS_PROVIDER_CONFIG".into(),
                provider_file.display().to_string(),
            ),
            (
                "HARNESS_MANIFESTS_DIR".into(),
                req.manifests_dir.display().to_string(),
            ),
            (
                "HARNESS_STATE_DIR".into(),
                req.state_dir.display().to_string(),
            ),
            (
                "HARNESS_STATUS_FILE".into(),
                status_file.display().to_string(),
            ),
            ("HARNESS_CONCURRENCY".into(), req.concurrency.to_string()),
            ("HARNESS_FAST".into(), "1".into()),
        ];
        let sites: Vec<serde_json::Value> = req
            .sites
            .iter()
            .map(|s| {
                let snippets = s.snippets.as_ref().map(
                    |(storage, path)| serde_json::json!({"storage": storage, "path": path}),
                );
                serde_json::json!({"name": s.name, "url": s.url, "node": s.node, "fingerprint": s.fingerprint, "snippets": snippets})
            })
            .collect();
        env.push((
            "HARNESS_SITES".into(),
            serde_json::Value::Array(sites).to_string(),
        ));
        if let Some(first) = req.sites.first() {
            env.push(("HARNESS_PVE_URL".into(), first.url.clone()));
            if let Some(fp) = &first.fingerprint {
                env.push(("HARNESS_PVE_FINGERPRINT".into(), fp.clone()));
            }
        }
        match &req.creds {
            Creds::Token { id, secret } => {
                env.push(("HARNESS_PVE_TOKEN_ID".into(), id.clone()));
                env.push(("HARNESS_PVE_TOKEN_SECRET".into(), secret.clone()));
            }
            Creds::Password { username, password } => {
                env.push(("HARNESS_PVE_USERNAME".into(), username.clone()));
                env.push(("HARNESS_PVE_PASSWORD".into(), password.clone()));
            }
        }
        env
    }
}

impl Deployer for External {
    fn describe(&self) -> String {
        format!("the external deployer `{}`", self.command)
    }

    fn run(&self, req: RunRequest) -> RunFuture {
        let command = self.command.clone();
        Box::pin(async move {
            let value = External::invoke(&command, &req).await?;
            serde_json::from_value(value)
                .context("the status JSON does not have the deployer's status shape")
        })
    }

    fn plan(&self, req: RunRequest) -> PlanFuture {
        let command = self.command.clone();
        let req = RunRequest {
            action: Action::Plan,
            ..req
        };
        Box::pin(async move { External::invoke(&command, &req).await })
    }
}

impl External {
    /// Runs the command for `req.action` and returns the JSON it wrote.
    async fn invoke(command: &str, req: &RunRequest) -> anyhow::Result<serde_json::Value> {
        {
            let scratch = req.state_dir.join(".harness");
            std::fs::create_dir_all(&scratch).context("creating the harness scratch dir")?;
            let provider_file = scratch.join("provider.yaml");
            let status_file = scratch.join(format!("status-{}.json", req.action.as_str()));
            std::fs::write(&provider_file, External::provider_yaml(req))
                .context("writing the provider config")?;
            let _ = std::fs::remove_file(&status_file);
            let child = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{command} \"$@\""))
                .arg("sh")
                .arg(req.action.as_str())
                .envs(External::env(req, &provider_file, &status_file))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // A killed scenario (dropped future) must kill the deployer too — and what
                // `sh` started: the command gets a process group of its own, killed whole.
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting `{command}`"))?;
            let mut group = KillGroupOnDrop(child.id());
            let out = child
                .wait_with_output()
                .await
                .with_context(|| format!("running `{command}`"))?;
            group.0 = None;
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: String = stderr
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            let text = match std::fs::read_to_string(&status_file) {
                Ok(t) => t,
                Err(_) => String::from_utf8_lossy(&out.stdout).into_owned(),
            };
            serde_json::from_str(&text).map_err(|e| {
                anyhow!(
                    "`{command} {}` (exit {:?}) wrote no status JSON to HARNESS_STATUS_FILE or stdout ({e}); its stderr ends with:\n{tail}",
                    req.action.as_str(),
                    out.status.code()
                )
            })
        }
    }
}

/// SIGKILLs the process group of an external deployer that is still running when its run is
/// dropped (a "kill" step). Killing only `sh` would leave the deployer it started running on as
/// an orphan, racing the resumed run for the cluster and the state file.
struct KillGroupOnDrop(Option<u32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
