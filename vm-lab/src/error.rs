//! One error type for the whole crate. "The harness broke" (`Harness`, `Io`, `Image`, `Qemu`…)
//! is kept apart from "the guest did not do what you asked" (`CommandFailed`, `Timeout`), so a
//! test failure says which side is at fault.

use std::path::PathBuf;
use std::time::Duration;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lab spec is invalid; the message names the node or field.
    #[error("invalid lab spec: {0}")]
    Spec(String),

    /// A QEMU command line could not be built (e.g. a multicast link without a local address).
    #[error("refusing to build the QEMU command line: {0}")]
    Args(String),

    /// The guest image could not be built.
    #[error("guest image: {0}")]
    Image(String),

    /// The requested accelerator is not usable.
    #[error("accelerator: {0}")]
    Accel(String),

    /// A host tool failed (qemu-img, unshare, apt-get, ssh-keygen…).
    #[error("{tool} failed: {detail}")]
    Tool { tool: String, detail: String },

    /// QEMU of a node exited when it should be running; carries its stderr and last serial lines.
    #[error("node {node}: QEMU exited ({status}); stderr:\n{stderr}\nlast serial lines:\n{serial}")]
    QemuExited {
        node: String,
        status: String,
        stderr: String,
        serial: String,
    },

    /// A wait ran out of time; carries the node's last serial lines.
    #[error(
        "node {node}: timed out after {after:?} waiting for {what}; last serial lines:\n{serial}"
    )]
    Timeout {
        node: String,
        what: String,
        after: Duration,
        serial: String,
    },

    /// A command in the guest exited non-zero where success was required.
    #[error("node {node}: `{command}` exited with {code}\nstdout: {stdout}\nstderr: {stderr}")]
    CommandFailed {
        node: String,
        command: String,
        code: i64,
        stdout: String,
        stderr: String,
    },

    /// A QMP or guest-agent exchange failed.
    #[error("node {node}: {channel}: {detail}")]
    Control {
        node: String,
        channel: &'static str,
        detail: String,
    },

    #[error("no node named {0:?} in this lab")]
    NoSuchNode(String),

    #[error("lab: {0}")]
    Lab(String),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn tool(tool: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Tool {
            tool: tool.into(),
            detail: detail.into(),
        }
    }

    /// True when the error is about the guest's behaviour rather than the harness.
    pub fn is_guest_failure(&self) -> bool {
        matches!(self, Error::CommandFailed { .. } | Error::Timeout { .. })
    }
}
