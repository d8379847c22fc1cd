//! The VM firewall over HTTP: rules (order, positions, moves, digests, PVE's validation
//! texts) here; aliases, ipsets and references in `sets`; options, permissions, the log and
//! the firewall going with its VM in `vm`.

use serde_json::{Value, json};

use crate::common::*;

mod sets;
mod vm;

pub const FW: &str = "/nodes/ml110-01/qemu/100/firewall";

pub type Form = Vec<(&'static str, &'static str)>;

pub async fn vm(f: &Fake, api: &Api, vmid: &str) {
    let st = create_vm(f, api, "ml110-01", &[("vmid", vmid), ("name", "web")]).await;
    assert_eq!(st["exitstatus"], "OK");
}

pub async fn setup() -> (Fake, Api) {
    let f = start().await;
    let api = f.api("site-1");
    vm(&f, &api, "100").await;
    (f, api)
}

pub async fn rules(api: &Api) -> Vec<Value> {
    let r = api.get(&format!("{FW}/rules")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().as_array().unwrap().clone()
}

pub async fn add_rule(api: &Api, form: &[(&str, &str)]) {
    let r = api.post(&format!("{FW}/rules"), form).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &Value::Null);
}

pub fn comments(list: &[Value]) -> Vec<&str> {
    list.iter()
        .map(|r| r["comment"].as_str().unwrap())
        .collect()
}

/// A refused rule: the status and the one parameter error PVE names.
pub async fn refused(api: &Api, form: &[(&str, &str)]) -> (u16, Value) {
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
