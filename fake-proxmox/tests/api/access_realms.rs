//! Authentication realms (`/access/domains`): PVE's two built-in ones, directory realms
//! with their required options, and a sync that cannot reach a server.

use serde_json::json;

use crate::common::*;

async fn ok(r: Resp) -> Resp {
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

#[tokio::test]
async fn pam_and_pve_are_listed_without_credentials_and_stay() {
    let f = start().await;
    let api = f.api("site-1");
    let anon = api.with_headers(&[]).get("/access/domains").await;
    assert_eq!(anon.status, 200, "the realm list is public: {}", anon.body);
    assert_eq!(
        anon.data(),
        &json!([
            {"realm": "pam", "type": "pam", "comment": "Linux PAM standard authentication"},
            {"realm": "pve", "type": "pve", "comment": "Proxmox VE authentication server"},
        ])
    );
    let pam = ok(api.get("/access/domains/pam").await).await;
    assert_eq!(pam.data()["type"], "pam");
    assert!(pam.data()["digest"].as_str().is_some_and(|d| d.len() == 40));
    // PVE re-adds both to every domains.cfg it reads: deleting them changes nothing.
    ok(api.send("DELETE", "/access/domains/pam", &[]).await).await;
    let again = ok(api.get("/access/domains").await).await;
    assert_eq!(again.data().as_array().unwrap().len(), 2);
    let reserved = api
        .post("/access/domains", &[("realm", "pve"), ("type", "pve")])
        .await;
    assert_eq!(
        reserved.message(),
        "add auth server failed: domain 'pve' already exists\n"
    );
    let builtin = api
        .post("/access/domains", &[("realm", "local2"), ("type", "pam")])
        .await;
    assert_eq!(
        builtin.message(),
        "add auth server failed: unable to create builtin type 'pam'\n"
    );
}

#[tokio::test]
async fn a_directory_realm_needs_its_options_and_cannot_sync_without_a_server() {
    let f = start().await;
    let api = f.api("site-1");
    let missing = api
        .post(
            "/access/domains",
            &[
                ("realm", "corp"),
                ("type", "ldap"),
                ("server1", "ldap.corp"),
                ("user_attr", "uid"),
            ],
        )
        .await;
    assert_eq!(missing.status, 500);
    assert_eq!(
        missing.message(),
        "add auth server failed: missing value for required option 'base_dn'\n"
    );
    let foreign = api
        .post(
            "/access/domains",
            &[
                ("realm", "corp"),
                ("type", "ldap"),
                ("client-id", "x"),
                ("server1", "ldap.corp"),
            ],
        )
        .await;
    assert_eq!(
        foreign.message(),
        "add auth server failed: unexpected property 'client-id'\n"
    );
    ok(api
        .post(
            "/access/domains",
            &[
                ("realm", "corp"),
                ("type", "ldap"),
                ("server1", "ldap.corp"),
                ("base_dn", "dc=corp"),
                ("user_attr", "uid"),
                ("comment", "Corporate"),
                ("default", "1"),
            ],
        )
        .await)
    .await;
    let list = ok(api.get("/access/domains").await).await;
    let corp = &list.data()[0];
    assert_eq!(
        corp,
        &json!({"realm": "corp", "type": "ldap", "comment": "Corporate", "default": 1})
    );
    let got = ok(api.get("/access/domains/corp").await).await;
    assert_eq!(got.data()["server1"], "ldap.corp");
    assert_eq!(got.data()["base_dn"], "dc=corp");
    let digest = got.data()["digest"].as_str().unwrap().to_string();
    ok(api
        .send(
            "PUT",
            "/access/domains/corp",
            &[("port", "636"), ("delete", "comment"), ("digest", &digest)],
        )
        .await)
    .await;
    let got = ok(api.get("/access/domains/corp").await).await;
    assert_eq!(got.data()["port"], 636);
    assert!(got.data().get("comment").is_none());
    let stale = api
        .send(
            "PUT",
            "/access/domains/corp",
            &[("port", "389"), ("digest", &digest)],
        )
        .await;
    assert!(
        stale.message().contains("detected modified configuration"),
        "{}",
        stale.body
    );
    let nothing = api.send("PUT", "/access/domains/corp", &[]).await;
    assert_eq!(
        nothing.message(),
        "update auth server failed: no options specified\n"
    );

    // No server: the sync task fails; a realm that is no directory cannot sync at all.
    let noscope = api.post("/access/domains/corp/sync", &[]).await;
    assert_eq!(noscope.status, 400);
    assert!(noscope.json["errors"]["scope"].is_string());
    let sync = ok(api
        .post("/access/domains/corp/sync", &[("scope", "users")])
        .await)
    .await;
    let upid = sync.data().as_str().unwrap().to_string();
    assert!(
        upid.contains(":auth-realm-sync:corp:root@pam!harness:"),
        "{upid}"
    );
    let node = upid.split(':').nth(1).unwrap().to_string();
    let status = wait_task(&f, &api, &node, &upid).await;
    assert_ne!(status["exitstatus"], "OK");
    let log = task_log(&api, &node, &upid).await;
    assert_eq!(log[0], "starting sync for realm corp");
    let pve = api
        .post("/access/domains/pve/sync", &[("scope", "users")])
        .await;
    assert_eq!(
        pve.message(),
        "Cannot sync realm type 'pve'! Only LDAP/AD realms can be synced.\n"
    );
    let none = api
        .post("/access/domains/nope/sync", &[("scope", "users")])
        .await;
    assert_eq!(none.json["errors"]["realm"], "Realm does not exist.");

    // A user of a deleted realm cannot log in any more.
    ok(api.send("DELETE", "/access/domains/corp", &[]).await).await;
    let gone = api.send("DELETE", "/access/domains/corp", &[]).await;
    assert_eq!(
        gone.message(),
        "delete auth server failed: authentication domain 'corp' does not exist\n"
    );
    let openid = api
        .post(
            "/access/domains",
            &[
                ("realm", "sso"),
                ("type", "openid"),
                ("issuer-url", "https://id"),
            ],
        )
        .await;
    assert_eq!(
        openid.message(),
        "add auth server failed: missing value for required option 'client-id'\n"
    );
}
