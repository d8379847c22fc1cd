//! Real volumes: the in-process fake with `FileDisks` over a temp dir, driven through its
//! HTTP API, checked on the files themselves with qemu-img, qemu-io and isoinfo.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "real_disks/support.rs"]
mod support;

use std::time::Duration;

use fake_proxmox::scenario::RemoteFileSpec;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_disk_and_its_cloud_init_drive_are_real_files_until_the_vm_is_purged() {
    let lab = start().await;
    let ctl = lab.fake.site("site-1").unwrap().control();
    let src = source_image(lab.tmp.path());
    let volid = ctl
        .place_file(NODE, "local", "import/src.qcow2", &src)
        .await
        .unwrap();
    assert_eq!(volid, "local:import/src.qcow2");
    let placed = lab.path("local", "import/src.qcow2");
    assert_eq!(placed, lab.tmp.path().join("var-lib-vz/import/src.qcow2"));
    assert_eq!(info(&placed)["format"], "qcow2");

    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu"),
            &[
                ("vmid", "100"),
                ("name", "web1"),
                ("memory", "512"),
                ("scsi0", "local-lvm:0,import-from=local:import/src.qcow2"),
                ("ide2", "local:cloudinit"),
                ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
                ("ipconfig0", "ip=192.168.11.50/24,gw=192.168.11.1"),
                ("ciuser", "ops"),
                (
                    "sshkeys",
                    "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIKey%20ops%40lab",
                ),
            ],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    // qemu-img's own progress, as PVE logs it, in place of the laid-out one (which logs
    // each of the 101 whole percents).
    let transferred: Vec<&String> = log
        .iter()
        .filter(|l| l.starts_with("transferred "))
        .collect();
    assert!((2..101).contains(&transferred.len()), "{log:#?}");
    assert_eq!(transferred[0], "transferred 0.0 B of 64.0 MiB (0.00%)");
    assert_eq!(
        transferred.last().unwrap().as_str(),
        "transferred 64.0 MiB of 64.0 MiB (100.00%)"
    );
    let disk = lab.path("local-lvm", "vm-100-disk-0");
    assert_eq!(
        disk,
        lab.tmp
            .path()
            .join("disks/site-1/ml110-01/local-lvm/vm-100-disk-0")
    );
    let di = info(&disk);
    assert_eq!(
        (di["format"].as_str(), di["virtual-size"].as_u64()),
        (Some("raw"), Some(64 * MIB))
    );
    let head = raw_bytes(&disk, lab.tmp.path(), 0, MIB + 1);
    assert!(head[..MIB as usize].iter().all(|b| *b == 0xab));
    assert_eq!(head[MIB as usize], 0);

    let ci = lab.path("local", "100/vm-100-cloudinit.qcow2");
    assert_eq!(
        ci,
        lab.tmp
            .path()
            .join("var-lib-vz/images/100/vm-100-cloudinit.qcow2")
    );
    assert_eq!(info(&ci)["format"], "qcow2");

    let (st, log) = lab
        .task(
            "PUT",
            &format!("/nodes/{NODE}/qemu/100/resize"),
            &[("disk", "scsi0"), ("size", "+64M")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    assert_eq!(info(&disk)["virtual-size"], 128 * MIB);

    let (st, log) = lab
        .task("POST", &format!("/nodes/{NODE}/qemu/100/status/start"), &[])
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    assert!(
        log.iter().any(|l| l == "generating cloud-init ISO"),
        "{log:#?}"
    );
    let iso = lab.tmp.path().join("ci.iso");
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "qcow2",
            "-O",
            "raw",
            ci.to_str().unwrap(),
            iso.to_str().unwrap(),
        ],
    );
    let bytes = std::fs::read(&iso).unwrap();
    // The primary volume descriptor's volume identifier (ISO 9660, 32 bytes at 0x8028).
    assert_eq!(
        std::str::from_utf8(&bytes[0x8028..0x8028 + 32])
            .unwrap()
            .trim_end(),
        "cidata"
    );
    for (file, kind) in [
        ("/user-data", "user"),
        ("/network-config", "network"),
        ("/meta-data", "meta"),
    ] {
        let dump = lab
            .call(
                reqwest::Method::GET,
                &format!("/nodes/{NODE}/qemu/100/cloudinit/dump"),
                &[("type", kind)],
            )
            .await;
        let inside = run("isoinfo", &["-R", "-i", iso.to_str().unwrap(), "-x", file]);
        assert_eq!(
            String::from_utf8(inside).unwrap(),
            dump.as_str().unwrap(),
            "{file}"
        );
    }
    let user = run(
        "isoinfo",
        &["-R", "-i", iso.to_str().unwrap(), "-x", "/user-data"],
    );
    assert!(
        String::from_utf8(user)
            .unwrap()
            .contains("  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey ops@lab\n")
    );
    let vendor = run(
        "isoinfo",
        &["-R", "-i", iso.to_str().unwrap(), "-x", "/vendor-data"],
    );
    assert!(vendor.is_empty());

    // A running VM takes a new user at once; `PUT …/cloudinit` writes it into the drive.
    lab.call(
        reqwest::Method::POST,
        &format!("/nodes/{NODE}/qemu/100/config"),
        &[("ciuser", "admin")],
    )
    .await;
    lab.call(
        reqwest::Method::PUT,
        &format!("/nodes/{NODE}/qemu/100/cloudinit"),
        &[],
    )
    .await;
    let user = iso_file(&ci, lab.tmp.path(), "/user-data");
    assert!(user.contains("\nuser: admin\n"), "{user}");

    let (st, _) = lab
        .task("POST", &format!("/nodes/{NODE}/qemu/100/status/stop"), &[])
        .await;
    assert_eq!(st["exitstatus"], "OK");
    let (st, log) = lab
        .task(
            "DELETE",
            &format!("/nodes/{NODE}/qemu/100"),
            &[("purge", "1")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    assert!(!disk.exists(), "{}", disk.display());
    assert!(!ci.exists(), "{}", ci.display());
    assert!(placed.exists(), "the import source is not the VM's");
    lab.fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_drive_on_thin_storage_holds_the_custom_user_snippet() {
    let lab = start().await;
    let ctl = lab.fake.site("site-1").unwrap().control();
    let snippet = lab.tmp.path().join("user.yaml");
    let user_data = "#cloud-config\nruncmd:\n  - touch /made-by-snippet\n";
    std::fs::write(&snippet, user_data).unwrap();
    ctl.place_file(NODE, "local", "snippets/user.yaml", &snippet)
        .await
        .unwrap();
    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu"),
            &[
                ("vmid", "103"),
                ("name", "win"),
                ("citype", "configdrive2"),
                ("cicustom", "user=local:snippets/user.yaml"),
                ("scsi1", "local-lvm:cloudinit"),
                ("net0", "virtio=BC:24:11:00:00:03,bridge=vmbr0"),
                ("ipconfig0", "ip=dhcp"),
                ("start", "1"),
            ],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    lab.fake
        .site("site-1")
        .unwrap()
        .control()
        .advance_clock(Duration::from_secs(5))
        .await
        .unwrap();
    let status = lab
        .call(
            reqwest::Method::GET,
            &format!("/nodes/{NODE}/qemu/103/status/current"),
            &[],
        )
        .await;
    assert_eq!(status["status"], "running");
    let ci = lab.path("local-lvm", "vm-103-cloudinit");
    assert_eq!(info(&ci)["format"], "raw");
    assert_eq!(iso_label(&ci, lab.tmp.path()), "config-2");
    let dir = lab.tmp.path();
    assert_eq!(iso_file(&ci, dir, "/openstack/latest/user_data"), user_data);
    let network = lab
        .call(
            reqwest::Method::GET,
            &format!("/nodes/{NODE}/qemu/103/cloudinit/dump"),
            &[("type", "network")],
        )
        .await;
    assert_eq!(
        iso_file(&ci, dir, "/openstack/content/0000"),
        network.as_str().unwrap()
    );
    let meta = iso_file(&ci, dir, "/openstack/latest/meta_data.json");
    assert!(
        meta.contains("\"network_config\": { \"content_path\": \"/content/0000\" }"),
        "{meta}"
    );
    lab.fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_copies_the_local_file_the_scenario_names_and_a_clone_copies_its_import() {
    const URL: &str = "https://cloud-images.example/src.qcow2";
    let lab = start_with(|sc, dir| {
        let src = source_image(dir);
        let size = std::fs::metadata(&src).unwrap().len();
        sc.sites[0].remote_files.push(RemoteFileSpec {
            url: URL.into(),
            size_bytes: size,
            file: Some(src),
        });
    })
    .await;
    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/storage/local/download-url"),
            &[
                ("url", URL),
                ("content", "import"),
                ("filename", "dl.qcow2"),
            ],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    let dl = lab.path("local", "import/dl.qcow2");
    assert_eq!(dl, lab.tmp.path().join("var-lib-vz/import/dl.qcow2"));
    let di = info(&dl);
    assert_eq!(
        (di["format"].as_str(), di["virtual-size"].as_u64()),
        (Some("qcow2"), Some(64 * MIB))
    );
    // The volume's size is the image's, so a disk made from it holds it.
    let content = lab
        .call(
            reqwest::Method::GET,
            &format!("/nodes/{NODE}/storage/local/content"),
            &[],
        )
        .await;
    let entry = content
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["volid"] == "local:import/dl.qcow2")
        .unwrap()
        .clone();
    assert_eq!(entry["size"], 64 * MIB, "{entry}");

    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu"),
            &[
                ("vmid", "104"),
                (
                    "scsi0",
                    "local:0,import-from=local:import/dl.qcow2,format=qcow2",
                ),
            ],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu/104/clone"),
            &[("newid", "105"), ("storage", "local-lvm"), ("full", "1")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    let copy = lab.path("local-lvm", "vm-105-disk-0");
    assert_eq!(info(&copy)["format"], "raw");
    let head = raw_bytes(&copy, lab.tmp.path(), 0, MIB + 1);
    assert!(head[..MIB as usize].iter().all(|b| *b == 0xab));
    assert_eq!(head[MIB as usize], 0);
    assert_eq!(
        info(&lab.path("local", "104/vm-104-disk-0.qcow2"))["format"],
        "qcow2"
    );
    lab.fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_source_fails_the_create_with_qemu_imgs_error_and_leaves_nothing() {
    let lab = start().await;
    let ctl = lab.fake.site("site-1").unwrap().control();
    let bad = lab.tmp.path().join("bad.qcow2");
    std::fs::write(&bad, b"QFI\xfbnot really a qcow2 image").unwrap();
    ctl.place_file(NODE, "local", "import/bad.qcow2", &bad)
        .await
        .unwrap();
    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu"),
            &[
                ("vmid", "101"),
                ("scsi0", "local-lvm:0,import-from=local:import/bad.qcow2"),
            ],
        )
        .await;
    let exit = st["exitstatus"].as_str().unwrap();
    let source = lab.path("local", "import/bad.qcow2");
    let target = lab.path("local-lvm", "vm-101-disk-0");
    assert_eq!(
        exit,
        format!(
            "unable to create VM 101 - copy failed: command '/usr/bin/qemu-img convert -p -n -f qcow2 -O raw {} {}' failed: exit code 1",
            source.display(),
            target.display()
        )
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("qemu-img: Could not open") && l.contains("bad.qcow2")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("successfully created disk")),
        "{log:#?}"
    );
    assert!(!target.exists());
    let state = ctl.state().await.unwrap();
    let site = &state["sites"][0];
    assert!(
        site["vms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["vmid"] != 101)
    );
    let lvm = site["nodes"][0]["storages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "local-lvm")
        .unwrap();
    assert!(lvm["volumes"].as_array().unwrap().is_empty(), "{lvm}");
    lab.fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_drops_the_previous_worlds_files_and_places_the_scenarios_again() {
    let lab = start().await;
    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu"),
            &[("vmid", "102"), ("scsi0", "local-lvm:1")],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    let disk = lab.path("local-lvm", "vm-102-disk-0");
    assert_eq!(info(&disk)["virtual-size"], 1024 * MIB);
    let iso = lab.path("local", "iso/ubuntu-22.04-cloud.img");
    assert_eq!(std::fs::metadata(&iso).unwrap().len(), 2_361_393_152);
    lab.fake
        .site("site-1")
        .unwrap()
        .control()
        .reset()
        .await
        .unwrap();
    assert!(!disk.exists());
    assert!(iso.exists(), "the scenario's volumes are placed again");
    lab.fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_image_is_a_real_file_a_vm_can_import() {
    let lab = start().await;
    let src = source_image(lab.tmp.path());
    let bytes = std::fs::read(&src).unwrap();
    let upid = lab
        .upload("local", "import", "up.qcow2", bytes.clone())
        .await;
    let (st, log) = lab.wait(&upid).await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    let placed = lab.path("local", "import/up.qcow2");
    assert_eq!(placed, lab.tmp.path().join("var-lib-vz/import/up.qcow2"));
    assert_eq!(
        std::fs::read(&placed).unwrap(),
        bytes,
        "the uploaded bytes, unchanged"
    );
    assert_eq!(info(&placed)["format"], "qcow2");

    let (st, log) = lab
        .task(
            "POST",
            &format!("/nodes/{NODE}/qemu"),
            &[
                ("vmid", "101"),
                ("memory", "512"),
                ("scsi0", "local-lvm:0,import-from=local:import/up.qcow2"),
            ],
        )
        .await;
    assert_eq!(st["exitstatus"], "OK", "{log:#?}");
    let disk = lab.path("local-lvm", "vm-101-disk-0");
    assert_eq!(info(&disk)["virtual-size"].as_u64(), Some(64 * MIB));
}
