//! Shared fixtures: a started fake, a PVE client with token or ticket auth, and the checker
//! of response shapes against the schema's declared `returns`.

use std::collections::BTreeMap;
use std::time::Duration;

use fake_proxmox::{ClockMode, ControlClient, FakeProxmox, PveVersion, Scenario};
use serde_json::Value;

pub const TOKEN: &str = "root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a";

pub struct Fake {
    pub fake: FakeProxmox,
}

pub async fn start_with(scenario: Scenario, clock: ClockMode) -> Fake {
    let fake = FakeProxmox::builder()
        .scenario(scenario)
        .auth_failure_delay(false)
        .clock(clock)
        .start()
        .await
        .expect("fake starts");
    Fake { fake }
}

/// The seed's sites, site-1 a cluster (`pve-cluster-1`) of three nodes: `ml110-02` like `ml110-01`, `ml110-03`
/// without local-lvm; a user `ops@pve` with PVEVMAdmin on everything.
pub async fn three_nodes() -> Fake {
    let sc = fake_proxmox::Scenario::from_yaml_str(&three_nodes_yaml()).unwrap();
    start_with(sc, fake_proxmox::ClockMode::Stepped).await
}

/// The scenario of [`three_nodes`].
pub fn three_nodes_yaml() -> String {
    let yaml = fake_proxmox::Scenario::default_yaml().replacen(
        "    tokens:\n",
        "      - userid: ops@pve\n        password: pw\n    acls:\n      - {path: /, ugid: ops@pve, role: PVEVMAdmin}\n    tokens:\n",
        1,
    );
    let start = yaml.find("      - name: ml110-01").unwrap();
    let end = start + yaml[start..].find("  - name: site-2").unwrap();
    let node = &yaml[start..end];
    let second = node
        .replace("ml110-01", "ml110-02")
        .replace("192.168.11.10 ", "192.168.11.12 ")
        .replace("cidr: 192.168.11.10/24", "cidr: 192.168.11.12/24");
    let third = node
        .replace("ml110-01", "ml110-03")
        .replace("192.168.11.10 ", "192.168.11.13 ")
        .replace("cidr: 192.168.11.10/24", "cidr: 192.168.11.13/24")
        .replace(
            "          - name: local-lvm\n",
            "          - name: other-lvm\n",
        );
    format!("{}{second}{third}{}", &yaml[..end], &yaml[end..]).replacen(
        "  - name: site-1\n",
        "  - name: site-1\n    cluster_name: pve-cluster-1\n",
        1,
    )
}

/// The seed's sites on a stepped clock (tests advance it explicitly).
pub async fn start() -> Fake {
    start_with(Scenario::embedded_default(), ClockMode::Stepped).await
}

impl Fake {
    pub fn api(&self, site: &str) -> Api {
        let s = self.fake.site(site).expect("site");
        let cert = reqwest::Certificate::from_pem(s.cert_pem().as_bytes()).unwrap();
        let http = reqwest::Client::builder()
            .tls_certs_only([cert])
            .build()
            .unwrap();
        Api {
            base: format!("{}/api2/json", s.url()),
            http,
            headers: vec![("Authorization".into(), format!("PVEAPIToken={TOKEN}"))],
        }
    }

    pub fn ctl(&self, site: &str) -> ControlClient {
        self.fake.site(site).expect("site").control()
    }

    /// Let simulated time pass (the clock is stepped).
    pub async fn advance(&self, secs: f64) {
        self.ctl("site-1")
            .advance_clock(Duration::from_secs_f64(secs))
            .await
            .unwrap();
    }
}

#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub body: String,
    pub json: Value,
}

impl Resp {
    pub fn data(&self) -> &Value {
        &self.json["data"]
    }
    pub fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or("")
    }
}

impl Api {
    pub fn with_headers(&self, h: &[(&str, &str)]) -> Api {
        Api {
            headers: h
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..self.clone()
        }
    }

    pub async fn send(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = self.http.request(m.clone(), format!("{}{path}", self.base));
        for (k, v) in &self.headers {
            rb = rb.header(k, v);
        }
        if !form.is_empty() {
            if m == reqwest::Method::GET || m == reqwest::Method::DELETE {
                rb = rb.query(form);
            } else {
                rb = rb.form(form);
            }
        }
        let r = rb.send().await.expect("request");
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        let json = serde_json::from_str(&body).unwrap_or(Value::Null);
        Resp { status, body, json }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, &[]).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Resp {
        self.send("POST", path, form).await
    }

    /// Creates the `@pve` user `userid` with the password `password1` and logs it in.
    pub async fn new_user(&self, userid: &str) -> Api {
        let r = self
            .post(
                "/access/users",
                &[("userid", userid), ("password", "password1")],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        self.login(userid, "password1").await
    }

    /// Gives `userid` the role `role` on `path`.
    pub async fn grant(&self, path: &str, role: &str, userid: &str) {
        let r = self
            .send(
                "PUT",
                "/access/acl",
                &[("path", path), ("roles", role), ("users", userid)],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }

    /// Log in with a ticket; returns a client that sends cookie + CSRF header.
    pub async fn login(&self, user: &str, password: &str) -> Api {
        let r = self
            .with_headers(&[])
            .post(
                "/access/ticket",
                &[("username", user), ("password", password)],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let t = r.data()["ticket"].as_str().unwrap().to_string();
        let c = r.data()["CSRFPreventionToken"]
            .as_str()
            .unwrap()
            .to_string();
        self.with_headers(&[
            ("Cookie", &format!("PVEAuthCookie={t}")),
            ("CSRFPreventionToken", &c),
        ])
    }
}

/// Poll a task until it stops, advancing the stepped clock; returns its status.
pub async fn wait_task(fake: &Fake, api: &Api, node: &str, upid: &str) -> Value {
    for _ in 0..200 {
        let r = api.get(&format!("/nodes/{node}/tasks/{upid}/status")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.data()["status"] == "stopped" {
            return r.data().clone();
        }
        fake.advance(1.0).await;
    }
    panic!("task {upid} never finished");
}

pub async fn task_log(api: &Api, node: &str, upid: &str) -> Vec<String> {
    let r = api
        .send(
            "GET",
            &format!("/nodes/{node}/tasks/{upid}/log"),
            &[("limit", "0")],
        )
        .await;
    r.data()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["t"].as_str().unwrap().to_string())
        .collect()
}

/// Create a VM and wait for the create task; returns the task status.
pub async fn create_vm(fake: &Fake, api: &Api, node: &str, form: &[(&str, &str)]) -> Value {
    let r = api.post(&format!("/nodes/{node}/qemu"), form).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    wait_task(fake, api, node, &upid).await
}

// Response shapes against the schema's declared `returns` (`shapes/`).

/// The declared `returns` of every GET in `version`'s API.
pub fn returns(version: PveVersion) -> BTreeMap<String, Value> {
    let text = match version {
        PveVersion::V9_1 => include_str!("../../crates/schema/data/returns-9.1.json"),
        PveVersion::V8_4 => include_str!("../../crates/schema/data/returns-8.4.json"),
        // 7.1 follows the 7.4 facts, as the fake's validation does.
        PveVersion::V7_4 | PveVersion::V7_1 => {
            include_str!("../../crates/schema/data/returns-7.4.json")
        }
    };
    serde_json::from_str(text).expect("the returns files are JSON")
}

/// Whether a declared `returns` says something about keys: an object with properties,
/// or an array of such objects.
pub fn is_specific(schema: &Value) -> bool {
    let has_props = |s: &Value| s["properties"].as_object().is_some_and(|p| !p.is_empty());
    match schema["type"].as_str() {
        Some("object") => has_props(schema),
        Some("array") => has_props(&schema["items"]),
        _ => false,
    }
}

/// The schema property for `key`: by name, or an indexed one (`net[n]` for `net0`).
fn property<'a>(props: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a Value> {
    props.get(key).or_else(|| {
        props.iter().find_map(|(name, p)| {
            let prefix = name.strip_suffix("[n]")?;
            let index = key.strip_prefix(prefix)?;
            (!index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())).then_some(p)
        })
    })
}

/// Every way `value` (at key path `at`) differs from `schema`.
pub fn mismatches(value: &Value, schema: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.is_null() {
        out.push(format!("{at}: null"));
        return out;
    }
    let ty = schema["type"].as_str().unwrap_or("any");
    let fits = match ty {
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        // Perl's 1/0; a JSON boolean where the value came from QMP or JSON::true.
        "boolean" => value.is_boolean() || value.as_u64().is_some_and(|n| n <= 1),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    };
    if !fits {
        out.push(format!("{at}: {ty} declared, got {value}"));
        return out;
    }
    if let (Some(allowed), Some(s)) = (schema["enum"].as_array(), value.as_str())
        && !allowed.iter().any(|a| a == s)
    {
        out.push(format!("{at}: {s:?} not in the enum {allowed:?}"));
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, item) in list.iter().enumerate() {
            out.extend(mismatches(item, items, &format!("{at}[{i}]")));
        }
    }
    if let (Some(props), Some(obj)) = (schema["properties"].as_object(), value.as_object()) {
        for (name, p) in props {
            let optional = p["optional"].as_u64() == Some(1) || p["optional"] == true;
            if !optional && !name.ends_with("[n]") && !obj.contains_key(name) {
                out.push(format!("{}: missing", join(at, name)));
            }
        }
        for (key, v) in obj {
            if let Some(p) = property(props, key) {
                out.extend(mismatches(v, p, &join(at, key)));
            }
        }
    }
    out
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// Keys inside list items are reported without their index, so one allowance covers all.
pub fn strip_indexes(at: &str) -> String {
    let mut s = String::new();
    let mut skipping = false;
    for c in at.chars() {
        match c {
            '[' => skipping = true,
            ']' => skipping = false,
            c if !skipping => s.push(c),
            _ => {}
        }
    }
    s.trim_start_matches('.').to_string()
}
