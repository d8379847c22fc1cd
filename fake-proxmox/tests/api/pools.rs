//! Resource pools (`/pools`, the deprecated `/pools/{poolid}`): members, the one-pool rule
//! for VMs, nesting, and PVE's refusals.

use serde_json::json;

use crate::common::*;

async fn ok(r: Resp) -> Resp {
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

#[tokio::test]
async fn a_pool_holds_vms_and_storages_and_is_deleted_once_empty() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api
        .post("/pools", &[("poolid", "prod"), ("comment", "Production")])
        .await)
    .await;
    let dup = api.post("/pools", &[("poolid", "prod")]).await;
    assert_eq!(
        dup.message(),
        "create pool failed: pool 'prod' already exists\n"
    );
    let list = ok(api.get("/pools").await).await;
    assert_eq!(
        list.data(),
        &json!([{"poolid": "prod", "comment": "Production"}])
    );

    // A VM created into the pool; a storage added.
    let created = create_vm(
        &f,
        &api,
        "ml110-01",
        &[
            ("vmid", "100"),
            ("name", "web"),
            ("memory", "512"),
            ("pool", "prod"),
        ],
    )
    .await;
    assert_eq!(created["exitstatus"], "OK");
    ok(api
        .send(
            "PUT",
            "/pools",
            &[("poolid", "prod"), ("storage", "local-lvm")],
        )
        .await)
    .await;
    let one = ok(api.send("GET", "/pools", &[("poolid", "prod")]).await).await;
    let pool = &one.data()[0];
    assert_eq!(pool["poolid"], "prod");
    assert_eq!(pool["comment"], "Production");
    let members = pool["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{pool}");
    assert_eq!(members[0]["id"], "qemu/100");
    assert_eq!(members[0]["vmid"], 100);
    assert_eq!(members[0]["type"], "qemu");
    assert_eq!(members[0]["node"], "ml110-01");
    assert_eq!(members[0]["name"], "web");
    assert_eq!(members[0]["status"], "stopped");
    assert_eq!(members[1]["id"], "storage/ml110-01/local-lvm");
    assert_eq!(members[1]["type"], "storage");
    assert_eq!(members[1]["plugintype"], "lvmthin");
    let only_vms = ok(api
        .send("GET", "/pools", &[("poolid", "prod"), ("type", "qemu")])
        .await)
    .await;
    assert_eq!(only_vms.data()[0]["members"].as_array().unwrap().len(), 1);
    let deprecated = ok(api.get("/pools/prod").await).await;
    assert_eq!(deprecated.data()["members"], pool["members"]);

    // cluster/resources lists the pool and names it on its VM.
    let res = ok(api.get("/cluster/resources").await).await;
    let rows = res.data().as_array().unwrap();
    assert_eq!(
        rows[0],
        json!({"id": "/pool/prod", "pool": "prod", "type": "pool"})
    );
    let vm = rows.iter().find(|r| r["id"] == "qemu/100").unwrap();
    assert_eq!(vm["pool"], "prod");

    let again = api
        .send("PUT", "/pools", &[("poolid", "prod"), ("vms", "100")])
        .await;
    assert_eq!(
        again.message(),
        "update pools failed: VM 100 is already a pool member\n"
    );
    let busy = api.send("DELETE", "/pools", &[("poolid", "prod")]).await;
    assert_eq!(busy.status, 500);
    assert_eq!(
        busy.message(),
        "delete pool failed: pool 'prod' is not empty (contains VM 100)\n"
    );
    ok(api
        .send(
            "PUT",
            "/pools",
            &[("poolid", "prod"), ("vms", "100"), ("delete", "1")],
        )
        .await)
    .await;
    let busy = api.send("DELETE", "/pools/prod", &[]).await;
    assert_eq!(
        busy.message(),
        "delete pool failed: pool 'prod' is not empty (contains storage 'local-lvm')\n"
    );
    let not_member = api
        .send("PUT", "/pools/prod", &[("vms", "100"), ("delete", "1")])
        .await;
    assert_eq!(
        not_member.message(),
        "update pools failed: VM 100 is not a pool member\n"
    );
    ok(api
        .send(
            "PUT",
            "/pools/prod",
            &[("storage", "local-lvm"), ("delete", "1")],
        )
        .await)
    .await;
    ok(api.send("DELETE", "/pools", &[("poolid", "prod")]).await).await;
    assert_eq!(ok(api.get("/pools").await).await.data(), &json!([]));
    let gone = api.send("GET", "/pools", &[("poolid", "prod")]).await;
    assert_eq!(gone.message(), "pool 'prod' does not exist\n");
}

#[tokio::test]
async fn a_vm_is_in_one_pool_and_moves_only_when_allowed() {
    let f = start().await;
    let api = f.api("site-1");
    for p in ["a", "b"] {
        ok(api.post("/pools", &[("poolid", p)]).await).await;
    }
    ok(api
        .send("PUT", "/pools", &[("poolid", "a"), ("vms", "100,101")])
        .await)
    .await;
    let moved = api
        .send("PUT", "/pools", &[("poolid", "b"), ("vms", "101")])
        .await;
    assert_eq!(moved.status, 500);
    assert_eq!(
        moved.message(),
        "update pools failed: VM 101 belongs already to pool 'a' and 'allow-move' is not set\n"
    );
    ok(api
        .send(
            "PUT",
            "/pools",
            &[("poolid", "b"), ("vms", "101"), ("allow-move", "1")],
        )
        .await)
    .await;
    // Members without a VM are not listed, as in PVE; the configuration keeps them.
    let a = ok(api.send("GET", "/pools", &[("poolid", "a")]).await).await;
    assert_eq!(a.data()[0]["members"], json!([]));
    let ok_delete = api.send("DELETE", "/pools", &[("poolid", "a")]).await;
    assert_eq!(
        ok_delete.status, 200,
        "VM 100 does not exist: {}",
        ok_delete.body
    );

    // Pool "b" still lists VM 101, which does not exist (destroyed, say): a new VM 101
    // created into "c" is in "c" only.
    ok(api.post("/pools", &[("poolid", "c")]).await).await;
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "101"), ("memory", "512"), ("pool", "c")],
    )
    .await;
    let b = ok(api.send("GET", "/pools", &[("poolid", "b")]).await).await;
    assert_eq!(b.data()[0]["members"], json!([]));
    let c = ok(api.send("GET", "/pools", &[("poolid", "c")]).await).await;
    assert_eq!(c.data()[0]["members"][0]["vmid"], 101);

    // A clone joins the pool it is cloned into.
    let clone = ok(api
        .post(
            "/nodes/ml110-01/qemu/101/clone",
            &[("newid", "105"), ("pool", "b")],
        )
        .await)
    .await;
    wait_task(&f, &api, "ml110-01", clone.data().as_str().unwrap()).await;
    let b = ok(api.send("GET", "/pools", &[("poolid", "b")]).await).await;
    assert_eq!(b.data()[0]["members"][0]["vmid"], 105);

    let missing = api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "102"), ("memory", "512"), ("pool", "nope")],
        )
        .await;
    assert_eq!(missing.status, 403);
    assert_eq!(
        missing.message(),
        "Permission check failed (pool 'nope' does not exist)\n"
    );
}

#[tokio::test]
async fn nested_pools_need_their_parent_and_valid_names() {
    let f = start().await;
    let api = f.api("site-1");
    let orphan = api.post("/pools", &[("poolid", "dept/team")]).await;
    assert_eq!(
        orphan.message(),
        "create pool failed: parent 'dept' of pool 'dept/team' does not exist\n"
    );
    ok(api.post("/pools", &[("poolid", "dept")]).await).await;
    ok(api.post("/pools", &[("poolid", "dept/team")]).await).await;
    let digit = api.post("/pools", &[("poolid", "dept/1x")]).await;
    assert_eq!(
        digit.message(),
        "create pool failed: pool name must start with a letter\n"
    );
    let deep = api.post("/pools", &[("poolid", "a/b/c/d")]).await;
    assert_eq!(deep.status, 400);
    assert_eq!(
        deep.json["errors"]["poolid"],
        "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)\n"
    );
    let chars = api.post("/pools", &[("poolid", "bad name")]).await;
    assert_eq!(
        chars.json["errors"]["poolid"],
        "invalid format - pool name 'bad name' contains invalid characters\n"
    );
    let parent = api.send("DELETE", "/pools", &[("poolid", "dept")]).await;
    assert_eq!(
        parent.message(),
        "delete pool failed: pool 'dept' is not empty (contains pool 'dept/team')\n"
    );
    let list = ok(api.get("/pools").await).await;
    let ids: Vec<&str> = list
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["poolid"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["dept", "dept/team"]);
}

#[tokio::test]
async fn pools_users_and_acls_are_reset_and_snapshotted_with_the_world() {
    let f = start().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    ok(api.post("/pools", &[("poolid", "kept")]).await).await;
    let snap = ctl.snapshot().await.unwrap();
    ok(api.post("/access/users", &[("userid", "later@pve")]).await).await;
    ok(api.send("DELETE", "/pools", &[("poolid", "kept")]).await).await;
    ctl.restore(&snap).await.unwrap();
    assert_eq!(
        ok(api.get("/pools").await).await.data(),
        &json!([{"poolid": "kept"}])
    );
    assert_eq!(api.get("/access/users/later@pve").await.status, 500);
    ctl.reset().await.unwrap();
    assert_eq!(ok(api.get("/pools").await).await.data(), &json!([]));
}

#[tokio::test]
async fn a_node_reports_the_sites_pve_manager_version() {
    let f = start().await;
    let api = f.api("site-1");
    let node = ok(api.get("/nodes/ml110-01/version").await).await;
    let cluster = ok(api.get("/version").await).await;
    for k in ["version", "release", "repoid"] {
        assert_eq!(node.data()[k], cluster.data()[k], "{k}");
    }
    assert_eq!(node.data()["release"], "9.1");
    let unknown = api.get("/nodes/nowhere/version").await;
    assert_ne!(unknown.status, 200);
}

#[tokio::test]
async fn a_destroyed_vm_leaves_its_pool_and_its_acl_entries_go() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api.post("/pools", &[("poolid", "prod")]).await).await;
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "100"), ("memory", "512"), ("pool", "prod")],
    )
    .await;
    create_vm(&f, &api, "ml110-01", &[("vmid", "1000"), ("memory", "512")]).await;
    ok(api.post("/access/users", &[("userid", "dev@pve")]).await).await;
    for path in ["/vms/100", "/vms/1000"] {
        ok(api
            .send(
                "PUT",
                "/access/acl",
                &[("path", path), ("roles", "PVEVMUser"), ("users", "dev@pve")],
            )
            .await)
        .await;
    }

    let r = ok(api.send("DELETE", "/nodes/ml110-01/qemu/100", &[]).await).await;
    let done = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(done["exitstatus"], "OK");

    // `remove_vm_access`: the VM's ACL entries go (not those of VM 1000).
    let acl = ok(api.get("/access/acl").await).await;
    let paths: Vec<&str> = acl
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/vms/1000"], "{}", acl.body);
    // And it left its pool: a new VM 100 made without `pool` is in none.
    create_vm(&f, &api, "ml110-01", &[("vmid", "100"), ("memory", "512")]).await;
    let prod = ok(api.send("GET", "/pools", &[("poolid", "prod")]).await).await;
    assert_eq!(prod.data()[0]["members"], json!([]), "{}", prod.body);
    ok(api.send("DELETE", "/pools", &[("poolid", "prod")]).await).await;
}

#[tokio::test]
async fn a_vm_created_into_a_pool_joins_it_when_its_task_has_made_it() {
    let f = start().await;
    let api = f.api("site-1");
    let members = |pool: &'static str| {
        let api = api.clone();
        async move {
            let r = ok(api.send("GET", "/pools", &[("poolid", pool)]).await).await;
            r.data()[0]["members"].clone()
        }
    };
    ok(api.post("/pools", &[("poolid", "prod")]).await).await;
    let r = ok(api
        .post(
            "/nodes/ml110-01/qemu",
            &[
                ("vmid", "100"),
                ("memory", "512"),
                ("scsi0", "local-lvm:1"),
                ("pool", "prod"),
            ],
        )
        .await)
    .await;
    // The VM exists (locked `create`) but joins only once its task has made it.
    assert_eq!(members("prod").await, json!([]));
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(members("prod").await[0]["vmid"], 100);

    // A pool deleted while the VM is made: nothing to join, the create still succeeds.
    ok(api.post("/pools", &[("poolid", "tmp")]).await).await;
    let r = ok(api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "101"), ("memory", "512"), ("pool", "tmp")],
        )
        .await)
    .await;
    ok(api.send("DELETE", "/pools", &[("poolid", "tmp")]).await).await;
    let done = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(done["exitstatus"], "OK");
    ok(api.post("/pools", &[("poolid", "tmp")]).await).await;
    assert_eq!(members("tmp").await, json!([]));

    // A clone likewise joins at the end of its task.
    let r = ok(api
        .post(
            "/nodes/ml110-01/qemu/100/clone",
            &[("newid", "102"), ("pool", "tmp")],
        )
        .await)
    .await;
    assert_eq!(members("tmp").await, json!([]));
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(members("tmp").await[0]["vmid"], 102);
}
