//! S4: one `cluster-config.json` per node and a hosts mapping of every node on every node, staged
//! in a directory per node and checked before use.
//!
//! The seed's second "critical fix" was the hosts mapping: its configs name peers by hostname and
//! the nodes have no DNS, so without `/etc/hosts` entries the Raft bootstrap cannot find its peers.
//! [`check_node`] catches that (and a config naming a certificate file that is not there) before
//! a node is touched.

use std::collections::BTreeMap;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::ClusterError;
use super::tls::{self, ClusterTls, TlsFileNames};
use super::topology::{ClusterSpec, GuestLayout, NodeIdentity, Ports};

pub const CONFIG_FILE: &str = "cluster-config.json";
pub const HOSTS_FILE: &str = "hosts";
pub const SECRETS_DIR: &str = "secrets";

/// The per-node cluster configuration, as installed on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeConfig {
    pub cluster_name: String,
    pub node_id: String,
    pub hostname: String,
    pub address: IpAddr,
    /// All members start together and form the cluster (the seed sets it on all three).
    pub bootstrap: bool,
    /// Every member, this node included, by hostname.
    pub peers: Vec<Peer>,
    pub ports: Ports,
    pub tls: TlsPaths,
    pub data_dir: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub id: String,
    pub hostname: String,
}

/// Paths on the node (not on the host) of the CA, certificate and key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsPaths {
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
}

/// What goes into each node's hosts mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostsMapping {
    /// Every node on every node (the seed's fix).
    AllNodes,
    /// Only `localhost` (the seed before its fix).
    LocalhostOnly,
}

/// How to stage: normally the names the config expects and a full hosts mapping; the other
/// values reproduce the seed's two misconfigurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageOptions {
    pub hosts: HostsMapping,
    pub seed_original_cert_names: bool,
}

impl Default for StageOptions {
    fn default() -> Self {
        Self {
            hosts: HostsMapping::AllNodes,
            seed_original_cert_names: false,
        }
    }
}

/// The staged configuration of a cluster: `root/<node>/{cluster-config.json,hosts,secrets/}`.
#[derive(Debug, Clone)]
pub struct StagedCluster {
    pub root: PathBuf,
    pub spec: ClusterSpec,
    pub layout: GuestLayout,
}

impl StagedCluster {
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join(node)
    }
}

/// Builds the config of one node.
pub fn node_config(spec: &ClusterSpec, layout: &GuestLayout, node: &NodeIdentity) -> NodeConfig {
    let names = TlsFileNames::for_node(&node.name);
    let sd = layout.secrets_dir();
    NodeConfig {
        cluster_name: spec.name.clone(),
        node_id: node.name.clone(),
        hostname: node.hostname.clone(),
        address: node.address,
        bootstrap: true,
        peers: spec
            .nodes
            .iter()
            .map(|n| Peer {
                id: n.name.clone(),
                hostname: n.hostname.clone(),
            })
            .collect(),
        ports: spec.ports,
        tls: TlsPaths {
            ca_file: format!("{sd}/{}", names.ca),
            cert_file: format!("{sd}/{}", names.cert),
            key_file: format!("{sd}/{}", names.key),
        },
        data_dir: layout.data_dir(),
    }
}

/// Renders a hosts file.
pub fn hosts_file(spec: &ClusterSpec, mapping: HostsMapping) -> String {
    let mut s = String::from("127.0.0.1 localhost\n");
    if mapping == HostsMapping::AllNodes {
        for n in &spec.nodes {
            if n.hostname == n.name {
                s.push_str(&format!("{} {}\n", n.address, n.hostname));
            } else {
                s.push_str(&format!("{} {} {}\n", n.address, n.hostname, n.name));
            }
        }
    }
    s
}

/// Parses a hosts file into hostname → address (first entry wins, as with glibc/musl).
pub fn parse_hosts(text: &str) -> BTreeMap<String, IpAddr> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split_whitespace();
        let Some(addr) = fields.next().and_then(|a| a.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in fields {
            map.entry(name.to_ascii_lowercase()).or_insert(addr);
        }
    }
    map
}

/// Writes every node's config, hosts mapping and secrets under `root` (S3 + S4 output).
pub fn stage(
    spec: &ClusterSpec,
    layout: &GuestLayout,
    tls: &ClusterTls,
    root: &Path,
    opts: StageOptions,
) -> Result<StagedCluster, ClusterError> {
    spec.check()?;
    for n in &spec.nodes {
        let dir = root.join(&n.name);
        fs::create_dir_all(&dir).map_err(|e| ClusterError::io(&dir, e))?;
        let cfg = node_config(spec, layout, n);
        let json = serde_json::to_string_pretty(&cfg)
            .map_err(|e| ClusterError::Spec(format!("cannot render {CONFIG_FILE}: {e}")))?;
        let p = dir.join(CONFIG_FILE);
        fs::write(&p, json + "\n").map_err(|e| ClusterError::io(&p, e))?;
        let p = dir.join(HOSTS_FILE);
        fs::write(&p, hosts_file(spec, opts.hosts)).map_err(|e| ClusterError::io(&p, e))?;
        let names = if opts.seed_original_cert_names {
            TlsFileNames::seed_original()
        } else {
            TlsFileNames::for_node(&n.name)
        };
        tls.write_node_secrets(&n.name, &dir.join(SECRETS_DIR), &names)?;
    }
    Ok(StagedCluster {
        root: root.to_owned(),
        spec: spec.clone(),
        layout: layout.clone(),
    })
}

/// Checks one staged node before use: its config parses and is about this node, every TLS path
/// it names is in the secrets directory the installer copies (and the files there verify), and
/// every peer hostname resolves through this node's hosts mapping to that peer's address.
pub fn check_node(staged: &StagedCluster, node: &NodeIdentity) -> Result<NodeConfig, ClusterError> {
    let fail = |cause: String| ClusterError::NodeConfig {
        node: node.name.clone(),
        cause,
    };
    let dir = staged.node_dir(&node.name);
    let p = dir.join(CONFIG_FILE);
    let text = fs::read_to_string(&p).map_err(|e| fail(format!("{}: {e}", p.display())))?;
    let cfg: NodeConfig = serde_json::from_str(&text)
        .map_err(|e| fail(format!("{CONFIG_FILE} does not parse: {e}")))?;
    if cfg.node_id != node.name {
        return Err(fail(format!(
            "{CONFIG_FILE} is for node {:?}, not {}",
            cfg.node_id, node.name
        )));
    }
    if cfg.peers.is_empty() {
        return Err(fail(format!("{CONFIG_FILE} lists no peers")));
    }
    if !cfg.peers.iter().any(|p| p.id == node.name) {
        return Err(fail(format!(
            "{CONFIG_FILE} does not list the node itself among its peers"
        )));
    }

    // TLS: each path must sit in the installed secrets directory, and the staged file of that
    // name must exist and verify.
    let secrets = staged.layout.secrets_dir();
    let base = |path: &str, what: &str| -> Result<String, ClusterError> {
        match path.strip_prefix(&format!("{secrets}/")) {
            Some(b) if !b.is_empty() && !b.contains('/') => Ok(b.to_owned()),
            _ => Err(fail(format!(
                "{CONFIG_FILE} names {what} {path}, which is not in {secrets}/, where the \
                 installer puts the secrets"
            ))),
        }
    };
    let names = TlsFileNames {
        ca: base(&cfg.tls.ca_file, "ca_file")?,
        cert: base(&cfg.tls.cert_file, "cert_file")?,
        key: base(&cfg.tls.key_file, "key_file")?,
    };
    tls::verify_node_secrets(&dir.join(SECRETS_DIR), node, &names)?;

    // Hosts: peers by hostname must resolve, to the right node.
    let p = dir.join(HOSTS_FILE);
    let hosts_text =
        fs::read_to_string(&p).map_err(|e| fail(format!("hosts mapping {}: {e}", p.display())))?;
    let hosts = parse_hosts(&hosts_text);
    // Other peers first: their names are the ones the Raft bootstrap dials.
    let ordered = cfg
        .peers
        .iter()
        .filter(|p| p.id != node.name)
        .chain(cfg.peers.iter().filter(|p| p.id == node.name));
    for peer in ordered {
        let Some(expected) = staged.spec.nodes.iter().find(|n| n.name == peer.id) else {
            return Err(fail(format!(
                "peer {} is not a node of cluster {}",
                peer.id, staged.spec.name
            )));
        };
        match hosts.get(&peer.hostname.to_ascii_lowercase()) {
            None => {
                return Err(fail(format!(
                    "peer hostname {} does not resolve: the hosts mapping of {} has no entry \
                     for it (there is no DNS in the lab)",
                    peer.hostname, node.name
                )));
            }
            Some(addr) if *addr != expected.address => {
                return Err(fail(format!(
                    "peer hostname {} resolves to {addr} in the hosts mapping, but {} is at {}",
                    peer.hostname, peer.id, expected.address
                )));
            }
            Some(_) => {}
        }
    }
    Ok(cfg)
}

/// Checks every node; the first failure is returned.
pub fn check_all(staged: &StagedCluster) -> Result<Vec<NodeConfig>, ClusterError> {
    staged
        .spec
        .nodes
        .iter()
        .map(|n| check_node(staged, n))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn staged(opts: StageOptions) -> (tempfile::TempDir, StagedCluster) {
        let spec = ClusterSpec::seed_t036();
        let tls = tls::generate(&spec).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let s = stage(&spec, &GuestLayout::default(), &tls, dir.path(), opts).unwrap();
        (dir, s)
    }

    #[test]
    fn staged_cluster_checks_and_names_peers_by_hostname() {
        let (_d, s) = staged(StageOptions::default());
        let cfgs = check_all(&s).unwrap();
        assert_eq!(cfgs.len(), 3);
        let c = &cfgs[1];
        assert_eq!(c.node_id, "node02");
        assert!(c.bootstrap);
        let hostnames: Vec<_> = c.peers.iter().map(|p| p.hostname.as_str()).collect();
        assert_eq!(hostnames, ["node01", "node02", "node03"]);
        assert_eq!(c.tls.cert_file, "/cluster/secrets/node02.crt");
        let hosts = fs::read_to_string(s.node_dir("node03").join(HOSTS_FILE)).unwrap();
        assert!(hosts.contains("192.168.100.11 node01\n"), "{hosts}");
        assert!(hosts.contains("192.168.100.12 node02\n"), "{hosts}");
    }

    #[test]
    fn missing_hosts_mapping_names_the_peer_that_does_not_resolve() {
        let (_d, s) = staged(StageOptions {
            hosts: HostsMapping::LocalhostOnly,
            ..Default::default()
        });
        let e = check_all(&s).unwrap_err().to_string();
        assert!(
            e.starts_with("node01: node config: peer hostname node02 does not resolve"),
            "{e}"
        );
    }

    #[test]
    fn hosts_entry_pointing_elsewhere_is_named() {
        let (_d, s) = staged(StageOptions::default());
        let p = s.node_dir("node01").join(HOSTS_FILE);
        fs::write(
            &p,
            "192.168.100.11 node01\n192.168.100.99 node02\n192.168.100.13 node03\n",
        )
        .unwrap();
        let e = check_node(&s, &s.spec.nodes[0]).unwrap_err().to_string();
        assert!(e.contains("node02 resolves to 192.168.100.99"), "{e}");
    }

    #[test]
    fn seed_original_cert_names_fail_before_use() {
        let (_d, s) = staged(StageOptions {
            seed_original_cert_names: true,
            ..Default::default()
        });
        let e = check_all(&s).unwrap_err().to_string();
        assert!(e.contains("/secrets/ca.crt does not exist"), "{e}");
        assert!(e.contains("ca-cert.pem"), "{e}");
    }

    #[test]
    fn config_naming_a_cert_file_that_does_not_exist_is_named() {
        let (_d, s) = staged(StageOptions::default());
        let p = s.node_dir("node02").join(CONFIG_FILE);
        let mut cfg: NodeConfig = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
        cfg.tls.cert_file = "/cluster/secrets/cert.pem".into();
        fs::write(&p, serde_json::to_string(&cfg).unwrap()).unwrap();
        let e = check_node(&s, &s.spec.nodes[1]).unwrap_err().to_string();
        assert!(e.starts_with("node02: TLS files:"), "{e}");
        assert!(e.contains("cert.pem does not exist"), "{e}");
    }

    #[test]
    fn tls_path_outside_the_secrets_dir_is_named() {
        let (_d, s) = staged(StageOptions::default());
        let p = s.node_dir("node01").join(CONFIG_FILE);
        let mut cfg: NodeConfig = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
        cfg.tls.ca_file = "/etc/nixos/secrets/ca.crt".into();
        fs::write(&p, serde_json::to_string(&cfg).unwrap()).unwrap();
        let e = check_node(&s, &s.spec.nodes[0]).unwrap_err().to_string();
        assert!(e.contains("names ca_file /etc/nixos/secrets/ca.crt"), "{e}");
    }

    #[test]
    fn garbage_config_is_a_clear_error() {
        let (_d, s) = staged(StageOptions::default());
        fs::write(s.node_dir("node03").join(CONFIG_FILE), "{not json").unwrap();
        let e = check_node(&s, &s.spec.nodes[2]).unwrap_err().to_string();
        assert!(
            e.contains("node03: node config: cluster-config.json does not parse"),
            "{e}"
        );
    }

    #[test]
    fn hosts_parser_ignores_comments_and_keeps_first_entry() {
        let m = parse_hosts("# c\n10.0.0.1 a b # x\n10.0.0.2 a\nbogus line\n");
        assert_eq!(m["a"].to_string(), "10.0.0.1");
        assert_eq!(m["b"].to_string(), "10.0.0.1");
        assert_eq!(m.len(), 2);
    }
}
