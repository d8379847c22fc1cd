//! Users and groups as a Terraform provider or an Ansible module manages them:
//! `/access/users`, `/access/groups`, the TFA listings.

use serde_json::json;

use crate::common::*;

async fn ok(r: Resp) -> Resp {
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

fn user<'a>(list: &'a Resp, userid: &str) -> Option<&'a serde_json::Value> {
    list.data()
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["userid"] == userid)
}

#[tokio::test]
async fn a_user_is_created_read_changed_and_deleted_with_its_tokens_groups_and_acls() {
    let f = start().await;
    let api = f.api("site-1");
    let list = ok(api.get("/access/users").await).await;
    let root = user(&list, "root@pam").expect("root@pam is listed");
    assert_eq!(root["enable"], 1);
    assert_eq!(root["expire"], 0);
    assert_eq!(root["realm-type"], "pam");
    assert!(
        root.get("tokens").is_none() && root.get("groups").is_none(),
        "{root}"
    );

    ok(api
        .post(
            "/access/groups",
            &[("groupid", "ops"), ("comment", "Operators")],
        )
        .await)
    .await;
    ok(api
        .post(
            "/access/users",
            &[
                ("userid", "deploy@pve"),
                ("password", "s3cret-pw"),
                ("email", "deploy@example.com"),
                ("firstname", "Deploy"),
                ("groups", "ops"),
                ("expire", "0"),
                ("comment", "CI"),
            ],
        )
        .await)
    .await;
    let got = ok(api.get("/access/users/deploy@pve").await).await;
    assert_eq!(
        got.data(),
        &json!({
            "enable": 1, "expire": 0, "email": "deploy@example.com", "firstname": "Deploy",
            "comment": "CI", "groups": ["ops"], "tokens": null,
        })
    );

    let token = api
        .post("/access/users/deploy@pve/token/ci", &[("privsep", "0")])
        .await;
    assert_eq!(token.status, 200, "{}", token.body);
    let full = ok(api.send("GET", "/access/users", &[("full", "1")]).await).await;
    let d = user(&full, "deploy@pve").unwrap();
    assert_eq!(d["groups"], "ops");
    assert_eq!(
        d["tokens"],
        json!([{"tokenid": "ci", "privsep": 0, "expire": 0}])
    );
    assert_eq!(d["realm-type"], "pve");
    let got = ok(api.get("/access/users/deploy@pve").await).await;
    assert_eq!(
        got.data()["tokens"],
        json!({"ci": {"privsep": 0, "expire": 0}})
    );

    // A second group, appended; then groups replaced.
    ok(api.post("/access/groups", &[("groupid", "dev")]).await).await;
    ok(api
        .send(
            "PUT",
            "/access/users/deploy@pve",
            &[("groups", "dev"), ("append", "1"), ("lastname", "Bot")],
        )
        .await)
    .await;
    let got = ok(api.get("/access/users/deploy@pve").await).await;
    assert_eq!(got.data()["groups"], json!(["dev", "ops"]));
    assert_eq!(got.data()["lastname"], "Bot");
    ok(api
        .send(
            "PUT",
            "/access/users/deploy@pve",
            &[("groups", "dev"), ("enable", "0")],
        )
        .await)
    .await;
    let got = ok(api.get("/access/users/deploy@pve").await).await;
    assert_eq!(got.data()["groups"], json!(["dev"]));
    assert_eq!(got.data()["enable"], 0);
    let only_enabled = ok(api.send("GET", "/access/users", &[("enabled", "1")]).await).await;
    assert!(user(&only_enabled, "deploy@pve").is_none());

    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms"),
                ("roles", "PVEVMUser"),
                ("users", "deploy@pve"),
                ("tokens", "deploy@pve!ci"),
            ],
        )
        .await)
    .await;
    ok(api.send("DELETE", "/access/users/deploy@pve", &[]).await).await;
    let gone = api.get("/access/users/deploy@pve").await;
    assert_eq!(gone.status, 500);
    assert_eq!(gone.message(), "no such user ('deploy@pve')\n");
    let acl = ok(api.get("/access/acl").await).await;
    assert_eq!(
        acl.data(),
        &json!([]),
        "the user's and its token's ACL entries went with it"
    );
    let group = ok(api.get("/access/groups/dev").await).await;
    assert_eq!(group.data()["members"], json!([]));
    let tokens = api.get("/access/users/deploy@pve/token").await;
    assert_eq!(tokens.status, 500, "{}", tokens.body);
    let again = api.send("DELETE", "/access/users/deploy@pve", &[]).await;
    assert_eq!(again.message(), "no such user ('deploy@pve')\n");
}

#[tokio::test]
async fn creating_a_user_refuses_what_pve_refuses() {
    let f = start().await;
    let api = f.api("site-1");
    let dup = api.post("/access/users", &[("userid", "root@pam")]).await;
    assert_eq!(dup.status, 500);
    assert_eq!(
        dup.message(),
        "create user failed: user 'root@pam' already exists\n"
    );

    let bad = api.post("/access/users", &[("userid", "no-realm")]).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.json["errors"]["userid"].is_string(), "{}", bad.body);

    let short = api
        .post(
            "/access/users",
            &[("userid", "a@pve"), ("password", "short")],
        )
        .await;
    assert_eq!(short.status, 400, "{}", short.body);
    assert!(short.json["errors"]["password"].is_string());

    let group = api
        .post("/access/users", &[("userid", "a@pve"), ("groups", "nope")])
        .await;
    assert_eq!(
        group.message(),
        "create user failed: no such group 'nope'\n"
    );
    let bad_group = api
        .post(
            "/access/users",
            &[("userid", "a@pve"), ("groups", "no pe!")],
        )
        .await;
    assert_eq!(bad_group.status, 400, "{}", bad_group.body);
    assert_eq!(
        bad_group.json["errors"]["groups"],
        "invalid format - group name 'pe!' contains invalid characters\n"
    );

    let pam = api
        .post(
            "/access/users",
            &[("userid", "bob@pam"), ("password", "longenough")],
        )
        .await;
    assert_eq!(pam.status, 500);
    assert!(
        pam.message()
            .starts_with("create user failed: change password failed: command 'usermod"),
        "{}",
        pam.body
    );
    let realm = api
        .post(
            "/access/users",
            &[("userid", "bob@corp"), ("password", "longenough")],
        )
        .await;
    assert_eq!(
        realm.message(),
        "create user failed: auth domain 'corp' does not exist\n"
    );
    // Without a password PVE never looks at the realm.
    ok(api.post("/access/users", &[("userid", "bob@corp")]).await).await;
    // Nothing of the refused attempts was kept.
    let list = ok(api.get("/access/users").await).await;
    assert!(user(&list, "a@pve").is_none() && user(&list, "bob@pam").is_none());
}

#[tokio::test]
async fn a_created_pve_user_logs_in_until_disabled_or_expired() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api
        .post(
            "/access/users",
            &[("userid", "alice@pve"), ("password", "wonderland")],
        )
        .await)
    .await;
    let t = api.login("alice@pve", "wonderland").await;
    // Logged in, she sees herself but nobody else (no privileges yet).
    let list = ok(t.get("/access/users").await).await;
    let ids: Vec<&str> = list
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["userid"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["alice@pve"]);
    let denied = t.get("/access/users/root@pam").await;
    assert_eq!(denied.status, 403, "{}", denied.body);

    let login = |user: &'static str, pw: &'static str| {
        let api = api.clone();
        async move {
            api.with_headers(&[])
                .post("/access/ticket", &[("username", user), ("password", pw)])
                .await
                .status
        }
    };
    ok(api
        .send("PUT", "/access/users/alice@pve", &[("enable", "0")])
        .await)
    .await;
    assert_eq!(login("alice@pve", "wonderland").await, 401);
    ok(api
        .send(
            "PUT",
            "/access/users/alice@pve",
            &[("enable", "1"), ("expire", "1")],
        )
        .await)
    .await;
    assert_eq!(login("alice@pve", "wonderland").await, 401, "expired");
    ok(api
        .send("PUT", "/access/users/alice@pve", &[("expire", "0")])
        .await)
    .await;
    assert_eq!(login("alice@pve", "wonderland").await, 200);
}

#[tokio::test]
async fn groups_are_listed_read_changed_and_deleted_with_their_acls() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api.post("/access/groups", &[("groupid", "ops")]).await).await;
    let dup = api.post("/access/groups", &[("groupid", "ops")]).await;
    assert_eq!(
        dup.message(),
        "create group failed: group 'ops' already exists\n"
    );
    let bad = api.post("/access/groups", &[("groupid", "o/ps")]).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    ok(api
        .post("/access/users", &[("userid", "u1@pve"), ("groups", "ops")])
        .await)
    .await;
    ok(api
        .send("PUT", "/access/groups/ops", &[("comment", "Operators")])
        .await)
    .await;
    let list = ok(api.get("/access/groups").await).await;
    assert_eq!(
        list.data(),
        &json!([{"groupid": "ops", "users": "u1@pve", "comment": "Operators"}])
    );
    let one = ok(api.get("/access/groups/ops").await).await;
    assert_eq!(
        one.data(),
        &json!({"members": ["u1@pve"], "comment": "Operators"})
    );
    let missing = api.get("/access/groups/nope").await;
    assert_eq!(missing.status, 500);
    assert_eq!(missing.message(), "group 'nope' does not exist\n");
    let missing = api
        .send("PUT", "/access/groups/nope", &[("comment", "x")])
        .await;
    assert_eq!(
        missing.message(),
        "update group failed: group 'nope' does not exist\n"
    );

    ok(api
        .send(
            "PUT",
            "/access/acl",
            &[("path", "/"), ("roles", "PVEAuditor"), ("groups", "ops")],
        )
        .await)
    .await;
    ok(api.send("DELETE", "/access/groups/ops", &[]).await).await;
    assert_eq!(ok(api.get("/access/acl").await).await.data(), &json!([]));
    let u = ok(api.get("/access/users/u1@pve").await).await;
    assert_eq!(u.data()["groups"], json!([]));
    let again = api.send("DELETE", "/access/groups/ops", &[]).await;
    assert_eq!(
        again.message(),
        "delete group failed: group 'ops' does not exist\n"
    );
}

#[tokio::test]
async fn tfa_listings_are_empty_and_shaped_as_pve_s() {
    let f = start().await;
    let api = f.api("site-1");
    assert_eq!(ok(api.get("/access/tfa").await).await.data(), &json!([]));
    assert_eq!(
        ok(api.get("/access/tfa/root@pam").await).await.data(),
        &json!([])
    );
    assert_eq!(
        ok(api.get("/access/users/root@pam/tfa").await).await.data(),
        &json!({})
    );
    let multiple = api
        .send("GET", "/access/users/root@pam/tfa", &[("multiple", "1")])
        .await;
    assert_eq!(multiple.data(), &json!({"user": []}));
    // A realm that enforces TFA says so.
    ok(api
        .send("PUT", "/access/domains/pve", &[("tfa", "type=oath")])
        .await)
    .await;
    ok(api.post("/access/users", &[("userid", "t@pve")]).await).await;
    let r = ok(api.get("/access/users/t@pve/tfa").await).await;
    assert_eq!(r.data(), &json!({"realm": "oath"}));
    let missing = api.get("/access/users/nobody@pve/tfa").await;
    assert_eq!(missing.status, 403, "{}", missing.body);
}

/// PVE checks the user on every request (`auth_handler`: `check_user_enabled` after the
/// ticket, `verify_token` for a token), not only at login.
#[tokio::test]
async fn tickets_and_tokens_already_issued_stop_with_an_expired_or_disabled_user() {
    let f = start().await;
    let api = f.api("site-1");
    ok(api
        .post(
            "/access/users",
            &[("userid", "carol@pve"), ("password", "carol123")],
        )
        .await)
    .await;
    let ticket = api.login("carol@pve", "carol123").await;
    let made = ok(api
        .post("/access/users/carol@pve/token/ci", &[("privsep", "0")])
        .await)
    .await;
    let value = made.data()["value"].as_str().unwrap();
    let token = api.with_headers(&[(
        "Authorization",
        &format!("PVEAPIToken=carol@pve!ci={value}"),
    )]);
    let statuses = || async {
        (
            ticket.get("/version").await.status,
            token.get("/version").await.status,
        )
    };
    assert_eq!(statuses().await, (200, 200));
    let set = |form: &'static [(&'static str, &'static str)]| {
        let api = api.clone();
        async move {
            ok(api.send("PUT", "/access/users/carol@pve", form).await).await;
        }
    };

    set(&[("expire", "1")]).await;
    let expired = ticket.get("/version").await;
    assert_eq!(expired.status, 401, "{}", expired.body);
    assert_eq!(statuses().await, (401, 401), "user expired");
    set(&[("expire", "0")]).await;
    assert_eq!(statuses().await, (200, 200));
    set(&[("enable", "0")]).await;
    assert_eq!(statuses().await, (401, 401), "user disabled");
    set(&[("enable", "1")]).await;
    assert_eq!(statuses().await, (200, 200));

    // An expired token stops; the user's ticket goes on.
    ok(api
        .send(
            "PUT",
            "/access/users/carol@pve/token/ci",
            &[("expire", "1")],
        )
        .await)
    .await;
    assert_eq!(statuses().await, (200, 401), "token expired");
}
