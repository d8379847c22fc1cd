//! Limits (`server::limits`): request bodies, guests, tasks kept, journal entries and a
//! tenant's open connections; each refusal names its flag, and nothing else is disturbed.

use std::time::{Duration, Instant};

use fake_proxmox::{FakeProxmox, Limits, TenantInfo, TenantRequest};
use serde_json::Value;

use super::{Api, NODE, ctl, host_with, site1, task_count};

async fn limited(limits: Limits) -> FakeProxmox {
    host_with(|b| b.limits(limits)).await
}

async fn tenant(host: &FakeProxmox) -> TenantInfo {
    ctl(host)
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap()
}

fn insecure() -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_body_past_max_body_is_refused_with_413_on_the_api_and_the_control_plane() {
    let host = limited(Limits {
        max_body: 2048,
        ..Limits::default()
    })
    .await;
    let t = tenant(&host).await;
    let s = site1(&t);
    let big = "x".repeat(4096);
    let http = insecure();
    let resp = http
        .post(format!("{}/_fake/scenario", s.url))
        .bearer_auth(&t.control_token)
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    let body: Value = resp.json().await.unwrap();
    let msg = body["error"].as_str().unwrap();
    assert!(
        msg.contains("4096 bytes") && msg.contains("--max-body"),
        "{msg}"
    );

    let api = Api::of(s);
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            &format!("/nodes/{NODE}/qemu"),
            &[("vmid", "100"), ("description", big.as_str())],
        )
        .await;
    assert_eq!(status, 413, "{body}");
    // The server's own listeners have the same limit.
    let host_site = host.site("site-1").unwrap();
    let resp = http
        .post(format!("{}/_fake/state/import", host_site.url()))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    // Nothing else was disturbed: small requests go on.
    api.create_vm(100).await;
    s.control().journal().await.unwrap();
    host.shutdown().await;
}

#[tokio::test]
async fn a_create_past_max_guests_is_refused_and_other_tenants_go_on() {
    let host = limited(Limits {
        max_guests: 2,
        ..Limits::default()
    })
    .await;
    let a = tenant(&host).await;
    let b = tenant(&host).await;
    let api = Api::of(site1(&a));
    api.create_vm(100).await;
    // A container counts as a guest like a VM.
    let ct = [
        ("vmid", "101"),
        (
            "ostemplate",
            "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
        ),
        ("storage", "local-lvm"),
    ];
    let (status, body) = api
        .call(reqwest::Method::POST, &format!("/nodes/{NODE}/lxc"), &ct)
        .await;
    assert_eq!(status, 200, "{body}");
    let form = [("vmid", "102"), ("memory", "512")];
    let (status, body) = api
        .call(reqwest::Method::POST, &format!("/nodes/{NODE}/qemu"), &form)
        .await;
    assert_eq!(status, 500, "{body}");
    let msg = body["message"].as_str().unwrap();
    assert!(msg.contains("--max-guests 2"), "{msg}");
    // The same world's other site counts too (the limit is the world's).
    let (status, _) = Api::of(a.site("site-2").unwrap())
        .call(reqwest::Method::POST, "/nodes/r630-01/qemu", &form)
        .await;
    assert_eq!(status, 500);
    // Reads and other tenants are not touched.
    assert_eq!(api.call(reqwest::Method::GET, "/version", &[]).await.0, 200);
    Api::of(site1(&b)).create_vm(100).await;
    host.shutdown().await;
}

#[tokio::test]
async fn past_max_tasks_the_oldest_finished_tasks_are_forgotten() {
    let host = limited(Limits {
        max_tasks: 3,
        ..Limits::default()
    })
    .await;
    let t = tenant(&host).await;
    let api = Api::of(site1(&t));
    let ctl = site1(&t).control();
    for vmid in 100..106 {
        api.create_vm(vmid).await;
        ctl.advance_clock(Duration::from_secs(60)).await.unwrap();
    }
    let state = ctl.state().await.unwrap();
    assert_eq!(task_count(&state), 3, "{state}");
    let (status, body) = api
        .call(reqwest::Method::GET, &format!("/nodes/{NODE}/tasks"), &[])
        .await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"105") && !ids.contains(&"100"), "{ids:?}");
    host.shutdown().await;
}

#[tokio::test]
async fn past_max_journal_the_oldest_entries_are_dropped() {
    let host = limited(Limits {
        max_journal: 3,
        ..Limits::default()
    })
    .await;
    let t = tenant(&host).await;
    let api = Api::of(site1(&t));
    for _ in 0..5 {
        api.call(reqwest::Method::GET, "/version", &[]).await;
    }
    let j = site1(&t).control().journal().await.unwrap();
    let seqs: Vec<u64> = j.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![3, 4, 5]);
    host.shutdown().await;
}

#[tokio::test]
async fn a_connection_past_max_connections_gets_503_and_is_closed() {
    let host = limited(Limits {
        max_connections: 2,
        ..Limits::default()
    })
    .await;
    let t = tenant(&host).await;
    // Each `Api` has its own connection, kept alive between requests.
    let first = Api::of(site1(&t));
    let second = Api::of(t.site("site-2").unwrap());
    assert_eq!(
        first.call(reqwest::Method::GET, "/version", &[]).await.0,
        200
    );
    assert_eq!(
        second.call(reqwest::Method::GET, "/version", &[]).await.0,
        200
    );
    let third = Api::of(site1(&t));
    let (status, body) = third.call(reqwest::Method::GET, "/version", &[]).await;
    assert_eq!(status, 503, "{body}");
    let msg = body["message"].as_str().unwrap();
    assert!(msg.contains("--max-tenant-connections"), "{msg}");
    // The control plane is counted too, and refused the same way (JSON).
    let (code, msg) = super::refused(site1(&t).control().journal().await);
    assert_eq!(code, 503);
    assert!(msg.contains("too many connections"), "{msg}");
    // The kept connections go on; the server's own listeners are not limited.
    assert_eq!(
        first.call(reqwest::Method::GET, "/version", &[]).await.0,
        200
    );
    ctl(&host).tenants().await.unwrap();
    // Once one closes, a new one is let in.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = third.call(reqwest::Method::GET, "/version", &[]).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no slot freed: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.shutdown().await;
}

#[test]
fn serve_help_documents_the_limits_and_their_defaults() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fake-proxmox"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let d = Limits::default();
    for (flag, default) in [
        ("--max-body", d.max_body),
        ("--max-guests", d.max_guests),
        ("--max-tasks", d.max_tasks),
        ("--max-journal", d.max_journal),
        ("--max-tenant-connections", d.max_connections),
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
        assert!(
            help.contains(&format!("[default: {default}]")),
            "default of {flag} missing from:\n{help}"
        );
    }
    assert!(help.contains("--control-token"), "{help}");
    assert!(help.contains("FAKE_PROXMOX_CONTROL_TOKEN"), "{help}");
}
