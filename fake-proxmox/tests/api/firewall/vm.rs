//! Options, permissions, the index and log, and the firewall going with its VM.

use serde_json::json;

use super::*; // the helpers, and `common`'s

#[tokio::test]
async fn options_round_trip_with_digest_and_delete() {
    let (_f, api) = setup().await;
    let path = format!("{FW}/options");
    let r = api.get(&path).await;
    // No options yet: only the digest of nothing.
    assert_eq!(
        r.data(),
        &json!({"digest": "da39a3ee5e6b4b0d3255bfef95601890afd80709"})
    );
    let set = [
        ("enable", "1"),
        ("policy_in", "DROP"),
        ("policy_out", "ACCEPT"),
        ("log_level_in", "info"),
        ("macfilter", "0"),
        ("dhcp", "1"),
        ("ipfilter", "1"),
    ];
    let r = api.send("PUT", &path, &set).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = api.get(&path).await.data().clone();
    let digest = got["digest"].as_str().unwrap().to_string();
    assert_eq!(
        got,
        json!({
            "enable": 1, "policy_in": "DROP", "policy_out": "ACCEPT", "log_level_in": "info",
            "macfilter": 0, "dhcp": 1, "ipfilter": 1, "digest": digest,
        })
    );
    let r = api
        .send(
            "PUT",
            &path,
            &[("delete", "policy_in,dhcp"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = api.get(&path).await.data().clone();
    assert!(got.get("policy_in").is_none() && got.get("dhcp").is_none());
    assert_eq!(got["enable"], 1);
    let r = api
        .send("PUT", &path, &[("enable", "0"), ("digest", &digest)])
        .await;
    assert_eq!(r.status, 500, "the digest is stale: {}", r.body);
    let r = api.send("PUT", &path, &[("delete", "bogus")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["delete"], "no such option 'bogus'");
    let r = api.send("PUT", &path, &[("policy_in", "ALLOW")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
}

#[tokio::test]
async fn the_firewall_is_cloned_with_the_vm_and_destroyed_with_it() {
    let (f, api) = setup().await;
    add_rule(
        &api,
        &[
            ("type", "in"),
            ("action", "ACCEPT"),
            ("macro", "HTTP"),
            ("enable", "1"),
        ],
    )
    .await;
    api.send("PUT", &format!("{FW}/options"), &[("enable", "1")])
        .await;

    let r = api
        .post("/nodes/ml110-01/qemu/100/clone", &[("newid", "101")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let r = api.get("/nodes/ml110-01/qemu/101/firewall/rules").await;
    assert_eq!(r.data()[0]["macro"], "HTTP");
    let r = api.get("/nodes/ml110-01/qemu/101/firewall/options").await;
    assert_eq!(r.data()["enable"], 1);

    let r = api.send("DELETE", "/nodes/ml110-01/qemu/100", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    let r = api.get(&format!("{FW}/rules")).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Configuration file 'nodes/ml110-01/qemu-server/100.conf' does not exist\n"
    );
    // A new VM 100 starts without the old one's rules.
    vm(&f, &api, "100").await;
    assert!(rules(&api).await.is_empty());
    assert_eq!(
        api.get("/nodes/ml110-01/qemu/101/firewall/rules")
            .await
            .data()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn index_and_an_empty_log() {
    let (_f, api) = setup().await;
    let r = api.get(FW).await;
    assert_eq!(
        r.data(),
        &json!([
            {"name": "rules"}, {"name": "aliases"}, {"name": "ipset"}, {"name": "refs"},
            {"name": "options"},
        ])
    );
    let r = api.get(&format!("{FW}/log")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &json!([{"n": 1, "t": "no content"}]));
    assert_eq!(r.json["total"], 1);
}

#[tokio::test]
async fn auditors_read_the_firewall_but_may_not_change_it() {
    let mut scenario = fake_proxmox::Scenario::embedded_default();
    let site = &mut scenario.sites[0];
    site.users.push(fake_proxmox::scenario::UserSpec {
        userid: "audit@pve".into(),
        password: "audit-pass".into(),
        enable: true,
    });
    site.acls.push(fake_proxmox::scenario::AclSpec {
        path: "/vms/100".into(),
        ugid: "audit@pve".into(),
        role: "PVEAuditor".into(),
        propagate: true,
    });
    let f = start_with(scenario, fake_proxmox::ClockMode::Stepped).await;
    let root = f.api("site-1");
    vm(&f, &root, "100").await;
    let auditor = root.login("audit@pve", "audit-pass").await;

    let r = auditor.get(&format!("{FW}/rules")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let writes: [(&str, &str, Form); 3] = [
        ("POST", "rules", vec![("type", "in"), ("action", "DROP")]),
        ("PUT", "options", vec![("enable", "1")]),
        (
            "POST",
            "aliases",
            vec![("name", "gw"), ("cidr", "10.0.0.1")],
        ),
    ];
    for (method, path, form) in writes {
        let r = auditor.send(method, &format!("{FW}/{path}"), &form).await;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.body);
        assert_eq!(
            r.message(),
            "Permission check failed (/vms/100, VM.Config.Network)\n"
        );
    }
    // The log needs VM.Console, which an auditor lacks.
    let r = auditor.get(&format!("{FW}/log")).await;
    assert_eq!(r.status, 403, "{}", r.body);
}

#[tokio::test]
async fn the_log_pages_the_vms_lines_as_pve_does() {
    let mut scenario = fake_proxmox::Scenario::embedded_default();
    scenario.sites[0].firewall_log = [
        "100 6 tap100i0-IN 02/Dec/2026:10:00:00 +0000 ACCEPT: IN=fwbr100i0 PROTO=TCP DPT=22",
        "101 6 tap101i0-IN 02/Dec/2026:10:30:00 +0000 ACCEPT: IN=fwbr101i0 PROTO=TCP DPT=22",
        "100 4 tap100i0-IN 02/Dec/2026:11:00:00 +0000 policy DROP: IN=fwbr100i0 PROTO=UDP",
        "100 4 tap100i0-IN 02/Dec/2026:12:00:00 +0000 policy DROP: IN=fwbr100i0 PROTO=ICMP",
    ]
    .map(String::from)
    .to_vec();
    let f = start_with(scenario, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    vm(&f, &api, "100").await;
    let log = |q: &'static [(&'static str, &'static str)]| {
        let api = api.clone();
        async move { api.send("GET", &format!("{FW}/log"), q).await }
    };
    let r = log(&[]).await;
    assert_eq!(r.json["total"], 3);
    let texts: Vec<&str> = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["t"].as_str().unwrap())
        .collect();
    assert!(texts.iter().all(|t| t.starts_with("100 ")), "{texts:?}");
    let r = log(&[("start", "1"), ("limit", "1")]).await;
    assert_eq!(r.data()[0]["n"], 2);
    assert_eq!(r.data().as_array().unwrap().len(), 1);
    // 2026-12-02 10:30 UTC: only the two later lines.
    let r = log(&[("since", "1796207400")]).await;
    assert_eq!(r.json["total"], 2, "{}", r.body);
    assert!(r.data()[0]["t"].as_str().unwrap().contains("PROTO=UDP"));
}
