//! Aliases and ipsets: CRUD, digests, rename, rules and refs naming them, the cluster's.

use serde_json::json;

use super::*; // the helpers, and `common`'s

#[tokio::test]
async fn aliases_are_named_by_rules_and_renamed() {
    let (_f, api) = setup().await;
    let path = format!("{FW}/aliases");
    let r = api
        .post(
            &path,
            &[
                ("name", "Web"),
                ("cidr", "10.0.0.5/32"),
                ("comment", "front"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = api.get(&path).await.data().clone();
    let digest = list[0]["digest"].clone();
    // Read back as PVE reads its file: the `/32` dropped, the family added.
    assert_eq!(
        list,
        json!([{
            "name": "Web", "cidr": "10.0.0.5", "ipversion": 4, "comment": "front",
            "digest": digest,
        }])
    );
    let r = api
        .post(&path, &[("name", "web"), ("cidr", "10.0.0.6")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["name"], "alias 'web' already exists");
    let r = api
        .post(&path, &[("name", "bad"), ("cidr", "10.0.0.0/33")])
        .await;
    assert_eq!(
        r.json["errors"]["cidr"],
        "invalid format - Prefix length 33 is longer than IP address (32)\n"
    );

    add_rule(
        &api,
        &[("type", "in"), ("action", "ACCEPT"), ("source", "web")],
    )
    .await;
    assert_eq!(rules(&api).await[0]["ipversion"], 4);
    // An IPv6 source and an IPv4 alias: PVE dies (500) rather than naming a parameter.
    let r = api
        .post(
            &format!("{FW}/rules"),
            &[
                ("type", "in"),
                ("action", "ACCEPT"),
                ("source", "fd00::1"),
                ("dest", "web"),
            ],
        )
        .await;
    assert_eq!(
        (r.status, r.message()),
        (500, "detected mixed ipv4/ipv6 addresses in rule\n")
    );

    let r = api
        .send(
            "PUT",
            &format!("{path}/web"),
            &[
                ("cidr", "192.0.2.0/24"),
                ("rename", "front"),
                ("digest", digest.as_str().unwrap()),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api.get(&format!("{path}/front")).await;
    assert_eq!(
        r.data(),
        &json!({"name": "front", "cidr": "192.0.2.0/24", "ipversion": 4})
    );
    let r = api.get(&format!("{path}/web")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["name"], "no such alias");
    // The rule still names `web`: PVE keeps it and lists what is wrong with it.
    let rule = &rules(&api).await[0];
    assert_eq!(rule["source"], "web");
    assert_eq!(rule["errors"], json!({"source": "no such alias 'web'"}));

    let r = api.send("DELETE", &format!("{path}/front"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(api.get(&path).await.data(), &json!([]));
}

#[tokio::test]
async fn ipsets_hold_entries_and_rules_and_refs_name_them() {
    let (_f, api) = setup().await;
    let sets = format!("{FW}/ipset");
    let r = api
        .post(&sets, &[("name", "Admins"), ("comment", "ops team")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // PVE reads ipset names back in lower case.
    let listed = api.get(&sets).await.data().clone();
    assert_eq!(listed[0]["name"], "admins");
    assert_eq!(listed[0]["comment"], "ops team");
    let r = api.post(&sets, &[("name", "admins")]).await;
    assert_eq!(r.json["errors"]["name"], "IPSet 'admins' already exists");

    let set = format!("{sets}/admins");
    for form in [
        vec![("cidr", "10.0.0.5/24"), ("comment", "office")],
        vec![("cidr", "10.0.1.9/32"), ("nomatch", "1")],
    ] {
        let r = api.post(&set, &form).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = api.post(&set, &[("cidr", "10.0.1.9")]).await;
    assert_eq!(
        r.json["errors"]["cidr"],
        "address '10.0.1.9' already exists"
    );
    let r = api.post(&set, &[("cidr", "nosuchalias")]).await;
    assert_eq!(
        (r.status, r.message()),
        (500, "no such alias 'nosuchalias'\n")
    );

    let list = api.get(&set).await.data().clone();
    let digest = list[0]["digest"].clone();
    // Host bits cleared, `/32` dropped, entries sorted as PVE writes them.
    assert_eq!(
        list,
        json!([
            {"cidr": "10.0.0.0/24", "comment": "office", "digest": digest},
            {"cidr": "10.0.1.9", "nomatch": 1, "digest": digest},
        ])
    );
    // A CIDR in the path takes the rest of it, escaped or not.
    let r = api.get(&format!("{set}/10.0.0.0%2F24")).await;
    assert_eq!(r.data(), &list[0]);
    let r = api
        .send(
            "PUT",
            &format!("{set}/10.0.0.0/24"),
            &[("comment", "hq"), ("nomatch", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api.get(&format!("{set}/10.0.0.0/24")).await;
    assert_eq!(
        (r.data()["comment"].as_str(), r.data()["nomatch"].as_i64()),
        (Some("hq"), Some(1))
    );
    let r = api.get(&format!("{set}/10.9.9.9")).await;
    assert_eq!(r.json["errors"]["cidr"], "no such IP/Network");

    add_rule(
        &api,
        &[
            ("type", "in"),
            ("action", "ACCEPT"),
            ("source", "+admins"),
            ("enable", "1"),
        ],
    )
    .await;
    api.post(
        &format!("{FW}/aliases"),
        &[("name", "gw"), ("cidr", "10.0.0.1"), ("comment", "router")],
    )
    .await;

    let r = api.get(&format!("{FW}/refs")).await;
    assert_eq!(
        r.data(),
        &json!([
            {"type": "ipset", "name": "admins", "ref": "+admins", "scope": "guest",
             "comment": "ops team"},
            {"type": "alias", "name": "gw", "ref": "gw", "scope": "guest", "comment": "router"},
        ])
    );
    let r = api
        .send("GET", &format!("{FW}/refs"), &[("type", "alias")])
        .await;
    assert_eq!(r.data().as_array().unwrap().len(), 1);
    assert_eq!(r.data()[0]["name"], "gw");

    let r = api.send("DELETE", &set, &[]).await;
    assert_eq!(
        (r.status, r.message()),
        (500, "IPSet 'admins' is not empty\n")
    );
    let r = api.send("DELETE", &format!("{set}/10.0.1.9"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let digest = api.get(&sets).await.data()[0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api
        .post(
            &sets,
            &[("name", "staff"), ("rename", "admins"), ("digest", &digest)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api.get(&set).await;
    assert_eq!((r.status, r.message()), (500, "no such IPSet 'admins'\n"));
    assert_eq!(
        rules(&api).await[0]["errors"]["source"],
        "no such ipset 'admins'"
    );
    let r = api
        .send("DELETE", &format!("{sets}/staff"), &[("force", "1")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(api.get(&sets).await.data(), &json!([]));
}

/// A site whose `cluster.fw` (from the scenario) defines an alias, an ipset and a group.
async fn with_cluster_firewall() -> (Fake, Api) {
    let mut scenario = fake_proxmox::Scenario::embedded_default();
    scenario.sites[0].cluster_firewall = Some(
        "[OPTIONS]\n\nenable: 1\n\n[ALIASES]\n\nOffice 192.0.2.0/24 # head office\n\n\
         [IPSET monitoring] # prometheus\n\n198.51.100.7\n\n[group webservers]\n\nIN HTTP(ACCEPT)\n"
            .into(),
    );
    let f = start_with(scenario, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    vm(&f, &api, "100").await;
    (f, api)
}

#[tokio::test]
async fn rules_and_refs_see_the_clusters_aliases_and_ipsets() {
    let (_f, api) = with_cluster_firewall().await;
    api.post(&format!("{FW}/ipset"), &[("name", "local")]).await;

    let r = api.get(&format!("{FW}/refs")).await;
    assert_eq!(
        r.data(),
        &json!([
            {"type": "ipset", "name": "monitoring", "ref": "+monitoring", "scope": "dc",
             "comment": "prometheus"},
            {"type": "alias", "name": "office", "ref": "office", "scope": "dc",
             "comment": "head office"},
            {"type": "ipset", "name": "local", "ref": "+local", "scope": "guest"},
        ])
    );
    let r = api
        .send("GET", &format!("{FW}/refs"), &[("type", "ipset")])
        .await;
    assert_eq!(r.data().as_array().unwrap().len(), 2);

    for form in [
        vec![
            ("type", "in"),
            ("action", "ACCEPT"),
            ("source", "dc/office"),
        ],
        vec![
            ("type", "in"),
            ("action", "ACCEPT"),
            ("source", "+dc/monitoring"),
        ],
        vec![
            ("type", "group"),
            ("action", "webservers"),
            ("iface", "net0"),
        ],
    ] {
        add_rule(&api, &form).await;
    }
    let list = rules(&api).await;
    assert_eq!(list[0]["type"], "group");
    assert_eq!(list[0]["action"], "webservers");
    assert_eq!(
        list[2]["ipversion"], 4,
        "the cluster alias gives the family"
    );
    let (status, errors) = refused(
        &api,
        &[("type", "in"), ("action", "ACCEPT"), ("source", "+dc/nope")],
    )
    .await;
    assert_eq!(
        (status, errors["source"].as_str()),
        (400, Some("no such ipset 'nope'"))
    );
    let (status, errors) = refused(&api, &[("type", "group"), ("action", "bad name!")]).await;
    assert_eq!(status, 400, "{errors}");

    // An ipset entry may name the cluster's alias.
    let r = api
        .post(&format!("{FW}/ipset/local"), &[("cidr", "dc/office")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api.get(&format!("{FW}/ipset/local")).await;
    assert_eq!(r.data()[0]["cidr"], "dc/office");
}
