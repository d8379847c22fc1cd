//! `PveError`: one type for every error PVE puts on the wire.
//!
//! PVE renders an error as an HTTP status whose reason phrase is the first line of the
//! message, plus (for API handler errors) a JSON body `{"data":null,"errors":{..},"message":".."}`.
//! Authentication failures and errors raised by the HTTP layer itself have an empty body.

use std::collections::BTreeMap;

/// How the body of an error response looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorBody {
    /// `{"data":null,...}` envelope (API handler errors).
    Envelope,
    /// No body at all: the reason phrase carries the text (auth failures, HTTP-layer errors).
    Empty,
}

/// An error exactly as PVE puts it on the wire.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{status} {message}")]
pub struct PveError {
    /// HTTP status.
    pub status: u16,
    /// Full message, including Perl's trailing newline where PVE has one.
    pub message: String,
    /// Per-parameter messages (`errors` of a 400 parameter error), if any.
    pub errors: Option<BTreeMap<String, String>>,
    /// How the error is put on the wire: JSON envelope, or the reason phrase alone.
    pub body: ErrorBody,
}

impl PveError {
    /// A handler error with an explicit status; `message` is used verbatim.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        PveError {
            status,
            message: message.into(),
            errors: None,
            body: ErrorBody::Envelope,
        }
    }

    /// A plain Perl `die "...\n"` inside a handler: HTTP 500.
    pub fn die(message: impl Into<String>) -> Self {
        Self::new(500, with_newline(message.into()))
    }

    /// `raise_param_exc`: 400 `Parameter verification failed.` with an `errors` map.
    pub fn params(errors: BTreeMap<String, String>) -> Self {
        PveError {
            status: 400,
            message: "Parameter verification failed.\n".into(),
            errors: Some(errors),
            body: ErrorBody::Envelope,
        }
    }

    /// A single-parameter `raise_param_exc`.
    pub fn param(name: &str, msg: impl Into<String>) -> Self {
        let mut m = BTreeMap::new();
        m.insert(name.to_string(), msg.into());
        Self::params(m)
    }

    /// `raise_perm_exc`: 403 `Permission check failed (...)`.
    pub fn perm(detail: Option<String>) -> Self {
        let message = match detail {
            Some(d) => format!("Permission check failed ({d})\n"),
            None => "Permission check failed\n".to_string(),
        };
        Self::new(403, message)
    }

    /// An error from the HTTP layer: empty body, text only in the reason phrase.
    pub fn bare(status: u16, message: impl Into<String>) -> Self {
        PveError {
            status,
            message: message.into(),
            errors: None,
            body: ErrorBody::Empty,
        }
    }

    /// `501 Method 'GET /x' not implemented` as `rest_handler` answers unknown routes.
    pub fn not_implemented(method: &str, rel_path: &str) -> Self {
        Self::new(501, format!("Method '{method} {rel_path}' not implemented"))
    }

    /// The missing-VM error of `PVE::AbstractConfig::load_config`.
    pub fn no_vm_config(node: &str, vmid: u32) -> Self {
        Self::die(format!(
            "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
        ))
    }

    /// The reason phrase: the first line of the message (PVE strips the rest).
    pub fn reason(&self) -> String {
        let first = self.message.lines().next().unwrap_or("");
        // Reason phrases must be visible ASCII/space/tab; replace anything else.
        first
            .chars()
            .map(|c| {
                if c == '\t' || (' '..='~').contains(&c) {
                    c
                } else {
                    '?'
                }
            })
            .collect()
    }
}

fn with_newline(mut s: String) -> String {
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_is_first_line_only() {
        let e = PveError::param("vmid", "property is missing and it is not optional");
        assert_eq!(e.reason(), "Parameter verification failed.");
        let e = PveError::bare(401, "No ticket");
        assert_eq!(e.reason(), "No ticket");
    }

    #[test]
    fn die_adds_perl_newline_once() {
        assert_eq!(PveError::die("x").message, "x\n");
        assert_eq!(PveError::die("x\n").message, "x\n");
    }

    #[test]
    fn non_ascii_never_reaches_the_reason_phrase() {
        let e = PveError::die("caf\u{e9}\nsecond");
        assert_eq!(e.reason(), "caf?");
    }
}
