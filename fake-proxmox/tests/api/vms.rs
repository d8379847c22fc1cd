//! VM lifecycle: create, config round-trip, nextid race, locks, start admission, delete.

use serde_json::Value;

use crate::common::*;

fn seed_vm<'a>(vmid: &'a str, disk: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("vmid", vmid),
        ("name", "nginx-proxy-vm"),
        ("cores", "2"),
        ("memory", "4096"),
        ("net0", "virtio,bridge=vmbr0"),
        ("scsi0", disk),
        ("ostype", "l26"),
        ("agent", "1"),
        ("boot", "order=scsi0"),
        ("ide2", "local-lvm:cloudinit"),
        ("ciuser", "admin"),
        ("cipassword", "s3cret"),
        ("ipconfig0", "ip=dhcp"),
    ]
}

#[tokio::test]
async fn qcow2_on_lvm_thin_fails_in_the_task() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &seed_vm("100", "local-lvm:20,format=qcow2"),
        )
        .await;
    assert_eq!(r.status, 200, "PVE accepts the request: {}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    // While the task runs the VM exists with `lock: create`.
    let cfg = api.get("/nodes/ml110-01/qemu/100/config").await;
    assert_eq!(cfg.data()["lock"], "create");
    let st = wait_task(&f, &api, "ml110-01", &upid).await;
    assert_eq!(
        st["exitstatus"],
        "unable to create VM 100 - unsupported format 'qcow2' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102."
    );
    let log = task_log(&api, "ml110-01", &upid).await;
    assert!(
        log.last()
            .unwrap()
            .starts_with("TASK ERROR: unable to create VM 100 - unsupported format 'qcow2'")
    );
    // The failed create leaves nothing behind.
    let r = api.get("/nodes/ml110-01/qemu/100/config").await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Configuration file 'nodes/ml110-01/qemu-server/100.conf' does not exist\n"
    );
}

#[tokio::test]
async fn config_round_trip() {
    let f = start().await;
    let api = f.api("site-1");
    let st = create_vm(&f, &api, "ml110-01", &seed_vm("100", "local-lvm:20")).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(st["user"], "root@pam");
    assert_eq!(st["tokenid"], "harness");
    let cfg = api.get("/nodes/ml110-01/qemu/100/config").await;
    let c = cfg.data();
    let net0 = c["net0"].as_str().unwrap();
    assert!(net0.starts_with("virtio=BC:24:11:"), "{net0}");
    assert!(net0.ends_with(",bridge=vmbr0"), "{net0}");
    assert_eq!(c["scsi0"], "local-lvm:vm-100-disk-0,size=20G");
    assert_eq!(c["ide2"], "local-lvm:vm-100-cloudinit,media=cdrom,size=4M");
    assert_eq!(c["cores"], 2, "integers are JSON numbers");
    assert_eq!(
        c["memory"], "4096",
        "memory is a property string since PVE 8.1"
    );
    assert_eq!(c["cipassword"], "**********");
    assert!(c.get("lock").is_none());
    let digest = c["digest"].as_str().unwrap();
    assert_eq!(digest.len(), 40);
    // The volumes exist on the storage.
    let vols = api
        .send(
            "GET",
            "/nodes/ml110-01/storage/local-lvm/content",
            &[("vmid", "100")],
        )
        .await;
    let ids: Vec<&str> = vols
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["volid"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["local-lvm:vm-100-cloudinit", "local-lvm:vm-100-disk-0"]
    );
    // A stale digest is refused; the right one works and changes it.
    let r = api
        .send(
            "PUT",
            "/nodes/ml110-01/qemu/100/config",
            &[("cores", "3"), ("digest", "0000")],
        )
        .await;
    assert_eq!(r.status, 500);
    let r = api
        .send(
            "PUT",
            "/nodes/ml110-01/qemu/100/config",
            &[("cores", "3"), ("digest", digest)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.data().is_null());
    let c2 = api.get("/nodes/ml110-01/qemu/100/config").await;
    assert_eq!(c2.data()["cores"], 3);
    assert_ne!(c2.data()["digest"], c["digest"]);
    // The MAC is kept when net0 is rewritten without one.
    api.send(
        "PUT",
        "/nodes/ml110-01/qemu/100/config",
        &[("net0", "virtio,bridge=vmbr0,firewall=1")],
    )
    .await;
    let c3 = api.get("/nodes/ml110-01/qemu/100/config").await;
    assert_eq!(
        c3.data()["net0"].as_str().unwrap(),
        format!("{net0},firewall=1")
    );
}

#[tokio::test]
async fn nextid_reserves_nothing_and_one_create_wins() {
    let f = start().await;
    let api = f.api("site-1");
    let a = api.get("/cluster/nextid").await;
    let b = api.get("/cluster/nextid").await;
    assert_eq!(a.data(), &Value::String("100".into()), "nextid is a string");
    assert_eq!(a.data(), b.data());
    let mut handles = Vec::new();
    for _ in 0..16 {
        let api = api.clone();
        handles.push(tokio::spawn(async move {
            api.post(
                "/nodes/ml110-01/qemu",
                &[("vmid", "100"), ("memory", "512")],
            )
            .await
        }));
    }
    let mut wins = 0;
    for h in handles {
        let r = h.await.unwrap();
        match r.status {
            200 => wins += 1,
            500 => assert_eq!(
                r.message(),
                "unable to create VM 100 - VM 100 already exists on node 'ml110-01'\n"
            ),
            s => panic!("unexpected {s}: {}", r.body),
        }
    }
    assert_eq!(wins, 1);
    let r = api.send("GET", "/cluster/nextid", &[("vmid", "100")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["vmid"], "VM 100 already exists");
    assert_eq!(api.get("/cluster/nextid").await.data(), "101");
}

#[tokio::test]
async fn start_checks_vcpus_against_host_threads() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[
            ("vmid", "101"),
            ("cores", "6"),
            ("net0", "virtio,bridge=vmbr0"),
        ],
    )
    .await;
    let r = api.post("/nodes/ml110-01/qemu/101/status/start", &[]).await;
    assert_eq!(r.status, 200);
    let st = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "MAX 5 vcpus allowed per VM on this node");
    // 5 fits.
    api.send("PUT", "/nodes/ml110-01/qemu/101/config", &[("cores", "5")])
        .await;
    let r = api.post("/nodes/ml110-01/qemu/101/status/start", &[]).await;
    let st = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let cur = api.get("/nodes/ml110-01/qemu/101/status/current").await;
    assert_eq!(cur.data()["status"], "running");
    assert_eq!(cur.data()["qmpstatus"], "running");
    // Running VMs cannot be destroyed.
    let r = api.send("DELETE", "/nodes/ml110-01/qemu/101", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "VM 101 is running - destroy failed\n");
    let r = api.post("/nodes/ml110-01/qemu/101/status/stop", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api
        .send("DELETE", "/nodes/ml110-01/qemu/101", &[("purge", "1")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(
        api.get("/nodes/ml110-01/qemu/101/status/current")
            .await
            .status,
        500
    );
}

#[tokio::test]
async fn missing_bridge_fails_start_and_reboot_of_stopped_vm_is_refused() {
    let f = start().await;
    let api = f.api("site-2");
    create_vm(
        &f,
        &api,
        "r630-01",
        &[("vmid", "200"), ("net0", "virtio,bridge=vmbr9")],
    )
    .await;
    let r = api.post("/nodes/r630-01/qemu/200/status/reboot", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "VM 200 not running\n");
    let r = api.post("/nodes/r630-01/qemu/200/status/start", &[]).await;
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(&f, &api, "r630-01", &upid).await;
    assert_eq!(st["exitstatus"], "start failed: QEMU exited with code 1");
    let log = task_log(&api, "r630-01", &upid).await;
    assert_eq!(log[0], "bridge 'vmbr9' does not exist");
}

#[tokio::test]
async fn clone_and_resize() {
    let f = start().await;
    let api = f.api("site-2");
    create_vm(
        &f,
        &api,
        "r630-01",
        &[
            ("vmid", "300"),
            ("scsi0", "local-lvm:8"),
            ("net0", "virtio,bridge=vmbr0"),
        ],
    )
    .await;
    let r = api
        .post(
            "/nodes/r630-01/qemu/300/clone",
            &[("newid", "301"), ("name", "copy")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let c = api.get("/nodes/r630-01/qemu/301/config").await;
    assert_eq!(c.data()["scsi0"], "local-lvm:vm-301-disk-0,size=8G");
    assert_eq!(c.data()["name"], "copy");
    let src = api.get("/nodes/r630-01/qemu/300/config").await;
    assert_ne!(
        src.data()["net0"],
        c.data()["net0"],
        "a clone gets a new MAC"
    );
    let r = api
        .post("/nodes/r630-01/qemu/300/clone", &[("newid", "301")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "unable to create VM 301: config file already exists\n"
    );
    let r = api
        .send(
            "PUT",
            "/nodes/r630-01/qemu/301/resize",
            &[("disk", "scsi0"), ("size", "+2G")],
        )
        .await;
    assert_eq!(r.status, 200);
    let st = wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let c = api.get("/nodes/r630-01/qemu/301/config").await;
    assert_eq!(c.data()["scsi0"], "local-lvm:vm-301-disk-0,size=10G");
    let r = api
        .send(
            "PUT",
            "/nodes/r630-01/qemu/301/resize",
            &[("disk", "scsi0"), ("size", "4G")],
        )
        .await;
    let st = wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "shrinking disks is not supported");
}
