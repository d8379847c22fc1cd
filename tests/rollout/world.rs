//! One World per scenario: its own fake-proxmox (own ports, state and fast clock) or, when
//! `HARNESS_PVE_URL` is set, a real PVE test cluster; its own manifests and state directory; the
//! deployer behind the adapter; and the verbs the steps are made of.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use fake_proxmox::storage::image_facts::ImageFacts;
use fake_proxmox::{ClockMode, ControlClient, FakeProxmox, Scenario, SnippetShare};
use tokio::task::JoinHandle;

use super::adapter::{self, Action, Creds, Deployer, RunRequest, SiteTarget};
use super::journal::{Entry, Journal};
use super::manifest::VmManifest;
use super::pve::Observer;
use super::recorder::Recorder;
use super::status::Status;
use super::target::TargetMap;

/// The seed's API token (the fake's default scenario holds it).
pub const HARNESS_TOKEN_ID: &str = "root@pam!harness";
pub const HARNESS_TOKEN_SECRET: &str = "3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a";
pub const ROOT_PASSWORD: &str = "harness";
/// Simulated seconds per real second: the fake's boot delays and imports take milliseconds.
pub const CLOCK_FACTOR: f64 = 100.0;

pub use super::target::RealPve;

pub enum Target {
    /// The fake is configured but not started yet (steps may still change its scenario).
    Pending(Box<Scenario>),
    Fake(FakeProxmox),
    Real(Box<RealPve>),
}

/// A deployer run: the journal window it covers and what it reported.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub first_seq: u64,
    pub last_seq: u64,
    pub status: Status,
}

/// A second, independent deployer (own state) for the race scenarios.
#[derive(Debug)]
pub struct Peer {
    pub manifests: BTreeMap<String, VmManifest>,
    pub dir: tempfile::TempDir,
    pub last: Option<Status>,
}

#[derive(cucumber::World)]
#[world(init = Self::new)]
pub struct RolloutWorld {
    pub target: Option<Target>,
    pub deployer: Arc<dyn Deployer>,
    pub dir: tempfile::TempDir,
    pub creds: Creds,
    pub manifests: BTreeMap<String, VmManifest>,
    /// Manifest files copied as they are (the seed's rollout), relative path → text.
    pub raw_manifests: BTreeMap<String, String>,
    pub concurrency: usize,
    pub runs: Vec<Run>,
    pub background: Option<(u64, JoinHandle<anyhow::Result<Status>>)>,
    pub peer: Option<Peer>,
    /// The last raw probe's answer: status and reason phrase.
    pub answer: Option<(u16, String)>,
    pub probe_window: Option<(u64, u64)>,
    /// VMIDs the last successful deploy reported, by name (for "same VMID as before").
    pub vmids_before: BTreeMap<String, Option<u32>>,
    pub destroyed: Vec<(String, u32)>,
    /// Volumes to place right after the fake starts: (node, storage, volname, bytes).
    pub setup_uploads: Vec<(String, String, String, u64)>,
    /// The last plan report (the deployer's `plan --json` shape).
    pub plan: Option<serde_json::Value>,
    /// The clock the fake starts with (fast by default; stepped where a scenario must hold a
    /// task mid-way regardless of build speed).
    pub clock: ClockMode,
    /// The mutation points the built-in deployer reached in this scenario (the self-test).
    pub reached: provision_harness::mutants::Reached,
    /// Real-target mode: this scenario's names on the target (see `target.rs`).
    pub map: Option<TargetMap>,
    /// Real-target mode: the recording proxy the deployer talks through (see `recorder.rs`).
    pub recorder: Option<Recorder>,
    /// What the deployer and the fault steps recorded for the scenario's trace.
    pub capture: provision_harness::trace::Capture,
    /// Each site's snippets share (the directory the deployer writes `userData` snippets
    /// into and the fake reads them from), once the fake started.
    pub snippet_shares: BTreeMap<String, SnippetShare>,
}

impl std::fmt::Debug for RolloutWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            None => "none".to_string(),
            Some(Target::Pending(_)) => "fake (not started)".to_string(),
            Some(Target::Fake(fake)) => format!(
                "fake {:?}",
                fake.sites()
                    .map(|s| format!("{}={}", s.name(), s.url()))
                    .collect::<Vec<_>>()
            ),
            Some(Target::Real(r)) => format!("real PVE {}", r.url),
        };
        f.debug_struct("RolloutWorld")
            .field("target", &target)
            .field("deployer", &self.deployer.describe())
            .field("dir", &self.dir.path())
            .field("creds", &self.creds)
            .field("manifests", &self.manifests.keys().collect::<Vec<_>>())
            .field("runs", &self.runs.len())
            .field("last_status", &self.runs.last().map(|r| &r.status))
            .finish()
    }
}

/// The seed's Ubuntu cloud image as the embedded scenario describes it (cloud-init, no guest
/// agent): what the harness places for import is the same image.
pub fn ubuntu_cloud_image() -> ImageFacts {
    Scenario::embedded_default()
        .sites
        .iter()
        .flat_map(|s| &s.nodes)
        .flat_map(|n| &n.storages)
        .flat_map(|s| &s.volumes)
        .find(|v| v.volname == "iso/ubuntu-22.04-cloud.img")
        .and_then(|v| v.image.clone())
        .unwrap_or(ImageFacts::UNKNOWN)
}

/// A ProxmoxVM manifest's text without its `userData`, when it has one (`None`: left as it
/// is, unreadable files included).
fn without_user_data(text: &str) -> Option<String> {
    let mut doc: serde_norway::Value = serde_norway::from_str(text).ok()?;
    if doc["kind"].as_str() != Some("ProxmoxVM") {
        return None;
    }
    doc.get_mut("spec")?
        .get_mut("forProvider")?
        .as_mapping_mut()?
        .remove("userData")?;
    serde_norway::to_string(&doc).ok()
}

impl RolloutWorld {
    async fn new() -> anyhow::Result<Self> {
        provision_harness::pve::tls::ensure_crypto_provider();
        let dir = tempfile::Builder::new()
            .prefix("rollout-scenario-")
            .tempdir()
            .context("scenario temp dir")?;
        std::fs::create_dir_all(dir.path().join("manifests"))?;
        std::fs::create_dir_all(dir.path().join("state"))?;
        let real = RealPve::current();
        let map = real.as_ref().map(RealPve::next_scenario);
        let creds = match &real {
            Some(r) => r.creds.clone(),
            None => Creds::Token {
                id: HARNESS_TOKEN_ID.into(),
                secret: HARNESS_TOKEN_SECRET.into(),
            },
        };
        let capture = provision_harness::trace::Capture::new();
        Ok(Self {
            target: real.map(|r| Target::Real(Box::new(r))),
            deployer: Arc::new(super::trace::Traced {
                inner: adapter::from_env(),
                capture: capture.clone(),
            }),
            dir,
            creds,
            manifests: BTreeMap::new(),
            raw_manifests: BTreeMap::new(),
            concurrency: 4,
            runs: Vec::new(),
            background: None,
            peer: None,
            answer: None,
            probe_window: None,
            vmids_before: BTreeMap::new(),
            destroyed: Vec::new(),
            clock: ClockMode::Scaled(CLOCK_FACTOR),
            setup_uploads: Vec::new(),
            plan: None,
            reached: Default::default(),
            map,
            recorder: None,
            capture,
            snippet_shares: BTreeMap::new(),
        })
    }

    pub fn is_real(&self) -> bool {
        matches!(self.target, Some(Target::Real(_)))
    }

    /// Chooses the seed's two sites (the fake's embedded default), unless a real PVE is targeted.
    pub fn use_seed_sites(&mut self) {
        if !self.is_real() {
            self.target = Some(Target::Pending(Box::new(Scenario::embedded_default())));
        }
    }

    /// The scenario to change before the fake starts.
    pub fn scenario_mut(&mut self) -> anyhow::Result<&mut Scenario> {
        match &mut self.target {
            Some(Target::Pending(s)) => Ok(s),
            Some(Target::Fake(_)) => {
                bail!("the fake is already running: change its scenario before the first When")
            }
            Some(Target::Real(_)) => bail!("this step needs the fake (tag the scenario @fake)"),
            None => bail!(
                "no cluster chosen: start with `Given a Proxmox test cluster with the seed's two sites`"
            ),
        }
    }

    /// Starts the fake if it is still pending.
    pub async fn ensure_started(&mut self) -> anyhow::Result<()> {
        if let Some(Target::Pending(scenario)) = &self.target {
            // The shares a deployer mounts to place user-data PVE's API cannot upload.
            let mut scenario = (**scenario).clone();
            let shares = scenario
                .share_snippets(&self.dir.path().join("shares"))
                .context("a directory for the snippets shares")?;
            self.snippet_shares = shares.into_iter().map(|s| (s.site.clone(), s)).collect();
            let fake = FakeProxmox::builder()
                .scenario(scenario)
                .tls(true)
                .auth_failure_delay(false)
                .clock(self.clock)
                .start()
                .await
                .map_err(|e| anyhow!("starting fake-proxmox: {e}"))?;
            for (node, storage, volname, bytes) in &self.setup_uploads {
                let site = site_of_node(node).ok_or_else(|| anyhow!("no site has node {node}"))?;
                let handle = fake
                    .site(site)
                    .ok_or_else(|| anyhow!("the fake has no site {site}"))?;
                handle
                    .control()
                    .upload_image(node, storage, volname, *bytes, &ubuntu_cloud_image())
                    .await
                    .map_err(|e| anyhow!("placing {storage}:{volname} on {node}: {e}"))?;
            }
            self.target = Some(Target::Fake(fake));
        }
        if self.target.is_none() {
            bail!(
                "no cluster chosen: start with `Given a Proxmox test cluster with the seed's two sites`"
            );
        }
        Ok(())
    }

    pub async fn fake(&mut self) -> anyhow::Result<&FakeProxmox> {
        self.ensure_started().await?;
        match &self.target {
            Some(Target::Fake(f)) => Ok(f),
            _ => bail!(
                "this step needs the fake's control API (tag the scenario @fake; it cannot run against a real PVE)"
            ),
        }
    }

    /// The control client of the site that hosts `node`.
    pub async fn control_for_node(&mut self, node: &str) -> anyhow::Result<ControlClient> {
        let site =
            site_of_node(node).ok_or_else(|| anyhow!("no site of the seed has node '{node}'"))?;
        self.control(site).await
    }

    pub async fn control(&mut self, site: &str) -> anyhow::Result<ControlClient> {
        let fake = self.fake().await?;
        let handle = fake
            .site(site)
            .ok_or_else(|| anyhow!("the fake has no site '{site}'"))?;
        Ok(handle.control())
    }

    /// Every site as the deployer must see it.
    pub async fn sites(&mut self) -> anyhow::Result<Vec<SiteTarget>> {
        self.ensure_started().await?;
        match &self.target {
            Some(Target::Fake(fake)) => Ok(fake
                .sites()
                .map(|s| SiteTarget {
                    name: s.name().to_string(),
                    url: s.url().to_string(),
                    node: node_of_site(s.name()).unwrap_or_default().to_string(),
                    fingerprint: Some(s.fingerprint().to_string()),
                    insecure: false,
                    snippets: self
                        .snippet_shares
                        .get(s.name())
                        .map(|x| (x.storage.clone(), x.dir.clone())),
                })
                .collect()),
            Some(Target::Real(r)) => {
                let r = r.clone();
                let record = std::env::var("HARNESS_PVE_RECORD").map_or(true, |v| v != "0");
                if record && self.recorder.is_none() {
                    let tls = match (&r.fingerprint, r.insecure) {
                        (Some(fp), _) => provision_harness::pve::TlsMode::Pinned(
                            provision_harness::pve::tls::parse_fingerprint(fp)
                                .map_err(|e| anyhow!("HARNESS_PVE_FINGERPRINT: {e}"))?,
                        ),
                        (None, true) => provision_harness::pve::TlsMode::Insecure,
                        (None, false) => provision_harness::pve::TlsMode::Verify,
                    };
                    self.recorder = Some(Recorder::start(&r.url, &tls).await?);
                }
                let (url, fingerprint, insecure) = match &self.recorder {
                    Some(rec) => (
                        rec.url().to_string(),
                        Some(rec.fingerprint().to_string()),
                        false,
                    ),
                    None => (r.url.clone(), r.fingerprint.clone(), r.insecure),
                };
                Ok(["site-1", "site-2"]
                    .iter()
                    .map(|name| SiteTarget {
                        name: name.to_string(),
                        url: url.clone(),
                        node: r.node.clone(),
                        fingerprint: fingerprint.clone(),
                        insecure,
                        snippets: r.snippets.clone(),
                    })
                    .collect())
            }
            _ => bail!("no cluster"),
        }
    }

    /// An API client for checks made outside the deployer (as root: the harness token on the
    /// fake, the target's own credentials on a real cluster).
    pub async fn observer(&mut self, node: &str) -> anyhow::Result<Observer> {
        if let Some(Target::Real(r)) = &self.target {
            // Straight to the target with its own credentials: the harness's checks are not the
            // deployer's requests (whose credentials a scenario may have made wrong).
            return Observer::new(&r.url, r.creds.clone());
        }
        let sites = self.sites().await?;
        let name = site_of_node(node).unwrap_or("site-1");
        let site = sites
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| anyhow!("no site for node {node}"))?;
        let creds = Creds::Token {
            id: HARNESS_TOKEN_ID.into(),
            secret: HARNESS_TOKEN_SECRET.into(),
        };
        Observer::new(&site.url, creds)
    }

    pub fn manifests_dir(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    fn write_manifests(
        &self,
        dir: &std::path::Path,
        manifests: &BTreeMap<String, VmManifest>,
    ) -> anyhow::Result<()> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
        // A real target without a snippets share cannot deliver user-data: leave it out.
        let no_share = matches!(&self.target, Some(Target::Real(r)) if r.snippets.is_none());
        for (path, text) in &self.raw_manifests {
            let file = dir.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let text = match no_share.then(|| without_user_data(text)).flatten() {
                Some(t) => t,
                None => text.clone(),
            };
            match &self.map {
                Some(map) => std::fs::write(file, map.manifest_text(&text))?,
                None => std::fs::write(file, text)?,
            }
        }
        for m in manifests.values() {
            let mut m = m.clone();
            if no_share && m.kind == "ProxmoxVM" {
                m.user_data = None;
            }
            if let Some(map) = &self.map {
                m.name = map.vm_name(&m.name);
                m.node = map.node(&m.node);
                m.storage = map.storage(&m.storage);
            }
            std::fs::write(dir.join(format!("{}.yaml", m.name)), m.to_yaml())?;
        }
        Ok(())
    }

    pub async fn request(&mut self, action: Action) -> anyhow::Result<RunRequest> {
        let sites = self.sites().await?;
        self.write_manifests(&self.manifests_dir(), &self.manifests)?;
        Ok(RunRequest {
            action,
            sites,
            creds: self.creds.clone(),
            manifests_dir: self.manifests_dir(),
            state_dir: self.dir.path().join("state"),
            concurrency: self.concurrency,
            reached: Some(self.reached.clone()),
        })
    }

    pub async fn peer_request(&mut self) -> anyhow::Result<RunRequest> {
        let sites = self.sites().await?;
        let peer = self
            .peer
            .as_ref()
            .ok_or_else(|| anyhow!("no second deployer"))?;
        let dir = peer.dir.path().join("manifests");
        self.write_manifests(&dir, &peer.manifests)?;
        let state_dir = peer.dir.path().join("state");
        std::fs::create_dir_all(&state_dir)?;
        Ok(RunRequest {
            action: Action::Deploy,
            sites,
            creds: self.creds.clone(),
            manifests_dir: dir,
            state_dir,
            concurrency: self.concurrency,
            reached: Some(self.reached.clone()),
        })
    }

    /// The journal's current end (0 against a real PVE: there is no journal).
    pub async fn journal_mark(&mut self) -> anyhow::Result<u64> {
        if self.is_real() {
            return Ok(self.recorder.as_ref().map_or(0, Recorder::last_seq));
        }
        Ok(self.journal().await?.last_seq())
    }

    /// Runs the deployer to completion and records the run.
    pub async fn run(&mut self, action: Action) -> anyhow::Result<&Status> {
        let req = self.request(action).await?;
        let first = self.journal_mark().await? + 1;
        let status = self
            .deployer
            .run(req)
            .await
            .with_context(|| format!("{} ({})", self.deployer.describe(), action.as_str()))?;
        let status = self.scenario_status(status);
        let last = self.journal_mark().await?;
        self.runs.push(Run {
            first_seq: first,
            last_seq: last,
            status,
        });
        Ok(&self.runs.last().expect("just pushed").status)
    }

    /// Starts a deploy in the background; a later step waits for it or kills it.
    pub async fn start_background(&mut self) -> anyhow::Result<()> {
        if self.background.is_some() {
            bail!("a background run is already going");
        }
        let req = self.request(Action::Deploy).await?;
        let first = self.journal_mark().await? + 1;
        let fut = self.deployer.run(req);
        self.background = Some((first, tokio::spawn(fut)));
        Ok(())
    }

    pub async fn finish_background(&mut self, within: Duration) -> anyhow::Result<&Status> {
        let (first, handle) = self
            .background
            .take()
            .ok_or_else(|| anyhow!("no background run was started"))?;
        let status = tokio::time::timeout(within, handle)
            .await
            .map_err(|_| anyhow!("the background run did not finish within {within:?}"))?
            .context("the background run panicked")??;
        let status = self.scenario_status(status);
        let last = self.journal_mark().await?;
        self.runs.push(Run {
            first_seq: first,
            last_seq: last,
            status,
        });
        Ok(&self.runs.last().expect("just pushed").status)
    }

    /// Kills the background run (drops its future: an in-process deployer stops at its next
    /// await, an external one gets SIGKILL) and records the window it covered.
    pub async fn kill_background(&mut self) -> anyhow::Result<()> {
        let (first, handle) = self
            .background
            .take()
            .ok_or_else(|| anyhow!("no background run was started"))?;
        handle.abort();
        let _ = handle.await;
        let last = self.journal_mark().await?;
        self.runs.push(Run {
            first_seq: first,
            last_seq: last,
            status: Status::default(),
        });
        Ok(())
    }

    pub fn last_status(&self) -> anyhow::Result<&Status> {
        self.runs
            .last()
            .map(|r| &r.status)
            .ok_or_else(|| anyhow!("the deployer has not run yet"))
    }

    /// The request journal of every site, in order.
    pub async fn journal(&mut self) -> anyhow::Result<Journal> {
        self.journal_since(0).await
    }

    /// The journal's entries numbered after `seq`, every site's, in order: what a loop that
    /// polls has not read yet.
    pub async fn journal_since(&mut self, seq: u64) -> anyhow::Result<Journal> {
        if self.is_real() {
            return self
                .recorder
                .as_ref()
                .map(|r| r.journal().within(&[(seq.saturating_add(1), u64::MAX)]))
                .ok_or_else(|| {
                    anyhow!("no recording of the deployer's requests (HARNESS_PVE_RECORD=0, or the deployer has not run)")
                });
        }
        let fake = self.fake().await?;
        // The sites of one fake share its world and so its journal: one read has every site's.
        let Some(site) = fake.sites().next() else {
            return Ok(Journal::new(Vec::new()));
        };
        let entries = site
            .control()
            .journal_since(seq)
            .await
            .map_err(|e| anyhow!("reading the journal of {}: {e}", site.name()))?;
        Ok(Journal::new(entries.into_iter().map(Entry::from).collect()))
    }

    /// The journal entries the deployer caused (its runs' windows, background runs included).
    pub async fn deployer_journal(&mut self) -> anyhow::Result<Journal> {
        let j = self.journal().await?;
        let mut windows: Vec<(u64, u64)> = self
            .runs
            .iter()
            .map(|r| (r.first_seq, r.last_seq))
            .collect();
        if let Some((first, _)) = &self.background {
            windows.push((*first, u64::MAX));
        }
        Ok(j.within(&windows))
    }

    /// The journal entries of the last completed run only.
    pub async fn last_run_journal(&mut self) -> anyhow::Result<Journal> {
        let run = self
            .runs
            .last()
            .cloned()
            .ok_or_else(|| anyhow!("the deployer has not run yet"))?;
        Ok(self
            .journal()
            .await?
            .within(&[(run.first_seq, run.last_seq)]))
    }

    /// Every task in `upids` has stopped, asked through the API (as the observer of `node`).
    pub async fn expect_tasks_stopped(
        &mut self,
        node: &str,
        upids: &std::collections::BTreeSet<String>,
    ) -> anyhow::Result<()> {
        let obs = self.observer(node).await?;
        for upid in upids {
            let on = upid.split(':').nth(1).unwrap_or_default();
            let st = obs.get(&format!("/nodes/{on}/tasks/{upid}/status")).await?;
            anyhow::ensure!(
                st["status"] == "stopped",
                "task {upid} is still {}",
                st["status"]
            );
        }
        Ok(())
    }

    /// Polls the journal until `pred` holds. Fails when the deployer finishes first, when it
    /// sent nothing new for `within`, or after `PROGRESS_CAP` × `within` in all: a deployer
    /// still sending requests is slow, not stuck (an external one on a loaded machine can take
    /// minutes over retries that are seconds apart when the machine is idle), and a wait that
    /// ended while it still worked would report a cause the deployer never had.
    pub async fn wait_journal(
        &mut self,
        within: Duration,
        what: &str,
        pred: impl Fn(&Journal) -> bool,
    ) -> anyhow::Result<()> {
        const PROGRESS_CAP: u32 = 5;
        let started = Instant::now();
        let mut seen = 0;
        let mut last_progress = started;
        loop {
            let j = self.deployer_journal().await?;
            if pred(&j) {
                return Ok(());
            }
            if let Some((_, h)) = &self.background
                && h.is_finished()
            {
                bail!(
                    "the deployer finished before {what}; its requests:\n{}",
                    j.render_tail(40)
                );
            }
            let sent = j.api().count();
            if sent != seen {
                seen = sent;
                last_progress = Instant::now();
            }
            if last_progress.elapsed() > within || started.elapsed() > within * PROGRESS_CAP {
                bail!(
                    "waited {:?} for {what} ({:?} since the deployer's last new request); the deployer's requests so far:\n{}",
                    started.elapsed(),
                    last_progress.elapsed(),
                    j.render_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// The seed's topology: which site hosts which node.
pub fn site_of_node(node: &str) -> Option<&'static str> {
    match node {
        "ml110-01" => Some("site-1"),
        "r630-01" => Some("site-2"),
        _ => None,
    }
}

pub fn node_of_site(site: &str) -> Option<&'static str> {
    match site {
        "site-1" => Some("ml110-01"),
        "site-2" => Some("r630-01"),
        _ => None,
    }
}
