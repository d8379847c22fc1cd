//! Roles and ACLs (`/access/roles`, `/access/acl`), and what they grant: a user's or
//! token's requests succeed or fail by the roles it holds on the path, through groups,
//! propagation, pools and privilege separation.

use serde_json::json;

use crate::common::*;

async fn ok(r: Resp) -> Resp {
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

#[tokio::test]
async fn built_in_roles_are_pve_9_1_s_and_cannot_be_changed() {
    let f = start().await;
    let api = f.api("site-1");
    let list = ok(api.get("/access/roles").await).await;
    let roles = list.data().as_array().unwrap();
    assert_eq!(roles.len(), 17, "{}", list.body);
    let vm_user = roles.iter().find(|r| r["roleid"] == "PVEVMUser").unwrap();
    assert_eq!(vm_user["special"], 1);
    assert_eq!(
        vm_user["privs"],
        "VM.Audit,VM.Backup,VM.Config.CDROM,VM.Config.Cloudinit,VM.Console,VM.GuestAgent.Audit,\
         VM.GuestAgent.FileRead,VM.GuestAgent.FileSystemMgmt,VM.GuestAgent.FileWrite,VM.PowerMgmt"
    );
    let tpl = ok(api.get("/access/roles/PVETemplateUser").await).await;
    assert_eq!(tpl.data(), &json!({"VM.Audit": 1, "VM.Clone": 1}));

    let change = api
        .send(
            "PUT",
            "/access/roles/PVEVMUser",
            &[("privs", "VM.Allocate")],
        )
        .await;
    assert_eq!(change.status, 500);
    assert_eq!(
        change.message(),
        "auto-generated role 'PVEVMUser' cannot be modified\n"
    );
    let del = api.send("DELETE", "/access/roles/Administrator", &[]).await;
    assert_eq!(
        del.message(),
        "auto-generated role 'Administrator' cannot be deleted\n"
    );
    let ns = api.post("/access/roles", &[("roleid", "pvecustom")]).await;
    assert_eq!(ns.status, 400);
    assert_eq!(
        ns.json["errors"]["roleid"],
        "cannot use role ID starting with the (case-insensitive) 'PVE' namespace"
    );
}

#[tokio::test]
async fn a_custom_role_is_created_changed_and_deleted() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api
        .post(
            "/access/roles",
            &[("roleid", "Deployer"), ("privs", "VM.Audit,VM.Allocate")],
        )
        .await)
    .await;
    let got = ok(api.get("/access/roles/Deployer").await).await;
    assert_eq!(got.data(), &json!({"VM.Allocate": 1, "VM.Audit": 1}));
    let list = ok(api.get("/access/roles").await).await;
    let mine = list
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["roleid"] == "Deployer")
        .unwrap()
        .clone();
    assert_eq!(
        mine,
        json!({"roleid": "Deployer", "privs": "VM.Allocate,VM.Audit", "special": 0})
    );

    let bad = api
        .send("PUT", "/access/roles/Deployer", &[("privs", "VM.Fly")])
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json["errors"]["privs"],
        "invalid format - invalid privilege 'VM.Fly'\n"
    );
    ok(api
        .send(
            "PUT",
            "/access/roles/Deployer",
            &[("privs", "VM.PowerMgmt"), ("append", "1")],
        )
        .await)
    .await;
    let got = ok(api.get("/access/roles/Deployer").await).await;
    assert_eq!(got.data().as_object().unwrap().len(), 3);
    ok(api
        .send("PUT", "/access/roles/Deployer", &[("privs", "VM.Audit")])
        .await)
    .await;
    let got = ok(api.get("/access/roles/Deployer").await).await;
    assert_eq!(got.data(), &json!({"VM.Audit": 1}));

    let dup = api.post("/access/roles", &[("roleid", "Deployer")]).await;
    assert_eq!(
        dup.message(),
        "create role failed: role 'Deployer' already exists\n"
    );
    ok(api.send("DELETE", "/access/roles/Deployer", &[]).await).await;
    let gone = api.get("/access/roles/Deployer").await;
    assert_eq!(gone.message(), "role 'Deployer' does not exist\n");
    let gone = api.send("DELETE", "/access/roles/Deployer", &[]).await;
    assert_eq!(
        gone.message(),
        "delete role failed: role 'Deployer' does not exist\n"
    );
}

#[tokio::test]
async fn acl_entries_are_set_listed_and_removed() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api.post("/access/users", &[("userid", "u@pve")]).await).await;
    ok(api.post("/access/groups", &[("groupid", "g1")]).await).await;
    ok(api.post("/access/users/u@pve/token/tk", &[]).await).await;
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms/100/"),
                ("roles", "PVEVMUser,PVEAuditor"),
                ("users", "u@pve"),
                ("groups", "g1"),
                ("tokens", "u@pve!tk"),
                ("propagate", "0"),
            ],
        )
        .await)
    .await;
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[("path", "/"), ("roles", "PVEAuditor"), ("users", "u@pve")],
        )
        .await)
    .await;
    let acl = ok(api.get("/access/acl").await).await;
    let rows: Vec<(String, String, String, String, i64)> = acl
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["path"].as_str().unwrap().to_string(),
                a["type"].as_str().unwrap().to_string(),
                a["ugid"].as_str().unwrap().to_string(),
                a["roleid"].as_str().unwrap().to_string(),
                a["propagate"].as_i64().unwrap(),
            )
        })
        .collect();
    let row = |p: &str, t: &str, u: &str, r: &str, prop: i64| {
        (
            p.to_string(),
            t.to_string(),
            u.to_string(),
            r.to_string(),
            prop,
        )
    };
    assert_eq!(
        rows,
        vec![
            row("/", "user", "u@pve", "PVEAuditor", 1),
            row("/vms/100", "user", "u@pve", "PVEAuditor", 0),
            row("/vms/100", "user", "u@pve", "PVEVMUser", 0),
            row("/vms/100", "group", "g1", "PVEAuditor", 0),
            row("/vms/100", "group", "g1", "PVEVMUser", 0),
            row("/vms/100", "token", "u@pve!tk", "PVEAuditor", 0),
            row("/vms/100", "token", "u@pve!tk", "PVEVMUser", 0),
        ]
    );
    // Setting an entry again changes its propagation; delete takes it away.
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms/100"),
                ("roles", "PVEVMUser"),
                ("groups", "g1"),
                ("delete", "1"),
            ],
        )
        .await)
    .await;
    let acl = ok(api.get("/access/acl").await).await;
    assert_eq!(acl.data().as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn acl_updates_refuse_what_pve_refuses() {
    let f = start().await;
    let api = f.api("site-1");
    let put = |form: Vec<(&'static str, &'static str)>| {
        let api = api.clone();
        async move { api.send("PUT", "/access/acl", &form).await }
    };
    let none = put(vec![("path", "/"), ("roles", "PVEAuditor")]).await;
    assert_eq!(none.status, 400);
    let msg = "either 'users', 'groups' or 'tokens' is required.";
    assert_eq!(
        none.json["errors"],
        json!({"users": msg, "groups": msg, "tokens": msg})
    );
    let path = put(vec![
        ("path", "/nowhere"),
        ("roles", "PVEAuditor"),
        ("users", "root@pam"),
    ])
    .await;
    assert_eq!(path.status, 400);
    assert_eq!(path.json["errors"]["path"], "invalid ACL path '/nowhere'");
    let role = put(vec![
        ("path", "/"),
        ("roles", "Nope"),
        ("users", "root@pam"),
    ])
    .await;
    assert_eq!(
        role.message(),
        "ACL update failed: role 'Nope' does not exist\n"
    );
    let user = put(vec![
        ("path", "/"),
        ("roles", "PVEAuditor"),
        ("users", "x@pve"),
    ])
    .await;
    assert_eq!(
        user.message(),
        "ACL update failed: user 'x@pve' does not exist\n"
    );
    let group = put(vec![
        ("path", "/"),
        ("roles", "PVEAuditor"),
        ("groups", "x"),
    ])
    .await;
    assert_eq!(
        group.message(),
        "ACL update failed: group 'x' does not exist\n"
    );
    let token = put(vec![
        ("path", "/"),
        ("roles", "PVEAuditor"),
        ("tokens", "root@pam!nope"),
    ])
    .await;
    assert_eq!(
        token.message(),
        "ACL update failed: no such token 'nope' for user 'root@pam'\n"
    );
    let bad_token = put(vec![
        ("path", "/"),
        ("roles", "PVEAuditor"),
        ("tokens", "root"),
    ])
    .await;
    assert_eq!(bad_token.status, 400, "{}", bad_token.body);
    assert_eq!(ok(api.get("/access/acl").await).await.data(), &json!([]));
}

/// A user made through the API, with a ticket-authenticated client.
async fn user_client(api: &Api, userid: &str) -> Api {
    ok(api
        .post(
            "/access/users",
            &[("userid", userid), ("password", "password1")],
        )
        .await)
    .await;
    api.login(userid, "password1").await
}

#[tokio::test]
async fn roles_granted_through_groups_and_pools_let_a_user_manage_vms() {
    let f = start().await;
    let api = f.api("site-1");
    let dev = user_client(&api, "dev@pve").await;
    let create = |c: Api, vmid: &'static str, pool: Option<&'static str>| async move {
        let mut form = vec![("vmid", vmid), ("memory", "512")];
        if let Some(p) = pool {
            form.push(("pool", p));
        }
        c.post("/nodes/ml110-01/qemu", &form).await
    };
    assert_eq!(create(dev.clone(), "200", None).await.status, 403);

    // Through a group: PVEVMAdmin on /vms, propagated.
    ok(api.post("/access/groups", &[("groupid", "devs")]).await).await;
    ok(api
        .send("PUT", "/access/users/dev@pve", &[("groups", "devs")])
        .await)
    .await;
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms"),
                ("roles", "PVEVMAdmin"),
                ("groups", "devs"),
            ],
        )
        .await)
    .await;
    let r = create(dev.clone(), "200", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(&f, &dev, "ml110-01", r.data().as_str().unwrap()).await;

    // The user's own NoAccess on the VM beats the group's role.
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms/200"),
                ("roles", "NoAccess"),
                ("users", "dev@pve"),
            ],
        )
        .await)
    .await;
    assert_eq!(dev.get("/nodes/ml110-01/qemu/200/config").await.status, 403);
    let perms = ok(dev
        .send("GET", "/access/permissions", &[("path", "/vms/200")])
        .await)
    .await;
    assert_eq!(perms.data(), &json!({}));

    // Through a pool: a second user with PVEVMAdmin on /pool/web only.
    let web = user_client(&api, "web@pve").await;
    ok(api.post("/pools", &[("poolid", "web")]).await).await;
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/pool/web"),
                ("roles", "PVEVMAdmin"),
                ("users", "web@pve"),
            ],
        )
        .await)
    .await;
    assert_eq!(create(web.clone(), "201", None).await.status, 403);
    let r = create(web.clone(), "201", Some("web")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(&f, &web, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(web.get("/nodes/ml110-01/qemu/201/config").await.status, 200);
    // VM 200 is not in the pool: not hers.
    assert_eq!(web.get("/nodes/ml110-01/qemu/200/config").await.status, 403);
    let listed = ok(web.get("/nodes/ml110-01/qemu").await).await;
    let ids: Vec<u64> = listed
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vmid"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [201]);
    // Adding VM 200 to her pool gives her VM 200 too.
    ok(api
        .send("PUT", "/pools", &[("poolid", "web"), ("vms", "200")])
        .await)
    .await;
    assert_eq!(web.get("/nodes/ml110-01/qemu/200/config").await.status, 200);
}

#[tokio::test]
async fn a_privilege_separated_token_holds_what_both_it_and_its_user_hold() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api.post("/access/users", &[("userid", "ci@pve")]).await).await;
    let tok = ok(api.post("/access/users/ci@pve/token/run", &[]).await).await;
    let secret = tok.data()["value"].as_str().unwrap().to_string();
    let header = format!("PVEAPIToken=ci@pve!run={secret}");
    let client = api.with_headers(&[("Authorization", header.as_str())]);
    let grant = |path: &'static str, role: &'static str, key: &'static str, who: &'static str| {
        let api = api.clone();
        async move {
            ok(api
                .send(
                    "PUT",
                    "/access/acl",
                    &[("path", path), ("roles", role), (key, who)],
                )
                .await)
            .await;
        }
    };
    grant("/", "PVEAuditor", "users", "ci@pve").await;
    assert_eq!(
        client.get("/nodes/ml110-01/status").await.status,
        403,
        "the token has nothing yet"
    );
    grant("/", "PVEAdmin", "tokens", "ci@pve!run").await;
    assert_eq!(client.get("/nodes/ml110-01/status").await.status, 200);
    let perms = ok(client
        .send("GET", "/access/permissions", &[("path", "/vms")])
        .await)
    .await;
    let held: Vec<&String> = perms.data()["/vms"].as_object().unwrap().keys().collect();
    assert_eq!(
        held,
        [
            "Datastore.Audit",
            "Mapping.Audit",
            "Pool.Audit",
            "SDN.Audit",
            "Sys.Audit",
            "VM.Audit",
            "VM.GuestAgent.Audit"
        ],
        "PVEAdmin on the token, PVEAuditor on its user: only what both hold"
    );
    let create = client
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "300"), ("memory", "512")],
        )
        .await;
    assert_eq!(create.status, 403);
}

#[tokio::test]
async fn without_permissions_modify_only_held_roles_can_be_handed_out() {
    let f = start().await;
    let api = f.api("site-1");
    let lead = user_client(&api, "lead@pve").await;
    ok(api.post("/access/users", &[("userid", "member@pve")]).await).await;
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms/100"),
                ("roles", "PVEVMAdmin"),
                ("users", "lead@pve"),
            ],
        )
        .await)
    .await;
    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms/101"),
                ("roles", "PVEVMAdmin"),
                ("users", "lead@pve"),
                ("propagate", "0"),
            ],
        )
        .await)
    .await;
    let grant = |path: &'static str, role: &'static str, propagate: &'static str| {
        let lead = lead.clone();
        async move {
            lead.send(
                "PUT",
                "/access/acl",
                &[
                    ("path", path),
                    ("roles", role),
                    ("users", "member@pve"),
                    ("propagate", propagate),
                ],
            )
            .await
        }
    };
    ok(grant("/vms/100", "PVEVMUser", "1").await).await;
    let more = grant("/vms/100", "PVEAdmin", "1").await;
    assert_eq!(more.status, 400, "{}", more.body);
    assert_eq!(
        more.json["errors"]["role"],
        "Cannot add role 'PVEAdmin' - requires 'Permissions.Modify' or superset of privileges."
    );
    let none = grant("/vms/100", "NoAccess", "1").await;
    assert_eq!(
        none.json["errors"]["role"],
        "Cannot add role 'NoAccess' - requires 'Permissions.Modify'"
    );
    let propagated = grant("/vms/101", "PVEVMUser", "1").await;
    assert_eq!(
        propagated.json["errors"]["role"],
        "Cannot add role 'PVEVMUser' with propagation - requires 'Permissions.Modify' or propagated superset of privileges."
    );
    ok(grant("/vms/101", "PVEVMUser", "0").await).await;
    let elsewhere = grant("/vms/102", "PVEVMUser", "0").await;
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.body);
    // The lead lists only the entries on paths where it may modify permissions.
    let seen = ok(lead.get("/access/acl").await).await;
    let paths: Vec<&str> = seen
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/vms/100", "/vms/100", "/vms/101", "/vms/101"]);
}
