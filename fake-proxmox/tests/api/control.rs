//! The control plane: faults, node offline, armed task failures, snapshots, clock, journal.

use std::time::Duration;

use fake_proxmox::FaultRule;

use crate::common::*;

#[tokio::test]
async fn fault_rules_fire_count_times() {
    let f = start().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    ctl.add_fault(FaultRule {
        method: Some("GET".into()),
        path_pattern: Some("/nodes/*/status".into()),
        count: Some(2),
        status: Some(500),
        message: Some("injected: pvestatd down".into()),
        ..FaultRule::default()
    })
    .await
    .unwrap();
    for _ in 0..2 {
        let r = api.get("/nodes/ml110-01/status").await;
        assert_eq!(r.status, 500);
        assert_eq!(r.message(), "injected: pvestatd down\n");
    }
    assert_eq!(api.get("/nodes/ml110-01/status").await.status, 200);
    let bad = ctl.add_fault(FaultRule::default()).await;
    assert!(bad.is_err(), "a rule without effect is refused");
}

#[tokio::test]
async fn offline_node_answers_595_and_shows_offline() {
    let f = start().await;
    let api = f.api("site-2");
    let ctl = f.ctl("site-2");
    ctl.set_node_online("r630-01", false).await.unwrap();
    let r = api.get("/nodes/r630-01/status").await;
    assert_eq!(r.status, 595);
    assert_eq!(r.body, "");
    let r = api.get("/nodes").await;
    assert_eq!(r.data()[0]["status"], "offline");
    ctl.set_node_online("r630-01", true).await.unwrap();
    assert_eq!(api.get("/nodes/r630-01/status").await.status, 200);
}

#[tokio::test]
async fn armed_task_failure_and_snapshots() {
    let f = start().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    let snap = ctl.snapshot().await.unwrap();
    ctl.fail_next_task("ml110-01", "qmcreate", "unable to create VM 160 - injected")
        .await
        .unwrap();
    let st = create_vm(&f, &api, "ml110-01", &[("vmid", "160")]).await;
    assert_eq!(st["exitstatus"], "unable to create VM 160 - injected");
    assert_eq!(api.get("/nodes/ml110-01/qemu/160/config").await.status, 500);
    let st = create_vm(&f, &api, "ml110-01", &[("vmid", "160")]).await;
    assert_eq!(st["exitstatus"], "OK", "armed failures fire once");
    ctl.restore(&snap).await.unwrap();
    assert_eq!(api.get("/nodes/ml110-01/qemu/160/config").await.status, 500);
    let state = ctl.state().await.unwrap();
    assert_eq!(state["sites"][0]["name"], "site-1");
}

#[tokio::test]
async fn scaled_clock_runs_tasks_without_stepping() {
    let f = start_with(
        fake_proxmox::Scenario::embedded_default(),
        fake_proxmox::ClockMode::Scaled(1000.0),
    )
    .await;
    let api = f.api("site-1");
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "170"), ("scsi0", "local-lvm:4")],
        )
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    let mut done = false;
    for _ in 0..100 {
        let st = api
            .get(&format!("/nodes/ml110-01/tasks/{upid}/status"))
            .await;
        if st.data()["status"] == "stopped" {
            assert_eq!(st.data()["exitstatus"], "OK");
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(done);
}

#[tokio::test]
async fn journal_records_what_was_sent() {
    let f = start().await;
    let api = f.api("site-2");
    let ctl = f.ctl("site-2");
    ctl.clear_journal().await.unwrap();
    api.post(
        "/nodes/r630-01/qemu",
        &[("vmid", "180"), ("cipassword", "hunter2")],
    )
    .await;
    let j = ctl.journal().await.unwrap();
    let e = j.last().unwrap();
    assert_eq!(e.method, "POST");
    assert_eq!(e.path, "/nodes/r630-01/qemu");
    assert_eq!(e.site, "site-2");
    assert_eq!(e.node.as_deref(), Some("r630-01"));
    assert_eq!(e.status, 200);
    assert_eq!(e.params["vmid"], "180");
    assert_eq!(e.params["cipassword"], "<redacted>");
}

#[tokio::test]
async fn journal_since_gives_only_what_came_after_a_seq_on_every_site() {
    let f = start().await;
    let ctl = f.ctl("site-1");
    f.api("site-1").get("/version").await;
    let before = ctl.journal().await.unwrap();
    let last = before.last().unwrap().seq;
    f.api("site-2").get("/nodes").await;
    f.api("site-1").get("/cluster/resources").await;
    let after = ctl.journal_since(last).await.unwrap();
    let seen: Vec<(&str, &str)> = after
        .iter()
        .map(|e| (e.site.as_str(), e.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("site-2", "/nodes"), ("site-1", "/cluster/resources")],
        "one journal for both sites, from after {last} only"
    );
    assert!(after.iter().all(|e| e.seq > last));
    assert!(ctl.journal_since(after[1].seq).await.unwrap().is_empty());

    let url = format!(
        "{}/_fake/journal?since=soon",
        f.fake.site("site-1").unwrap().url()
    );
    let bad = f.api("site-1").http.get(url).send().await.unwrap();
    assert_eq!(bad.status(), 400, "a since that is not a number is refused");
}

#[tokio::test]
async fn full_storage_fails_allocation_in_the_task() {
    let f = start().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    ctl.set_storage_full("ml110-01", "local-lvm", true)
        .await
        .unwrap();
    let st = create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "190"), ("scsi0", "local-lvm:10")],
    )
    .await;
    let e = st["exitstatus"].as_str().unwrap();
    assert!(
        e.starts_with("unable to create VM 190 - lvcreate 'pve/vm-190-disk-0' error:"),
        "{e}"
    );
    let s = api.get("/nodes/ml110-01/storage/local-lvm/status").await;
    assert_eq!(s.data()["avail"], 0);
    ctl.set_storage_full("ml110-01", "local-lvm", false)
        .await
        .unwrap();
    let st = create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "190"), ("scsi0", "local-lvm:10")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
}
