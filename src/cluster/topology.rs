//! Who is in the cluster: node names, hostnames and addresses, and where things live on a node's
//! disk. Everything else (certificates, configs, scripts) is derived from this.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::error::ClusterError;

/// Name of the first-boot script, in the staged node directory and at the disk's top.
pub const BOOT_SCRIPT_FILE: &str = "boot.sh";

/// One member of the cluster as the provisioner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// The node's name in the lab and its cluster member name (`node01`).
    pub name: String,
    /// The hostname peers use to reach it (the seed's configs use hostnames, not addresses).
    pub hostname: String,
    /// Its address on the cluster L2.
    pub address: IpAddr,
}

/// TCP ports of the cluster service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ports {
    pub client: u16,
    pub peer: u16,
    pub metrics: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Self {
            client: 2379,
            peer: 2380,
            metrics: 2381,
        }
    }
}

/// The cluster to bring up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Also the etcd initial-cluster token, so two clusters never merge by accident.
    pub name: String,
    pub nodes: Vec<NodeIdentity>,
    #[serde(default)]
    pub ports: Ports,
}

/// Where the provisioner puts things on a node. The disk's cluster partition is mounted at
/// `mount` by the boot hook; all paths in `cluster-config.json` are under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLayout {
    pub mount: String,
}

impl Default for GuestLayout {
    fn default() -> Self {
        Self {
            mount: "/cluster".to_owned(),
        }
    }
}

impl GuestLayout {
    pub fn secrets_dir(&self) -> String {
        format!("{}/secrets", self.mount)
    }
    pub fn etc_dir(&self) -> String {
        format!("{}/etc", self.mount)
    }
    pub fn bin_dir(&self) -> String {
        format!("{}/bin", self.mount)
    }
    pub fn data_dir(&self) -> String {
        format!("{}/data", self.mount)
    }
    pub fn log_file(&self) -> String {
        format!("{}/log/etcd.log", self.mount)
    }
    pub fn config_file(&self) -> String {
        format!("{}/cluster-config.json", self.etc_dir())
    }
    pub fn boot_script(&self) -> String {
        format!("{}/{}", self.mount, BOOT_SCRIPT_FILE)
    }
}

impl ClusterSpec {
    /// Checks the spec itself: at least one node, unique names, hostnames and addresses, and
    /// hostnames that are valid DNS labels (etcd and the certificate SANs need that).
    pub fn check(&self) -> Result<(), ClusterError> {
        if self.nodes.is_empty() {
            return Err(ClusterError::Spec("the cluster has no nodes".into()));
        }
        if self.name.is_empty() || !self.name.chars().all(is_label_char) {
            return Err(ClusterError::Spec(format!(
                "cluster name {:?} must be non-empty and use only a-z, 0-9 and '-'",
                self.name
            )));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.name.is_empty() || !n.name.chars().all(is_label_char) {
                return Err(ClusterError::Spec(format!(
                    "node name {:?} must be non-empty and use only a-z, 0-9 and '-'",
                    n.name
                )));
            }
            if n.hostname.is_empty() || !n.hostname.split('.').all(is_dns_label) {
                return Err(ClusterError::Spec(format!(
                    "node {}: hostname {:?} is not a valid DNS name",
                    n.name, n.hostname
                )));
            }
            for other in &self.nodes[..i] {
                if other.name == n.name {
                    return Err(ClusterError::Spec(format!(
                        "node name {} appears twice",
                        n.name
                    )));
                }
                if other.hostname == n.hostname {
                    return Err(ClusterError::Spec(format!(
                        "nodes {} and {} share the hostname {}",
                        other.name, n.name, n.hostname
                    )));
                }
                if other.address == n.address {
                    return Err(ClusterError::Spec(format!(
                        "nodes {} and {} share the address {}",
                        other.name, n.name, n.address
                    )));
                }
            }
        }
        Ok(())
    }

    pub fn node(&self, name: &str) -> Result<&NodeIdentity, ClusterError> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| ClusterError::Spec(format!("no node named {name} in the cluster")))
    }

    /// The seed's three nodes (T036): node01..03 at 192.168.100.11..13. These addresses only
    /// ever exist inside the lab's own network namespace.
    pub fn seed_t036() -> Self {
        let nodes = (1..=3u8)
            .map(|i| NodeIdentity {
                name: format!("node0{i}"),
                hostname: format!("node0{i}"),
                address: IpAddr::from([192, 168, 100, 10 + i]),
            })
            .collect();
        Self {
            name: "photoncloud-t036".into(),
            nodes,
            ports: Ports::default(),
        }
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

fn is_dns_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && !l.starts_with('-')
        && !l.ends_with('-')
        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn seed_spec_is_valid() {
        let s = ClusterSpec::seed_t036();
        s.check().unwrap();
        assert_eq!(s.nodes[2].address.to_string(), "192.168.100.13");
    }

    #[test]
    fn duplicate_address_is_named() {
        let mut s = ClusterSpec::seed_t036();
        s.nodes[1].address = s.nodes[0].address;
        let e = s.check().unwrap_err().to_string();
        assert!(
            e.contains("node01") && e.contains("node02") && e.contains("192.168.100.11"),
            "{e}"
        );
    }

    #[test]
    fn bad_hostname_is_refused() {
        let mut s = ClusterSpec::seed_t036();
        s.nodes[0].hostname = "node_01".into();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("node_01"), "{e}");
    }
}
