//! The real-target mode: a PVE cluster named by `HARNESS_PVE_URL` (or by a test, through
//! [`set_real_target`]), and the rules that let the suite share it.
//!
//! **Isolation.** A run has a prefix (`ph-<6 hex>-`, or `HARNESS_RUN_ID`) and each scenario a
//! number, so every VM a scenario asks for as `nginx-proxy-vm` is created as
//! `ph-3fa9c1-s07-nginx-proxy-vm`: two scenarios, two runs or two CI jobs on one cluster never
//! see each other's VMs. After a scenario (passed or failed) the harness runs `destroy` and then
//! removes whatever is still named with the scenario's prefix; after the run, whatever is named
//! with the run's prefix. What an interrupted run left is removed with
//! `provision-harness cleanup --prefix <run prefix>`.
//!
//! **One mapping for manifests and assertions.** The seed's nodes (`ml110-01`, `r630-01`) become
//! `HARNESS_PVE_NODE`; its storages `local-lvm` and `ceph-fs` become `HARNESS_PVE_STORAGE` and
//! `HARNESS_PVE_NOIMAGES_STORAGE` (a storage that exists but holds no VM disks); the harness's
//! token and password become the environment's. [`TargetMap`] applies that mapping to what the
//! deployer is given and to what the steps expect (request paths, create parameters, error
//! texts, VM names), so a scenario reads the same on every target.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use super::adapter::Creds;
use super::params::Request;
use super::status::Status;
use super::world::RolloutWorld;
use super::world::{HARNESS_TOKEN_ID, ROOT_PASSWORD};

/// The seed's nodes; both stand for the one real node.
pub const SEED_NODES: [&str; 2] = ["ml110-01", "r630-01"];
/// The seed's storage for VM disks, and its storage that holds no VM disks.
pub const SEED_IMAGES_STORAGE: &str = "local-lvm";
pub const SEED_NOIMAGES_STORAGE: &str = "ceph-fs";
/// The fixed rollout's storage for VM disks (examples/sankofa-fixed).
pub const FIXED_IMAGES_STORAGE: &str = "ceph-rbd";

/// A real PVE test cluster (see docs/src/real-pve.md, "Targeting a real PVE test cluster").
#[derive(Debug, Clone)]
pub struct RealPve {
    pub url: String,
    pub fingerprint: Option<String>,
    pub insecure: bool,
    pub node: String,
    /// The credentials the deployer uses by default (the token if one is given).
    pub creds: Creds,
    /// The API token, when the environment names one (the token scenarios need it).
    pub token: Option<(String, String)>,
    /// User and password, when the environment names them (the ticket scenarios need them).
    pub password: Option<(String, String)>,
    pub images_storage: String,
    pub noimages_storage: String,
    /// Scenarios run at once against this target.
    pub parallel: usize,
    /// The run's VM name prefix (`ph-3fa9c1-`).
    pub run_prefix: String,
    /// The target's snippets share (`HARNESS_PVE_SNIPPETS=STORAGE:PATH`): a storage with
    /// `snippets` content mounted here. Without one the steps' manifests carry no `userData`
    /// (it could not reach a VM).
    pub snippets: Option<(String, PathBuf)>,
}

static OVERRIDE: OnceLock<RealPve> = OnceLock::new();
static FROM_ENV: OnceLock<Option<RealPve>> = OnceLock::new();
static SCENARIO_NO: AtomicU32 = AtomicU32::new(0);

/// Makes `t` this process's real target (a test that starts its own black-box server), before
/// the suite runs. Returns `false` if a target was already chosen.
pub fn set_real_target(t: RealPve) -> bool {
    OVERRIDE.set(t).is_ok()
}

/// A fresh run prefix: `HARNESS_RUN_ID` if set, else `ph-` and 6 random hex digits.
pub fn new_run_prefix() -> String {
    match std::env::var("HARNESS_RUN_ID") {
        Ok(id) if !id.trim().is_empty() => format!("{}-", id.trim().trim_end_matches('-')),
        _ => format!("ph-{:06x}-", rand::random::<u32>() & 0xff_ffff),
    }
}

impl RealPve {
    /// The target of this process: the one a test set, else the environment's (read once, so
    /// every scenario of a run shares one prefix), else none (the suite runs on its own fakes).
    pub fn current() -> Option<RealPve> {
        if let Some(t) = OVERRIDE.get() {
            return Some(t.clone());
        }
        FROM_ENV.get_or_init(RealPve::from_env).clone()
    }

    fn from_env() -> Option<RealPve> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let url = get("HARNESS_PVE_URL")?;
        let token = get("HARNESS_PVE_TOKEN_ID").zip(get("HARNESS_PVE_TOKEN_SECRET"));
        let password = get("HARNESS_PVE_PASSWORD").map(|p| {
            (
                get("HARNESS_PVE_USERNAME").unwrap_or_else(|| "root@pam".into()),
                p,
            )
        });
        Some(RealPve::new(
            url,
            get("HARNESS_PVE_FINGERPRINT"),
            get("HARNESS_PVE_INSECURE").is_some_and(|v| v == "1" || v == "true"),
            get("HARNESS_PVE_NODE").unwrap_or_else(|| "pve".into()),
            token,
            password,
        ))
        .map(|mut t| {
            if let Some(s) = get("HARNESS_PVE_STORAGE") {
                t.images_storage = s;
            }
            if let Some(s) = get("HARNESS_PVE_NOIMAGES_STORAGE") {
                t.noimages_storage = s;
            }
            if let Some(n) = get("HARNESS_PVE_PARALLEL").and_then(|n| n.parse().ok()) {
                t.parallel = n;
            }
            t.snippets = get("HARNESS_PVE_SNIPPETS").and_then(|v| {
                let (storage, path) = v.split_once(':')?;
                Some((storage.to_string(), PathBuf::from(path)))
            });
            t
        })
    }

    /// A target with the defaults (storages `local-lvm` and `local`, 2 scenarios at once, a
    /// fresh run prefix).
    pub fn new(
        url: String,
        fingerprint: Option<String>,
        insecure: bool,
        node: String,
        token: Option<(String, String)>,
        password: Option<(String, String)>,
    ) -> RealPve {
        let creds = match (&token, &password) {
            (Some((id, secret)), _) => Creds::Token {
                id: id.clone(),
                secret: secret.clone(),
            },
            (None, Some((username, password))) => Creds::Password {
                username: username.clone(),
                password: password.clone(),
            },
            (None, None) => Creds::Password {
                username: "root@pam".into(),
                password: String::new(),
            },
        };
        RealPve {
            url,
            fingerprint,
            insecure,
            node,
            creds,
            token,
            password,
            images_storage: SEED_IMAGES_STORAGE.into(),
            noimages_storage: "local".into(),
            parallel: 2,
            run_prefix: new_run_prefix(),
            snippets: None,
        }
    }

    /// The next scenario's mapping (its own name prefix).
    pub fn next_scenario(&self) -> TargetMap {
        let n = SCENARIO_NO.fetch_add(1, Ordering::Relaxed) + 1;
        TargetMap {
            node: self.node.clone(),
            images_storage: self.images_storage.clone(),
            noimages_storage: self.noimages_storage.clone(),
            prefix: format!("{}s{n:02}-", self.run_prefix),
            token: self.token.clone(),
            password: self.password.clone(),
        }
    }
}

/// How one scenario's names map onto the real target (see the module doc).
#[derive(Debug, Clone)]
pub struct TargetMap {
    pub node: String,
    pub images_storage: String,
    pub noimages_storage: String,
    /// This scenario's VM name prefix (`ph-3fa9c1-s07-`).
    pub prefix: String,
    pub token: Option<(String, String)>,
    pub password: Option<(String, String)>,
}

impl TargetMap {
    pub fn node(&self, node: &str) -> String {
        if SEED_NODES.contains(&node) {
            self.node.clone()
        } else {
            node.to_string()
        }
    }

    pub fn storage(&self, storage: &str) -> String {
        match storage {
            SEED_IMAGES_STORAGE | FIXED_IMAGES_STORAGE => self.images_storage.clone(),
            SEED_NOIMAGES_STORAGE => self.noimages_storage.clone(),
            other => other.to_string(),
        }
    }

    pub fn vm_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The scenario's name of a VM the target holds as `name`.
    pub fn scenario_name(&self, name: &str) -> String {
        name.strip_prefix(&self.prefix).unwrap_or(name).to_string()
    }

    /// A request path pattern: node segments mapped.
    pub fn path(&self, path: &str) -> String {
        path.split('/')
            .map(|seg| self.node(seg))
            .collect::<Vec<_>>()
            .join("/")
    }

    /// A text the scenario expects (an error message, a create parameter): the seed's node and
    /// storage names, and the scenario's VM names, as the target has them.
    pub fn text(&self, text: &str, vm_names: &[String]) -> String {
        let mut out = String::with_capacity(text.len());
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut String| {
            if word.is_empty() {
                return;
            }
            let mapped = if SEED_NODES.contains(&word.as_str()) {
                self.node(word)
            } else if [
                SEED_IMAGES_STORAGE,
                SEED_NOIMAGES_STORAGE,
                FIXED_IMAGES_STORAGE,
            ]
            .contains(&word.as_str())
            {
                self.storage(word)
            } else if vm_names.iter().any(|n| n == word) {
                self.vm_name(word)
            } else {
                word.clone()
            };
            out.push_str(&mapped);
            word.clear();
        };
        for c in text.chars() {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                word.push(c);
            } else {
                flush(&mut word, &mut out);
                out.push(c);
            }
        }
        flush(&mut word, &mut out);
        out
    }

    /// A manifest file copied as it is (the seed's rollout) with the target's names: VM and
    /// metadata name prefixed, node and storage mapped, `dependsOn` entries prefixed. A file
    /// that is not YAML stays as it is (the deployer must still find it unreadable).
    pub fn manifest_text(&self, text: &str) -> String {
        use serde_norway::Value;
        let Ok(mut doc) = serde_norway::from_str::<Value>(text) else {
            return text.to_string();
        };
        let prefix = |v: &mut Value| {
            if let Some(s) = v.as_str() {
                *v = Value::String(self.vm_name(s));
            }
        };
        if let Some(v) = doc.get_mut("metadata").and_then(|m| m.get_mut("name")) {
            prefix(v);
        }
        if let Some(spec) = doc.get_mut("spec") {
            if let Some(fp) = spec.get_mut("forProvider") {
                if let Some(v) = fp.get_mut("name") {
                    prefix(v);
                }
                if let Some(v) = fp.get_mut("node")
                    && let Some(n) = v.as_str()
                {
                    *v = Value::String(self.node(n));
                }
                if let Some(v) = fp.get_mut("storage")
                    && let Some(n) = v.as_str()
                {
                    *v = Value::String(self.storage(n));
                }
            }
            if let Some(Value::Sequence(deps)) = spec
                .get_mut("deployment")
                .and_then(|d| d.get_mut("dependsOn"))
            {
                deps.iter_mut().for_each(prefix);
            }
        }
        serde_norway::to_string(&doc).unwrap_or_else(|_| text.to_string())
    }

    /// The harness's token id as the target has it.
    pub fn token_id(&self, id: &str) -> String {
        match (&self.token, id) {
            (Some((real, _)), HARNESS_TOKEN_ID) => real.clone(),
            _ => id.to_string(),
        }
    }

    /// The secret of a token the scenario names.
    pub fn token_secret(&self, id: &str) -> anyhow::Result<String> {
        match (&self.token, id) {
            (Some((_, secret)), HARNESS_TOKEN_ID) => Ok(secret.clone()),
            (None, HARNESS_TOKEN_ID) => anyhow::bail!(
                "this scenario needs an API token on the real target: set HARNESS_PVE_TOKEN_ID and HARNESS_PVE_TOKEN_SECRET"
            ),
            _ => anyhow::bail!("no known secret for token '{id}' on the real target"),
        }
    }

    /// User and password for the harness's `root@pam` / `harness` login.
    pub fn login(&self, user: &str, password: &str) -> anyhow::Result<(String, String)> {
        match &self.password {
            Some(real) if user == "root@pam" && password == ROOT_PASSWORD => Ok(real.clone()),
            Some(_) => Ok((user.to_string(), password.to_string())),
            None => anyhow::bail!(
                "this scenario logs in with a password: set HARNESS_PVE_USERNAME and HARNESS_PVE_PASSWORD for the real target"
            ),
        }
    }
}

/// The mapping rules, checked by the harness self-test.
pub fn check_mapping() -> Result<(), String> {
    let m = TargetMap {
        node: "pve1".into(),
        images_storage: "fast".into(),
        noimages_storage: "local".into(),
        prefix: "ph-abcdef-s03-".into(),
        token: Some(("u@pve!t".into(), "s".into())),
        password: None,
    };
    let cases = [
        (
            m.path("/nodes/ml110-01/qemu/*/status"),
            "/nodes/pve1/qemu/*/status",
        ),
        (
            m.text(
                "storage 'local-lvm' on node ml110-01 is full (ceph-fs, nginx-proxy-vm)",
                &["nginx-proxy-vm".into()],
            ),
            "storage 'fast' on node pve1 is full (local, ph-abcdef-s03-nginx-proxy-vm)",
        ),
        (
            m.text("local-lvm:0,import-from=local:import/x.qcow2", &[]),
            "fast:0,import-from=local:import/x.qcow2",
        ),
        (
            m.scenario_name("ph-abcdef-s03-nginx-proxy-vm"),
            "nginx-proxy-vm",
        ),
        (m.token_id(HARNESS_TOKEN_ID), "u@pve!t"),
    ];
    for (got, want) in cases {
        if got != want {
            return Err(format!("mapping: got {got:?}, expected {want:?}"));
        }
    }
    let raw = "metadata:\n  name: email-server\nspec:\n  forProvider:\n    name: email-server\n    node: r630-01\n    storage: ceph-rbd\n  deployment:\n    dependsOn: [dns-primary]\n";
    let doc: serde_norway::Value =
        serde_norway::from_str(&m.manifest_text(raw)).map_err(|e| e.to_string())?;
    let fp = &doc["spec"]["forProvider"];
    let ok = doc["metadata"]["name"].as_str() == Some("ph-abcdef-s03-email-server")
        && fp["name"].as_str() == Some("ph-abcdef-s03-email-server")
        && fp["node"].as_str() == Some("pve1")
        && fp["storage"].as_str() == Some("fast")
        && doc["spec"]["deployment"]["dependsOn"][0].as_str() == Some("ph-abcdef-s03-dns-primary");
    if !ok {
        return Err(format!("manifest mapping: {}", m.manifest_text(raw)));
    }
    if m.manifest_text("kind: [unclosed") != "kind: [unclosed" {
        return Err("an unreadable manifest was changed".into());
    }
    Ok(())
}

impl RealPve {
    /// The target as a one-site provider config (the harness's own cleanup goes straight to it,
    /// not through a recorder).
    pub fn provider(&self) -> anyhow::Result<provision_harness::config::Provider> {
        use provision_harness::pve::{Credentials, TlsMode};
        let tls = match (&self.fingerprint, self.insecure) {
            (Some(fp), _) => TlsMode::Pinned(
                provision_harness::pve::tls::parse_fingerprint(fp)
                    .map_err(|e| anyhow::anyhow!("HARNESS_PVE_FINGERPRINT: {e}"))?,
            ),
            (None, true) => TlsMode::Insecure,
            (None, false) => TlsMode::Verify,
        };
        let credentials = match &self.creds {
            Creds::Token { id, secret } => Credentials::Token {
                token_id: id.clone(),
                secret: secret.clone(),
            },
            Creds::Password { username, password } => Credentials::Password {
                username: username.clone(),
                password: password.clone(),
            },
        };
        Ok(provision_harness::config::Provider {
            sites: vec![provision_harness::config::Site {
                name: "target".into(),
                endpoint: self.url.clone(),
                node: Some(self.node.clone()),
                tls,
                snippets: self.snippets.as_ref().map(|(storage, path)| {
                    provision_harness::config::SnippetShare {
                        storage: storage.clone(),
                        path: path.clone(),
                    }
                }),
            }],
            credentials,
        })
    }

    /// Removes every VM named `prefix…` on the target (the library's `cleanup`, as the
    /// `provision-harness cleanup` command runs it).
    pub async fn sweep(
        &self,
        prefix: &str,
    ) -> anyhow::Result<provision_harness::deployer::cleanup::CleanupReport> {
        use provision_harness::deployer::cleanup::{CleanupOptions, cleanup};
        let options = CleanupOptions {
            task_wait: provision_harness::pve::tasks::TaskWait {
                poll: std::time::Duration::from_millis(100),
                timeout: std::time::Duration::from_secs(600),
            },
            ..CleanupOptions::default()
        };
        Ok(cleanup(&self.provider()?, prefix, &options).await?)
    }

    /// The command that removes what this run left if it is interrupted.
    pub fn cleanup_command(&self) -> String {
        format!(
            "provision-harness cleanup --provider-config <a config naming {}> --prefix {}",
            self.url, self.run_prefix
        )
    }
}

/// The mapping as World verbs: each is the identity on the suite's own fakes.
impl RolloutWorld {
    /// The node a manifest's node stands for on the target (the real cluster has its own).
    pub fn real_node(&self, node: &str) -> String {
        match &self.map {
            Some(m) => m.node(node),
            None => node.to_string(),
        }
    }

    /// The name the target holds the scenario's VM `name` under (prefixed on a real target).
    pub fn target_name(&self, name: &str) -> String {
        match &self.map {
            Some(m) => m.vm_name(name),
            None => name.to_string(),
        }
    }

    /// A request path pattern as the target sees it (the seed's nodes mapped).
    pub fn target_path(&self, path: &str) -> String {
        match &self.map {
            Some(m) => m.path(path),
            None => path.to_string(),
        }
    }

    /// A request the scenario names, as the target sees it.
    pub fn target_request(&self, r: &Request) -> Request {
        Request {
            method: r.method.clone(),
            path: self.target_path(&r.path),
        }
    }

    /// The harness's token id as the target has it.
    pub fn target_token_id(&self, id: &str) -> String {
        match &self.map {
            Some(m) => m.token_id(id),
            None => id.to_string(),
        }
    }

    /// The harness's `root@pam` as the target's user (the one `HARNESS_PVE_USERNAME` names).
    pub fn target_user(&self, user: &str) -> String {
        match self.map.as_ref().and_then(|m| m.password.as_ref()) {
            Some((real, _)) if user == "root@pam" => real.clone(),
            _ => user.to_string(),
        }
    }

    /// A text the scenario expects (error message, create parameter) as the target has it.
    pub fn target_text(&self, text: &str) -> String {
        match &self.map {
            Some(m) => {
                let mut names: Vec<String> = self.manifests.keys().cloned().collect();
                if let Some(p) = &self.peer {
                    names.extend(p.manifests.keys().cloned());
                }
                m.text(text, &names)
            }
            None => text.to_string(),
        }
    }

    /// A status with the scenario's VM names (a real target holds them prefixed), so the steps
    /// look VMs up by the names the scenario gave them.
    pub fn scenario_status(&self, mut status: Status) -> Status {
        if let Some(m) = &self.map {
            for vm in &mut status.vms {
                vm.name = m.scenario_name(&vm.name);
            }
        }
        status
    }
}
