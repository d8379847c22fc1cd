//! A Proxmox VE API client: `/api2/json`, the `{"data":…}` envelope, PVE's error shapes, token or
//! ticket auth, TLS trust options, and a timeout on every call.

pub mod api;
pub mod auth;
pub mod error;
pub mod guests;
pub mod request;
pub mod tasks;
pub mod tls;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

pub use auth::Credentials;
pub use error::PveError;
pub use request::Request;
pub use tls::TlsMode;

/// Parameters are `(name, value)` pairs: form body for POST/PUT, query string for GET/DELETE.
pub type Params<'a> = [(&'a str, String)];

/// Parameters whose values must never reach a log.
const SECRET_PARAMS: &[&str] = &["password", "cipassword", "new-password"];

#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub tls: TlsMode,
    /// Upper bound for one HTTP exchange.
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            tls: TlsMode::Verify,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

pub struct PveClient {
    http: reqwest::Client,
    /// `https://host:8006/api2/json`
    base: String,
    credentials: Credentials,
    ticket: Mutex<Option<auth::Ticket>>,
}

impl std::fmt::Debug for PveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PveClient")
            .field("base", &self.base)
            .field("principal", &self.credentials.principal())
            .finish()
    }
}

impl PveClient {
    /// `endpoint` is the server's base URL (`https://host:8006`), with or without `/api2/json`.
    pub fn new(
        endpoint: &str,
        credentials: Credentials,
        options: &ClientOptions,
    ) -> Result<Self, PveError> {
        tls::ensure_crypto_provider();
        let trimmed = endpoint.trim_end_matches('/');
        let root = trimmed.strip_suffix("/api2/json").unwrap_or(trimmed);
        let url = reqwest::Url::parse(root)
            .map_err(|e| PveError::Setup(format!("endpoint '{endpoint}': {e}")))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(PveError::Setup(format!(
                "endpoint '{endpoint}' must be https:// (or http:// for tests)"
            )));
        }
        credentials.check().map_err(PveError::Setup)?;
        // PVE's pveproxy speaks HTTP/1.1, whose status line carries PVE's error text.
        let builder = reqwest::Client::builder()
            .http1_only()
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("provision-harness/", env!("CARGO_PKG_VERSION")));
        let http = tls::apply(builder, &options.tls)
            .map_err(PveError::Setup)?
            .build()
            .map_err(|e| PveError::Setup(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: format!("{root}/api2/json"),
            credentials,
            ticket: Mutex::new(None),
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn principal(&self) -> &str {
        self.credentials.principal()
    }

    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &Params<'_>,
    ) -> Result<T, PveError> {
        self.call(Method::GET, path, params).await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &Params<'_>,
    ) -> Result<T, PveError> {
        self.call(Method::POST, path, params).await
    }

    pub async fn put<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &Params<'_>,
    ) -> Result<T, PveError> {
        self.call(Method::PUT, path, params).await
    }

    pub async fn delete<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &Params<'_>,
    ) -> Result<T, PveError> {
        self.call(Method::DELETE, path, params).await
    }

    /// Sends `request` (built by [`Request`]'s constructors, which `plan` checks too).
    pub async fn send<T: DeserializeOwned>(&self, request: &Request<'_>) -> Result<T, PveError> {
        self.call(request.method.clone(), &request.path(), &request.params)
            .await
    }

    /// Makes sure a password login works now (token auth has no login step; its first call
    /// proves it).
    pub async fn authenticate(&self) -> Result<(), PveError> {
        if matches!(self.credentials, Credentials::Password { .. }) {
            self.current_ticket(true).await?;
        }
        Ok(())
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        params: &Params<'_>,
    ) -> Result<T, PveError> {
        let data = match self.exchange(method.clone(), path, params, false).await {
            // A ticket can be revoked or expire early (server restart, clock): log in again once.
            Err(PveError::Http { status: 401, .. })
                if matches!(self.credentials, Credentials::Password { .. }) =>
            {
                self.exchange(method.clone(), path, params, true).await?
            }
            other => other?,
        };
        decode_data(&data).map_err(|e| PveError::Decode {
            method: method.to_string(),
            path: path.to_string(),
            detail: e.to_string(),
        })
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        params: &Params<'_>,
        fresh_ticket: bool,
    ) -> Result<bytes::Bytes, PveError> {
        let url = format!("{}{}", self.base, path);
        let mut req = self.http.request(method.clone(), &url);
        match &self.credentials {
            Credentials::Token { token_id, secret } => {
                if crate::mutants::active(crate::mutants::Mutant::TokenAsCookie) {
                    req = req.header(
                        reqwest::header::COOKIE,
                        format!("PVEAuthCookie={token_id}={secret}"),
                    );
                } else if let Some(h) = self.credentials.token_header() {
                    req = req.header(reqwest::header::AUTHORIZATION, h);
                }
            }
            Credentials::Password { .. } => {
                let t = self.current_ticket(fresh_ticket).await?;
                req = req.header(
                    reqwest::header::COOKIE,
                    format!("PVEAuthCookie={}", t.ticket),
                );
                if method != Method::GET {
                    req = req.header("CSRFPreventionToken", t.csrf);
                }
            }
        }
        req = if method == Method::GET || method == Method::DELETE {
            if params.is_empty() {
                req
            } else {
                req.query(params)
            }
        } else {
            req.form(params)
        };
        tracing::debug!(method = %method, path, params = %loggable(params), "pve request");
        let started = Instant::now();
        let resp = req.send().await.map_err(|e| transport(&method, path, &e))?;
        tracing::debug!(method = %method, path, status = resp.status().as_u16(), ms = started.elapsed().as_millis() as u64, "pve response");
        read_envelope(&method, path, resp).await
    }

    async fn current_ticket(&self, force: bool) -> Result<auth::Ticket, PveError> {
        let mut guard = self.ticket.lock().await;
        if let Some(t) = guard.as_ref()
            && !force
            && !t.needs_renewal()
        {
            return Ok(t.clone());
        }
        let Credentials::Password { username, password } = &self.credentials else {
            return Err(PveError::Setup("ticket requested for token auth".into()));
        };
        // Renewal sends the old ticket as the password, as PVE allows; a fresh login otherwise.
        let secret = match guard.as_ref() {
            Some(t) if !force => t.ticket.clone(),
            _ => password.clone(),
        };
        let url = format!("{}/access/ticket", self.base);
        let form = [("username", username.clone()), ("password", secret)];
        tracing::debug!(username = %username, "pve login");
        let resp = self
            .http
            .post(&url)
            .form(&form)
            .send()
            .await
            .map_err(|e| transport(&Method::POST, "/access/ticket", &e))?;
        let body = read_envelope(&Method::POST, "/access/ticket", resp).await?;
        let data: serde_json::Value = decode_data(&body).map_err(|e| PveError::Decode {
            method: "POST".into(),
            path: "/access/ticket".into(),
            detail: e.to_string(),
        })?;
        let field = |k: &str| {
            data.get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .ok_or_else(|| PveError::Decode {
                    method: "POST".into(),
                    path: "/access/ticket".into(),
                    detail: format!("no {k} in the answer"),
                })
        };
        let ticket = auth::Ticket {
            ticket: field("ticket")?,
            csrf: field("CSRFPreventionToken")?,
            issued: Instant::now(),
        };
        *guard = Some(ticket.clone());
        Ok(ticket)
    }
}

fn loggable(params: &Params<'_>) -> String {
    params
        .iter()
        .map(|(k, v)| {
            if SECRET_PARAMS.contains(k) {
                format!("{k}=<redacted>")
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn transport(method: &Method, path: &str, e: &reqwest::Error) -> PveError {
    // reqwest's Display for connect errors is terse; the source chain names the cause.
    let mut detail = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        src = s.source();
    }
    PveError::Transport {
        method: method.to_string(),
        path: path.to_string(),
        detail,
        timeout: e.is_timeout(),
    }
}

/// The `data` of a successful answer's envelope, decoded straight from the body: large
/// listings (`/cluster/resources` of a thousand VMs) are decoded once, not first into a
/// `serde_json::Value` and then again into their type. A missing `data` decodes as `null`.
fn decode_data<T: DeserializeOwned>(body: &[u8]) -> Result<T, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Envelope<T> {
        #[serde(default = "Option::default")]
        data: Option<T>,
    }
    match serde_json::from_slice::<Envelope<T>>(body)?.data {
        Some(t) => Ok(t),
        None => T::deserialize(serde_json::Value::Null),
    }
}

/// The body of a successful answer (checked to be JSON by its decoder), or PVE's error.
async fn read_envelope(
    method: &Method,
    path: &str,
    resp: reqwest::Response,
) -> Result<bytes::Bytes, PveError> {
    let status = resp.status();
    let reason = resp
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
        .or_else(|| status.canonical_reason().map(str::to_string))
        .unwrap_or_default();
    let body = resp
        .bytes()
        .await
        .map_err(|e| transport(method, path, &e))?;
    if status.is_success() {
        if body.is_empty() || serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
            return Err(PveError::Decode {
                method: method.to_string(),
                path: path.to_string(),
                detail: format!("status {status} with a body that is not JSON"),
            });
        }
        return Ok(body);
    }
    let json: Option<serde_json::Value> = if body.is_empty() {
        None
    } else {
        serde_json::from_slice(&body).ok()
    };
    let mut errors = BTreeMap::new();
    let mut message = None;
    if let Some(v) = &json {
        if let Some(map) = v.get("errors").and_then(|e| e.as_object()) {
            for (k, val) in map {
                let text = val
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| val.to_string());
                errors.insert(k.clone(), text);
            }
        }
        message = v
            .get("message")
            .and_then(|m| m.as_str())
            .map(|m| m.trim_end().to_string());
    }
    Err(PveError::Http {
        method: method.to_string(),
        path: path.to_string(),
        status: status.as_u16(),
        reason,
        message,
        errors,
    })
}

#[cfg(test)]
mod tests;
