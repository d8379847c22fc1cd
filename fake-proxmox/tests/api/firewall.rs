//! The VM firewall: rules in order, positions, moves, digests, PVE's validation texts,
//! options, aliases and ipsets with references, and the firewall going with its VM.

use serde_json::{Value, json};

use crate::common::*;

const FW: &str = "/nodes/ml110-01/qemu/100/firewall";

type Form = Vec<(&'static str, &'static str)>;

async fn vm(f: &Fake, api: &Api, vmid: &str) {
    let st = create_vm(f, api, "ml110-01", &[("vmid", vmid), ("name", "web")]).await;
    assert_eq!(st["exitstatus"], "OK");
}

async fn setup() -> (Fake, Api) {
    let f = start().await;
    let api = f.api("site-1");
    vm(&f, &api, "100").await;
    (f, api)
}

async fn rules(api: &Api) -> Vec<Value> {
    let r = api.get(&format!("{FW}/rules")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().as_array().unwrap().clone()
}

async fn add_rule(api: &Api, form: &[(&str, &str)]) {
    let r = api.post(&format!("{FW}/rules"), form).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &Value::Null);
}

fn comments(list: &[Value]) -> Vec<&str> {
    list.iter()
        .map(|r| r["comment"].as_str().unwrap())
        .collect()
}

/// A refused rule: the status and the one parameter error PVE names.
async fn refused(api: &Api, form: &[(&str, &str)]) -> (u16, Value) {
    let r = api.post(&format!("{FW}/rules"), form).await;
    (r.status, r.json["errors"].clone())
}

#[tokio::test]
async fn rules_go_first_and_list_back_in_order_with_positions() {
    let (_f, api) = setup().await;
    add_rule(
        &api,
        &[
            ("type", "in"),
            ("action", "ACCEPT"),
            ("macro", "ssh"),
            ("enable", "1"),
            ("comment", "a"),
        ],
    )
    .await;
    add_rule(
        &api,
        &[
            ("type", "out"),
            ("action", "DROP"),
            ("proto", "tcp"),
            ("dport", "25"),
            ("comment", "b"),
            ("pos", "1"),
        ],
    )
    .await;
    add_rule(
        &api,
        &[
            ("type", "in"),
            ("action", "ACCEPT"),
            ("source", "10.0.0.0/8"),
            ("proto", "tcp"),
            ("dport", "80,443"),
            ("iface", "net0"),
            ("log", "info"),
            ("enable", "1"),
            ("comment", "c"),
        ],
    )
    .await;
    let list = rules(&api).await;
    // PVE puts every new rule first (`pos` is ignored on create: `moveto` places it).
    assert_eq!(comments(&list), ["c", "b", "a"]);
    for (i, r) in list.iter().enumerate() {
        assert_eq!(r["pos"], json!(i));
        assert_eq!(r["digest"], list[0]["digest"]);
        assert_eq!(r["digest"].as_str().unwrap().len(), 40);
    }
    assert_eq!(
        list[0],
        json!({
            "pos": 0, "digest": list[0]["digest"], "type": "in", "action": "ACCEPT",
            "source": "10.0.0.0/8", "proto": "tcp", "dport": "80,443", "iface": "net0",
            "log": "info", "enable": 1, "ipversion": 4, "comment": "c",
        })
    );
    // Without `enable` a new rule is disabled; a macro is stored as PVE spells it.
    assert_eq!(list[1]["enable"], 0);
    assert_eq!(list[2]["macro"], "SSH");
    assert_eq!(list[2]["enable"], 1);

    let r = api.get(&format!("{FW}/rules/1")).await;
    assert_eq!(r.data(), &list[1]);
    let r = api.get(&format!("{FW}/rules/3")).await;
    assert_eq!((r.status, r.message()), (500, "no rule at position 3\n"));
}

#[tokio::test]
async fn rules_move_update_and_delete_guarded_by_the_digest() {
    let (_f, api) = setup().await;
    for c in ["d", "c", "b", "a"] {
        add_rule(
            &api,
            &[("type", "in"), ("action", "ACCEPT"), ("comment", c)],
        )
        .await;
    }
    assert_eq!(comments(&rules(&api).await), ["a", "b", "c", "d"]);
    let stale = rules(&api).await[0]["digest"].as_str().unwrap().to_string();

    // `moveto` puts the rule before the rule now at that position, ignoring the rest.
    let r = api
        .send(
            "PUT",
            &format!("{FW}/rules/3"),
            &[("moveto", "0"), ("comment", "x")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(comments(&rules(&api).await), ["d", "a", "b", "c"]);

    // The list changed since `stale` was read: PVE refuses.
    for (method, path) in [("DELETE", "rules/0"), ("PUT", "rules/0")] {
        let r = api
            .send(method, &format!("{FW}/{path}"), &[("digest", &stale)])
            .await;
        assert_eq!(r.status, 500, "{}", r.body);
        assert_eq!(
            r.message(),
            "detected modified configuration - file changed by other user? Try again.\n"
        );
    }
    // Past the end: last. To the next position: before the rule now there, i.e. no move.
    api.send("PUT", &format!("{FW}/rules/0"), &[("moveto", "9")])
        .await;
    assert_eq!(comments(&rules(&api).await), ["a", "b", "c", "d"]);
    api.send("PUT", &format!("{FW}/rules/1"), &[("moveto", "2")])
        .await;
    assert_eq!(comments(&rules(&api).await), ["a", "b", "c", "d"]);

    let digest = rules(&api).await[0]["digest"].as_str().unwrap().to_string();
    let r = api
        .send(
            "PUT",
            &format!("{FW}/rules/1"),
            &[
                ("digest", &digest),
                ("action", "DROP"),
                ("proto", "udp"),
                ("dport", "53"),
                ("enable", "1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .send(
            "PUT",
            &format!("{FW}/rules/1"),
            &[("delete", "dport,comment")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let b = &rules(&api).await[1];
    assert_eq!(
        (b["action"].as_str(), b["proto"].as_str()),
        (Some("DROP"), Some("udp"))
    );
    assert!(b.get("dport").is_none() && b.get("comment").is_none());
    let r = api
        .send("PUT", &format!("{FW}/rules/1"), &[("delete", "action")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["delete"],
        "unable to delete required property 'action'"
    );

    let r = api.send("DELETE", &format!("{FW}/rules/2"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(rules(&api).await.len(), 3);
    let r = api.send("DELETE", &format!("{FW}/rules/3"), &[]).await;
    assert_eq!((r.status, r.message()), (500, "no rule at position 3\n"));
}

#[tokio::test]
async fn invalid_rules_are_refused_with_pves_texts() {
    let (_f, api) = setup().await;
    let base = [("type", "in"), ("action", "ACCEPT")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v: Vec<(&str, &str)> = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    // Every one is a 400 naming one parameter.
    let cases: Vec<(Form, &str, &str)> = vec![
        (
            with(&[("proto", "tcp"), ("dport", "70000")]),
            "dport",
            "invalid format - invalid port '70000'\n",
        ),
        (
            with(&[("proto", "tcp"), ("sport", "90:80")]),
            "sport",
            "invalid format - backwards range '90:80' not allowed, did you mean '80:90'?\n",
        ),
        (
            with(&[("source", "10.0.0.300")]),
            "source",
            "invalid format - invalid IP address: Invalid quad in IP address 10.0.0.300 - 300\n",
        ),
        (
            with(&[("dest", "10.0.0.1/24")]),
            "dest",
            "invalid format - invalid IP address: Invalid prefix 00001010000000000000000000000001/24\n",
        ),
        (
            with(&[("proto", "bogus")]),
            "proto",
            "invalid format - unknown protocol 'bogus'\n",
        ),
        (with(&[("macro", "Nope")]), "macro", "unknown macro 'Nope'"),
        (
            with(&[("source", "+missing")]),
            "source",
            "no such ipset 'missing'",
        ),
        (
            with(&[("dest", "dc/office")]),
            "dest",
            "no such alias 'dc/office'",
        ),
        (
            with(&[("dport", "22")]),
            "proto",
            "missing property - 'dport' requires this property",
        ),
        (
            with(&[("proto", "gre"), ("dport", "22")]),
            "dport",
            "protocol 'gre' does not support ports",
        ),
        (
            with(&[("iface", "eth0")]),
            "iface",
            "value does not match the regex pattern 'net\\d+'",
        ),
        (
            with(&[("macro", "SSH"), ("proto", "udp")]),
            "proto",
            "parameter 'proto' already define in macro (value = 'tcp')",
        ),
        (
            with(&[("source", "10.0.0.1"), ("dest", "fd00::1")]),
            "dest",
            "detected mixed ipv4/ipv6 addresses in rule",
        ),
        (
            vec![("type", "forward"), ("action", "ACCEPT")],
            "type",
            "invalid rule type 'forward' for rule_env 'vm'",
        ),
        (
            vec![("type", "in"), ("action", "ALLOW")],
            "action",
            "unknown action 'ALLOW'",
        ),
    ];
    for (form, param, text) in cases {
        let (s, errors) = refused(&api, &form).await;
        assert_eq!(s, 400, "{form:?}: {errors}");
        assert_eq!(errors[param], text, "{form:?}: {errors}");
    }
    assert!(rules(&api).await.is_empty(), "nothing refused was stored");
}

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
        json!([{"name": "Web", "cidr": "10.0.0.5", "ipversion": 4, "comment": "front", "digest": digest}])
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
        .post(&sets, &[("name", "admins"), ("comment", "ops team")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
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
            {"type": "ipset", "name": "admins", "ref": "+admins", "scope": "guest", "comment": "ops team"},
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
        &json!([{"name": "rules"}, {"name": "aliases"}, {"name": "ipset"}, {"name": "refs"}, {"name": "options"}])
    );
    let r = api.get(&format!("{FW}/log")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &json!([{"n": 1, "t": "no content"}]));
    assert_eq!(r.json["total"], 1);
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
            {"type": "ipset", "name": "monitoring", "ref": "+monitoring", "scope": "dc", "comment": "prometheus"},
            {"type": "alias", "name": "office", "ref": "office", "scope": "dc", "comment": "head office"},
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
