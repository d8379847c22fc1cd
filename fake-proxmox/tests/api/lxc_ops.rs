//! Containers copied and moved: `clone` (full copies, linked clones of a template),
//! `migrate` (the precondition, offline, restart mode) and `move_volume` (to a storage or
//! to another container), with pve-container's refusals.

use serde_json::{Value, json};

use crate::common::*;
use crate::lxc::{NODE, create_ct, ct, task, volumes_of};

async fn lvm_volumes(api: &Api, node: &str, storage: &str, vmid: u64) -> Vec<String> {
    let c = api
        .get(&format!("/nodes/{node}/storage/{storage}/content"))
        .await;
    volumes_of(c.data(), vmid)
}

fn upid_of(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_container_is_cloned_full_or_linked_from_its_template() {
    let f = start().await;
    let api = f.api("site-1");
    create_ct(
        &f,
        &api,
        &[
            ("vmid", "240"),
            ("hostname", "base"),
            ("storage", "local-lvm"),
            ("rootfs", "local-lvm:4"),
            ("mp0", "local-lvm:1,mp=/srv"),
            ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
        ],
    )
    .await;
    let r = api
        .send("PUT", &ct("/240/firewall/options"), &[("enable", "1")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let src = api.get(&ct("/240/config")).await.data().clone();

    // A full copy (a container's default), on another name.
    let done = task(
        &f,
        &api,
        "POST",
        &ct("/240/clone"),
        &[("newid", "241"), ("hostname", "copy")],
    )
    .await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    assert_eq!(done["type"], "vzclone");
    assert_eq!(done["id"], "240");
    let log = task_log(&api, NODE, done["upid"].as_str().unwrap()).await;
    assert!(
        log.iter()
            .any(|l| l == "creating a clone of container 240 with ID 241"),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l == "create full clone of mountpoint rootfs (local-lvm:vm-240-disk-0)"),
        "{log:#?}"
    );
    let c = api.get(&ct("/241/config")).await.data().clone();
    assert_eq!(c["hostname"], "copy");
    assert_eq!(c["rootfs"], "local-lvm:vm-241-disk-0,size=4G");
    assert_eq!(c["mp0"], "local-lvm:vm-241-disk-1,mp=/srv,size=1G");
    assert_ne!(c["net0"], src["net0"], "a clone gets a new MAC");
    assert!(c.get("lock").is_none(), "{c}");
    assert!(
        api.get(&ct("/240/config"))
            .await
            .data()
            .get("lock")
            .is_none()
    );
    let fw = api.get(&ct("/241/firewall/options")).await;
    assert_eq!(fw.data()["enable"], 1, "the firewall file is copied");
    assert_eq!(
        lvm_volumes(&api, NODE, "local-lvm", 241).await,
        ["local-lvm:vm-241-disk-0", "local-lvm:vm-241-disk-1"]
    );

    // Refusals before the task.
    let r = api.post(&ct("/240/clone"), &[("newid", "241")]).await;
    assert_eq!(r.message(), "CT 241 already exists on node 'ml110-01'\n");
    let r = api
        .post(&ct("/240/clone"), &[("newid", "242"), ("full", "0")])
        .await;
    // The keys are checked sorted: `mp0` (disk 1) before `rootfs`.
    assert_eq!(
        r.message(),
        "Linked clone feature for 'local-lvm:vm-240-disk-1' is not available\n"
    );
    let r = api
        .post(
            &ct("/240/clone"),
            &[("newid", "242"), ("full", "0"), ("storage", "local-lvm")],
        )
        .await;
    assert_eq!(
        r.message(),
        "parameter 'storage' not allowed for linked clones\n"
    );
    let r = api
        .post(&ct("/240/clone"), &[("newid", "242"), ("snapname", "nope")])
        .await;
    assert_eq!(r.message(), "snapshot 'nope' does not exist\n");
    let r = api
        .post(&ct("/240/clone"), &[("newid", "242"), ("target", "nope")])
        .await;
    assert_eq!(r.message(), "no such cluster node 'nope'\n");
    let done = task(&f, &api, "POST", &ct("/240/status/start"), &[]).await;
    assert_eq!(done["exitstatus"], "OK");
    let r = api.post(&ct("/240/clone"), &[("newid", "242")]).await;
    assert_eq!(
        r.message(),
        "Full clone of a running container is only possible from a snapshot\n"
    );
    let done = task(&f, &api, "POST", &ct("/240/status/stop"), &[]).await;
    assert_eq!(done["exitstatus"], "OK");

    // From a template: linked by default on LVM-thin, each volume a thin clone.
    let done = task(&f, &api, "POST", &ct("/240/template"), &[]).await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let done = task(&f, &api, "POST", &ct("/240/clone"), &[("newid", "243")]).await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let log = task_log(&api, NODE, done["upid"].as_str().unwrap()).await;
    assert!(
        log.iter()
            .any(|l| l == "create linked clone of mount point rootfs (local-lvm:base-240-disk-0)"),
        "{log:#?}"
    );
    let c = api.get(&ct("/243/config")).await.data().clone();
    assert_eq!(c["rootfs"], "local-lvm:vm-243-disk-0,size=4G");
    assert!(c.get("template").is_none(), "{c}");

    // The source is locked `disk` while the task runs; the new config `create`.
    let r = api.post(&ct("/240/clone"), &[("newid", "244")]).await;
    let upid = upid_of(&r);
    assert_eq!(api.get(&ct("/240/config")).await.data()["lock"], "disk");
    assert_eq!(api.get(&ct("/244/config")).await.data()["lock"], "create");
    let again = api.post(&ct("/240/clone"), &[("newid", "245")]).await;
    assert_eq!(again.message(), "CT is locked (disk)\n");
    assert_eq!(wait_task(&f, &api, NODE, &upid).await["exitstatus"], "OK");
}

#[tokio::test]
async fn a_bind_mount_is_not_cloned() {
    let f = start().await;
    // Only root@pam itself mounts host paths.
    let api = f.api("site-1").login("root@pam", "harness").await;
    create_ct(
        &f,
        &api,
        &[
            ("vmid", "246"),
            ("rootfs", "local-lvm:4"),
            ("mp0", "/srv/share,mp=/share"),
        ],
    )
    .await;
    let r = api.post(&ct("/246/clone"), &[("newid", "247")]).await;
    assert_eq!(
        r.message(),
        "unable to clone mountpoint 'mp0' (type bind)\n"
    );
}

#[tokio::test]
async fn migration_lists_the_nodes_and_moves_a_stopped_container() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    create_ct(&f, &api, &[("vmid", "250"), ("storage", "local-lvm")]).await;
    let pre = api.get(&ct("/250/migrate")).await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    assert_eq!(
        pre.data(),
        &json!({"running": 0, "allowed-nodes": ["ml110-02", "ml110-03"], "not-allowed-nodes": {}})
    );

    let r = api.post(&ct("/250/migrate"), &[("target", NODE)]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["target"], "target is local node.");
    let r = api.post(&ct("/250/migrate"), &[("target", "nope")]).await;
    assert_eq!(r.message(), "no such cluster node 'nope'\n");
    let r = api
        .post(
            &ct("/250/migrate"),
            &[("target", "ml110-02"), ("target-storage", "local")],
        )
        .await;
    assert_eq!(
        r.message(),
        "storage 'local' does not support CT rootdirs\n"
    );

    // ml110-03 has no `local-lvm`: `prepare` fails the task, the container stays.
    let r = api
        .post(&ct("/250/migrate"), &[("target", "ml110-03")])
        .await;
    let upid = upid_of(&r);
    let done = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(done["exitstatus"], "migration aborted");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log.iter().any(|l| l
            == "ERROR: migration aborted (duration 00:00:00): storage 'local-lvm' is not available on node 'ml110-03'"),
        "{log:#?}"
    );
    assert!(
        api.get(&ct("/250/config"))
            .await
            .data()
            .get("lock")
            .is_none()
    );

    // A storage map sends it to `other-lvm` there.
    let r = api
        .post(
            &ct("/250/migrate"),
            &[("target", "ml110-03"), ("target-storage", "other-lvm")],
        )
        .await;
    let upid = upid_of(&r);
    assert!(upid.contains(":vzmigrate:250:"), "{upid}");
    assert_eq!(api.get(&ct("/250/config")).await.data()["lock"], "migrate");
    let done = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let log = task_log(&api, NODE, &upid).await;
    for line in [
        "starting migration of CT 250 to node 'ml110-03' (192.168.11.13)",
        "found local volume 'local-lvm:vm-250-disk-0' (in current VM config)",
        "volume 'local-lvm:vm-250-disk-0' is 'other-lvm:vm-250-disk-0' on the target",
    ] {
        assert!(log.iter().any(|l| l == line), "{line}: {log:#?}");
    }
    assert_eq!(api.get(&ct("/250/config")).await.status, 500);
    let c = api.get("/nodes/ml110-03/lxc/250/config").await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(c.data()["rootfs"], "other-lvm:vm-250-disk-0,size=4G");
    assert_eq!(
        lvm_volumes(&api, "ml110-03", "other-lvm", 250).await,
        ["other-lvm:vm-250-disk-0"]
    );
    assert!(lvm_volumes(&api, NODE, "local-lvm", 250).await.is_empty());
}

#[tokio::test]
async fn a_running_container_migrates_only_in_restart_mode() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    create_ct(
        &f,
        &api,
        &[("vmid", "251"), ("storage", "local-lvm"), ("start", "1")],
    )
    .await;
    let pre = api.get(&ct("/251/migrate")).await;
    assert_eq!(pre.data()["running"], 1);
    let r = api
        .post(&ct("/251/migrate"), &[("target", "ml110-02")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "can't migrate running container without --online or --restart\n"
    );
    // `online` passes the API, but `prepare` has no live migration.
    let r = api
        .post(
            &ct("/251/migrate"),
            &[("target", "ml110-02"), ("online", "1")],
        )
        .await;
    let upid = upid_of(&r);
    let done = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(done["exitstatus"], "migration aborted");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log.iter().any(|l| l
            == "ERROR: migration aborted (duration 00:00:00): lxc live migration is currently not implemented"),
        "{log:#?}"
    );
    let st = api.get(&ct("/251/status/current")).await;
    assert_eq!(st.data()["status"], "running");

    let r = api
        .post(
            &ct("/251/migrate"),
            &[("target", "ml110-02"), ("restart", "1")],
        )
        .await;
    let upid = upid_of(&r);
    // Shut down first, then moved, then started there.
    let st = api.get(&ct("/251/status/current")).await;
    assert_eq!(st.data()["status"], "stopped");
    let done = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let log = task_log(&api, NODE, &upid).await;
    for line in ["shutdown CT 251", "start container on target node"] {
        assert!(log.iter().any(|l| l == line), "{line}: {log:#?}");
    }
    let st = api.get("/nodes/ml110-02/lxc/251/status/current").await;
    assert_eq!(st.status, 200, "{}", st.body);
    assert_eq!(st.data()["status"], "running");
}

#[tokio::test]
async fn a_volume_moves_to_another_storage_or_container() {
    let f = start().await;
    let api = f.api("site-1");
    create_ct(
        &f,
        &api,
        &[
            ("vmid", "260"),
            ("rootfs", "local-lvm:4"),
            ("mp0", "local-lvm:1,mp=/data"),
        ],
    )
    .await;
    create_ct(&f, &api, &[("vmid", "261"), ("storage", "local-lvm")]).await;

    let r = api
        .post(
            &ct("/260/move_volume"),
            &[
                ("volume", "mp0"),
                ("storage", "local-lvm"),
                ("target-vmid", "261"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "either set storage or target-vmid, but not both\n"
    );
    let r = api
        .post(&ct("/260/move_volume"), &[("volume", "mp0")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["storage"],
        "both 'storage' and 'target-vmid' missing, either needs to be set"
    );
    let r = api
        .post(
            &ct("/260/move_volume"),
            &[("volume", "rootfs"), ("target-vmid", "261")],
        )
        .await;
    assert_eq!(r.message(), "Cannot move to/from 'rootfs'\n");
    let r = api
        .post(
            &ct("/260/move_volume"),
            &[("volume", "mp0"), ("target-vmid", "269")],
        )
        .await;
    assert_eq!(r.message(), "could not find CT 269\n");

    // To the other container: renamed for it, gone from the source.
    let done = task(
        &f,
        &api,
        "POST",
        &ct("/260/move_volume"),
        &[
            ("volume", "mp0"),
            ("target-vmid", "261"),
            ("target-volume", "mp1"),
        ],
    )
    .await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    assert_eq!(done["type"], "move_volume");
    assert_eq!(done["id"], "260-mp0>261-mp1");
    let src = api.get(&ct("/260/config")).await.data().clone();
    assert!(src.get("mp0").is_none(), "{src}");
    let dst = api.get(&ct("/261/config")).await.data().clone();
    assert_eq!(dst["mp1"], "local-lvm:vm-261-disk-1,mp=/data,size=1G");

    // To a storage: a copy; the old volume stays as `unused0`.
    let r = api
        .post(
            &ct("/261/move_volume"),
            &[("volume", "mp1"), ("storage", "local-lvm")],
        )
        .await;
    let upid = upid_of(&r);
    assert_eq!(api.get(&ct("/261/config")).await.data()["lock"], "disk");
    let done = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let c: Value = api.get(&ct("/261/config")).await.data().clone();
    assert_eq!(c["mp1"], "local-lvm:vm-261-disk-2,mp=/data,size=1G");
    assert_eq!(c["unused0"], "local-lvm:vm-261-disk-1");
    assert!(c.get("lock").is_none(), "{c}");

    // A running container's volumes stay; an unused volume does not move to a storage.
    let r = api
        .post(
            &ct("/261/move_volume"),
            &[("volume", "unused0"), ("storage", "local")],
        )
        .await;
    assert_eq!(
        r.message(),
        "cannot move volume 'unused0', only configured volumes can be moved to another storage\n"
    );
    let done = task(&f, &api, "POST", &ct("/261/status/start"), &[]).await;
    assert_eq!(done["exitstatus"], "OK");
    let r = api
        .post(
            &ct("/261/move_volume"),
            &[("volume", "rootfs"), ("storage", "local")],
        )
        .await;
    assert_eq!(r.message(), "cannot move volumes of a running container\n");
}
