//! One error type for the provisioner. Every variant names the node (where there is one) and the
//! cause, because the seed's failures were all "something is named wrong somewhere".

use std::path::PathBuf;

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster spec: {0}")]
    Spec(String),

    #[error("TLS: {0}")]
    Tls(String),

    /// A certificate or key file is missing, misnamed, or has the wrong mode.
    #[error("{node}: TLS files: {cause}")]
    TlsFiles { node: String, cause: String },

    /// A node's configuration (cluster-config.json or its hosts mapping) does not hold together.
    #[error("{node}: node config: {cause}")]
    NodeConfig { node: String, cause: String },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The lab driver failed (boot, restart, control channel).
    #[error("lab: {0}")]
    Lab(String),

    /// The harness could not reach or drive a node (SSH refused, timeout).
    #[error("{node}: transport: {cause}")]
    Transport { node: String, cause: String },

    /// A command on a node ran and failed.
    #[error("{node}: step {step} failed (exit {code}): {detail}")]
    Remote {
        node: String,
        step: String,
        code: i32,
        detail: String,
    },

    /// The cluster came up but does not meet an S6 check.
    #[error("validation: {0}")]
    Validation(String),

    /// The user's own provisioning command failed.
    #[error("external provisioner: {0}")]
    External(String),
}

impl ClusterError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
