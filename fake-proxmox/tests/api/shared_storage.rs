//! Shared storages: one `shared: true` declaration puts the storage on every node of the
//! site, with one set of volumes; a migration leaves its disks where they are.

use crate::common::*;

/// The three-node site with an NFS storage that only ml110-01 declares.
async fn with_nfs() -> Fake {
    let nfs = "          - name: nfs-shared\n            type: nfs\n            path: /mnt/pve/nfs-shared\n            content: [images, backup]\n            total_bytes: 1099511627776\n            shared: true\n";
    let yaml = three_nodes_yaml().replacen(
        "          - name: local-lvm\n",
        &format!("{nfs}          - name: local-lvm\n"),
        1,
    );
    let sc = fake_proxmox::Scenario::from_yaml_str(&yaml).unwrap();
    start_with(sc, fake_proxmox::ClockMode::Stepped).await
}

async fn volids(api: &Api, node: &str) -> Vec<String> {
    let r = api
        .get(&format!("/nodes/{node}/storage/nfs-shared/content"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["volid"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_shared_storage_has_one_set_of_volumes_on_every_node() {
    let f = with_nfs().await;
    let api = f.api("site-1");
    for node in ["ml110-01", "ml110-02", "ml110-03"] {
        assert!(volids(&api, node).await.is_empty(), "{node}");
    }
    create_vm(
        &f,
        &api,
        "ml110-02",
        &[("vmid", "100"), ("scsi0", "nfs-shared:4")],
    )
    .await;
    let disk = "nfs-shared:100/vm-100-disk-0.raw";
    for node in ["ml110-01", "ml110-02", "ml110-03"] {
        assert_eq!(volids(&api, node).await, [disk], "{node}");
    }
    // A backup placed through one node is there for all; deleting it on another removes it.
    let b = "backup/vzdump-qemu-100-2025_01_01-00_00_00.vma.zst";
    f.ctl("site-1")
        .upload_volume("ml110-03", "nfs-shared", b, 1 << 20)
        .await
        .unwrap();
    assert_eq!(volids(&api, "ml110-01").await.len(), 2);
    let r = api
        .send(
            "DELETE",
            &format!("/nodes/ml110-01/storage/nfs-shared/content/{b}"),
            &[],
        )
        .await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(volids(&api, "ml110-03").await, [disk]);
    // Space is taken once, seen everywhere.
    let used = |node: &'static str| {
        let api = api.clone();
        async move {
            api.get(&format!("/nodes/{node}/storage/nfs-shared/status"))
                .await
                .data()["used"]
                .clone()
        }
    };
    assert_eq!(used("ml110-01").await, used("ml110-03").await);
    // Full through one node is full on all.
    f.ctl("site-1")
        .set_storage_full("ml110-02", "nfs-shared", true)
        .await
        .unwrap();
    let r = api
        .post(
            "/nodes/ml110-03/storage/nfs-shared/content",
            &[
                ("vmid", "101"),
                ("filename", "vm-101-disk-0"),
                ("size", "1G"),
            ],
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
}

#[tokio::test]
async fn a_migration_leaves_disks_on_a_shared_storage_alone() {
    let f = with_nfs().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "100"), ("scsi0", "nfs-shared:4")],
    )
    .await;
    let r = api
        .post(
            "/nodes/ml110-01/qemu/100/migrate",
            &[("target", "ml110-03")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let cfg = api.get("/nodes/ml110-03/qemu/100/config").await;
    assert!(
        cfg.data()["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("nfs-shared:100/vm-100-disk-0.raw"),
        "{}",
        cfg.body
    );
    for node in ["ml110-01", "ml110-03"] {
        assert_eq!(
            volids(&api, node).await,
            ["nfs-shared:100/vm-100-disk-0.raw"],
            "{node}"
        );
    }
    // Destroyed on its new node: gone from the storage on every node.
    let r = api.send("DELETE", "/nodes/ml110-03/qemu/100", &[]).await;
    wait_task(&f, &api, "ml110-03", r.data().as_str().unwrap()).await;
    assert!(volids(&api, "ml110-02").await.is_empty());
}
