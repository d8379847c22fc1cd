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
    refused(
        vec![("disk", "scsi0")],
        "either set 'storage' or 'target-vmid'",
    )
    .await;

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
