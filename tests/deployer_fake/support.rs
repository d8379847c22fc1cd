//! Shared fixtures: a fake per test, a provider pointed at it, manifests, fast options.

use std::path::PathBuf;
use std::time::Duration;

use fake_proxmox::{ClockMode, ControlClient, FakeProxmox, JournalEntry, Scenario};
use provision_harness::config::{Provider, Site, SnippetShare};
use provision_harness::deploy::{DeployOptions, RolloutResult, VmOutcome};
use provision_harness::examples;
use provision_harness::manifest::{ManifestSet, load_texts};
use provision_harness::pipeline::PipelineOptions;
use provision_harness::pve::Credentials;
use provision_harness::pve::tasks::TaskWait;
use provision_harness::pve::tls::{TlsMode, parse_fingerprint};
use provision_harness::retry::Backoff;
use serde_json::Value;

pub const TOKEN_ID: &str = "root@pam!sankofa-instance-1-api-token";
pub const TOKEN_SECRET: &str = "6f1c2b9e-4d3a-4b8f-a1e7-5c0d9e8f7a61";
pub const IMPORT_IMAGE: &str = "local:import/ubuntu-22.04-cloud.qcow2";

pub struct Env {
    pub fake: FakeProxmox,
    pub provider: Provider,
    pub dir: tempfile::TempDir,
}

/// The seed's sites with an RBD storage and the image as an `import` volume.
pub fn fixed_scenario() -> Scenario {
    Scenario::from_yaml_str(examples::SANKOFA_FIXED_SCENARIO).unwrap()
}

pub async fn start(mut scenario: Scenario) -> Env {
    let dir = tempfile::tempdir().unwrap();
    // Each site's snippets share, where the deployer writes the manifests' userData.
    let shares = scenario.share_snippets(&dir.path().join("shares")).unwrap();
    let fake = FakeProxmox::builder()
        .scenario(scenario)
        .tls(true)
        .auth_failure_delay(false)
        .clock(ClockMode::Scaled { factor: 2000.0 })
        .start()
        .await
        .unwrap();
    let sites = fake
        .sites()
        .map(|s| Site {
            name: s.name().to_string(),
            endpoint: s.url().to_string(),
            node: None,
            tls: TlsMode::Pinned(parse_fingerprint(s.fingerprint()).unwrap()),
            snippets: shares
                .iter()
                .find(|x| x.site == s.name())
                .map(|x| SnippetShare {
                    storage: x.storage.clone(),
                    path: x.dir.clone(),
                }),
        })
        .collect();
    let provider = Provider {
        sites,
        credentials: Credentials::Token {
            token_id: TOKEN_ID.into(),
            secret: TOKEN_SECRET.into(),
        },
    };
    Env {
        fake,
        provider,
        dir,
    }
}

impl Env {
    pub fn ctl(&self, site: &str) -> ControlClient {
        self.fake.site(site).unwrap().control()
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.path().join("state.json")
    }

    /// Requests the deployer sent to `site` (the fake keeps one journal for all its sites).
    pub async fn journal(&self, site: &str) -> Vec<JournalEntry> {
        let mut j = self.ctl(site).journal().await.unwrap();
        j.retain(|e| e.site == site);
        j
    }

    /// The fake's VMs on `site` whose config name is `name`.
    pub async fn vms_named(&self, site: &str, name: &str) -> Vec<Value> {
        let st = self.ctl(site).state().await.unwrap();
        site_state(&st, site)["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["config"]["name"].as_str() == Some(name))
            .cloned()
            .collect()
    }

    /// Volumes owned by a VMID that no VM has (orphan disks).
    pub async fn orphan_volumes(&self, site: &str) -> Vec<String> {
        let st = self.ctl(site).state().await.unwrap();
        let s = site_state(&st, site);
        let vmids: Vec<u64> = s["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["vmid"].as_u64())
            .collect();
        let mut out = Vec::new();
        for n in s["nodes"].as_array().unwrap() {
            for stg in n["storages"].as_array().unwrap() {
                for v in stg["volumes"].as_array().unwrap() {
                    if let Some(id) = v["vmid"].as_u64()
                        && !vmids.contains(&id)
                    {
                        out.push(v["volid"].as_str().unwrap_or("?").to_string());
                    }
                }
            }
        }
        out
    }

    pub async fn shutdown(self) {
        self.fake.shutdown().await;
    }
}

pub fn site_state<'a>(st: &'a Value, site: &str) -> &'a Value {
    st["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == site)
        .unwrap()
}

/// A ProxmoxVM manifest; `extra` is appended to `spec` (e.g. a `deployment:` block).
#[allow(clippy::too_many_arguments)]
pub fn manifest(
    name: &str,
    site: &str,
    node: &str,
    storage: &str,
    image: &str,
    cpu: u32,
    disk: &str,
    network: &str,
) -> (String, String) {
    let text = format!(
        "apiVersion: proxmox.sankofa.nexus/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    node: {node}\n    name: {name}\n    cpu: {cpu}\n    memory: 2Gi\n    disk: {disk}\n    storage: {storage}\n    network: {network}\n    image: {image}\n    site: {site}\n    userData: |\n      #cloud-config\n      packages: [qemu-guest-agent]\n      runcmd: [systemctl enable --now qemu-guest-agent]\n"
    );
    (format!("{name}.yaml"), text)
}

/// A small VM on ml110-01 (site-1), lvm-thin, the import image.
pub fn vm1(name: &str) -> (String, String) {
    manifest(
        name,
        "site-1",
        "ml110-01",
        "local-lvm",
        IMPORT_IMAGE,
        1,
        "20Gi",
        "vmbr0",
    )
}

pub fn set(files: &[(String, String)]) -> ManifestSet {
    load_texts(files.iter().map(|(p, t)| (p.as_str(), t.as_str())))
}

pub fn options(state: Option<PathBuf>) -> DeployOptions {
    DeployOptions {
        concurrency: 4,
        backoff: Backoff {
            base: Duration::from_millis(40),
            cap: Duration::from_millis(300),
            max_attempts: 10,
        },
        pipeline: PipelineOptions {
            task_wait: TaskWait {
                poll: Duration::from_millis(5),
                timeout: Duration::from_secs(30),
            },
            ip_wait: Duration::from_secs(5),
            ip_poll: Duration::from_millis(10),
            ..PipelineOptions::default()
        },
        http_timeout: Duration::from_secs(10),
        state_path: state,
        ..DeployOptions::default()
    }
}

pub fn vm<'a>(r: &'a RolloutResult, name: &str) -> &'a VmOutcome {
    r.vms
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("{name} not in {r:#?}"))
}

/// Non-GET requests (what changed something).
pub fn writes(j: &[JournalEntry]) -> Vec<&JournalEntry> {
    j.iter().filter(|e| e.method != "GET").collect()
}
