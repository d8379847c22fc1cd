//! PVE's wire errors, kept whole: the status line's reason phrase (PVE puts the first line of the
//! message there), the `errors` map of parameter problems, and the `message` body key (PVE ≥ 8.3).

use std::collections::BTreeMap;

#[derive(Debug, Clone, thiserror::Error)]
pub enum PveError {
    /// PVE answered with an error status.
    #[error("{method} {path}: {status} {}", describe(.reason, .message, .errors))]
    Http {
        method: String,
        path: String,
        status: u16,
        reason: String,
        message: Option<String>,
        errors: BTreeMap<String, String>,
    },
    /// The request never got an answer (connect, TLS, timeout).
    #[error("{method} {path}: {detail}")]
    Transport {
        method: String,
        path: String,
        detail: String,
        timeout: bool,
    },
    /// PVE answered 2xx with a body this client does not understand.
    #[error("{method} {path}: unexpected response: {detail}")]
    Decode {
        method: String,
        path: String,
        detail: String,
    },
    /// A worker task ended with an error exitstatus.
    #[error("task {upid} failed: {exitstatus}")]
    Task {
        upid: String,
        exitstatus: String,
        /// The last lines of the task log.
        log: Vec<String>,
    },
    /// A worker task was still running when the wait gave up.
    #[error("task {upid} still running after {waited_ms} ms")]
    TaskTimeout { upid: String, waited_ms: u128 },
    /// The client could not be built (bad endpoint, TLS options).
    #[error("client setup: {0}")]
    Setup(String),
}

fn describe(reason: &str, message: &Option<String>, errors: &BTreeMap<String, String>) -> String {
    let mut out = reason.trim().to_string();
    if let Some(m) = message {
        let m = m.trim();
        if !m.is_empty() && !out.contains(m) && !m.contains(&out) {
            out.push_str(" — ");
            out.push_str(m);
        } else if m.len() > out.len() {
            out = m.to_string();
        }
    }
    if !errors.is_empty() {
        let list: Vec<String> = errors
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.trim()))
            .collect();
        out.push_str(&format!(" [{}]", list.join("; ")));
    }
    out
}

impl PveError {
    pub fn status(&self) -> Option<u16> {
        match self {
            PveError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Every human-readable text this error carries, for classification by message.
    pub fn text(&self) -> String {
        match self {
            PveError::Http {
                reason,
                message,
                errors,
                ..
            } => {
                let mut t = reason.clone();
                if let Some(m) = message {
                    t.push(' ');
                    t.push_str(m);
                }
                for v in errors.values() {
                    t.push(' ');
                    t.push_str(v);
                }
                t
            }
            PveError::Task { exitstatus, .. } => exitstatus.clone(),
            other => other.to_string(),
        }
    }

    pub fn is_transport(&self) -> bool {
        matches!(self, PveError::Transport { .. })
    }
}
