//! Who may use a listener's control plane. Without a token (`serve` without
//! `--control-token`) it is open to anyone who reaches the port, as before; with one, every
//! `/_fake/…` request but `/_fake/health` (a liveness probe that tells nothing) must carry
//! `Authorization: Bearer TOKEN`, else it gets `401` with a JSON `{"error"}` saying what is
//! missing or wrong. Tokens are compared in constant time.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde_json::json;

/// A control-plane token: the secret a client sends as `Authorization: Bearer …`.
#[derive(Clone, PartialEq, Eq)]
pub struct ControlToken(Arc<str>);

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlToken(<redacted>)")
    }
}

impl ControlToken {
    /// A token given by the user; empty or whitespace-bearing ones are refused (they cannot
    /// travel in a header intact).
    pub fn new(s: &str) -> Result<ControlToken, String> {
        if s.is_empty() {
            return Err("the control token is empty".into());
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the control token must be printable ASCII without spaces (it travels in a header)"
                    .into(),
            );
        }
        Ok(ControlToken(Arc::from(s)))
    }

    /// A new random token: 256 bits, hex.
    pub fn generate() -> ControlToken {
        let bytes: [u8; 32] = rand::rng().random();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        ControlToken(Arc::from(hex.as_str()))
    }

    /// The token's text, as a client sends it after `Bearer `.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time that depends on their lengths only.
    pub fn matches(&self, given: &str) -> bool {
        constant_time_eq(self.0.as_bytes(), given.as_bytes())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    diff == 0
}

/// Why a request may not use the control plane; `None` when it may.
pub fn refusal(token: Option<&ControlToken>, req: &Request) -> Option<&'static str> {
    let token = token?;
    if req
        .uri()
        .path()
        .trim_end_matches('/')
        .ends_with("/_fake/health")
        || req.uri().path() == "/health"
    {
        return None;
    }
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Some(
            "this control plane needs a token: send 'Authorization: Bearer TOKEN' (the server's --control-token, or a tenant's control_token)",
        );
    };
    let Some(given) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) else {
        return Some(
            "the Authorization header must be 'Bearer TOKEN' (the server's --control-token, or a tenant's control_token)",
        );
    };
    if !token.matches(given.trim()) {
        return Some(
            "wrong control token: this listener takes only its own token (a tenant's token works on that tenant's listeners only; the server's token on the server's)",
        );
    }
    None
}

/// Middleware for the `/_fake` router: refuse with 401 unless the request may use it.
pub async fn require(
    State(token): State<Option<ControlToken>>,
    req: Request,
    next: Next,
) -> Response {
    match refusal(token.as_ref(), &req) {
        None => next.run(req).await,
        Some(msg) => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Bearer realm=\"fake-proxmox control\"",
            )],
            Json(json!({"error": msg})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        let t = ControlToken::new("s3cret").unwrap();
        assert!(t.matches("s3cret"));
        assert!(!t.matches("s3cre"));
        assert!(!t.matches("s3cret!"));
        assert!(!t.matches("S3cret"));
        assert!(!t.matches(""));
    }

    #[test]
    fn generated_tokens_are_long_and_differ() {
        let a = ControlToken::generate();
        let b = ControlToken::generate();
        assert_eq!(a.as_str().len(), 64);
        assert_ne!(a, b);
    }

    #[test]
    fn bad_tokens_are_refused() {
        assert!(ControlToken::new("").is_err());
        assert!(ControlToken::new("a b").is_err());
        assert!(ControlToken::new("ok-token_1").is_ok());
    }
}
