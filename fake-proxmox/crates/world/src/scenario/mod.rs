//! Scenarios: the YAML description of the simulated sites (clusters, nodes, storages,
//! bridges, users, tokens, ACLs). The embedded default is seed 000's two sites.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::storage::model::{Content, StorageType};
use crate::version::PveVersion;

const DEFAULT_YAML: &str = include_str!("default.yaml");

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        /// The scenario file's path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not YAML of the scenario's shape (parser message).
    #[error("invalid scenario YAML: {0}")]
    Yaml(String),
    /// The YAML parsed but breaks a rule (no sites, duplicate names, bad sizes...).
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

/// The world a fake-proxmox server starts with: its sites, as a YAML file describes them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of every random choice: fault probabilities draw from it, each site (pids,
    /// secrets) from its own seed derived from it.
    #[serde(default)]
    pub seed: u64,
    /// The sites, each an independent PVE cluster or standalone node.
    pub sites: Vec<SiteSpec>,
}

/// One site: a PVE cluster (or standalone node) with its version, users, nodes and storages.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SiteSpec {
    /// Site name, unique in the scenario.
    pub name: String,
    /// The PVE version the site emulates (default 9.1).
    #[serde(default = "default_version")]
    pub version: PveVersion,
    /// A cluster name makes `/cluster/status` list a cluster entry (standalone node otherwise).
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// Seconds a simulated guest takes to boot before its agent answers (default 25).
    #[serde(default = "default_boot_delay")]
    pub boot_delay_secs: f64,
    /// Download speed from the internet, MiB/s (default 40); a storage's own speed caps it.
    #[serde(default = "default_download_speed")]
    pub download_mib_s: f64,
    /// The site's users (`root@pam` too, when it is to log in).
    #[serde(default)]
    pub users: Vec<UserSpec>,
    /// API tokens.
    #[serde(default)]
    pub tokens: Vec<TokenSpec>,
    /// ACL entries.
    #[serde(default)]
    pub acls: Vec<AclSpec>,
    /// Files download-url "finds" at these URLs (nothing is ever fetched).
    #[serde(default)]
    pub remote_files: Vec<RemoteFileSpec>,
    /// What runs this site's VMs: `simulated` (rows in a table) or `lab` (real QEMU guests
    /// with real volume files). Unset: the server's default (`serve --backend`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// The site's `/etc/pve/firewall/cluster.fw` (PVE's syntax): the aliases, ipsets and
    /// security groups VM firewall rules may name. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_firewall: Option<String>,
    /// Lines of the nodes' `/var/log/pve-firewall.log` as pvefw-logger writes them
    /// (`VMID LEVEL CHAIN DD/Mon/YYYY:HH:MM:SS +ZZZZ MESSAGE`): no traffic is simulated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub firewall_log: Vec<String>,
    /// The site's nodes.
    pub nodes: Vec<NodeSpec>,
    /// What every simulated guest of the site has: scripted command results and files (see
    /// `agent::guest_os`).
    #[serde(
        default,
        skip_serializing_if = "crate::agent::guest_os::GuestSetup::is_empty"
    )]
    pub guest: crate::agent::guest_os::GuestSetup,
    /// The appliance index (`GET /nodes/{node}/aplinfo`); absent: a few of the templates PVE
    /// offers (`storage::appliance::builtin_index`), `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub appliances: Option<Vec<crate::storage::appliance::Appliance>>,
}

/// What runs a site's VMs (see `exec`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// No process: figures and agent answers made up from the config.
    #[default]
    Simulated,
    /// Real QEMU guests in a vm-lab namespace booting from real volume files.
    Lab,
}

fn default_version() -> PveVersion {
    PveVersion::V9_1
}

fn default_boot_delay() -> f64 {
    25.0
}
fn default_download_speed() -> f64 {
    40.0
}

/// A user of the site.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    /// `user@realm`.
    pub userid: String,
    /// Its password.
    pub password: String,
    /// Whether it may log in (default yes).
    #[serde(default = "yes")]
    pub enable: bool,
}

fn yes() -> bool {
    true
}

/// An API token of the site.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    /// `user@realm!name`
    pub tokenid: String,
    /// The token's secret (what clients send after `=`).
    pub secret: String,
    /// Privilege separation (default yes): the token holds only what its own ACLs grant.
    #[serde(default = "yes")]
    pub privsep: bool,
}

/// An ACL entry of the site.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AclSpec {
    /// Object path (`/`, `/vms/100`, `/storage/local`).
    pub path: String,
    /// A user id (`user@realm`) or a token id (`user@realm!name`).
    pub ugid: String,
    /// Role name (`PVEAdmin`, `PVEVMUser`, ...).
    pub role: String,
    /// Whether it applies below `path` too (default yes).
    #[serde(default = "yes")]
    pub propagate: bool,
}

/// A file `download-url` can "fetch": its URL and size.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RemoteFileSpec {
    /// The URL a download names.
    pub url: String,
    /// Its size in bytes (what the download transfers and the volume holds).
    pub size_bytes: u64,
    /// A local file that stands for the download: with real disks (`FileDisks`), the
    /// downloaded volume is a copy of it (nothing is ever fetched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
}

/// One node of a site: its hardware, network bridges and storages.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Node name (`pve1`).
    pub name: String,
    /// The node's address (default `192.0.2.10`).
    #[serde(default = "default_ip")]
    pub ip: String,
    /// CPU model as `nodes/{node}/status` shows it (default `Common KVM processor`).
    #[serde(default = "default_cpu_model")]
    pub cpu_model: String,
    /// CPU sockets (default 1).
    #[serde(default = "one")]
    pub sockets: u32,
    /// Cores per socket (`cpuinfo.cores`).
    pub cores: u32,
    /// Host logical CPUs (`cpuinfo.cpus`): the start-time vCPU limit.
    pub threads: u32,
    /// Host memory in bytes.
    pub memory_bytes: u64,
    /// Whether the node is up at the start (default yes).
    #[serde(default = "yes")]
    pub online: bool,
    /// Linux bridges (`vmbr0`...) guests' NICs attach to.
    #[serde(default)]
    pub bridges: Vec<BridgeSpec>,
    /// Storages configured on the node.
    #[serde(default)]
    pub storages: Vec<StorageSpec>,
    /// What runs this node's VMs, when it differs from its site's `backend` (one lab node in a
    /// simulated cluster, say). Unset: the site's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
}

impl SiteSpec {
    /// The backend `node` runs on, given the server's default.
    pub fn node_backend(&self, node: &NodeSpec, default: Backend) -> Backend {
        node.backend.or(self.backend).unwrap_or(default)
    }

    /// Whether any of the site's nodes runs on `backend`, given the server's default.
    pub fn uses_backend(&self, backend: Backend, default: Backend) -> bool {
        self.nodes
            .iter()
            .any(|n| self.node_backend(n, default) == backend)
    }
}

fn one() -> u32 {
    1
}
fn default_ip() -> String {
    "192.0.2.10".into()
}
fn default_cpu_model() -> String {
    "Common KVM processor".into()
}

/// A Linux bridge of a node, as `/etc/network/interfaces` would define it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BridgeSpec {
    /// Bridge name (`vmbr0`).
    pub name: String,
    /// The bridge's own address with prefix (`192.168.1.2/24`), if any.
    #[serde(default)]
    pub cidr: Option<String>,
    /// Default gateway on the bridge, if any.
    #[serde(default)]
    pub gateway: Option<String>,
    /// `bridge_ports` (`eno1`), if any.
    #[serde(default)]
    pub ports: Option<String>,
    /// The simulated DHCP pool guests on this bridge get addresses from.
    #[serde(default)]
    pub dhcp_start: Option<String>,
    /// Last address of the DHCP pool.
    #[serde(default)]
    pub dhcp_end: Option<String>,
}

/// A storage of a node (a shared one is listed on each node that has it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    /// Storage id (`local`, `local-lvm`).
    pub name: String,
    /// Plugin type (`dir`, `lvmthin`, `zfspool`, ...).
    #[serde(rename = "type")]
    pub kind: StorageType,
    /// PVE's `path` of a directory-like storage (`/var/lib/vz`), if any.
    #[serde(default)]
    pub path: Option<String>,
    /// With real disks (`FileDisks`): the host directory holding this storage's files
    /// (default `<disks root>/<site>/<node>/<storage>/`). PVE's `path` stays as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing_dir: Option<PathBuf>,
    /// Content types it holds (`images`, `iso`, `backup`, ...).
    pub content: Vec<Content>,
    /// Capacity in bytes.
    pub total_bytes: u64,
    /// Write speed, MiB/s (default 200): copies and downloads take size / speed.
    #[serde(default = "default_speed")]
    pub speed_mib_s: f64,
    /// Whether all nodes see the same storage (`shared`).
    #[serde(default)]
    pub shared: bool,
    /// Whether the storage is enabled (default yes); a disabled one is not active.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// PVE's `prune-backups` option of the storage (`keep-last=3,keep-weekly=2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_backups: Option<String>,
    /// Volumes it holds at the start.
    #[serde(default)]
    pub volumes: Vec<VolumeSpec>,
}

fn default_speed() -> f64 {
    200.0
}

/// A volume a storage holds at the start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    /// Path part of the volid, e.g. `iso/ubuntu-22.04-cloud.img`.
    pub volname: String,
    /// Virtual size in bytes.
    pub size_bytes: u64,
    /// Bytes taken on the storage; `size_bytes` when unset.
    #[serde(default)]
    pub used_bytes: Option<u64>,
    /// With real disks (`FileDisks`): a local file the volume is a copy of (else an empty
    /// image of `size_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// A backup's notes (backups on directory-like storages only, as in PVE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// A protected backup.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// A container backup's `etc/vzdump/pct.conf` (the config file's text): what a restore
    /// (`POST /nodes/{node}/lxc` with `restore=1`) recovers. A backup without one is an
    /// archive that holds no configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// What the image holds (`{os, cloud_init, guest_agent}`): how a VM booted from a disk
    /// made of it behaves. Unset: an image nothing is known about (cloud-init and the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::storage::image_facts::ImageFacts>,
    /// A snippet's text (`snippets/…` volumes): what a VM's `cicustom` reads from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A site's snippets storage given a directory by [`Scenario::share_snippets`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnippetShare {
    /// Site name.
    pub site: String,
    /// Storage id.
    pub storage: String,
    /// The storage's directory: its `snippets/` holds the snippet files.
    pub dir: PathBuf,
}

impl Scenario {
    /// Give each site's first storage with `snippets` content that has no `backing_dir` a
    /// directory under `root` (`<root>/<site>/<storage>`, made here), as a share the
    /// deployer mounts: snippets written into its `snippets/` are what PVE lists and what a
    /// VM's `cicustom` reads. Every node of the site sees the same directory. Returns the
    /// shares, one per site that has such a storage (a storage that already had a
    /// directory is returned as it is).
    pub fn share_snippets(&mut self, root: &Path) -> std::io::Result<Vec<SnippetShare>> {
        let mut shares = Vec::new();
        for site in &mut self.sites {
            let Some(name) = site
                .nodes
                .iter()
                .flat_map(|n| &n.storages)
                .find(|s| s.content.contains(&Content::Snippets))
                .map(|s| s.name.clone())
            else {
                continue;
            };
            let mut dir = None;
            for s in site
                .nodes
                .iter_mut()
                .flat_map(|n| &mut n.storages)
                .filter(|s| s.name == name)
            {
                let d = match (&s.backing_dir, &dir) {
                    (Some(own), _) => own.clone(),
                    (None, Some(d)) => PathBuf::clone(d),
                    (None, None) => {
                        let d = root.join(&site.name).join(&name);
                        std::fs::create_dir_all(d.join("snippets"))?;
                        d
                    }
                };
                s.backing_dir = Some(d.clone());
                dir.get_or_insert(d);
            }
            if let Some(dir) = dir {
                shares.push(SnippetShare {
                    site: site.name.clone(),
                    storage: name,
                    dir,
                });
            }
        }
        Ok(shares)
    }

    /// The seed's two sites (`site-1`/ml110-01, `site-2`/r630-01).
    pub fn embedded_default() -> Scenario {
        // The embedded YAML is checked by a unit test; failing here is a build defect.
        #[allow(clippy::expect_used)]
        Self::from_yaml_str(DEFAULT_YAML).expect("embedded default scenario is valid")
    }

    /// The YAML of the built-in scenario.
    pub fn default_yaml() -> &'static str {
        DEFAULT_YAML
    }

    /// Parse and check a scenario from YAML text.
    ///
    /// # Errors
    /// `ScenarioError::Yaml` when the text does not parse, `ScenarioError::Invalid` when it
    /// breaks a rule.
    pub fn from_yaml_str(s: &str) -> Result<Scenario, ScenarioError> {
        let sc: Scenario =
            serde_norway::from_str(s).map_err(|e| ScenarioError::Yaml(e.to_string()))?;
        sc.validate()?;
        Ok(sc)
    }

    /// Read, parse and check a scenario file.
    ///
    /// # Errors
    /// `ScenarioError::Read` when the file cannot be read, else as `from_yaml_str`.
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<Scenario, ScenarioError> {
        let p = path.as_ref();
        let s = std::fs::read_to_string(p).map_err(|source| ScenarioError::Read {
            path: p.display().to_string(),
            source,
        })?;
        Self::from_yaml_str(&s)
    }

    /// The scenario as YAML (empty when it cannot be written).
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(self).unwrap_or_default()
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        if self.sites.is_empty() {
            return Err(ScenarioError::Invalid("no sites".into()));
        }
        let node_re = regex::Regex::new(r"^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$")
            .map_err(|e| ScenarioError::Invalid(e.to_string()))?;
        let mut sites = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        for s in &self.sites {
            if !sites.insert(s.name.clone()) {
                return Err(ScenarioError::Invalid(format!(
                    "site '{}' defined twice",
                    s.name
                )));
            }
            validate_site(s).map_err(ScenarioError::Invalid)?;
            for n in &s.nodes {
                if !node_re.is_match(&n.name) {
                    return Err(ScenarioError::Invalid(format!(
                        "node name '{}' is not a valid pve-node",
                        n.name
                    )));
                }
                if !nodes.insert(n.name.clone()) {
                    return Err(ScenarioError::Invalid(format!(
                        "node '{}' defined twice (node names are unique over all sites)",
                        n.name
                    )));
                }
                validate_node(n).map_err(ScenarioError::Invalid)?;
            }
        }
        Ok(())
    }
}

/// A site's own figures, tokens and ACLs.
fn validate_site(s: &SiteSpec) -> Result<(), String> {
    if s.nodes.is_empty() {
        return Err(format!("site '{}' has no nodes", s.name));
    }
    if s.boot_delay_secs.is_nan()
        || s.boot_delay_secs < 0.0
        || s.download_mib_s.is_nan()
        || s.download_mib_s <= 0.0
    {
        return Err(format!(
            "site '{}': boot_delay_secs must be >= 0 and download_mib_s > 0",
            s.name
        ));
    }
    for t in &s.tokens {
        let Some((user, _)) = t.tokenid.split_once('!') else {
            return Err(format!(
                "site '{}': token id '{}' is not user@realm!name",
                s.name, t.tokenid
            ));
        };
        if !s.users.iter().any(|u| u.userid == user) {
            return Err(format!(
                "site '{}': token '{}' belongs to unknown user '{user}'",
                s.name, t.tokenid
            ));
        }
    }
    for a in &s.acls {
        if crate::access::model::role_privs(&a.role).is_none() {
            return Err(format!(
                "site '{}': unknown role '{}' (PVE 9.1's built-in roles: {})",
                s.name,
                a.role,
                crate::access::roles::BUILTIN
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// A node's CPU figures, storages and bridges.
fn validate_node(n: &NodeSpec) -> Result<(), String> {
    if n.threads == 0 || n.cores == 0 || n.sockets == 0 {
        return Err(format!(
            "node '{}': sockets, cores and threads must be >= 1",
            n.name
        ));
    }
    let mut st = BTreeSet::new();
    for sto in &n.storages {
        if !st.insert(sto.name.clone()) {
            return Err(format!(
                "node '{}': storage '{}' defined twice",
                n.name, sto.name
            ));
        }
        validate_storage(sto).map_err(|e| format!("node '{}': {e}", n.name))?;
    }
    for b in &n.bridges {
        validate_bridge(b).map_err(|e| format!("node '{}': bridge '{}': {e}", n.name, b.name))?;
    }
    Ok(())
}

fn validate_storage(sto: &StorageSpec) -> Result<(), String> {
    for c in &sto.content {
        if !sto.kind.allowed_content().contains(c) {
            return Err(format!(
                "storage '{}' ({}) does not support content type '{}'",
                sto.name,
                sto.kind.as_str(),
                c.as_str()
            ));
        }
    }
    if sto.speed_mib_s.is_nan() || sto.speed_mib_s <= 0.0 {
        return Err(format!("storage '{}': speed_mib_s must be > 0", sto.name));
    }
    for v in &sto.volumes {
        if crate::storage::volid::parse_volname(sto.kind, &v.volname).is_none() {
            return Err(format!(
                "storage '{}': invalid volume name '{}'",
                sto.name, v.volname
            ));
        }
    }
    Ok(())
}

/// A bridge's DHCP pool: both ends or neither, IPv4, in order, at most 65536 addresses.
fn validate_bridge(b: &BridgeSpec) -> Result<(), String> {
    match (&b.dhcp_start, &b.dhcp_end) {
        (Some(a), Some(z)) => {
            let (Ok(a), Ok(z)) = (
                a.parse::<std::net::Ipv4Addr>(),
                z.parse::<std::net::Ipv4Addr>(),
            ) else {
                return Err("dhcp_start/dhcp_end must be IPv4 addresses".into());
            };
            if u32::from(a) > u32::from(z) {
                return Err("dhcp_start after dhcp_end".into());
            }
            if u32::from(z) - u32::from(a) >= 65_536 {
                return Err("a DHCP pool holds at most 65536 addresses".into());
            }
            Ok(())
        }
        (None, None) => Ok(()),
        _ => Err("give both dhcp_start and dhcp_end".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn embedded_default_is_the_seed() {
        let s = Scenario::embedded_default();
        let names: Vec<_> = s.sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["site-1", "site-2"]);
        assert_eq!(s.sites[0].nodes[0].name, "ml110-01");
        assert_eq!(s.sites[0].nodes[0].threads, 5);
        assert_eq!(s.sites[1].nodes[0].name, "r630-01");
        assert_eq!(s.sites[1].nodes[0].threads, 50);
        let r630 = &s.sites[1].nodes[0];
        let ceph = r630.storages.iter().find(|s| s.name == "ceph-fs").unwrap();
        assert_eq!(ceph.kind, StorageType::CephFs);
        assert!(!ceph.content.contains(&Content::Images));
    }

    #[test]
    fn unknown_keys_and_bad_content_are_refused() {
        let y = Scenario::default_yaml().replace("boot_delay_secs: 25", "boot_delay: 25");
        assert!(matches!(
            Scenario::from_yaml_str(&y),
            Err(ScenarioError::Yaml(_))
        ));
        let y = Scenario::default_yaml().replace(
            "content: [iso, vztmpl, backup, snippets]\n",
            "content: [images]\n",
        );
        let e = Scenario::from_yaml_str(&y).unwrap_err().to_string();
        assert!(e.contains("does not support content type 'images'"), "{e}");
    }

    #[test]
    fn round_trips_through_yaml() {
        let s = Scenario::embedded_default();
        let again = Scenario::from_yaml_str(&s.to_yaml()).unwrap();
        assert_eq!(s, again);
    }
}
