//! Migration between the nodes of one cluster: the precondition listing, PVE's refusals
//! before the task, an offline migration of a stopped VM with a local disk, a live one that
//! needs `with-local-disks`, and a target node that cannot be reached.

use crate::common::*;

#[tokio::test]
async fn a_stopped_vm_with_a_local_disk_migrates_offline() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "180"), ("name", "db1"), ("scsi0", "local-lvm:4")],
    )
    .await;
    let pre = api.get("/nodes/ml110-01/qemu/180/migrate").await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    let d = pre.data();
    assert_eq!(d["running"], 0);
    assert_eq!(d["allowed_nodes"], serde_json::json!(["ml110-02"]));
    assert_eq!(
        d["not_allowed_nodes"]["ml110-03"]["unavailable_storages"],
        serde_json::json!(["local-lvm"])
    );
    assert_eq!(d["local_disks"][0]["volid"], "local-lvm:vm-180-disk-0");
    assert_eq!(d["local_disks"][0]["size"], 4u64 << 30);

    let r = api
        .post(
            "/nodes/ml110-01/qemu/180/migrate",
            &[("target", "ml110-03")],
        )
        .await;
    assert_eq!(
        r.message(),
        "storage 'local-lvm' is not available on node 'ml110-03'\n"
    );
    let r = api
        .post(
            "/nodes/ml110-01/qemu/180/migrate",
            &[("target", "ml110-01")],
        )
        .await;
    assert_eq!(r.status, 400);
    let r = api
        .post("/nodes/ml110-01/qemu/180/migrate", &[("target", "nope")])
        .await;
    assert_eq!(r.message(), "no such cluster node 'nope'\n");

    let r = api
        .post(
            "/nodes/ml110-01/qemu/180/migrate",
            &[("target", "ml110-02")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":qmigrate:180:"), "{upid}");
    // Locked while it runs.
    let cfg = api.get("/nodes/ml110-01/qemu/180/config").await;
    assert_eq!(cfg.data()["lock"], "migrate");
    let done = wait_task(&f, &api, "ml110-01", &upid).await;
    assert_eq!(done["exitstatus"], "OK");
    let log = task_log(&api, "ml110-01", &upid).await;
    assert!(
        log[0].starts_with("starting migration of VM 180 to node 'ml110-02'"),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l == "found local disk 'local-lvm:vm-180-disk-0' (attached)")
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("migration finished successfully"))
    );
    assert_eq!(log.last().unwrap(), "TASK OK");

    // The VM and its disk are on the target now.
    let old = api.get("/nodes/ml110-01/qemu/180/config").await;
    assert_eq!(old.status, 500);
    let cfg = api.get("/nodes/ml110-02/qemu/180/config").await;
    assert_eq!(cfg.status, 200, "{}", cfg.body);
    assert!(cfg.data().get("lock").is_none());
    let vols = api.get("/nodes/ml110-02/storage/local-lvm/content").await;
    assert!(
        vols.body.contains("local-lvm:vm-180-disk-0"),
        "{}",
        vols.body
    );
    let src = api.get("/nodes/ml110-01/storage/local-lvm/content").await;
    assert!(!src.body.contains("vm-180-disk-0"), "{}", src.body);
    let res = api.get("/cluster/resources?type=vm").await;
    let vm = res
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 180)
        .unwrap()
        .clone();
    assert_eq!(vm["node"], "ml110-02");
    // It starts there.
    let r = api.post("/nodes/ml110-02/qemu/180/status/start", &[]).await;
    let st = wait_task(&f, &api, "ml110-02", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
}

#[tokio::test]
async fn a_running_vm_moves_live_only_when_asked_and_with_its_local_disks() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "181"), ("scsi0", "local-lvm:2")],
    )
    .await;
    let r = api.post("/nodes/ml110-01/qemu/181/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let path = "/nodes/ml110-01/qemu/181/migrate";
    let r = api.post(path, &[("target", "ml110-02")]).await;
    assert_eq!(r.message(), "can't migrate running VM without --online\n");
    let r = api
        .post(path, &[("target", "ml110-02"), ("online", "1")])
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    let failed = wait_task(&f, &api, "ml110-01", &upid).await;
    assert_eq!(failed["exitstatus"], "migration aborted", "{failed}");
    let log = task_log(&api, "ml110-01", &upid).await;
    assert!(
        log.iter()
            .any(|l| l.starts_with("ERROR: migration aborted (duration ")
                && l.ends_with(
                    "can't live migrate attached local disks without with-local-disks option"
                )),
        "{log:#?}"
    );
    // Still where it was, unlocked, running.
    let cur = api.get("/nodes/ml110-01/qemu/181/status/current").await;
    assert_eq!(cur.data()["status"], "running");
    assert!(cur.data().get("lock").is_none());
    let r = api
        .post(
            path,
            &[
                ("target", "ml110-02"),
                ("online", "1"),
                ("with-local-disks", "1"),
            ],
        )
        .await;
    let ok = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(ok["exitstatus"], "OK");
    let cur = api.get("/nodes/ml110-02/qemu/181/status/current").await;
    assert_eq!(cur.data()["status"], "running");
}

#[tokio::test]
async fn an_unreachable_target_fails_the_task_and_leaves_the_vm() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "182"), ("scsi0", "local-lvm:1")],
    )
    .await;
    f.ctl("site-1")
        .set_node_online("ml110-02", false)
        .await
        .unwrap();
    let r = api
        .post(
            "/nodes/ml110-01/qemu/182/migrate",
            &[("target", "ml110-02")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(&f, &api, "ml110-01", &upid).await;
    // The task dies with `migration aborted`; the cause is in its log (AbstractMigrate).
    assert_eq!(st["exitstatus"], "migration aborted");
    let log = task_log(&api, "ml110-01", &upid).await;
    assert!(
        log.iter().any(|l| l
            == "ERROR: migration aborted (duration 00:00:03): Can't connect to destination address using public key"),
        "{log:#?}"
    );
    let cfg = api.get("/nodes/ml110-01/qemu/182/config").await;
    assert_eq!(cfg.status, 200);
    assert!(cfg.data().get("lock").is_none());
    // A user without root may not pick the migration network.
    let ops = api.login("ops@pve", "pw").await;
    let r = ops
        .post(
            "/nodes/ml110-01/qemu/182/migrate",
            &[("target", "ml110-03"), ("migration_network", "10.1.0.0/24")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("Only root may use this option."),
        "{}",
        r.body
    );
}
