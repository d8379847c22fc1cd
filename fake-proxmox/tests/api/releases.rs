//! Sites of every release: a 7.4, an 8.4 and a 9.1 site each validate every method of their
//! own release's API before any model code (a call with an unknown parameter gets PVE's 400
//! naming it, modelled route or not), answer the methods their release lacks with PVE's 501,
//! and report their own `/version`.

use std::collections::BTreeSet;

use fake_proxmox::schema::ApiSchema;
use fake_proxmox::{ClockMode, PveVersion, Scenario};

use crate::common::{Api, Fake, start_with};

const UNKNOWN: &str =
    "property is not defined in schema and the schema does not allow additional properties";

/// The default scenario with site-1 on `version`, and root's ticket client for it (a ticket,
/// not a token: methods with `allowtoken=0` refuse tokens before validating).
async fn site_of(version: PveVersion) -> (Fake, Api) {
    let yaml = Scenario::default_yaml().replacen(
        "version: \"9.1\"",
        &format!("version: \"{version}\""),
        1,
    );
    let f = start_with(Scenario::from_yaml_str(&yaml).unwrap(), ClockMode::Stepped).await;
    let api = f.api("site-1").login("root@pam", "harness").await;
    (f, api)
}

/// `template` with every `{param}` filled with a value that routes there.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some("node") => "ml110-01".to_string(),
                Some("vmid") => "100".to_string(),
                Some(name) => format!("probe-{name}"),
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

fn methods(v: PveVersion) -> BTreeSet<(String, String)> {
    let s = ApiSchema::get(v);
    s.templates()
        .flat_map(|t| s.methods(t).map(move |m| (m.to_string(), t.to_string())))
        .collect()
}

/// Every method of `version`'s dump is validated by the site; every method only other
/// releases have answers 501. Returns the two counts.
async fn check_release(version: PveVersion) -> (usize, usize) {
    let (_f, api) = site_of(version).await;
    let v = api.get("/version").await;
    assert_eq!(v.data()["release"], version.as_str(), "{}", v.body);
    assert_eq!(v.data()["version"], version.manager_version());

    let own = methods(version);
    let schema = ApiSchema::get(version);
    let mut problems = Vec::new();
    for (m, t) in &own {
        let path = concrete(t);
        let r = api.send(m, &path, &[("x-probe", "1")]).await;
        let refused = r.status == 400 && r.json["errors"]["x-probe"] == UNKNOWN;
        let open = schema.method(m, t).is_some_and(|i| i.additional_properties);
        if !refused && !open {
            problems.push(format!("{m} {path}: {} {}", r.status, r.body));
        }
    }
    let others: BTreeSet<(String, String)> = PveVersion::RELEASES
        .iter()
        .flat_map(|v| methods(*v))
        .filter(|k| !own.contains(k))
        .collect();
    for (m, t) in &others {
        let path = concrete(t);
        // A path the release routes to another template of its own (a `{param}` level) is
        // that template's call, not a missing one.
        if schema
            .find_template(&path)
            .is_some_and(|(own_t, _)| schema.method(m, own_t).is_some())
        {
            continue;
        }
        let r = api.send(m, &path, &[]).await;
        let message_ok = if version.has_error_message_key() {
            r.message() == format!("Method '{m} {path}' not implemented")
        } else {
            r.json.get("message").is_none()
        };
        if r.status != 501 || !message_ok {
            problems.push(format!(
                "{m} {path} (not in {version}): {} {}",
                r.status, r.body
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "PVE {version}:\n{}",
        problems.join("\n")
    );
    (own.len(), others.len())
}

#[tokio::test]
async fn a_7_4_site_validates_every_method_of_7_4() {
    let (own, others) = check_release(PveVersion::V7_4).await;
    eprintln!("PVE 7.4: {own} methods validated, {others} of later releases answer 501");
    assert_eq!(own, 540);
}

#[tokio::test]
async fn an_8_4_site_validates_every_method_of_8_4() {
    let (own, others) = check_release(PveVersion::V8_4).await;
    eprintln!("PVE 8.4: {own} methods validated, {others} of other releases answer 501");
    assert_eq!(own, 605);
}

#[tokio::test]
async fn a_9_1_site_validates_every_method_of_9_1() {
    let (own, others) = check_release(PveVersion::V9_1).await;
    eprintln!("PVE 9.1: {own} methods validated, {others} of earlier releases answer 501");
    assert_eq!(own, 649);
}

/// A scenario loaded through the control API may change a site's release: the next request is
/// routed and checked against the new release's schema, not the one the site answered as
/// before (the dispatcher resolves routes ahead of the world's lock for the last release seen).
#[tokio::test]
async fn a_release_changed_by_a_loaded_scenario_routes_the_next_request() {
    let f = start_with(
        Scenario::from_yaml_str(Scenario::default_yaml()).unwrap(),
        ClockMode::Stepped,
    )
    .await;
    let api = f.api("site-1");
    let path = "/cluster/mapping/pci";
    let probe = [("x-probe", "1")];
    let r = api.send("GET", path, &probe).await;
    assert_eq!(
        (r.status, &r.json["errors"]["x-probe"]),
        (400, &UNKNOWN.into()),
        "{}",
        r.body
    );

    let as_7_4 = Scenario::default_yaml().replacen("version: \"9.1\"", "version: \"7.4\"", 1);
    f.ctl("site-1").load_scenario_yaml(&as_7_4).await.unwrap();
    let r = api.send("GET", path, &probe).await;
    assert_eq!(r.status, 501, "{}", r.body);
    assert_eq!(api.get("/version").await.data()["release"], "7.4");

    f.ctl("site-1")
        .load_scenario_yaml(Scenario::default_yaml())
        .await
        .unwrap();
    let r = api.send("GET", path, &probe).await;
    assert_eq!(r.status, 400, "{}", r.body);
}
