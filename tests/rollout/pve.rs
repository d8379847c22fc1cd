//! A plain PVE API client for what the steps check or do outside the deployer (look at VMs,
//! stop one, probe authentication), so those checks hold against a real PVE too.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use super::adapter::Creds;

#[derive(Debug, Clone)]
pub struct Observer {
    http: reqwest::Client,
    base: String,
    creds: Creds,
}

/// One VM as `/cluster/resources` lists it.
#[derive(Debug, Clone)]
pub struct VmSeen {
    /// `qemu` or `lxc`: VMs and containers share the VMID space and the listing.
    pub kind: String,
    pub vmid: u32,
    pub name: String,
    pub node: String,
    pub status: String,
}

/// A raw answer: status, reason phrase, body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub reason: String,
    pub body: String,
}

pub fn raw_client() -> anyhow::Result<reqwest::Client> {
    provision_harness::pve::tls::ensure_crypto_provider();
    // The probes talk to the scenario's own loopback fake (or the test cluster the user named);
    // the deployer's own TLS handling is what the scenarios judge, not this client's.
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .http1_only()
        .timeout(Duration::from_secs(20))
        .build()
        .context("building the probe client")
}

impl Observer {
    pub fn new(url: &str, creds: Creds) -> anyhow::Result<Observer> {
        Ok(Observer {
            http: raw_client()?,
            base: format!("{}/api2/json", url.trim_end_matches('/')),
            creds,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn auth(
        &self,
        req: reqwest::RequestBuilder,
        write: bool,
    ) -> anyhow::Result<reqwest::RequestBuilder> {
        match &self.creds {
            Creds::Token { id, secret } => {
                Ok(req.header("Authorization", format!("PVEAPIToken={id}={secret}")))
            }
            Creds::Password { username, password } => {
                let (ticket, csrf) = self.login(username, password).await?;
                let req = req.header("Cookie", format!("PVEAuthCookie={ticket}"));
                Ok(if write {
                    req.header("CSRFPreventionToken", csrf)
                } else {
                    req
                })
            }
        }
    }

    pub async fn login(&self, username: &str, password: &str) -> anyhow::Result<(String, String)> {
        let resp = self
            .http
            .post(self.url("/access/ticket"))
            .form(&[("username", username), ("password", password)])
            .send()
            .await
            .context("POST /access/ticket")?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("login as {username} refused: {status}");
        }
        let ticket = v["data"]["ticket"]
            .as_str()
            .ok_or_else(|| anyhow!("no ticket in {v}"))?;
        let csrf = v["data"]["CSRFPreventionToken"]
            .as_str()
            .unwrap_or_default();
        Ok((ticket.to_string(), csrf.to_string()))
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let req = self.auth(self.http.get(self.url(path)), false).await?;
        envelope(
            req.send().await.with_context(|| format!("GET {path}"))?,
            "GET",
            path,
        )
        .await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> anyhow::Result<Value> {
        let req = self
            .auth(self.http.post(self.url(path)).form(form), true)
            .await?;
        envelope(
            req.send().await.with_context(|| format!("POST {path}"))?,
            "POST",
            path,
        )
        .await
    }

    /// Sends a request with exactly the headers given (no credentials added).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
    ) -> anyhow::Result<Answer> {
        let m = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self.http.request(m, self.url(path));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status();
        let reason = status.canonical_reason().unwrap_or("").to_string();
        // PVE puts its error text in the reason phrase; hyper exposes it as an extension.
        let reason = resp
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
            .unwrap_or(reason);
        let body = resp.text().await.unwrap_or_default();
        Ok(Answer {
            status: status.as_u16(),
            reason,
            body,
        })
    }

    pub async fn vms(&self) -> anyhow::Result<Vec<VmSeen>> {
        let v = self.get("/cluster/resources?type=vm").await?;
        let list = v.as_array().cloned().unwrap_or_default();
        Ok(list
            .iter()
            .filter(|r| r["type"] == "qemu" || r["type"] == "lxc")
            .filter_map(|r| {
                Some(VmSeen {
                    kind: r["type"].as_str().unwrap_or_default().to_string(),
                    vmid: u32::try_from(r["vmid"].as_u64()?).ok()?,
                    name: r["name"].as_str().unwrap_or_default().to_string(),
                    node: r["node"].as_str().unwrap_or_default().to_string(),
                    status: r["status"].as_str().unwrap_or_default().to_string(),
                })
            })
            .collect())
    }

    pub async fn vm_config(&self, node: &str, vmid: u32) -> anyhow::Result<Value> {
        self.get(&format!("/nodes/{node}/qemu/{vmid}/config")).await
    }

    /// The config of a guest of either kind (`kind`: `qemu` or `lxc`).
    pub async fn guest_config(&self, node: &str, kind: &str, vmid: u32) -> anyhow::Result<Value> {
        self.get(&format!("/nodes/{node}/{kind}/{vmid}/config"))
            .await
    }

    /// Volume ids on every storage of `node` that holds VM images.
    pub async fn image_volumes(&self, node: &str) -> anyhow::Result<Vec<String>> {
        let storages = self.get(&format!("/nodes/{node}/storage")).await?;
        let mut out = Vec::new();
        for s in storages.as_array().cloned().unwrap_or_default() {
            let content = s["content"].as_str().unwrap_or_default();
            if !content.split(',').any(|c| c == "images") {
                continue;
            }
            let Some(name) = s["storage"].as_str() else {
                continue;
            };
            let vols = self
                .get(&format!("/nodes/{node}/storage/{name}/content"))
                .await?;
            for v in vols.as_array().cloned().unwrap_or_default() {
                if let Some(id) = v["volid"].as_str() {
                    out.push(id.to_string());
                }
            }
        }
        Ok(out)
    }

    pub async fn await_task(
        &self,
        node: &str,
        upid: &str,
        within: Duration,
    ) -> anyhow::Result<String> {
        let started = Instant::now();
        loop {
            let st = self
                .get(&format!("/nodes/{node}/tasks/{upid}/status"))
                .await?;
            if st["status"] == "stopped" {
                return Ok(st["exitstatus"].as_str().unwrap_or_default().to_string());
            }
            if started.elapsed() > within {
                bail!("task {upid} still running after {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn envelope(resp: reqwest::Response, method: &str, path: &str) -> anyhow::Result<Value> {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{method} {path}: {status} {body}");
    }
    let v: Value = serde_json::from_str(&body)
        .with_context(|| format!("{method} {path}: not JSON: {body}"))?;
    Ok(v.get("data").cloned().unwrap_or(Value::Null))
}

/// `size=20G` (or `M`, `T`) from a disk property string, in GiB.
pub fn disk_size_gib(prop: &str) -> Option<f64> {
    let size = prop.split(',').find_map(|kv| kv.strip_prefix("size="))?;
    let (num, unit) = size.split_at(
        size.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(size.len()),
    );
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "T" => n * 1024.0,
        "G" | "" => n,
        "M" => n / 1024.0,
        "K" => n / (1024.0 * 1024.0),
        _ => return None,
    })
}
