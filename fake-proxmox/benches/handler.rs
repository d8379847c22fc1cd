//! The fake's own cost per request, in process: the axum app called directly, no sockets,
//! no HTTP parsing, no client. It separates what the fake spends per request from the
//! kernel's loopback path and the load client, which dominate `load`'s figures.
//!
//! `cargo bench -p fake-proxmox --bench handler` prints `name: value unit` lines for
//! `GET …/status/current`, `GET /cluster/resources` and a task status poll, over a site
//! of 1,000 VMs on 50 nodes (`HANDLER_ITERS` sets the number of calls per figure,
//! `HANDLER_ONLY` picks one figure by name prefix).

use std::time::Instant;

use anyhow::{Result, bail};
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
use tower::ServiceExt;

const NODES: usize = 50;
const VMS: u32 = 1000;
const TOKEN: &str = "PVEAPIToken=root@pam!bench=0b6f3c1e-2f4d-4b7a-9c8e-1d2e3f4a5b6c";

fn scenario() -> Result<Scenario> {
    let mut y = String::from(
        "seed: 1\nsites:\n  - name: bench\n    version: \"9.1\"\n    \
         users:\n      - userid: root@pam\n        password: bench\n    tokens:\n      \
         - tokenid: root@pam!bench\n        secret: 0b6f3c1e-2f4d-4b7a-9c8e-1d2e3f4a5b6c\n        \
         privsep: false\n    nodes:\n",
    );
    for n in 1..=NODES {
        y.push_str(&format!(
            "      - name: node{n:02}\n        cores: 64\n        threads: 128\n        \
             memory_bytes: 549755813888\n        bridges:\n          - name: vmbr0\n        \
             storages:\n          - name: local-lvm\n            type: lvmthin\n            \
             content: [images, rootdir]\n            total_bytes: 10995116277760\n"
        ));
    }
    Ok(Scenario::from_yaml_str(&y)?)
}

fn node_of(vmid: u32) -> String {
    format!("node{:02}", (vmid as usize % NODES) + 1)
}

async fn call(app: &Router, method: &str, uri: &str, form: Option<String>) -> Result<Vec<u8>> {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("Authorization", TOKEN);
    if form.is_some() {
        b = b.header("Content-Type", "application/x-www-form-urlencoded");
    }
    let req = b.body(form.map_or_else(Body::empty, Body::from))?;
    let resp = app.clone().oneshot(req).await?;
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
    if !status.is_success() {
        bail!(
            "{method} {uri}: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(body.to_vec())
}

async fn per_request(
    name: &str,
    iters: u32,
    mut uri: impl FnMut(u32) -> String,
    app: &Router,
) -> Result<()> {
    if std::env::var("HANDLER_ONLY").is_ok_and(|o| !name.starts_with(o.as_str())) {
        return Ok(());
    }
    for i in 0..iters / 10 {
        call(app, "GET", &uri(i), None).await?;
    }
    let t = Instant::now();
    for i in 0..iters {
        call(app, "GET", &uri(i), None).await?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
    println!("{name}: {us:.2} us/req");
    Ok(())
}

fn main() -> Result<()> {
    let iters: u32 = std::env::var("HANDLER_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let fake = FakeProxmox::builder()
            .scenario(scenario()?)
            .tls(false)
            .auth_failure_delay(false)
            .clock(ClockMode::Scaled(1000.0))
            .start()
            .await?;
        let app = fake_proxmox::app(fake.shared().clone(), "bench");
        let mut upid = String::new();
        for vmid in 100..100 + VMS {
            let form = format!(
                "vmid={vmid}&name=vm{vmid}&memory=512&cores=1&scsi0=local-lvm%3A1&net0=virtio%2Cbridge%3Dvmbr0"
            );
            let body = call(&app, "POST", &format!("/api2/json/nodes/{}/qemu", node_of(vmid)), Some(form)).await?;
            let v: serde_json::Value = serde_json::from_slice(&body)?;
            upid = v["data"].as_str().unwrap_or_default().to_string();
        }
        let enc: String =
            percent_encoding::utf8_percent_encode(&upid, percent_encoding::NON_ALPHANUMERIC).to_string();
        let last = 100 + VMS - 1;
        per_request(
            "status_current_handler",
            iters,
            |i| {
                let vmid = 100 + (i.wrapping_mul(7919) % VMS);
                format!("/api2/json/nodes/{}/qemu/{vmid}/status/current", node_of(vmid))
            },
            &app,
        )
        .await?;
        per_request(
            "task_status_handler",
            iters,
            |_| format!("/api2/json/nodes/{}/tasks/{enc}/status", node_of(last)),
            &app,
        )
        .await?;
        per_request(
            "cluster_resources_handler_1000_vms",
            (iters / 200).max(10),
            |_| "/api2/json/cluster/resources".to_string(),
            &app,
        )
        .await?;
        fake.shutdown().await;
        Ok(())
    })
}
