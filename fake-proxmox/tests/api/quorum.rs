//! Quorum loss: with too few nodes online the cluster refuses what needs `/etc/pve` — with
//! `check_cfs_quorum`'s text where PVE checks first, with the read-only file system's
//! otherwise — while reads, logins and node-local work go on; it recovers with quorum.

use crate::common::*;

#[tokio::test]
async fn without_quorum_writes_fail_as_pve_fails_them_and_reads_go_on() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "200"), ("scsi0", "local-lvm:1")],
    )
    .await;
    let ctl = f.ctl("site-1");
    // One of three down: still quorate.
    ctl.set_node_online("ml110-02", false).await.unwrap();
    let st = api.get("/cluster/status").await;
    let cluster = &st.data().as_array().unwrap()[0];
    assert_eq!(cluster["quorate"], 1, "{}", st.body);
    // Two of three down: no quorum.
    ctl.set_node_online("ml110-03", false).await.unwrap();
    let st = api.get("/cluster/status").await;
    assert_eq!(st.data().as_array().unwrap()[0]["quorate"], 0);

    let r = api.post("/nodes/ml110-01/qemu", &[("vmid", "201")]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "cluster not ready - no quorum?\n");
    let r = api.post("/nodes/ml110-01/qemu/200/status/start", &[]).await;
    assert_eq!(r.message(), "cluster not ready - no quorum?\n");
    let r = api
        .send(
            "PUT",
            "/nodes/ml110-01/qemu/200/config",
            &[("memory", "1024")],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(
        r.message()
            .starts_with("unable to open file '/etc/pve/nodes/ml110-01/qemu-server/200.conf.tmp."),
        "{}",
        r.message()
    );
    assert!(r.message().ends_with("' - Permission denied\n"));
    let r = api.post("/access/users", &[("userid", "joe@pve")]).await;
    assert!(r.message().contains("/etc/pve/user.cfg.tmp."), "{}", r.body);

    // Reads, a login and node-local work keep working.
    assert_eq!(api.get("/nodes/ml110-01/qemu/200/config").await.status, 200);
    assert_eq!(api.get("/cluster/resources").await.status, 200);
    let ticket = api.login("root@pam", "harness").await;
    assert_eq!(ticket.get("/version").await.status, 200);
    let r = api
        .post(
            "/nodes/ml110-01/storage/local-lvm/content",
            &[
                ("vmid", "200"),
                ("filename", "vm-200-disk-5"),
                ("size", "1G"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Quorum back: the same create goes through.
    ctl.set_node_online("ml110-02", true).await.unwrap();
    let st = create_vm(&f, &api, "ml110-01", &[("vmid", "201")]).await;
    assert_eq!(st["exitstatus"], "OK");
}
