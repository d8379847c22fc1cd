//! The fake's own cost per request, in process: the axum app called directly, no sockets,
//! no HTTP parsing, no client. It separates what the fake spends per request from the
//! kernel's loopback path and the load client, which dominate `load`'s figures.
//!
//! `cargo bench -p fake-proxmox --bench handler` prints `name: value unit` lines for
//! `GET …/status/current`, `GET /cluster/resources` and a task status poll, over a site
//! of 1,000 VMs on 50 nodes (`HANDLER_ITERS` sets the number of calls per figure,
//! `HANDLER_ONLY` picks one figure by name prefix).
//!
//! Each figure is given twice: wall-clock time per call, and the process's CPU time per call
//! (user + system, from `/proc/self/stat`), which stays meaningful on a shared machine.
//! `bare_status_current_handler` is the reference: a one-route axum app answering a fixed
//! body of the fake's size, called the same way; `status_current_vs_bare_cpu` is the fake's
//! CPU per call over it.

use std::time::Instant;

use anyhow::{Result, bail};
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
use tower::ServiceExt;

#[path = "common/site.rs"]
mod site;
use site::{FIRST_VMID, TOKEN, VMS, node_of, scenario_yaml};

fn scenario() -> Result<Scenario> {
    Ok(Scenario::from_yaml_str(&scenario_yaml())?)
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
) -> Result<Option<f64>> {
    // The bare reference goes with the figure it is the reference of.
    let plain = name.trim_start_matches("bare_");
    if std::env::var("HANDLER_ONLY").is_ok_and(|o| !plain.starts_with(o.as_str())) {
        return Ok(None);
    }
    for i in 0..iters / 10 {
        call(app, "GET", &uri(i), None).await?;
    }
    let cpu0 = cpu_secs();
    let t = Instant::now();
    for i in 0..iters {
        call(app, "GET", &uri(i), None).await?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
    let cpu_us = (cpu_secs() - cpu0) * 1e6 / f64::from(iters);
    println!("{name}: {us:.2} us/req");
    println!("{name}_cpu: {cpu_us:.2} us/req");
    Ok(Some(cpu_us))
}

/// CPU time (user + system) this process has used so far, from `/proc/self/stat`.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime: fields 14 and 15, indexes 11 and 12 after the `(comm)`.
    (ticks(11) + ticks(12)) / 100.0
}

/// One axum route answering `body` as the fake answers `status/current` (same content type).
fn bare_app(body: bytes::Bytes) -> Router {
    Router::new().route(
        "/api2/json/nodes/{node}/qemu/{vmid}/status/current",
        axum::routing::get(move || {
            let body = body.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/json;charset=UTF-8",
                    )],
                    body,
                )
            }
        }),
    )
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
        for vmid in FIRST_VMID..FIRST_VMID + VMS {
            let form = format!(
                "vmid={vmid}&name=vm{vmid}&memory=512&cores=1&scsi0=local-lvm%3A1&net0=virtio%2Cbridge%3Dvmbr0"
            );
            let body = call(&app, "POST", &format!("/api2/json/nodes/{}/qemu", node_of(vmid)), Some(form)).await?;
            let v: serde_json::Value = serde_json::from_slice(&body)?;
            upid = v["data"].as_str().unwrap_or_default().to_string();
        }
        let enc: String =
            percent_encoding::utf8_percent_encode(&upid, percent_encoding::NON_ALPHANUMERIC).to_string();
        let last = FIRST_VMID + VMS - 1;
        let status_uri = |i: u32| {
            let vmid = FIRST_VMID + (i.wrapping_mul(7919) % VMS);
            format!("/api2/json/nodes/{}/qemu/{vmid}/status/current", node_of(vmid))
        };
        let fake_cpu = per_request("status_current_handler", iters, status_uri, &app).await?;
        let body = call(&app, "GET", &status_uri(0), None).await?;
        let bare = bare_app(body.into());
        let bare_cpu =
            per_request("bare_status_current_handler", iters, status_uri, &bare).await?;
        if let (Some(f), Some(b)) = (fake_cpu, bare_cpu) {
            println!("status_current_vs_bare_cpu: {:.2}", f / b);
        }
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
