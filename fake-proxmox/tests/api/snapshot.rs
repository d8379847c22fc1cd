//! Snapshots: take, list, roll back, delete — with PVE's locks, task logs, storage
//! support rules and errors.

use serde_json::{Value, json};

use fake_proxmox::storage::model::Content;
use fake_proxmox::{ClockMode, Scenario};

use crate::common::*;

const NODE: &str = "ml110-01";
const VM: &str = "/nodes/ml110-01/qemu/190";

async fn task(
    f: &Fake,
    api: &Api,
    method: &str,
    path: &str,
    form: &[(&str, &str)],
) -> (Value, Vec<String>) {
    let r = api.send(method, path, form).await;
    assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(f, api, NODE, &upid).await;
    (st, task_log(api, NODE, &upid).await)
}

async fn vm_with_disk(f: &Fake, api: &Api, disk: &str) {
    let st = create_vm(
        f,
        api,
        NODE,
        &[
            ("vmid", "190"),
            ("name", "db-1"),
            ("memory", "2048"),
            ("scsi0", disk),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
}

async fn config(api: &Api) -> Value {
    let r = api.get(&format!("{VM}/config")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().clone()
}

async fn list(api: &Api) -> Vec<Value> {
    let r = api.get(&format!("{VM}/snapshot")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().as_array().unwrap().clone()
}

#[tokio::test]
async fn snapshot_then_rollback_restores_the_config_and_keeps_new_disks_as_unused() {
    let f = start().await;
    let api = f.api("site-1");
    vm_with_disk(&f, &api, "local-lvm:1").await;

    let (st, log) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot"),
        &[("snapname", "before"), ("description", "pre-upgrade")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK", "{log:?}");
    assert_eq!(st["type"], "qmsnapshot");
    assert!(
        log.contains(&"snapshotting 'drive-scsi0' (local-lvm:vm-190-disk-0)".to_string()),
        "{log:?}"
    );
    assert!(
        log.contains(&"  Logical volume \"snap_vm-190-disk-0_before\" created.".to_string()),
        "{log:?}"
    );

    let snaps = list(&api).await;
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    let before = snaps.iter().find(|s| s["name"] == "before").unwrap();
    assert_eq!(before["description"], "pre-upgrade");
    assert_eq!(before["vmstate"], 0);
    assert!(before["snaptime"].as_u64().unwrap() > 0);
    let current = snaps.iter().find(|s| s["name"] == "current").unwrap();
    assert_eq!(current["parent"], "before");
    assert_eq!(current["description"], "You are here!");
    assert_eq!(current["running"], 0);
    assert_eq!(config(&api).await["parent"], "before");
    let state = f.ctl("site-1").state().await.unwrap();
    let vm = state["sites"][0]["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 190)
        .unwrap()
        .clone();
    assert_eq!(
        vm["snapshots"]["before"]["config"]["memory"], "2048",
        "{vm}"
    );

    let r = api
        .send("GET", &format!("{VM}/snapshot/before/config"), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data()["memory"], "2048");
    assert_eq!(r.data()["description"], "pre-upgrade");

    // Change the VM, then go back.
    let r = api
        .post(
            &format!("{VM}/config"),
            &[("memory", "4096"), ("scsi1", "local-lvm:2")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(config(&api).await["memory"], "4096");

    // A clone from the snapshot is made of the snapshot's config, not the current one.
    let (st, _) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/clone"),
        &[("newid", "191"), ("snapname", "before")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    let clone = api.get("/nodes/ml110-01/qemu/191/config").await;
    assert_eq!(clone.data()["memory"], "2048", "{}", clone.body);
    assert!(clone.data().get("scsi1").is_none(), "{}", clone.body);
    assert!(clone.data().get("parent").is_none(), "{}", clone.body);
    let r = api
        .post(
            &format!("{VM}/clone"),
            &[("newid", "192"), ("snapname", "nope")],
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains("snapshot 'nope' does not exist"),
        "{}",
        r.body
    );

    let (st, log) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot/before/rollback"),
        &[],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK", "{log:?}");
    assert_eq!(st["type"], "qmrollback");
    let cfg = config(&api).await;
    assert_eq!(cfg["memory"], "2048", "{cfg}");
    assert!(cfg.get("scsi1").is_none(), "{cfg}");
    assert_eq!(cfg["unused0"], "local-lvm:vm-190-disk-1", "{cfg}");
    assert_eq!(cfg["parent"], "before");

    // Delete it: the VM no longer has a parent.
    let (st, log) = task(&f, &api, "DELETE", &format!("{VM}/snapshot/before"), &[]).await;
    assert_eq!(st["exitstatus"], "OK", "{log:?}");
    assert!(
        log.contains(
            &"  Logical volume \"snap_vm-190-disk-0_before\" successfully removed.".to_string()
        ),
        "{log:?}"
    );
    let snaps = list(&api).await;
    assert_eq!(snaps, vec![snaps[0].clone()]);
    assert!(snaps[0].get("parent").is_none(), "{snaps:?}");
    assert!(config(&api).await.get("parent").is_none());
}

#[tokio::test]
async fn pves_errors_for_names_storages_and_missing_snapshots() {
    // A raw image on a directory storage cannot be snapshotted (`local` holds images here).
    let mut sc = Scenario::embedded_default();
    for s in &mut sc.sites[0].nodes[0].storages {
        if s.name == "local" {
            s.content.push(Content::Images);
        }
    }
    let f = start_with(sc, ClockMode::Stepped).await;
    let api = f.api("site-1");
    vm_with_disk(&f, &api, "local:1").await;
    let (st, _) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot"),
        &[("snapname", "s1")],
    )
    .await;
    assert_eq!(st["exitstatus"], "snapshot feature is not available");
    assert!(
        list(&api).await.len() == 1,
        "a failed snapshot leaves nothing behind"
    );

    let r = api
        .post(&format!("{VM}/snapshot"), &[("snapname", "current")])
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body
            .contains("unable to use snapshot name 'current' (reserved name)")
    );
    let r = api
        .post(&format!("{VM}/snapshot"), &[("snapname", "1bad")])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);

    let (st, _) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot/nope/rollback"),
        &[],
    )
    .await;
    assert_eq!(st["exitstatus"], "snapshot 'nope' does not exist");
    let (st, _) = task(&f, &api, "DELETE", &format!("{VM}/snapshot/nope"), &[]).await;
    assert_eq!(st["exitstatus"], "snapshot 'nope' does not exist");
    let r = api.get(&format!("{VM}/snapshot/nope/config")).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains("snapshot 'nope' does not exist"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn a_running_vm_is_locked_while_snapshotting_and_rollback_stops_it() {
    let f = start().await;
    let api = f.api("site-1");
    vm_with_disk(&f, &api, "local-lvm:1").await;
    let (st, _) = task(&f, &api, "POST", &format!("{VM}/status/start"), &[]).await;
    assert_eq!(st["exitstatus"], "OK");

    // While the task runs (the clock is stepped) the VM carries the snapshot lock.
    let r = api
        .post(
            &format!("{VM}/snapshot"),
            &[("snapname", "s1"), ("vmstate", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert_eq!(config(&api).await["lock"], "snapshot");
    let snaps = list(&api).await;
    assert_eq!(
        snaps.iter().find(|s| s["name"] == "s1").unwrap()["snapstate"],
        "prepare"
    );
    let r = api.post(&format!("{VM}/status/stop"), &[]).await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "VM is locked (snapshot)");
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log[0].starts_with("saving VM state and RAM using storage 'local-lvm'"),
        "{log:?}"
    );
    let snap = api.get(&format!("{VM}/snapshot/s1/config")).await;
    assert_eq!(snap.data()["vmstate"], "local-lvm:vm-190-state-s1");
    assert_eq!(
        list(&api).await.iter().find(|s| s["name"] == "s1").unwrap()["vmstate"],
        1
    );

    // Rolling back to a snapshot with RAM leaves the VM running (its state resumed);
    // without RAM a running VM is stopped and only `start=1` starts it again.
    let (st, _) = task(&f, &api, "POST", &format!("{VM}/snapshot/s1/rollback"), &[]).await;
    assert_eq!(st["exitstatus"], "OK");
    let cur = api.get(&format!("{VM}/status/current")).await;
    assert_eq!(cur.data()["status"], "running");

    let (st, _) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot"),
        &[("snapname", "disk_only")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    let (st, _) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot/disk_only/rollback"),
        &[],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(
        api.get(&format!("{VM}/status/current")).await.data()["status"],
        "stopped"
    );
    let (st, _) = task(
        &f,
        &api,
        "POST",
        &format!("{VM}/snapshot/disk_only/rollback"),
        &[("start", "1")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(
        api.get(&format!("{VM}/status/current")).await.data()["status"],
        "running"
    );

    // Deleting the RAM snapshot frees its state volume.
    let (st, _) = task(&f, &api, "DELETE", &format!("{VM}/snapshot/s1"), &[]).await;
    assert_eq!(st["exitstatus"], "OK");
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local-lvm/content"))
        .await;
    assert!(
        !content.body.contains("vm-190-state-s1"),
        "{}",
        content.body
    );
    assert_eq!(json!(list(&api).await.len()), json!(2));
}

#[tokio::test]
async fn feature_answers_per_storage_and_unlink_detaches_or_frees_disks() {
    let f = start().await;
    let api = f.api("site-1");
    let st = create_vm(
        &f,
        &api,
        NODE,
        &[
            ("vmid", "190"),
            ("scsi0", "local-lvm:1"),
            ("scsi1", "local-lvm:1"),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    let feature = |name: &'static str| {
        let api = api.clone();
        async move {
            let r = api
                .send("GET", &format!("{VM}/feature"), &[("feature", name)])
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.data().clone()
        }
    };
    assert_eq!(
        feature("snapshot").await,
        json!({"hasFeature": 1, "nodes": ["ml110-01"]})
    );
    assert_eq!(feature("copy").await["hasFeature"], 1);
    assert_eq!(
        feature("clone").await["hasFeature"],
        0,
        "a linked clone needs a template's base image"
    );

    // unlink: detached to unusedN, then (as unusedN) freed; force frees at once.
    let r = api
        .send("PUT", &format!("{VM}/unlink"), &[("idlist", "scsi1")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json, json!({"data": null}));
    let cfg = config(&api).await;
    assert_eq!(cfg["unused0"], "local-lvm:vm-190-disk-1", "{cfg}");
    let r = api
        .send("PUT", &format!("{VM}/unlink"), &[("idlist", "unused0")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .send(
            "PUT",
            &format!("{VM}/unlink"),
            &[("idlist", "scsi0"), ("force", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let cfg = config(&api).await;
    assert!(
        cfg.get("scsi0").is_none() && cfg.get("unused0").is_none(),
        "{cfg}"
    );
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local-lvm/content"))
        .await;
    assert!(!content.body.contains("vm-190-disk"), "{}", content.body);
}

#[tokio::test]
async fn deleting_a_snapshot_in_the_middle_relinks_its_child() {
    let f = start().await;
    let api = f.api("site-1");
    vm_with_disk(&f, &api, "local-lvm:1").await;
    for name in ["s1", "s2", "s3"] {
        let (st, _) = task(
            &f,
            &api,
            "POST",
            &format!("{VM}/snapshot"),
            &[("snapname", name)],
        )
        .await;
        assert_eq!(st["exitstatus"], "OK");
    }
    let parent_of = |snaps: &[Value], name: &str| {
        snaps
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s.get("parent").cloned().unwrap_or(Value::Null))
    };
    let snaps = list(&api).await;
    assert_eq!(parent_of(&snaps, "s2"), Some(json!("s1")));
    assert_eq!(parent_of(&snaps, "s3"), Some(json!("s2")));
    assert_eq!(parent_of(&snaps, "current"), Some(json!("s3")));

    let (st, _) = task(&f, &api, "DELETE", &format!("{VM}/snapshot/s2"), &[]).await;
    assert_eq!(st["exitstatus"], "OK");
    let snaps = list(&api).await;
    assert_eq!(parent_of(&snaps, "s2"), None);
    assert_eq!(parent_of(&snaps, "s3"), Some(json!("s1")), "{snaps:?}");
    assert_eq!(parent_of(&snaps, "current"), Some(json!("s3")));

    // The newest one: the current state falls back to its parent.
    let (st, _) = task(&f, &api, "DELETE", &format!("{VM}/snapshot/s3"), &[]).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(parent_of(&list(&api).await, "current"), Some(json!("s1")));
}
