//! One error type for the whole crate. "The harness broke" (`Harness`, `Io`, `Image`, `Qemu`…)
//! is kept apart from "the guest did not do what you asked" (`CommandFailed`, `Timeout`), so a
//! test failure says which side is at fault.

use std::path::PathBuf;
use std::time::Duration;

/// The crate's result type; the error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything vm-lab can fail with. [`Error::is_guest_failure`] tells a guest that misbehaved
/// (`CommandFailed`, `Timeout`) from a harness that broke (every other variant).
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
    Tool {
        /// The program that failed, e.g. `qemu-img`.
        tool: String,
        /// Why: its exit status and stderr, or the spawn error.
        detail: String,
    },

    /// QEMU of a node exited when it should be running; carries its stderr and last serial lines.
    #[error("node {node}: QEMU exited ({status}); stderr:\n{stderr}\nlast serial lines:\n{serial}")]
    QemuExited {
        /// The node whose QEMU died.
        node: String,
        /// Its exit status as the OS reported it (code or signal).
        status: String,
        /// Everything QEMU wrote to stderr.
        stderr: String,
        /// The node's last serial console lines before it died.
        serial: String,
    },

    /// A wait ran out of time; carries the node's last serial lines.
    #[error(
        "node {node}: timed out after {after:?} waiting for {what}; last serial lines:\n{serial}"
    )]
    Timeout {
        /// The node that was waited on.
        node: String,
        /// What was awaited, e.g. `VMLAB-READY` or `the guest agent`.
        what: String,
        /// How long the wait lasted before giving up.
        after: Duration,
        /// The node's last serial console lines when the wait gave up.
        serial: String,
    },

    /// A command in the guest exited non-zero where success was required.
    #[error("node {node}: `{command}` exited with {code}\nstdout: {stdout}\nstderr: {stderr}")]
    CommandFailed {
        /// The node the command ran on.
        node: String,
        /// The command line as given.
        command: String,
        /// Its exit code; 128 + the signal number when a signal killed it.
        code: i64,
        /// What it wrote to stdout, lossily decoded as UTF-8.
        stdout: String,
        /// What it wrote to stderr, lossily decoded as UTF-8.
        stderr: String,
    },

    /// A QMP or guest-agent exchange failed.
    #[error("node {node}: {channel}: {detail}")]
    Control {
        /// The node whose control socket failed.
        node: String,
        /// Which channel or agent command: `"qmp"`, `"agent"`, `"guest-file-open"`, ….
        channel: &'static str,
        /// The failure as the protocol or the socket reported it.
        detail: String,
    },

    /// A node name that is not in the lab's spec.
    #[error("no node named {0:?} in this lab")]
    NoSuchNode(String),

    /// A lab-level request could not be carried out: bad fault parameters, a node in the wrong
    /// state for the verb, an unreadable state file in the run directory.
    #[error("lab: {0}")]
    Lab(String),

    /// A file or socket operation failed; `path` is the file it was about.
    #[error("{path}: {source}")]
    Io {
        /// The file, directory or socket the operation was on.
        path: PathBuf,
        /// The OS error.
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
