//! Credentials, CSRF, API tokens, privileges.

use fake_proxmox::AuthKind;

use crate::common::*;

#[tokio::test]
async fn api_token_sent_as_cookie_is_not_a_ticket() {
    let f = start().await;
    let api = f.api("site-1");
    // The seed's deployer bug: the token in a PVEAuthCookie cookie.
    let bad = api.with_headers(&[(
        "Cookie",
        "PVEAuthCookie=root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a",
    )]);
    let r = bad.get("/nodes/ml110-01/status").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body, "", "auth failures have an empty body");
    // The same token in the Authorization header works.
    let r = api.get("/nodes/ml110-01/status").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data()["cpuinfo"]["cpus"], 5);
    let j = f.ctl("site-1").journal().await.unwrap();
    assert!(
        matches!(&j[0].auth, AuthKind::TokenInCookie { tokenid } if tokenid == "root@pam!harness")
    );
    assert_eq!(j[0].status, 401);
    assert!(matches!(&j[1].auth, AuthKind::ApiToken { tokenid } if tokenid == "root@pam!harness"));
}

#[tokio::test]
async fn no_credentials_and_bad_token() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api.with_headers(&[]).get("/version").await;
    assert_eq!(r.status, 401);
    let r = api
        .with_headers(&[("Authorization", "PVEAPIToken=root@pam!harness=wrong")])
        .get("/version")
        .await;
    assert_eq!(r.status, 401);
    // The separator after PVEAPIToken may also be a space.
    let r = api
        .with_headers(&[("Authorization", &format!("PVEAPIToken {TOKEN}"))])
        .get("/version")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.data()["release"], "9.1");
}

#[tokio::test]
async fn ticket_writes_need_csrf() {
    let f = start().await;
    let api = f.api("site-1");
    let t = api.login("root@pam", "harness").await;
    // GET with a ticket needs no CSRF token.
    let cookie = t.headers[0].1.clone();
    let cookie_only = t.with_headers(&[("Cookie", cookie.as_str())]);
    assert_eq!(cookie_only.get("/cluster/nextid").await.status, 200);
    let r = cookie_only
        .post("/nodes/ml110-01/qemu", &[("vmid", "100")])
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body, "");
    let r = t.post("/nodes/ml110-01/qemu", &[("vmid", "100")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.data().as_str().unwrap().starts_with("UPID:ml110-01:"));
    // The ticket also works in the Authorization header.
    let ticket = cookie.trim_start_matches("PVEAuthCookie=").to_string();
    let r = api
        .with_headers(&[("Authorization", &format!("PVEAuthCookie={ticket}"))])
        .get("/version")
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn bad_login_and_token_refusing_route() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api
        .with_headers(&[])
        .post(
            "/access/ticket",
            &[("username", "root@pam"), ("password", "nope")],
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.message(), "authentication failure\n");
    assert!(r.json["data"].is_null());
    // /access/ticket refuses API tokens (allowtoken=0).
    let r = api
        .post(
            "/access/ticket",
            &[("username", "root@pam"), ("password", "harness")],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (URI '/access/ticket' not available with API token, need proper ticket.\n)\n"
    );
    // The journal never shows the password.
    let j = f.ctl("site-1").journal().await.unwrap();
    assert!(
        j.iter()
            .all(|e| e.params.get("password").is_none_or(|p| p == "<redacted>"))
    );
}

#[tokio::test]
async fn privileges_follow_acls_and_privsep() {
    let yaml = fake_proxmox::Scenario::default_yaml().replacen(
        "    tokens:\n",
        "      - userid: audit@pve\n        password: pw\n    acls:\n      - {path: /, ugid: audit@pve, role: PVEAuditor}\n      - {path: /, ugid: root@pam!ro, role: PVEAuditor}\n    tokens:\n      - tokenid: root@pam!ro\n        secret: ro-secret\n        privsep: true\n",
        1,
    );
    let sc = fake_proxmox::Scenario::from_yaml_str(&yaml).unwrap();
    let f = start_with(sc, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    let audit = api.login("audit@pve", "pw").await;
    assert_eq!(audit.get("/nodes/ml110-01/status").await.status, 200);
    let r = audit.post("/nodes/ml110-01/qemu", &[("vmid", "100")]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.message(), "Permission check failed\n");
    // A privilege-separated token of root gets only its own ACLs.
    let ro = api.with_headers(&[("Authorization", "PVEAPIToken=root@pam!ro=ro-secret")]);
    assert_eq!(ro.get("/cluster/resources").await.status, 200);
    let r = ro.post("/nodes/ml110-01/qemu/100/status/start", &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/100, VM.PowerMgmt)\n"
    );
}

#[tokio::test]
async fn api_tokens_are_created_used_changed_and_deleted() {
    let f = start().await;
    let root = f.api("site-1").login("root@pam", "harness").await;
    let path = "/access/users/root@pam/token/ci";
    let r = root
        .post(path, &[("privsep", "0"), ("comment", "deploys")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data()["full-tokenid"], "root@pam!ci");
    assert_eq!(r.data()["info"]["privsep"], 0);
    assert_eq!(r.data()["info"]["comment"], "deploys");
    let secret = r.data()["value"].as_str().unwrap().to_string();
    assert!(!secret.is_empty());
    let again = root.post(path, &[]).await;
    assert_eq!(
        (again.status, again.message()),
        (500, "Token already exists.\n")
    );

    let list = root.get("/access/users/root@pam/token").await;
    let names: Vec<&str> = list
        .data()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["tokenid"].as_str())
        .collect();
    assert!(
        names.contains(&"ci") && names.contains(&"harness"),
        "{names:?}"
    );

    // The new token authenticates.
    let auth = format!("PVEAPIToken=root@pam!ci={secret}");
    let as_token = root.with_headers(&[("Authorization", auth.as_str())]);
    assert_eq!(as_token.get("/version").await.status, 200);

    let r = root.send("PUT", path, &[("expire", "4102444800")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data()["expire"], 4102444800u64);
    assert_eq!(root.get(path).await.data()["comment"], "deploys");

    assert_eq!(root.send("DELETE", path, &[]).await.status, 200);
    let gone = root.get(path).await;
    assert_eq!(
        (gone.status, gone.message()),
        (500, "no such token 'ci' for user 'root@pam'\n")
    );
    assert_eq!(as_token.get("/version").await.status, 401);
    let r = root.send("DELETE", path, &[]).await;
    assert_eq!(
        (r.status, r.message()),
        (500, "no such token for user 'root@pam'\n")
    );
    let r = root.post("/access/users/nobody@pve/token/ci", &[]).await;
    assert_eq!(
        (r.status, r.message()),
        (500, "no such user ('nobody@pve')\n")
    );
}

#[tokio::test]
async fn permissions_list_the_callers_privileges_by_path() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api
        .send("GET", "/access/permissions", &[("path", "/vms")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data()["/vms"]["VM.PowerMgmt"], 1);
    assert_eq!(r.data().as_object().map(|m| m.len()), Some(1));
    // Ticket verify mode: privileges checked, no ticket handed out.
    let r = api
        .with_headers(&[])
        .post(
            "/access/ticket",
            &[
                ("username", "root@pam"),
                ("password", "harness"),
                ("path", "/vms"),
                ("privs", "VM.Audit,VM.PowerMgmt"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &serde_json::json!({"username": "root@pam"}));
}
