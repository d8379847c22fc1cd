//! Shared fixtures: a started fake, a PVE client with token or ticket auth.

use std::time::Duration;

use fake_proxmox::{ClockMode, ControlClient, FakeProxmox, Scenario};
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

/// The seed's sites on a stepped clock (tests advance it explicitly).
pub async fn start() -> Fake {
    start_with(Scenario::embedded_default(), ClockMode::Stepped).await
}

impl Fake {
    pub fn api(&self, site: &str) -> Api {
        let s = self.fake.site(site).expect("site");
        let cert = reqwest::Certificate::from_pem(s.cert_pem().as_bytes()).unwrap();
        let http = reqwest::Client::builder()
            .add_root_certificate(cert)
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
