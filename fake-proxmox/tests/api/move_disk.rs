//! `POST …/move_disk`: a `qmmove` task copies the disk; the old volume is kept as unused or
//! freed; PVE's refusals answer 500 before any task starts.

use fake_proxmox::storage::model::Content;
use fake_proxmox::{ClockMode, Scenario};

use crate::common::*;

const NODE: &str = "ml110-01";
const VM: &str = "/nodes/ml110-01/qemu/195";

/// The seed's sites with ml110-01's `local` directory storage also holding VM images.
async fn start_with_images_on_local() -> Fake {
    let mut sc = Scenario::embedded_default();
    for s in &mut sc.sites[0].nodes[0].storages {
        if s.name == "local" {
            s.content.push(Content::Images);
        }
    }
    start_with(sc, ClockMode::Stepped).await
}

/// VM 195 with `scsi0` as given and the seed's image as a CD-ROM.
async fn vm_with_disk_and_cdrom(f: &Fake, api: &Api, scsi0: &str) {
    let st = create_vm(
        f,
        api,
        NODE,
        &[
            ("vmid", "195"),
            ("scsi0", scsi0),
            ("ide2", "local:iso/ubuntu-22.04-cloud.img,media=cdrom"),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
}

#[tokio::test]
async fn a_disk_moves_between_storages_and_the_old_volume_is_kept_or_freed() {
    let f = start_with_images_on_local().await;
    let api = f.api("site-1");
    vm_with_disk_and_cdrom(&f, &api, "local-lvm:1,discard=on").await;

    let r = api
        .post(
            &format!("{VM}/move_disk"),
            &[("disk", "scsi0"), ("storage", "local"), ("format", "qcow2")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(st["type"], "qmmove");
    let log = task_log(&api, NODE, &upid).await;
    assert_eq!(
        log[0],
        "create full clone of drive scsi0 (local-lvm:vm-195-disk-0)"
    );
    assert!(log.iter().any(|l| l.contains("(100.00%)")), "{log:?}");
    let cfg = api.get(&format!("{VM}/config")).await;
    let cfg = cfg.data();
    assert_eq!(
        cfg["scsi0"], "local:195/vm-195-disk-0.qcow2,discard=on,size=1G",
        "{cfg}"
    );
    assert_eq!(cfg["unused0"], "local-lvm:vm-195-disk-0", "{cfg}");

    // Back to lvm-thin, this time freeing the qcow2 copy.
    let r = api
        .post(
            &format!("{VM}/move_disk"),
            &[("disk", "scsi0"), ("storage", "local-lvm"), ("delete", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let cfg = api.get(&format!("{VM}/config")).await;
    assert_eq!(
        cfg.data()["scsi0"],
        "local-lvm:vm-195-disk-1,discard=on,size=1G"
    );
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local/content"))
        .await;
    assert!(
        !content.body.contains("vm-195-disk-0.qcow2"),
        "{}",
        content.body
    );
}

#[tokio::test]
async fn pves_refusals_answer_before_any_task() {
    let f = start_with_images_on_local().await;
    let api = f.api("site-1");
    vm_with_disk_and_cdrom(&f, &api, "local-lvm:1").await;
    let refused = |form: Vec<(&'static str, &'static str)>, text: &'static str| {
        let api = api.clone();
        async move {
            let r = api.post(&format!("{VM}/move_disk"), &form).await;
            assert_eq!(r.status, 500, "{form:?}: {}", r.body);
            assert!(r.body.contains(text), "{form:?}: {}", r.body);
        }
    };
    refused(
        vec![("disk", "scsi0"), ("storage", "local-lvm")],
        "you can't move to the same storage with same format",
    )
    .await;
    refused(
        vec![("disk", "scsi3"), ("storage", "local")],
        "disk 'scsi3' does not exist",
    )
    .await;
    refused(
        vec![("disk", "ide2"), ("storage", "local-lvm")],
        "you can't move a cdrom",
    )
    .await;
    // Neither or both destinations: PVE's parameter errors, on both keys.
    for form in [
        vec![("disk", "scsi0")],
        vec![
            ("disk", "scsi0"),
            ("storage", "local"),
            ("target-vmid", "196"),
        ],
    ] {
        let r = api.post(&format!("{VM}/move_disk"), &form).await;
        assert_eq!(r.status, 400, "{form:?}: {}", r.body);
        assert!(r.json["errors"]["storage"].is_string(), "{}", r.body);
        assert!(r.json["errors"]["target-vmid"].is_string(), "{}", r.body);
    }

    // A disk that a snapshot still uses cannot be moved away and deleted.
    let r = api
        .post(&format!("{VM}/snapshot"), &[("snapname", "s1")])
        .await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    refused(
        vec![("disk", "scsi0"), ("storage", "local"), ("delete", "1")],
        "you can't move a disk with snapshots and delete the source",
    )
    .await;
}

#[tokio::test]
async fn a_disk_is_reassigned_to_another_vm_of_the_node() {
    let f = start_with_images_on_local().await;
    let api = f.api("site-1");
    vm_with_disk_and_cdrom(&f, &api, "local-lvm:1").await;
    create_vm(&f, &api, NODE, &[("vmid", "196"), ("scsi0", "local-lvm:2")]).await;
    let path = format!("{VM}/move_disk");
    let r = api
        .post(&path, &[("disk", "scsi0"), ("target-vmid", "195")])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api
        .post(&path, &[("disk", "scsi0"), ("target-vmid", "196")])
        .await;
    assert_eq!(
        r.message(),
        "Target disk key 'scsi0' is already in use for VM '196'\n"
    );
    let r = api
        .post(
            &path,
            &[
                ("disk", "ide2"),
                ("target-vmid", "196"),
                ("target-disk", "scsi5"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "CD drive contents can't be moved to another VM\n"
    );
    let r = api
        .post(&path, &[("disk", "scsi0"), ("target-vmid", "999")])
        .await;
    assert_eq!(r.message(), "could not find target VM 999\n");

    let r = api
        .post(
            &path,
            &[
                ("disk", "scsi0"),
                ("target-vmid", "196"),
                ("target-disk", "scsi1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":qmmove:195-scsi0>196-scsi1:"), "{upid}");
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log.contains(&"reassign disk 'scsi0' from VM '195' as 'scsi1' to VM '196'".to_string()),
        "{log:?}"
    );

    // The volume changed owner and name; nothing was copied.
    let src = api.get(&format!("{VM}/config")).await;
    assert!(src.data().get("scsi0").is_none(), "{}", src.body);
    let dst = api.get("/nodes/ml110-01/qemu/196/config").await;
    let scsi1 = dst.data()["scsi1"].as_str().unwrap();
    assert!(scsi1.starts_with("local-lvm:vm-196-disk-1,"), "{scsi1}");
    let content = api.get("/nodes/ml110-01/storage/local-lvm/content").await;
    assert!(!content.body.contains("vm-195-disk-0"), "{}", content.body);
    assert!(content.body.contains("vm-196-disk-1"), "{}", content.body);

    // A running source VM keeps attached disks.
    let r = api.post("/nodes/ml110-01/qemu/196/status/start", &[]).await;
    wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    let r = api
        .post(
            "/nodes/ml110-01/qemu/196/move_disk",
            &[("disk", "scsi1"), ("target-vmid", "195")],
        )
        .await;
    assert_eq!(
        r.message(),
        "Cannot move disk to another VM while the source VM is running - detach first\n"
    );
}
