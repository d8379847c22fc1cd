//! The real-target journal: a recording HTTPS proxy between the deployer and the real cluster.
//!
//! On its own fake the suite reads what the deployer sent from the fake's request journal. A real
//! PVE keeps no such journal, so in real-target mode each scenario gets a [`Recorder`] on a
//! loopback port: the deployer is pointed at it (its own certificate, whose fingerprint the
//! deployer pins), and it forwards every request unchanged to the target (pinning the target's
//! fingerprint itself) and records the exchange. The steps that judge what the deployer sent
//! then read [`Recorder::journal`] — the same [`Entry`] shape as the fake's journal, so the same
//! assertions hold on both targets, and nothing in them depends on the fake.
//!
//! The exchanges are also written as a *cassette* per scenario (secrets redacted):
//! `<reports>/cassettes/<scenario prefix>.json`, the record of what the real cluster answered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response};
use fake_proxmox::AuthKind;
use parking_lot::Mutex;
use provision_harness::pve::TlsMode;
use serde_json::{Value, json};

use super::journal::{Entry, Journal, auth_label};

/// Parameter names whose values never reach a cassette.
const SECRET_KEYS: &[&str] = &[
    "password",
    "cipassword",
    "new-password",
    "ticket",
    "CSRFPreventionToken",
    "secret",
    "value",
];

/// One recorded exchange: the journal entry and the answer's body.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub entry: Entry,
    /// Whether the request carried a `CSRFPreventionToken` header (a replay must do the same).
    pub csrf: bool,
    pub response: Value,
}

struct Inner {
    upstream: String,
    client: reqwest::Client,
    started: Instant,
    exchanges: Mutex<Vec<Exchange>>,
}

pub struct Recorder {
    url: String,
    fingerprint: String,
    inner: Arc<Inner>,
    handle: axum_server::Handle<SocketAddr>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("url", &self.url)
            .field("upstream", &self.inner.upstream)
            .finish()
    }
}

impl Recorder {
    /// Starts a recorder in front of `upstream` (a base URL without `/api2/json`), reached with
    /// `tls` (the target's pinned fingerprint, or insecure).
    pub async fn start(upstream: &str, tls: &TlsMode) -> anyhow::Result<Recorder> {
        provision_harness::pve::tls::ensure_crypto_provider();
        let builder = reqwest::Client::builder()
            .http1_only()
            .timeout(Duration::from_secs(120))
            // Pinned certificates name the node, not the address (as the deployer does).
            .redirect(reqwest::redirect::Policy::none());
        let client = provision_harness::pve::tls::apply(builder, tls)
            .map_err(|e| anyhow!(e))?
            .build()
            .context("the recorder's upstream client")?;
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .context("the recorder's certificate")?;
        let cert_der = ck.cert.der().to_vec();
        let fingerprint = provision_harness::pve::tls::format_fingerprint(
            &provision_harness::pve::tls::fingerprint_of(&cert_der),
        );
        let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der())
            .map_err(|e| anyhow!("the recorder's key: {e}"))?;
        let mut cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![rustls::pki_types::CertificateDer::from(cert_der)], key)
            .context("the recorder's TLS config")?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            upstream: upstream.trim_end_matches('/').to_string(),
            client,
            started: Instant::now(),
            exchanges: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&inner));
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(
            listener,
            axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(cfg)),
        )?
        .handle(handle.clone());
        tokio::spawn(async move {
            if let Err(e) = server.serve(app.into_make_service()).await {
                eprintln!("the recorder stopped: {e}");
            }
        });
        Ok(Recorder {
            url: format!("https://{addr}"),
            fingerprint,
            inner,
            handle,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn journal(&self) -> Journal {
        Journal::new(
            self.inner
                .exchanges
                .lock()
                .iter()
                .map(|x| x.entry.clone())
                .collect(),
        )
    }

    pub fn last_seq(&self) -> u64 {
        self.inner.exchanges.lock().len() as u64
    }

    /// Writes the cassette of this scenario (secrets redacted) to `path`.
    pub fn write_cassette(&self, path: &Path, scenario: &str) -> anyhow::Result<()> {
        let interactions: Vec<Value> = self
            .inner
            .exchanges
            .lock()
            .iter()
            .map(|x| {
                json!({
                    "seq": x.entry.seq,
                    "time": x.entry.time,
                    "method": x.entry.method,
                    "path": x.entry.path,
                    "params": redact_params(&x.entry.params),
                    "auth": auth_label(&x.entry.auth),
                    "csrf": x.csrf,
                    "status": x.entry.status,
                    "reason": x.entry.status_text,
                    "response": redact(&x.response),
                })
            })
            .collect();
        let doc = json!({
            "scenario": scenario,
            "target": self.inner.upstream,
            "interactions": interactions,
        });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    pub fn shutdown(&self) {
        self.handle.shutdown();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

async fn forward(State(inner): State<Arc<Inner>>, req: axum::extract::Request) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let mut params: BTreeMap<String, String> = BTreeMap::new();
    if let Some(q) = parts.uri.query() {
        params.extend(form_urlencoded::parse(q.as_bytes()).into_owned());
    }
    let content_type = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if content_type.starts_with("application/json") {
        if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&body) {
            for (k, v) in m {
                let v = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                params.insert(k, v);
            }
        }
    } else if !body.is_empty() {
        params.extend(form_urlencoded::parse(&body).into_owned());
    }
    let mut up = inner.client.request(
        parts.method.clone(),
        format!("{}{path_and_query}", inner.upstream),
    );
    for (k, v) in &parts.headers {
        if !matches!(
            k.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        ) {
            up = up.header(k, v);
        }
    }
    let (status, reason, resp_type, resp_body) = match up.body(body).send().await {
        Ok(resp) => {
            let status = resp.status();
            let reason = resp
                .extensions()
                .get::<hyper::ext::ReasonPhrase>()
                .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_string());
            let ct = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json;charset=UTF-8")
                .to_string();
            let bytes = resp.bytes().await.unwrap_or_default();
            (status.as_u16(), reason, ct, bytes.to_vec())
        }
        // What pveproxy answers when it cannot reach a node: 595 and the cause as the reason.
        Err(e) => (
            595,
            format!("recorder: the target did not answer: {e}"),
            "application/json;charset=UTF-8".to_string(),
            br#"{"data":null}"#.to_vec(),
        ),
    };
    let api_path = parts
        .uri
        .path()
        .strip_prefix("/api2/json")
        .unwrap_or(parts.uri.path())
        .to_string();
    {
        let mut ex = inner.exchanges.lock();
        let seq = ex.len() as u64 + 1;
        ex.push(Exchange {
            entry: Entry {
                seq,
                time: inner.started.elapsed().as_secs_f64(),
                site: "real".into(),
                method: parts.method.as_str().to_string(),
                path: api_path,
                params,
                auth: auth_of(&parts.headers, refused_credentials(status, &reason)),
                status,
                status_text: reason.clone(),
            },
            csrf: parts.headers.contains_key("csrfpreventiontoken"),
            response: serde_json::from_slice(&resp_body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&resp_body).into())),
        });
    }
    let mut out = Response::builder()
        .status(status)
        .header("content-type", resp_type)
        .body(Body::from(resp_body))
        .unwrap_or_else(|_| Response::new(Body::empty()));
    if let Ok(rp) = hyper::ext::ReasonPhrase::try_from(reason.into_bytes()) {
        out.extensions_mut().insert(rp);
    }
    out
}

/// A 401 that refused the credentials themselves (a write refused for a missing CSRF token was
/// made with a valid ticket).
pub fn refused_credentials(status: u16, reason: &str) -> bool {
    status == 401 && !reason.to_ascii_lowercase().contains("csrf")
}

/// How a request authenticated, read from its headers the way PVE reads them (a ticket in the
/// `PVEAuthCookie` cookie, an API token in `Authorization: PVEAPIToken=…`), and whether the
/// target refused those credentials.
pub fn auth_of(headers: &HeaderMap, refused: bool) -> AuthKind {
    if let Some(token) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("PVEAPIToken"))
    {
        let token = token.trim_start_matches(['=', ' ']);
        let tokenid = token
            .split_once('=')
            .map_or(token, |(id, _)| id)
            .to_string();
        return if refused {
            AuthKind::InvalidToken { tokenid }
        } else {
            AuthKind::ApiToken { tokenid }
        };
    }
    let cookie = headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix("PVEAuthCookie="));
    let Some(cookie) = cookie else {
        return AuthKind::None;
    };
    let value = percent_decode(cookie);
    if let Some(rest) = value.strip_prefix("PVE:") {
        let userid = rest.split(':').next().unwrap_or_default().to_string();
        return if refused {
            AuthKind::InvalidTicket
        } else {
            AuthKind::Ticket { userid }
        };
    }
    if value.contains('!') {
        let tokenid = value.split_once('=').map_or(value.as_str(), |(id, _)| id);
        return AuthKind::TokenInCookie {
            tokenid: tokenid.to_string(),
        };
    }
    AuthKind::InvalidTicket
}

fn percent_decode(s: &str) -> String {
    form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
}

fn redact_params(params: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    params
        .iter()
        .map(|(k, v)| {
            let v = if SECRET_KEYS.contains(&k.as_str()) {
                "<redacted>".to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

/// A response body with tickets, CSRF tokens and token secrets replaced.
pub fn redact(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    if SECRET_KEYS.contains(&k.as_str()) && v.is_string() {
                        (k.clone(), Value::String("<redacted>".into()))
                    } else {
                        (k.clone(), redact(v))
                    }
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// The header and redaction rules, checked by the harness self-test.
pub fn check_rules() -> Result<(), String> {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        "PVEAPIToken=root@pam!ci=1234-5678"
            .parse()
            .map_err(|_| "h")?,
    );
    if auth_of(&h, false)
        != (AuthKind::ApiToken {
            tokenid: "root@pam!ci".into(),
        })
    {
        return Err(format!("token header read as {:?}", auth_of(&h, false)));
    }
    let mut c = HeaderMap::new();
    c.insert(
        "cookie",
        "PVEAuthCookie=PVE%3Aroot%40pam%3A6789ABCD%3A%3Asig"
            .parse()
            .map_err(|_| "c")?,
    );
    if auth_of(&c, false)
        != (AuthKind::Ticket {
            userid: "root@pam".into(),
        })
    {
        return Err(format!("ticket cookie read as {:?}", auth_of(&c, false)));
    }
    let mut t = HeaderMap::new();
    t.insert(
        "cookie",
        "PVEAuthCookie=root@pam!harness=abc"
            .parse()
            .map_err(|_| "t")?,
    );
    if !matches!(auth_of(&t, true), AuthKind::TokenInCookie { .. }) {
        return Err(format!("token cookie read as {:?}", auth_of(&t, true)));
    }
    if refused_credentials(401, "Permission denied - invalid csrf token")
        || !refused_credentials(401, "Authentication failed!")
    {
        return Err("a CSRF refusal was read as refused credentials, or the reverse".into());
    }
    let r = redact(&json!({"data": {"ticket": "PVE:x", "CSRFPreventionToken": "y", "a": 1}}));
    if r["data"]["ticket"] != "<redacted>" || r["data"]["a"] != 1 {
        return Err(format!("redaction: {r}"));
    }
    Ok(())
}
