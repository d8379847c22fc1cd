//! The other storage methods of the VM subset: copying a volume
//! (`POST …/content/{volume}`), `import-metadata`, `file-restore/list|download` and
//! `oci-registry-pull`, each with PVE's success and refusals.

use crate::common::*;

const NODE: &str = "ml110-01";
const LOCAL: &str = "/nodes/ml110-01/storage/local";

#[tokio::test]
async fn a_volume_is_copied_by_an_imgcopy_task() {
    let f = start().await;
    let api = f.api("site-1").login("root@pam", "harness").await;
    let iso = "iso/ubuntu-22.04-cloud.img";
    let r = api
        .post(
            &format!("{LOCAL}/content/{iso}"),
            &[("target", "iso/copy.img")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":imgcopy::root@pam:"), "{upid}");
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let log = task_log(&api, NODE, &upid).await;
    assert_eq!(log[0], format!("DEBUG: starting worker {upid}"));
    let r = api
        .get(&format!("{LOCAL}/content/local:iso/copy.img"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data()["size"], 2361393152u64);

    // Copying onto an existing file, or a backup (no transfer format), fails in the task.
    let r = api
        .post(
            &format!("{LOCAL}/content/{iso}"),
            &[("target", "iso/copy.img")],
        )
        .await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        "file '/var/lib/vz/template/iso/copy.img' already exists"
    );
    let ctl = f.ctl("site-1");
    let b = "backup/vzdump-qemu-100-2025_01_01-00_00_00.vma.zst";
    ctl.upload_volume(NODE, "local", b, 1 << 20).await.unwrap();
    let r = api
        .post(
            &format!("{LOCAL}/content/{b}"),
            &[("target", "backup/x.vma.zst")],
        )
        .await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        "cannot migrate from storage type 'dir' to 'dir'"
    );
    let r = api
        .post(
            &format!("{LOCAL}/content/iso/none.iso"),
            &[("target", "iso/y.iso")],
        )
        .await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_ne!(st["exitstatus"], "OK");
}

#[tokio::test]
async fn a_copy_is_root_only_and_stays_on_its_storage() {
    let f = start().await;
    let api = f.api("site-1");
    let root = api.login("root@pam", "harness").await;
    let iso = "iso/ubuntu-22.04-cloud.img";
    let r = root
        .post(
            &format!("{LOCAL}/content/{iso}"),
            &[("target", "local-lvm:vm-100-disk-0")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["volume"],
        "storage ID mismatch (local-lvm != local)\n"
    );
    // A method without permissions is root@pam's: a ticket of root@pam may, a token of
    // root@pam is not root@pam (its user is `root@pam!harness`), nor is an Administrator.
    let r = root
        .post(
            &format!("{LOCAL}/content/{iso}"),
            &[("target", "iso/b.img")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(
            &format!("{LOCAL}/content/{iso}"),
            &[("target", "iso/c.img")],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.message(), "Permission check failed (user != root@pam)\n");
    let op = api.new_user("op@pve").await;
    api.grant("/", "Administrator", "op@pve").await;
    let r = op
        .post(
            &format!("{LOCAL}/content/{iso}"),
            &[("target", "iso/d.img")],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.message(), "Permission check failed (user != root@pam)\n");
}

#[tokio::test]
async fn import_metadata_describes_an_ova() {
    let f = start().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    ctl.upload_volume(NODE, "local", "import/web-server.ova", 8 << 30)
        .await
        .unwrap();
    let r = api
        .send(
            "GET",
            &format!("{LOCAL}/import-metadata"),
            &[("volume", "import/web-server.ova")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.data();
    assert_eq!(d["type"], "vm");
    assert_eq!(d["source"], "import/web-server.ova");
    assert_eq!(d["create-args"]["name"], "web-server");
    assert_eq!(d["create-args"]["boot"], "order=scsi0");
    assert_eq!(
        d["disks"]["scsi0"]["volid"],
        "local:import/web-server.ova/web-server-disk1.vmdk"
    );
    assert_eq!(d["disks"]["scsi0"]["size"], 8u64 << 30);
    assert_eq!(d["warnings"][0]["type"], "ova-needs-extracting");

    // An OVF needs its disk beside it.
    ctl.upload_volume(NODE, "local", "import/db.ovf", 4096)
        .await
        .unwrap();
    let get = |v: &'static str| {
        let api = api.clone();
        async move {
            api.send("GET", &format!("{LOCAL}/import-metadata"), &[("volume", v)])
                .await
        }
    };
    let r = get("import/db.ovf").await;
    assert_eq!(
        r.message(),
        "error parsing db-disk1.vmdk, file seems not to exist at /var/lib/vz/import/db-disk1.vmdk\n"
    );
    ctl.upload_volume(NODE, "local", "import/db-disk1.vmdk", 2 << 30)
        .await
        .unwrap();
    let r = get("import/db.ovf").await;
    assert_eq!(
        r.data()["disks"]["scsi0"]["volid"],
        "local:import/db-disk1.vmdk"
    );
    assert_eq!(r.data()["warnings"], serde_json::json!([]));

    // Refusals: not an import volume, not OVA/OVF, missing, a block storage.
    let r = get("iso/ubuntu-22.04-cloud.img").await;
    assert_eq!(
        (r.status, r.message()),
        (500, "invalid content type 'iso'\n")
    );
    let r = get("import/db-disk1.vmdk").await;
    assert_eq!(r.message(), "invalid format\n");
    let r = get("import/gone.ova").await;
    assert_eq!(
        r.message(),
        "command 'tar -xO --wildcards --occurrence=1 -f /var/lib/vz/import/gone.ova '*.ovf'' failed: exit code 2\n"
    );
    let r = api
        .send(
            "GET",
            "/nodes/ml110-01/storage/local-lvm/import-metadata",
            &[("volume", "import/x.ova")],
        )
        .await;
    assert_eq!(
        r.message(),
        "unable to parse lvm volume name 'import/x.ova'\n"
    );
}

#[tokio::test]
async fn file_restore_is_for_pbs_storages_only() {
    let f = start().await;
    let api = f.api("site-1");
    for path in ["list", "download"] {
        let r = api
            .send(
                "GET",
                &format!("{LOCAL}/file-restore/{path}"),
                &[
                    ("volume", "vzdump-qemu-100-2025_01_01-00_00_00.vma.zst"),
                    ("filepath", "/"),
                ],
            )
            .await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(
            r.json["errors"]["storage"],
            "Only PBS storages supported for file-restore."
        );
    }
    let r = api
        .send(
            "GET",
            &format!("{LOCAL}/file-restore/list"),
            &[("volume", "iso/ubuntu-22.04-cloud.img"), ("filepath", "/")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "unable to parse directory volume name 'backup/iso/ubuntu-22.04-cloud.img'\n"
    );
    let r = api
        .send(
            "GET",
            &format!("{LOCAL}/file-restore/list"),
            &[
                ("volume", "local:iso/ubuntu-22.04-cloud.img"),
                ("filepath", "/"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "unable to use volume local:iso/ubuntu-22.04-cloud.img - content type needs to be 'backup'\n"
    );
    let r = api
        .send(
            "GET",
            &format!("{LOCAL}/file-restore/list"),
            &[("volume", "other:backup/x.vma"), ("filepath", "/")],
        )
        .await;
    assert_eq!(
        r.json["errors"]["volume"],
        "storage ID mismatch (other != local)."
    );
}

#[tokio::test]
async fn an_oci_pull_fails_as_on_a_node_without_the_registry() {
    let f = start().await;
    let api = f.api("site-1");
    let pull = |form: Vec<(&'static str, &'static str)>| {
        let api = api.clone();
        async move { api.post(&format!("{LOCAL}/oci-registry-pull"), &form).await }
    };
    let r = pull(vec![("reference", "alpine:latest")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(
        upid.contains(":ociregistrypull:alpine_latest.tar:"),
        "{upid}"
    );
    let st = wait_task(&f, &api, NODE, &upid).await;
    let exit = st["exitstatus"].as_str().unwrap();
    assert!(
        exit.starts_with("command 'skopeo copy docker://alpine:latest oci-archive:/var/lib/vz/template/cache/alpine_latest.tar.tmp."),
        "{exit}"
    );
    assert!(exit.ends_with("' failed: exit code 1"), "{exit}");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log.iter()
            .any(|l| l.contains("pinging container registry registry-1.docker.io")),
        "{log:?}"
    );
    // Nothing arrived.
    let r = api
        .get(&format!("{LOCAL}/content/vztmpl/alpine_latest.tar"))
        .await;
    assert_eq!(r.status, 500);

    // Refusals: the reference's pattern, the storage type, the content type, an existing file.
    let r = pull(vec![("reference", "alpine")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api
        .post(
            "/nodes/ml110-01/storage/local-lvm/oci-registry-pull",
            &[("reference", "alpine:latest")],
        )
        .await;
    assert_eq!(
        r.message(),
        "can't upload to storage type 'lvmthin', not a file based storage!\n"
    );
    let ctl = f.ctl("site-1");
    ctl.upload_volume(NODE, "local", "vztmpl/debian.tar", 1 << 20)
        .await
        .unwrap();
    let r = pull(vec![
        ("reference", "ghcr.io/x/debian:12"),
        ("filename", "debian"),
    ])
    .await;
    assert_eq!(
        r.message(),
        "refusing to override existing file 'debian.tar'\n"
    );
    let r = f
        .api("site-2")
        .post(
            "/nodes/r630-01/storage/ceph-fs/oci-registry-pull",
            &[("reference", "alpine:latest")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn an_oci_pull_needs_template_and_network_privileges() {
    let f = start().await;
    let api = f.api("site-1");
    let op = api.new_user("op@pve").await;
    let path = format!("{LOCAL}/oci-registry-pull");
    let r = op.post(&path, &[("reference", "alpine:latest")]).await;
    assert_eq!(
        r.message(),
        "Permission check failed (/storage/local, Datastore.AllocateTemplate)\n"
    );
    api.grant("/storage/local", "PVEDatastoreAdmin", "op@pve")
        .await;
    let r = op.post(&path, &[("reference", "alpine:latest")]).await;
    assert_eq!(
        r.message(),
        "Permission check failed (/nodes/ml110-01, Sys.AccessNetwork)\n"
    );
}
