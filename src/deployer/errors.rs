//! Why a VM's rollout failed, and whether trying again can help.
//!
//! Retryable: the node is unreachable, the image is not there yet, resources are busy or short,
//! the VM is locked. Fail fast: the spec is invalid, the bridge or storage is missing or wrong,
//! the credentials are refused, the PVE version cannot import disks.

use serde::Serialize;

use crate::deployer::pve::PveError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorClass {
    Retryable,
    FailFast,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    #[error("{0}")]
    InvalidSpec(String),
    #[error("authentication refused by {site}: {detail}")]
    AuthRefused { site: String, detail: String },
    #[error("TLS verification of {site} failed: {detail}")]
    TlsUntrusted { site: String, detail: String },
    #[error("site '{0}' is not in the provider config")]
    SiteUnknown(String),
    #[error("node {node} is not part of {site} (nodes there: {known})")]
    NodeUnknown {
        site: String,
        node: String,
        known: String,
    },
    #[error("node {node} is not reachable or unhealthy: {detail}")]
    NodeUnreachable { node: String, detail: String },
    #[error("network bridge '{bridge}' does not exist on node {node} (bridges there: {known})")]
    BridgeMissing {
        node: String,
        bridge: String,
        known: String,
    },
    #[error("storage '{storage}' does not exist on node {node}")]
    StorageMissing { node: String, storage: String },
    #[error(
        "storage '{storage}' on node {node} is type {kind} with content [{content}]: it cannot hold VM disks (needs 'images'{hint})"
    )]
    StorageNotForImages {
        node: String,
        storage: String,
        kind: String,
        content: String,
        hint: String,
    },
    #[error(
        "storage '{storage}' on node {node} is type {kind} with content [{content}]: it cannot hold container root filesystems (needs 'rootdir')"
    )]
    StorageNotForContainers {
        node: String,
        storage: String,
        kind: String,
        content: String,
    },
    #[error("userData of VM {vm} cannot reach it: {detail}")]
    UserDataUndeliverable { vm: String, detail: String },
    #[error("storage '{storage}' on node {node} is full: {detail}")]
    StorageFull {
        node: String,
        storage: String,
        detail: String,
    },
    #[error("image '{image}' not usable on node {node}: {detail}")]
    ImageMissing {
        image: String,
        node: String,
        detail: String,
    },
    #[error("disk import not supported: {detail}")]
    ImportNotSupported { detail: String },
    #[error("insufficient resources: {0}")]
    Insufficient(String),
    #[error("node {node} has {threads} CPU threads; a VM with {cores} vCPUs cannot start there")]
    TooManyVcpus {
        node: String,
        cores: u32,
        threads: u64,
    },
    #[error("VM is locked: {0}")]
    Locked(String),
    #[error("dependency '{0}' did not become ready")]
    DependencyFailed(String),
    #[error("{0}")]
    Api(String),
    #[error("{0} (transient)")]
    Transient(String),
}

impl StepError {
    pub fn class(&self) -> ErrorClass {
        use StepError::*;
        match self {
            NodeUnreachable { .. }
            | StorageFull { .. }
            | ImageMissing { .. }
            | Insufficient(_)
            | Locked(_)
            | Transient(_) => ErrorClass::Retryable,
            InvalidSpec(_)
            | AuthRefused { .. }
            | TlsUntrusted { .. }
            | SiteUnknown(_)
            | NodeUnknown { .. }
            | BridgeMissing { .. }
            | StorageMissing { .. }
            | StorageNotForImages { .. }
            | StorageNotForContainers { .. }
            | UserDataUndeliverable { .. }
            | ImportNotSupported { .. }
            | TooManyVcpus { .. }
            | DependencyFailed(_)
            | Api(_) => ErrorClass::FailFast,
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Retryable
    }

    /// A short machine-readable reason (the condition's `reason`).
    pub fn reason(&self) -> &'static str {
        use StepError::*;
        match self {
            InvalidSpec(_) => "InvalidSpec",
            AuthRefused { .. } => "AuthRefused",
            TlsUntrusted { .. } => "TlsUntrusted",
            SiteUnknown(_) => "SiteUnknown",
            NodeUnknown { .. } => "NodeUnknown",
            NodeUnreachable { .. } => "NodeUnreachable",
            BridgeMissing { .. } => "BridgeMissing",
            StorageMissing { .. } => "StorageMissing",
            StorageNotForImages { .. } => "StorageNotForImages",
            StorageNotForContainers { .. } => "StorageNotForContainers",
            UserDataUndeliverable { .. } => "UserDataUndeliverable",
            StorageFull { .. } => "StorageFull",
            ImageMissing { .. } => "ImageMissing",
            ImportNotSupported { .. } => "ImportNotSupported",
            Insufficient(_) => "InsufficientResources",
            TooManyVcpus { .. } => "TooManyVcpus",
            Locked(_) => "Locked",
            DependencyFailed(_) => "DependencyFailed",
            Api(_) => "ApiError",
            Transient(_) => "Transient",
        }
    }
}

/// What went wrong talking to PVE, classified by status and PVE's own wording.
pub fn classify(site: &str, node: &str, storage: Option<&str>, err: &PveError) -> StepError {
    by_transport(site, node, err)
        .or_else(|| by_status(site, node, err))
        .or_else(|| by_text(node, storage, err.text().trim()))
        .unwrap_or_else(|| StepError::Api(err.to_string()))
}

/// The request never got an answer: a certificate problem will not fix itself, anything
/// else is the node being unreachable; a task that ran out of time may finish later.
fn by_transport(site: &str, node: &str, err: &PveError) -> Option<StepError> {
    match err {
        PveError::Transport { detail, .. } => {
            let d = detail.to_lowercase();
            Some(if d.contains("certificate") || d.contains("fingerprint") {
                StepError::TlsUntrusted {
                    site: site.to_string(),
                    detail: err.to_string(),
                }
            } else {
                StepError::NodeUnreachable {
                    node: node.to_string(),
                    detail: err.to_string(),
                }
            })
        }
        PveError::TaskTimeout { .. } => Some(StepError::Transient(err.to_string())),
        _ => None,
    }
}

fn by_status(site: &str, node: &str, err: &PveError) -> Option<StepError> {
    match err.status()? {
        401 | 403 => Some(StepError::AuthRefused {
            site: site.to_string(),
            detail: err.to_string(),
        }),
        595 | 596 | 502 | 503 | 504 => Some(StepError::NodeUnreachable {
            node: node.to_string(),
            detail: err.to_string(),
        }),
        _ => None,
    }
}

/// PVE's error texts, in the order they must be tried (the storage texts before the
/// generic "insufficient").
fn by_text(node: &str, storage: Option<&str>, text: &str) -> Option<StepError> {
    let lower = text.to_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    let storage = || storage.unwrap_or("?").to_string();
    if any(&["does not support vm images"]) {
        return Some(StepError::StorageNotForImages {
            node: node.to_string(),
            storage: storage(),
            kind: "?".into(),
            content: "?".into(),
            hint: String::new(),
        });
    }
    if any(&[
        "insufficient free space",
        "no space left",
        "not enough free space",
        "storage full",
        "out of space",
    ]) {
        return Some(StepError::StorageFull {
            node: node.to_string(),
            storage: storage(),
            detail: text.to_string(),
        });
    }
    // A cluster without quorum: PVE refuses before the work (`check_cfs_quorum`) or the
    // read-only /etc/pve refuses the write. Quorum comes back with the nodes.
    if any(&["no quorum"]) || (lower.contains("/etc/pve/") && lower.contains("permission denied")) {
        return Some(StepError::Transient(format!(
            "the cluster has no quorum: {}",
            text.trim_end()
        )));
    }
    if any(&["vm is locked", "can't lock file", "got timeout"]) {
        return Some(StepError::Locked(text.to_string()));
    }
    if any(&[
        "insufficient",
        "cannot allocate memory",
        "out of memory",
        "not enough",
    ]) {
        return Some(StepError::Insufficient(text.to_string()));
    }
    if any(&["vcpus allowed per vm"]) {
        // The VM is larger than the node: waiting will not change that.
        return Some(StepError::InvalidSpec(format!("node {node}: {text}")));
    }
    if any(&[
        "node is offline",
        "no route to host",
        "connection refused",
        "hostname lookup",
    ]) {
        return Some(StepError::NodeUnreachable {
            node: node.to_string(),
            detail: text.to_string(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn http(status: u16, reason: &str) -> PveError {
        PveError::Http {
            method: "POST".into(),
            path: "/nodes/n/qemu".into(),
            status,
            reason: reason.into(),
            message: None,
            errors: BTreeMap::new(),
        }
    }

    #[test]
    fn classes_follow_the_seed() {
        let c = |e: &PveError| classify("site-1", "n", Some("local-lvm"), e);
        assert_eq!(
            c(&http(401, "Authentication failed!")).reason(),
            "AuthRefused"
        );
        assert!(!c(&http(401, "No ticket")).is_retryable());
        assert!(c(&http(595, "Connection refused")).is_retryable());
        assert!(c(&http(500, "VM is locked (create)")).is_retryable());
        let full = c(&PveError::Task {
            upid: "u".into(),
            exitstatus: "unable to create VM 100 - lvcreate 'pve/vm-100-disk-0' error:   Volume group \"pve\" has insufficient free space (10 extents): 20 required.".into(),
            log: vec![],
        });
        assert_eq!(full.reason(), "StorageFull");
        assert!(full.to_string().contains("local-lvm"));
        assert!(full.is_retryable());
        assert!(!c(&http(500, "something odd")).is_retryable());
        let no_quorum = c(&http(500, "cluster not ready - no quorum?\n"));
        assert_eq!(no_quorum.reason(), "Transient");
        assert!(no_quorum.is_retryable());
        let read_only = c(&http(
            500,
            "unable to open file '/etc/pve/nodes/pve/qemu-server/100.conf.tmp.2345' - Permission denied\n",
        ));
        assert!(read_only.is_retryable(), "{read_only}");
        // A permission denied elsewhere is no quorum loss.
        assert!(
            !c(&http(
                500,
                "unable to open file '/var/tmp/x' - Permission denied"
            ))
            .is_retryable()
        );
        let transport = PveError::Transport {
            method: "GET".into(),
            path: "/".into(),
            detail: "connect refused".into(),
            timeout: false,
        };
        assert_eq!(c(&transport).reason(), "NodeUnreachable");
    }
}
