//! Backup volumes: their listing, the `notes` and `protected` attributes
//! (`PUT …/content/{volume}`), deletion of protected backups, and prunes
//! (`GET|DELETE …/prunebackups`) with PVE's marks and refusals.

use serde_json::Value;

use crate::common::*;

const NODE: &str = "ml110-01";
const CONTENT: &str = "/nodes/ml110-01/storage/local/content";
const PRUNE: &str = "/nodes/ml110-01/storage/local/prunebackups";

fn backup(vmid: u32, day: u32) -> String {
    format!("backup/vzdump-qemu-{vmid}-2025_01_{day:02}-02_00_00.vma.zst")
}

/// Backups of VM 100 on days 1..=4, one of VM 101, and a renamed one of VM 100.
async fn with_backups(f: &Fake) {
    let ctl = f.ctl("site-1");
    let mut names: Vec<String> = (1..=4).map(|d| backup(100, d)).collect();
    names.push(backup(101, 2));
    names.push("backup/vzdump-qemu-100-before-upgrade.vma.zst".into());
    for n in names {
        ctl.upload_volume(NODE, "local", &n, 1 << 30).await.unwrap();
    }
}

fn marks(r: &Resp) -> Vec<(String, String)> {
    r.data()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let v = e["volid"].as_str().unwrap();
            (
                v.trim_start_matches("local:backup/vzdump-qemu-")
                    .to_string(),
                e["mark"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn put(api: &Api, volume: &str, form: &[(&str, &str)]) -> Resp {
    api.send("PUT", &format!("{CONTENT}/{volume}"), form).await
}

#[tokio::test]
async fn backups_are_listed_with_their_guest_time_and_attributes() {
    let f = start().await;
    let api = f.api("site-1");
    with_backups(&f).await;
    let name = backup(100, 1);
    let r = put(
        &api,
        &name,
        &[
            ("notes", "before kernel 6.8\nsecond line"),
            ("protected", "1"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json["data"], Value::Null);

    let r = api
        .send("GET", CONTENT, &[("content", "backup"), ("vmid", "100")])
        .await;
    let list = r.data().as_array().unwrap();
    assert_eq!(list.len(), 5, "{}", r.body);
    let e = list
        .iter()
        .find(|e| e["volid"] == format!("local:{name}"))
        .unwrap();
    assert_eq!(e["format"], "vma.zst");
    assert_eq!(e["subtype"], "qemu");
    assert_eq!(e["vmid"], 100);
    assert_eq!(e["ctime"], 1_735_696_800u64, "2025-01-01 02:00:00 UTC");
    assert_eq!(e["notes"], "before kernel 6.8", "the first line only");
    assert_eq!(e["protected"], 1);
    let other = list
        .iter()
        .find(|e| e["volid"] != format!("local:{name}"))
        .unwrap();
    assert!(other.get("notes").is_none() && other.get("protected").is_none());

    // One volume: all of the notes; a backup without attributes has empty notes and 0.
    let r = api.get(&format!("{CONTENT}/{name}")).await;
    assert_eq!(r.data()["notes"], "before kernel 6.8\nsecond line");
    assert_eq!(r.data()["protected"], 1);
    assert_eq!(r.data()["format"], "raw");
    assert_eq!(
        r.data()["path"],
        "/var/lib/vz/dump/vzdump-qemu-100-2025_01_01-02_00_00.vma.zst"
    );
    let r = api.get(&format!("{CONTENT}/{}", backup(100, 2))).await;
    assert_eq!(
        (&r.data()["notes"], &r.data()["protected"]),
        (&Value::from(""), &Value::from(0))
    );
    // Not a backup: no attributes at all.
    let r = api
        .get(&format!("{CONTENT}/iso/ubuntu-22.04-cloud.img"))
        .await;
    assert!(r.data().get("notes").is_none(), "{}", r.body);

    // Empty notes remove them.
    put(&api, &name, &[("notes", "")]).await;
    let r = api.get(&format!("{CONTENT}/{name}")).await;
    assert_eq!(r.data()["notes"], "");
}

#[tokio::test]
async fn only_backups_have_notes_and_protection() {
    let f = start().await;
    let api = f.api("site-1");
    let iso = "iso/ubuntu-22.04-cloud.img";
    let r = put(&api, iso, &[("notes", "x")]).await;
    assert_eq!(
        (r.status, r.message()),
        (500, "only backups can have notes\n")
    );
    let r = put(&api, iso, &[("protected", "1")]).await;
    assert_eq!(
        (r.status, r.message()),
        (500, "only backups support attribute 'protected'\n")
    );
    create_vm(&f, &api, NODE, &[("vmid", "100"), ("scsi0", "local-lvm:1")]).await;
    let lvm = "/nodes/ml110-01/storage/local-lvm/content/vm-100-disk-0";
    let r = api.send("PUT", lvm, &[("notes", "x")]).await;
    assert_eq!(
        r.message(),
        "volume notes are not supported for PVE::Storage::LvmThinPlugin at /usr/share/perl5/PVE/Storage/Plugin.pm line 1300.\n"
    );
    let r = api.send("PUT", lvm, &[("protected", "1")]).await;
    assert_eq!(
        r.message(),
        "attribute 'protected' is not supported for storage type 'lvmthin'\n"
    );
    // A volume id of another storage is refused as a parameter.
    let r = put(&api, "local-lvm:vm-100-disk-0", &[("notes", "x")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["volume"],
        "storage ID mismatch (local-lvm != local)\n"
    );
    let r = put(&api, "backup/notes.txt", &[("notes", "x")]).await;
    assert_eq!(
        r.message(),
        "unable to parse directory volume name 'backup/notes.txt'\n"
    );
}

#[tokio::test]
async fn backup_access_needs_vm_backup_and_protection_is_limited_without_allocate() {
    let f = start().await;
    let api = f.api("site-1");
    with_backups(&f).await;
    let op = api.new_user("op@pve").await;
    let name = backup(100, 1);
    let r = put(&op, &name, &[("notes", "x")]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.message(),
        "Permission check failed (/storage/local, Datastore.AllocateSpace)\n"
    );
    // Reading it needs the same (`check_volume_access`).
    let r = op.get(&format!("{CONTENT}/{name}")).await;
    assert_eq!(
        (r.status, r.message()),
        (
            403,
            "Permission check failed (/storage/local, Datastore.AllocateSpace)\n"
        )
    );
    for (path, role) in [
        ("/storage/local", "PVEDatastoreUser"),
        ("/vms/100", "PVEVMUser"),
    ] {
        api.grant(path, role, "op@pve").await;
    }
    assert_eq!(put(&op, &name, &[("notes", "x")]).await.status, 200);
    // The listing shows op the ISO, the container template and VM 100's backups, not VM 101's.
    let r = op.send("GET", CONTENT, &[]).await;
    let listed: Vec<&str> = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["volid"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 7, "{listed:?}");
    assert!(!listed.iter().any(|v| v.contains("-101-")), "{listed:?}");
    // VM 101's backups are not op's.
    let r = put(&op, &backup(101, 2), &[("notes", "x")]).await;
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/101, VM.Backup)\n"
    );
    // Without Datastore.Allocate five protected backups per guest are the most; more
    // backups of VM 100 for that.
    let ctl = f.ctl("site-1");
    for d in 5..=7 {
        ctl.upload_volume(NODE, "local", &backup(100, d), 1 << 20)
            .await
            .unwrap();
    }
    for d in 1..=5 {
        let r = put(&op, &backup(100, d), &[("protected", "1")]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = put(&op, &backup(100, 6), &[("protected", "1")]).await;
    assert_eq!(
        r.message(),
        "The number of protected backups per guest is limited to 5 on storage 'local'\n"
    );
    // root holds Datastore.Allocate: unlimited.
    assert_eq!(
        put(&api, &backup(100, 6), &[("protected", "1")])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_protected_backup_is_not_deleted() {
    let f = start().await;
    let api = f.api("site-1");
    with_backups(&f).await;
    let name = backup(100, 1);
    let r = put(&api, &name, &[("protected", "1")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        api.get(&format!("{CONTENT}/{name}")).await.data()["protected"],
        1
    );
    let r = api.send("DELETE", &format!("{CONTENT}/{name}"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.data().as_str().unwrap().contains(":imgdel:100@local:"),
        "{}",
        r.body
    );
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        format!("cannot remove protected volume '{name}' on 'local'")
    );
    assert_eq!(api.get(&format!("{CONTENT}/{name}")).await.status, 200);
    put(&api, &name, &[("protected", "0")]).await;
    let r = api.send("DELETE", &format!("{CONTENT}/{name}"), &[]).await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(api.get(&format!("{CONTENT}/{name}")).await.status, 500);
}

#[tokio::test]
async fn a_prune_dry_run_marks_as_pve_does() {
    let f = start().await;
    let api = f.api("site-1");
    with_backups(&f).await;
    put(&api, &backup(100, 3), &[("protected", "1")]).await;
    let r = api
        .send("GET", PRUNE, &[("prune-backups", "keep-last=2")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = marks(&r);
    let mark = |k: &str| m.iter().find(|(v, _)| v.starts_with(k)).unwrap().1.clone();
    // VM 100: day 4 and day 2 kept (day 3 is protected and not counted), day 1 goes.
    assert_eq!(mark("100-2025_01_04"), "keep");
    assert_eq!(mark("100-2025_01_03"), "protected");
    assert_eq!(mark("100-2025_01_02"), "keep");
    assert_eq!(mark("100-2025_01_01"), "remove");
    assert_eq!(mark("100-before"), "renamed");
    assert_eq!(mark("101-"), "keep", "VM 101 is its own group");
    let renamed = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mark"] == "renamed")
        .unwrap();
    assert_eq!(
        (&renamed["type"], &renamed["vmid"]),
        (&Value::from("qemu"), &Value::from(100))
    );

    // vmid and type narrow the list; keep-all keeps everything.
    let r = api
        .send(
            "GET",
            PRUNE,
            &[("prune-backups", "keep-all=1"), ("vmid", "101")],
        )
        .await;
    assert_eq!(
        marks(&r),
        [(
            "101-2025_01_02-02_00_00.vma.zst".to_string(),
            "keep".to_string()
        )]
    );
    let r = api
        .send(
            "GET",
            PRUNE,
            &[("prune-backups", "keep-last=1"), ("type", "lxc")],
        )
        .await;
    assert_eq!(r.data(), &serde_json::json!([]));
}

#[tokio::test]
async fn prune_refusals() {
    let f = start().await;
    let api = f.api("site-1");
    // The storage's own retention: the default `local` has none.
    let r = api.get(PRUNE).await;
    assert_eq!(
        (r.status, r.message()),
        (
            500,
            "no prune-backups options configured for storage 'local'\n"
        )
    );
    let r = api
        .send(
            "GET",
            "/nodes/ml110-01/storage/local-lvm/prunebackups",
            &[("prune-backups", "keep-last=1")],
        )
        .await;
    assert_eq!(
        r.message(),
        "storage 'local-lvm' does not support backups\n"
    );
    let r = api
        .send("GET", PRUNE, &[("prune-backups", "keep-all=1,keep-last=2")])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["prune-backups"],
        "invalid format - keep-all cannot be set together with other options.\n"
    );
    let r = api
        .send("GET", PRUNE, &[("prune-backups", "keep-weekly=x")])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // keep-last=0 is allowed and means keep-all.
    let r = api
        .send("GET", PRUNE, &[("prune-backups", "keep-last=0")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // The prune task fails where the storage holds no backups.
    let r = api
        .send(
            "DELETE",
            "/nodes/ml110-01/storage/local-lvm/prunebackups",
            &[("prune-backups", "keep-last=1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":prunebackups:local-lvm:"), "{upid}");
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(
        st["exitstatus"],
        "storage 'local-lvm' does not support backups"
    );
}

#[tokio::test]
async fn a_prune_removes_what_it_marks_and_needs_its_privileges() {
    let f = start().await;
    let api = f.api("site-1");
    with_backups(&f).await;
    put(&api, &backup(100, 1), &[("protected", "1")]).await;
    let op = api.new_user("op@pve").await;
    let r = op
        .send("DELETE", PRUNE, &[("prune-backups", "keep-last=1")])
        .await;
    assert_eq!(
        r.message(),
        "Permission check failed (/storage/local, Datastore.Allocate)\n"
    );
    let r = op
        .send(
            "DELETE",
            PRUNE,
            &[("prune-backups", "keep-last=1"), ("vmid", "100")],
        )
        .await;
    assert_eq!(
        r.message(),
        "Permission check failed (/storage/local, Datastore.AllocateSpace)\n"
    );

    let r = api
        .send(
            "DELETE",
            PRUNE,
            &[("prune-backups", "keep-last=1"), ("vmid", "100")],
        )
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":prunebackups:100@local:"), "{upid}");
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let log = task_log(&api, NODE, &upid).await;
    for d in [2, 3] {
        assert!(
            log.contains(&format!("removing backup 'local:{}'", backup(100, d))),
            "{log:?}"
        );
    }
    let r = api.send("GET", CONTENT, &[("content", "backup")]).await;
    let left: Vec<&str> = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["volid"].as_str().unwrap())
        .collect();
    let want: Vec<String> = [backup(100, 1), backup(100, 4), backup(101, 2)]
        .iter()
        .map(|n| format!("local:{n}"))
        .chain(["local:backup/vzdump-qemu-100-before-upgrade.vma.zst".to_string()])
        .collect();
    let mut left: Vec<String> = left.iter().map(|s| s.to_string()).collect();
    left.sort();
    let mut want = want;
    want.sort();
    assert_eq!(left, want, "protected, newest, other VM's and renamed stay");
}

#[tokio::test]
async fn a_storage_retention_from_the_scenario_is_used() {
    let yaml = fake_proxmox::Scenario::default_yaml().replacen(
        "            content: [iso, vztmpl, backup, snippets, import]\n",
        "            content: [iso, vztmpl, backup, snippets, import]\n            prune_backups: keep-daily=2\n",
        1,
    ).replacen(
        "                used_bytes: 691863552     # file size on disk\n",
        "                used_bytes: 691863552\n              - volname: backup/vzdump-qemu-100-2025_01_05-02_00_00.vma.zst\n                size_bytes: 1048576\n                protected: true\n                notes: from the scenario\n",
        1,
    );
    let sc = fake_proxmox::Scenario::from_yaml_str(&yaml).unwrap();
    let f = start_with(sc, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    with_backups(&f).await;
    let r = api.get(PRUNE).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let removed = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["mark"] == "remove")
        .count();
    assert_eq!(removed, 2, "days 1 and 2 of VM 100: {}", r.body);
    let r = api.get(&format!("{CONTENT}/{}", backup(100, 5))).await;
    assert_eq!(r.data()["protected"], 1, "{}", r.body);
    assert_eq!(r.data()["notes"], "from the scenario");
}
