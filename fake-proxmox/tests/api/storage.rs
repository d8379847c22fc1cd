//! Storage rules: CephFS holds no VM disks, import-from and the import content type,
//! capacity, download-url.

use crate::common::*;

#[tokio::test]
async fn cephfs_refuses_a_vm_disk() {
    let f = start().await;
    let api = f.api("site-2");
    let r = api
        .post(
            "/nodes/r630-01/qemu",
            &[("vmid", "120"), ("scsi0", "ceph-fs:500")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["storage"],
        "storage 'ceph-fs' does not support vm images"
    );
    assert_eq!(r.message(), "Parameter verification failed.\n");
    // Nothing was created.
    assert_eq!(api.get("/nodes/r630-01/qemu/120/config").await.status, 500);
    // An unknown storage is a 500.
    let r = api
        .post(
            "/nodes/r630-01/qemu",
            &[("vmid", "120"), ("scsi0", "nope:5")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "storage 'nope' does not exist\n");
}

#[tokio::test]
async fn storage_listing_and_status() {
    let f = start().await;
    let api = f.api("site-2");
    let r = api.get("/nodes/r630-01/storage").await;
    let names: Vec<&str> = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["storage"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ceph-fs", "local", "local-lvm"]);
    let r = api
        .send("GET", "/nodes/r630-01/storage", &[("content", "images")])
        .await;
    assert_eq!(r.data().as_array().unwrap().len(), 1);
    let r = api.get("/nodes/r630-01/storage/local-lvm/status").await;
    assert_eq!(r.data()["type"], "lvmthin");
    assert_eq!(r.data()["total"], 183931974451u64);
    assert_eq!(r.data()["active"], 1);
    let r = api.get("/nodes/r630-01/storage/local/content").await;
    assert_eq!(r.data()[0]["volid"], "local:iso/ubuntu-22.04-cloud.img");
    let r = api.get("/nodes/r630-01/storage/nope/status").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "storage 'nope' does not exist\n");
}

#[tokio::test]
async fn import_from_an_iso_volume_is_the_wrong_type() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[
                ("vmid", "100"),
                (
                    "scsi0",
                    "local-lvm:0,import-from=local:iso/ubuntu-22.04-cloud.img",
                ),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["scsi0"],
        "local:iso/ubuntu-22.04-cloud.img has wrong type 'iso' - needs to be 'images' or 'import'"
    );
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[
                ("vmid", "100"),
                ("scsi0", "local-lvm:20,import-from=local:import/x.qcow2"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["scsi0"],
        "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"
    );
}

#[tokio::test]
async fn download_then_import_is_task_work_with_progress() {
    let f = start().await;
    let api = f.api("site-1");
    // The image name must end in .qcow2 for the import content type.
    let r = api
        .post(
            "/nodes/ml110-01/storage/local/download-url",
            &[
                ("url", "https://cloud-images.example/jammy.img"),
                ("content", "import"),
                ("filename", "jammy.img"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["filename"],
        "invalid filename or wrong extension"
    );
    let r = api
        .post(
            "/nodes/ml110-01/storage/local/download-url",
            &[
                ("url", "https://cloud-images.example/jammy.img"),
                ("content", "import"),
                ("filename", "jammy.qcow2"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(
        upid.contains(":download:jammy.qcow2:root@pam!harness:"),
        "{upid}"
    );
    let st = wait_task(&f, &api, "ml110-01", &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    // Downloading again refuses to overwrite.
    let r = api
        .post(
            "/nodes/ml110-01/storage/local/download-url",
            &[
                ("url", "https://cloud-images.example/jammy.img"),
                ("content", "import"),
                ("filename", "jammy.qcow2"),
            ],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(
        r.message()
            .starts_with("refusing to override existing file"),
        "{}",
        r.message()
    );
    // Import it into a new VM's disk: a task that takes time and logs progress.
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[
                ("vmid", "130"),
                (
                    "scsi0",
                    "local-lvm:0,import-from=local:import/jammy.qcow2,discard=on",
                ),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    f.advance(2.0).await;
    let mid = api
        .get(&format!("/nodes/ml110-01/tasks/{upid}/status"))
        .await;
    assert_eq!(
        mid.data()["status"],
        "running",
        "a 1.7 GiB import takes longer than 2 s"
    );
    let st = wait_task(&f, &api, "ml110-01", &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let log = task_log(&api, "ml110-01", &upid).await;
    assert!(
        log.iter()
            .any(|l| l == "create full clone of drive scsi0 (local:import/jammy.qcow2)"),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("transferred ") && l.ends_with("(100.00%)")),
        "{log:?}"
    );
    assert_eq!(log.last().unwrap(), "TASK OK");
    let c = api.get("/nodes/ml110-01/qemu/130/config").await;
    let scsi0 = c.data()["scsi0"].as_str().unwrap();
    assert!(
        scsi0.starts_with("local-lvm:vm-130-disk-0,discard=on,size="),
        "{scsi0}"
    );
    assert!(
        !scsi0.contains("import-from"),
        "import-from is not echoed back"
    );
}

#[tokio::test]
async fn import_fails_in_the_task_when_source_missing_or_target_full() {
    let f = start().await;
    let api = f.api("site-2");
    let ctl = f.ctl("site-2");
    ctl.upload_volume("r630-01", "local", "import/big.qcow2", 40 << 30)
        .await
        .unwrap();
    let r = api
        .post(
            "/nodes/r630-01/qemu",
            &[
                ("vmid", "140"),
                (
                    "scsi0",
                    "local-lvm:0,import-from=local:import/missing.qcow2",
                ),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        "unable to create VM 140 - volume 'local:import/missing.qcow2' does not exist"
    );
    // Shrink local-lvm so the 40 GiB of data cannot fit.
    ctl.set_storage_capacity("r630-01", "local-lvm", 10 << 30)
        .await
        .unwrap();
    let r = api
        .post(
            "/nodes/r630-01/qemu",
            &[
                ("vmid", "141"),
                ("scsi0", "local-lvm:0,import-from=local:import/big.qcow2"),
            ],
        )
        .await;
    let st = wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
    let e = st["exitstatus"].as_str().unwrap();
    assert!(
        e.starts_with("unable to create VM 141 - qemu-img: error while writing at byte"),
        "{e}"
    );
    assert!(e.contains("No space left on device"), "{e}");
    assert_eq!(api.get("/nodes/r630-01/qemu/141/config").await.status, 500);
}

#[tokio::test]
async fn download_url_refuses_block_storages() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api
        .post(
            "/nodes/ml110-01/storage/local-lvm/download-url",
            &[
                ("url", "https://x.example/a.iso"),
                ("content", "iso"),
                ("filename", "a.iso"),
            ],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "can't upload to storage type 'lvmthin', not a file based storage!\n"
    );
}

#[tokio::test]
async fn thick_lvm_checks_free_space_with_lvms_text() {
    let mut sc = fake_proxmox::Scenario::embedded_default();
    sc.sites[0].nodes[0].storages.push(
        serde_norway::from_str(
            "name: vg-data\ntype: lvm\ncontent: [images, rootdir]\ntotal_bytes: 10737418240\n",
        )
        .unwrap(),
    );
    let f = start_with(sc, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    let st = create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "100"), ("scsi0", "vg-data:20")],
    )
    .await;
    assert_eq!(
        st["exitstatus"],
        "unable to create VM 100 - lvcreate 'pve/vm-100-disk-0' error:   Volume group \"pve\" has insufficient free space (2560 extents): 5120 required."
    );
    let st = create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "100"), ("scsi0", "vg-data:8")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    let s = api.get("/nodes/ml110-01/storage/vg-data/status").await;
    assert_eq!(
        s.data()["used"],
        8u64 << 30,
        "thick LVM reserves the whole disk"
    );
}
