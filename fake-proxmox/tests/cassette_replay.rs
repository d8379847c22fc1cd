//! The parity report: cassettes recorded against a real PVE cluster (the rollout suite's
//! real-target mode writes one per scenario, secrets redacted) replayed against fake-proxmox,
//! listing every difference in status, PVE's reason phrase and the shape of the answer.
//!
//! `cargo test -p fake-proxmox --test cassette_replay` replays the cassettes bundled in
//! `tests/cassettes/` (recorded by `cargo test --test real_target` against a `fake-proxmox serve`
//! process, cluster `../tests/data/blackbox-cluster.yaml`): the fake must agree with its own
//! recording on every status and reason, and a doctored cassette must be reported.
//!
//! Against your cluster's cassettes (prints the report; fails on a difference only with
//! `FAKE_PROXMOX_PARITY_STRICT=1`):
//!
//! ```sh
//! FAKE_PROXMOX_CASSETTES=target/cucumber/cassettes \
//! FAKE_PROXMOX_CASSETTE_SCENARIO=my-cluster.yaml \
//! FAKE_PROXMOX_CASSETTE_TOKEN='root@pam!harness=<secret in that scenario>' \
//! FAKE_PROXMOX_CASSETTE_PASSWORD='root@pam:<password in that scenario>' \
//! cargo test -p fake-proxmox --test cassette_replay -- --nocapture
//! ```
//!
//! The scenario must describe the cluster the cassettes were recorded on (node, storage and
//! bridge names); each cassette is replayed on a fresh fake at the pace it was recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
use serde_json::Value;

const REDACTED: &str = "<redacted>";

/// Credentials the replay uses where the cassette says which kind was used.
#[derive(Debug, Clone)]
struct Creds {
    token_id: String,
    token_secret: String,
    user: String,
    password: String,
}

impl Creds {
    /// The black-box cluster's (tests/data/blackbox-cluster.yaml).
    fn blackbox() -> Creds {
        Creds {
            token_id: "root@pam!ci-rollout".into(),
            token_secret: "7d0c6c1e-5b8a-4f3e-9a21-3e4f5a6b7c8d".into(),
            user: "root@pam".into(),
            password: "blackbox-Passw0rd".into(),
        }
    }

    fn from_env() -> Creds {
        let mut c = Creds::blackbox();
        if let Ok(t) = std::env::var("FAKE_PROXMOX_CASSETTE_TOKEN")
            && let Some((id, secret)) = t.split_once('=')
        {
            c.token_id = id.into();
            c.token_secret = secret.into();
        }
        if let Ok(p) = std::env::var("FAKE_PROXMOX_CASSETTE_PASSWORD")
            && let Some((user, password)) = p.split_once(':')
        {
            c.user = user.into();
            c.password = password.into();
        }
        c
    }
}

/// One difference between a cassette and the fake's answer.
#[derive(Debug, Clone, PartialEq)]
struct Difference {
    cassette: String,
    seq: u64,
    request: String,
    what: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} #{} {}: {}",
            self.cassette, self.seq, self.request, self.what
        )
    }
}

/// The shape of a JSON answer: object keys with their value types, arrays by their first
/// element, two levels deep (values differ between clusters; types and keys should not).
fn shape(v: &Value, depth: usize) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) if depth == 0 => format!("array[{}]", a.len().min(1)),
        Value::Array(a) => match a.first() {
            None => "[]".into(),
            Some(x) => format!("[{}]", shape(x, depth - 1)),
        },
        Value::Object(_) if depth == 0 => "object".into(),
        Value::Object(m) => {
            let mut keys: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}:{}", shape(v, depth - 1)))
                .collect();
            keys.sort();
            format!("{{{}}}", keys.join(","))
        }
    }
}

/// How many object keys an answer has, all levels (the shape's size).
fn keys(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len() + m.values().map(keys).sum::<usize>(),
        Value::Array(a) => a.iter().map(keys).sum(),
        _ => 0,
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    creds: Creds,
    ticket: Option<(String, String)>,
    /// The cassette's task ids → the replay's (a UPID names its start time and process).
    upids: Vec<(String, String)>,
}

impl Client {
    async fn login(&mut self) -> Option<(String, String)> {
        if self.ticket.is_none() {
            let r = self
                .http
                .post(format!("{}/access/ticket", self.base))
                .form(&[
                    ("username", self.creds.user.as_str()),
                    ("password", self.creds.password.as_str()),
                ])
                .send()
                .await
                .ok()?;
            let v: Value = r.json().await.ok()?;
            self.ticket = Some((
                v["data"]["ticket"].as_str()?.to_string(),
                v["data"]["CSRFPreventionToken"].as_str()?.to_string(),
            ));
        }
        self.ticket.clone()
    }

    /// Sends the recorded request with the kind of credentials the cassette names.
    async fn replay(&mut self, x: &Value) -> Result<(u16, String, Value), String> {
        let method = x["method"].as_str().unwrap_or("GET");
        let mut path = x["path"].as_str().unwrap_or("/").to_string();
        for (recorded, replayed) in &self.upids {
            path = path.replace(recorded, replayed);
            path = path.replace(&recorded.replace(':', "%3A"), replayed);
        }
        let path = path.as_str();
        let auth = x["auth"].as_str().unwrap_or("no credentials");
        let mut params: Vec<(String, String)> = x["params"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        for (k, v) in &mut params {
            if v == REDACTED && k == "password" {
                *v = self.creds.password.clone();
            }
            if k == "username" && path == "/access/ticket" {
                *v = self.creds.user.clone();
            }
        }
        let m = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(m, &url);
        req = if matches!(method, "POST" | "PUT") {
            req.form(&params)
        } else {
            req.query(&params)
        };
        let (id, secret) = (self.creds.token_id.clone(), self.creds.token_secret.clone());
        if auth.starts_with("API token header") {
            req = req.header("Authorization", format!("PVEAPIToken={id}={secret}"));
        } else if auth.starts_with("invalid API token") {
            req = req.header(
                "Authorization",
                format!("PVEAPIToken={id}=00000000-0000-0000-0000-000000000000"),
            );
        } else if auth.ends_with("sent as a PVEAuthCookie cookie") {
            req = req.header("Cookie", format!("PVEAuthCookie={id}={secret}"));
        } else if auth.starts_with("ticket of") {
            let (ticket, csrf) = self.login().await.ok_or("login for the replay failed")?;
            req = req.header("Cookie", format!("PVEAuthCookie={ticket}"));
            if x["csrf"].as_bool() == Some(true) {
                req = req.header("CSRFPreventionToken", csrf);
            }
        } else if auth == "invalid ticket" {
            req = req.header("Cookie", "PVEAuthCookie=PVE:root@pam:00000000::invalid");
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let reason = resp
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
            .unwrap_or_default();
        let body = resp.text().await.unwrap_or_default();
        let json: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
        if let (Some(recorded), Some(replayed)) =
            (x["response"]["data"].as_str(), json["data"].as_str())
            && recorded.starts_with("UPID:")
            && replayed.starts_with("UPID:")
        {
            self.upids
                .push((recorded.to_string(), replayed.to_string()));
        }
        if path == "/access/ticket" && status == 200 {
            self.ticket = Some((
                json["data"]["ticket"].as_str().unwrap_or_default().into(),
                json["data"]["CSRFPreventionToken"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            ));
        }
        Ok((status, reason, json))
    }
}

/// What differs between the recorded answer and the fake's: status, error text, answer shape.
fn compare(x: &Value, status: u16, reason: &str, json: &Value) -> Vec<String> {
    let want_status = x["status"].as_u64().unwrap_or(0) as u16;
    if status != want_status {
        return vec![format!(
            "status {want_status} on the cluster, {status} on the fake ({:?} vs {reason:?})",
            x["reason"].as_str().unwrap_or_default()
        )];
    }
    let mut out = Vec::new();
    let want_reason = x["reason"].as_str().unwrap_or_default().trim();
    if status >= 400 && want_reason != reason.trim() {
        out.push(format!(
            "error text {want_reason:?} on the cluster, {:?} on the fake",
            reason.trim()
        ));
    }
    let (a, b) = (shape(&x["response"], 3), shape(json, 3));
    if status < 400 && a != b {
        out.push(format!("answer shape {a} on the cluster, {b} on the fake"));
    }
    out
}

/// Replays one cassette on a fresh fake; every difference it finds.
async fn replay(
    cassette: &Path,
    scenario: &Scenario,
    clock: ClockMode,
    creds: &Creds,
) -> Vec<Difference> {
    let name = cassette
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let doc: Value = match std::fs::read_to_string(cassette)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(d) => d,
        Err(e) => {
            return vec![Difference {
                cassette: name,
                seq: 0,
                request: String::new(),
                what: format!("unreadable cassette: {e}"),
            }];
        }
    };
    let fake = FakeProxmox::builder()
        .scenario(scenario.clone())
        .auth_failure_delay(false)
        .clock(clock)
        .start()
        .await
        .expect("the fake starts");
    let site = fake.sites().next().expect("a site");
    let cert = reqwest::Certificate::from_pem(site.cert_pem().as_bytes()).unwrap();
    let mut client = Client {
        http: reqwest::Client::builder()
            .tls_certs_only([cert])
            .http1_only()
            .build()
            .unwrap(),
        base: format!("{}/api2/json", site.url()),
        creds: creds.clone(),
        ticket: None,
        upids: Vec::new(),
    };
    let started = Instant::now();
    let mut out = Vec::new();
    for x in doc["interactions"].as_array().into_iter().flatten() {
        // At the pace of the recording, so tasks have progressed as far as they had.
        let at = Duration::from_secs_f64(x["time"].as_f64().unwrap_or(0.0).max(0.0));
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let seq = x["seq"].as_u64().unwrap_or(0);
        let request = format!(
            "{} {}",
            x["method"].as_str().unwrap_or("?"),
            x["path"].as_str().unwrap_or("?")
        );
        let diff = |what: String| Difference {
            cassette: name.clone(),
            seq,
            request: request.clone(),
            what,
        };
        // A read is sent again while it differs (for up to 3 s): a task or a boot may take a
        // little longer on the replay than it did on the cluster, and a read changes nothing.
        let retry_until = Instant::now() + Duration::from_secs(3);
        let found = loop {
            let (found, behind) = match client.replay(x).await {
                Ok((status, reason, json)) => (
                    compare(x, status, &reason, &json),
                    // Fewer keys than recorded: the replay has not got as far (a task still
                    // running has no exitstatus yet); more keys: it is ahead, waiting won't help.
                    keys(&json) < keys(&x["response"]) || status != x["status"],
                ),
                Err(e) => (vec![format!("the fake did not answer: {e}")], true),
            };
            if found.is_empty() || !behind || x["method"] != "GET" || Instant::now() > retry_until {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        out.extend(found.into_iter().map(diff));
    }
    fake.shutdown().await;
    out
}

fn cassettes_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

fn bundled() -> (PathBuf, Scenario) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scenario = Scenario::from_yaml_file(root.join("../tests/data/blackbox-cluster.yaml"))
        .expect("the black-box cluster scenario");
    (root.join("tests/cassettes"), scenario)
}

/// The bundled cassettes were recorded against this fake: it must agree with them on every
/// status and error text (shape differences are listed: some depend on timing, such as a task
/// polled while still running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_cassettes_replay_without_status_or_error_differences() {
    let (dir, scenario) = bundled();
    let files = cassettes_in(&dir);
    assert!(!files.is_empty(), "no cassettes in {}", dir.display());
    let mut hard = Vec::new();
    for f in &files {
        let diffs = replay(f, &scenario, ClockMode::Scaled(100.0), &Creds::blackbox()).await;
        for d in &diffs {
            println!("  {d}");
        }
        hard.extend(
            diffs
                .into_iter()
                .filter(|d| d.what.starts_with("status") || d.what.starts_with("error text")),
        );
    }
    assert!(
        hard.is_empty(),
        "the fake disagrees with its own recording:\n{}",
        hard.iter()
            .map(|d| format!("  {d}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A cassette whose cluster answered otherwise is reported, naming the request and both answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doctored_cassette_is_reported() {
    let (dir, scenario) = bundled();
    let file = cassettes_in(&dir).into_iter().next().expect("a cassette");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let first = &mut doc["interactions"][0];
    let want = format!(
        "{} {}",
        first["method"].as_str().unwrap(),
        first["path"].as_str().unwrap()
    );
    first["status"] = 500.into();
    first["reason"] = "Internal Server Error".into();
    let tmp = tempfile::tempdir().unwrap();
    let doctored = tmp.path().join("doctored.json");
    std::fs::write(&doctored, serde_json::to_string(&doc).unwrap()).unwrap();
    let diffs = replay(
        &doctored,
        &scenario,
        ClockMode::Scaled(100.0),
        &Creds::blackbox(),
    )
    .await;
    assert!(
        diffs
            .iter()
            .any(|d| d.seq == 1 && d.request == want && d.what.starts_with("status 500")),
        "the doctored status was not reported: {diffs:?}"
    );
}

/// Your cluster's cassettes (see the module doc); skipped when `FAKE_PROXMOX_CASSETTES` is unset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_report_for_recorded_cassettes() {
    let Ok(dir) = std::env::var("FAKE_PROXMOX_CASSETTES") else {
        println!("FAKE_PROXMOX_CASSETTES is not set: no parity report");
        return;
    };
    let scenario = match std::env::var("FAKE_PROXMOX_CASSETTE_SCENARIO") {
        Ok(p) => Scenario::from_yaml_file(&p).expect("FAKE_PROXMOX_CASSETTE_SCENARIO"),
        Err(_) => bundled().1,
    };
    let creds = Creds::from_env();
    let files = cassettes_in(Path::new(&dir));
    let mut all = Vec::new();
    for f in &files {
        all.extend(replay(f, &scenario, ClockMode::Real, &creds).await);
    }
    println!(
        "parity report: {} cassette(s), {} difference(s)",
        files.len(),
        all.len()
    );
    for d in &all {
        println!("  {d}");
    }
    if std::env::var("FAKE_PROXMOX_PARITY_STRICT").is_ok_and(|v| v == "1") {
        assert!(all.is_empty(), "{} difference(s)", all.len());
    }
}
