//! Credentials and how they go on the wire.
//!
//! An API token is sent as `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET` — never as the
//! `PVEAuthCookie` the seed's deployer used (that cookie carries a ticket, not a token). A password
//! gets a ticket from `POST /access/ticket`; writes then carry `CSRFPreventionToken`, and the ticket
//! is renewed before its 2-hour lifetime ends.

use std::time::{Duration, Instant};

/// Renew a ticket this long after it was issued (PVE tickets live 2 h).
pub const TICKET_RENEW_AFTER: Duration = Duration::from_secs(90 * 60);

#[derive(Clone, PartialEq)]
pub enum Credentials {
    Token { token_id: String, secret: String },
    Password { username: String, password: String },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Token { token_id, .. } => f
                .debug_struct("Token")
                .field("token_id", token_id)
                .field("secret", &"<redacted>")
                .finish(),
            Credentials::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

impl Credentials {
    /// Who is acting, for logs and reports (never the secret).
    pub fn principal(&self) -> &str {
        match self {
            Credentials::Token { token_id, .. } => token_id,
            Credentials::Password { username, .. } => username,
        }
    }

    /// Checks the token id shape PVE accepts: `user@realm!name`, name `[A-Za-z][A-Za-z0-9._-]+`.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Credentials::Token { token_id, secret } => {
                let Some((user, name)) = token_id.split_once('!') else {
                    return Err(format!(
                        "token id '{token_id}' must look like user@realm!tokenname"
                    ));
                };
                if !user.contains('@') {
                    return Err(format!("token id '{token_id}' has no @realm"));
                }
                let mut chars = name.chars();
                let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                    && name.len() >= 2
                    && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
                if !ok {
                    return Err(format!("token name in '{token_id}' is not valid for PVE"));
                }
                if secret.is_empty() {
                    return Err("token secret is empty".to_string());
                }
                Ok(())
            }
            Credentials::Password { username, password } => {
                if !username.contains('@') {
                    return Err(format!(
                        "username '{username}' needs a realm (e.g. root@pam)"
                    ));
                }
                if password.is_empty() {
                    return Err("password is empty".to_string());
                }
                Ok(())
            }
        }
    }

    /// The `Authorization` header value for token auth.
    pub fn token_header(&self) -> Option<String> {
        match self {
            Credentials::Token { token_id, secret } => {
                Some(format!("PVEAPIToken={token_id}={secret}"))
            }
            Credentials::Password { .. } => None,
        }
    }
}

/// A login ticket and its CSRF token.
#[derive(Clone)]
pub struct Ticket {
    pub ticket: String,
    pub csrf: String,
    pub issued: Instant,
}

impl Ticket {
    pub fn needs_renewal(&self) -> bool {
        self.issued.elapsed() >= TICKET_RENEW_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_secrets() {
        let c = Credentials::Token {
            token_id: "root@pam!t1".into(),
            secret: "s3cr3t".into(),
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let p = Credentials::Password {
            username: "root@pam".into(),
            password: "pw-xyz".into(),
        };
        assert!(!format!("{p:?}").contains("pw-xyz"));
    }

    #[test]
    fn tickets_are_renewed_before_their_two_hours() {
        let fresh = Ticket {
            ticket: "t".into(),
            csrf: "c".into(),
            issued: Instant::now(),
        };
        assert!(!fresh.needs_renewal());
        if let Some(old) = Instant::now().checked_sub(Duration::from_secs(91 * 60)) {
            let aged = Ticket {
                issued: old,
                ..fresh
            };
            assert!(aged.needs_renewal());
        }
        assert!(TICKET_RENEW_AFTER < Duration::from_secs(2 * 3600));
    }

    #[test]
    fn token_header_format() {
        let c = Credentials::Token {
            token_id: "root@pam!sankofa-instance-1-api-token".into(),
            secret: "abc".into(),
        };
        assert_eq!(
            c.token_header().as_deref(),
            Some("PVEAPIToken=root@pam!sankofa-instance-1-api-token=abc")
        );
        assert!(c.check().is_ok());
        let bad = Credentials::Token {
            token_id: "root@pam".into(),
            secret: "x".into(),
        };
        assert!(bad.check().is_err());
    }
}
