//! Per release: every method of the release's dump is routed and validated (the probe), and the
//! behaviour gates between releases show in the schema as the dumps have them.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use super::*;

const CREATE: &str = "/nodes/{node}/qemu";
const UNKNOWN: &str =
    "property is not defined in schema and the schema does not allow additional properties";
const MISSING: &str = "property is missing and it is not optional";

fn text(pairs: &[(&str, &str)]) -> BTreeMap<String, RawValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), RawValue::Text(v.to_string())))
        .collect()
}

/// `template` with every `{param}` filled (a value that routes, not necessarily a valid one).
fn concrete(template: &str) -> (String, Vec<String>) {
    let mut names = Vec::new();
    let path = template
        .split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => {
                    names.push(name.to_string());
                    format!("probe-{name}")
                }
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/");
    (path, names)
}

/// The probe of one method: its path routes to it, and a call with an unknown parameter and
/// without its required ones is refused naming exactly those (plus path parameters whose
/// probe value does not fit their format).
fn probe(s: &ApiSchema, method: &str, template: &str) -> Result<(), String> {
    let (path, path_params) = concrete(template);
    match s.route(method, &path) {
        RouteMatch::Found { template: t, .. } if t == template => {}
        other => return Err(format!("{path} routes to {other:?}")),
    }
    let info = s.method(method, template).unwrap();
    let mut params: BTreeMap<String, RawValue> = path_params
        .iter()
        .map(|n| (n.clone(), RawValue::Text(format!("probe-{n}"))))
        .collect();
    params.insert("x-probe".into(), RawValue::Text("1".into()));
    let required: BTreeSet<String> = info
        .parameters
        .iter()
        .filter(|(n, p)| !p.is_optional() && !path_params.contains(n))
        .map(|(n, _)| n.replace("[n]", "0"))
        .collect();
    let errors = match s.validate(method, template, &params) {
        Ok(_) if info.additional_properties && required.is_empty() => return Ok(()),
        Ok(_) => return Err("validates without its required parameters".into()),
        Err(e) => e,
    };
    if !info.additional_properties && errors.get("x-probe").map(String::as_str) != Some(UNKNOWN) {
        return Err(format!("the unknown parameter is not refused: {errors:?}"));
    }
    for r in &required {
        if errors.get(r).map(String::as_str) != Some(MISSING) {
            return Err(format!("required {r} is not asked for: {errors:?}"));
        }
    }
    let stray: Vec<&String> = errors
        .keys()
        .filter(|k| *k != "x-probe" && !required.contains(*k) && !path_params.contains(k))
        .collect();
    if !stray.is_empty() {
        return Err(format!("errors on parameters not sent: {stray:?}"));
    }
    Ok(())
}

#[test]
fn every_method_of_every_release_routes_and_validates() {
    // The method counts of the dumps (7.4-16, 8.4.5, 9.1): a regenerated dump shows here.
    let expected = [
        (PveVersion::V7_4, 540),
        (PveVersion::V8_4, 605),
        (PveVersion::V9_1, 649),
    ];
    for (v, count) in expected {
        let s = ApiSchema::get(v);
        let mut n = 0;
        let mut failures = Vec::new();
        for t in s.templates() {
            for m in s.methods(t) {
                n += 1;
                if let Err(e) = probe(s, m, t) {
                    failures.push(format!("{m} {t}: {e}"));
                }
            }
        }
        eprintln!("PVE {v}: {n} methods, each routes and validates");
        assert!(failures.is_empty(), "PVE {v}:\n{}", failures.join("\n"));
        assert_eq!(n, count, "PVE {v}'s method count");
    }
}

/// A method a release lacks is not found: the fake answers PVE's 501 for it.
#[test]
fn a_method_a_release_lacks_is_not_found() {
    let s = ApiSchema::get(PveVersion::V7_4);
    // `oci-registry-pull` is 9.x, `PUT /pools` (poolid in the body) 8.x.
    for (m, p) in [
        ("POST", "/nodes/pve/storage/local/oci-registry-pull"),
        ("PUT", "/pools"),
        ("GET", "/cluster/mapping/pci"),
    ] {
        assert_eq!(s.route(m, p), RouteMatch::NotImplemented, "{m} {p}");
        assert!(matches!(
            ApiSchema::get(PveVersion::V9_1).route(m, p),
            RouteMatch::Found { .. }
        ));
    }
    // 9.x dropped GlusterFS.
    let p = "/nodes/pve/scan/glusterfs";
    assert!(matches!(
        ApiSchema::get(PveVersion::V8_4).route("GET", p),
        RouteMatch::Found { .. }
    ));
    assert_eq!(
        ApiSchema::get(PveVersion::V9_1).route("GET", p),
        RouteMatch::NotImplemented
    );
}

fn accepts(v: PveVersion, method: &str, template: &str, pairs: &[(&str, &str)]) -> bool {
    ApiSchema::get(v)
        .validate(method, template, &text(pairs))
        .is_ok()
}

/// Which releases accept `pairs` on a create: `[7.1, 7.4, 8.4, 9.1]`.
fn create_accepted_by(pairs: &[(&str, &str)]) -> Vec<bool> {
    let mut all = vec![("node", "pve"), ("vmid", "100")];
    all.extend_from_slice(pairs);
    PveVersion::ALL
        .iter()
        .map(|v| accepts(*v, "POST", CREATE, &all))
        .collect()
}

#[test]
fn gate_import_from_since_7_2() {
    assert_eq!(
        create_accepted_by(&[("scsi0", "local-lvm:0,import-from=local-lvm:vm-9000-disk-0")]),
        [false, true, true, true]
    );
}

#[test]
fn gate_import_content_since_8_2() {
    // `content=import` of download-url and upload (their enums), and import-metadata.
    let dl = "/nodes/{node}/storage/{storage}/download-url";
    let form = [
        ("node", "pve"),
        ("storage", "local"),
        ("content", "import"),
        ("filename", "noble.qcow2"),
        ("url", "http://127.0.0.1/noble.qcow2"),
    ];
    let by: Vec<bool> = PveVersion::ALL
        .iter()
        .map(|v| accepts(*v, "POST", dl, &form))
        .collect();
    assert_eq!(by, [false, false, true, true]);
    let meta = "/nodes/{node}/storage/{storage}/import-metadata";
    let has: Vec<bool> = PveVersion::ALL
        .iter()
        .map(|v| ApiSchema::get(*v).method("GET", meta).is_some())
        .collect();
    assert_eq!(has, [false, false, true, true]);
    let gate: Vec<bool> = PveVersion::ALL
        .iter()
        .map(|v| v.has_import_content())
        .collect();
    assert_eq!(gate, [false, false, true, true]);
}

#[test]
fn gate_memory_property_string_since_8_1() {
    assert_eq!(
        create_accepted_by(&[("memory", "current=2048")]),
        [false, false, true, true]
    );
    assert_eq!(create_accepted_by(&[("memory", "2048")]), [true; 4]);
    let typed: Vec<serde_json::Value> = PveVersion::ALL
        .iter()
        .map(|v| {
            ApiSchema::get(*v)
                .validate(
                    "POST",
                    CREATE,
                    &text(&[("node", "pve"), ("vmid", "100"), ("memory", "2048")]),
                )
                .unwrap()["memory"]
                .clone()
        })
        .collect();
    assert_eq!(
        typed,
        [
            serde_json::json!(2048),
            serde_json::json!(2048),
            serde_json::json!("2048"),
            serde_json::json!("2048")
        ]
    );
}

#[test]
fn gate_cloud_init_options() {
    // `ciupgrade` since 8.1; the other cloud-init options in every release.
    assert_eq!(
        create_accepted_by(&[("ciupgrade", "0")]),
        [false, false, true, true]
    );
    let common = [
        ("ciuser", "ops"),
        ("cipassword", "x"),
        ("citype", "nocloud"),
        ("cicustom", "user=local:snippets/u.yaml"),
        ("ipconfig0", "ip=dhcp"),
        ("nameserver", "192.0.2.1"),
        ("searchdomain", "example.com"),
    ];
    assert_eq!(create_accepted_by(&common), [true; 4]);
}

#[test]
fn gate_agent_options() {
    // `freeze-fs` and `guest-fsfreeze` came with 9.x; `freeze-fs-on-backup` and
    // `fstrim_cloned_disks`, `type` are in every release.
    assert_eq!(
        create_accepted_by(&[("agent", "1,freeze-fs=0")]),
        [false, false, false, true]
    );
    assert_eq!(
        create_accepted_by(&[("agent", "1,guest-fsfreeze=0")]),
        [false, false, false, true]
    );
    assert_eq!(
        create_accepted_by(&[(
            "agent",
            "enabled=1,freeze-fs-on-backup=0,fstrim_cloned_disks=1,type=virtio"
        )]),
        [true; 4]
    );
}

#[test]
fn gate_storage_types() {
    let types = |v: PveVersion| -> Vec<String> {
        ApiSchema::get(v)
            .method("POST", "/storage")
            .unwrap()
            .param("type")
            .unwrap()
            .enumeration
            .clone()
            .unwrap()
    };
    // `esxi` since 8.2 (the importer), `glusterfs` gone in 9.0.
    for (v, esxi, gluster) in [
        (PveVersion::V7_4, false, true),
        (PveVersion::V8_4, true, true),
        (PveVersion::V9_1, true, false),
    ] {
        let t = types(v);
        assert_eq!(t.contains(&"esxi".to_string()), esxi, "{v}: {t:?}");
        assert_eq!(t.contains(&"glusterfs".to_string()), gluster, "{v}: {t:?}");
        for common in [
            "dir", "lvmthin", "nfs", "cifs", "rbd", "cephfs", "zfspool", "pbs",
        ] {
            assert!(t.contains(&common.to_string()), "{v}: {common}");
        }
    }
}

#[test]
fn versions_are_ordered_by_release() {
    assert!(PveVersion::V7_1 < PveVersion::V7_4);
    assert!(PveVersion::V7_4 < PveVersion::V8_4);
    assert!(PveVersion::V8_4 < PveVersion::V9_1);
    assert_eq!("7.4".parse::<PveVersion>(), Ok(PveVersion::V7_4));
    assert_eq!(PveVersion::parse(" 7.4 "), Some(PveVersion::V7_4));
    assert_eq!(PveVersion::V7_4.manager_version(), "7.4-16");
    assert_eq!(PveVersion::V7_4.repoid(), "0f39f621");
    assert_eq!(PveVersion::V8_4.manager_version(), "8.4.5");
    let releases: Vec<&str> = PveVersion::RELEASES.iter().map(|v| v.as_str()).collect();
    assert_eq!(releases, ["7.4", "8.4", "9.1"]);
}

/// The behaviour gates (`release`'s methods) per version: `[7.1, 7.4, 8.4, 9.1]`.
#[test]
fn behaviour_gates_per_release() {
    let by = |f: fn(PveVersion) -> bool| -> Vec<bool> { PveVersion::ALL.map(f).to_vec() };
    let from_8 = [false, false, true, true];
    assert_eq!(by(PveVersion::has_import_from), [false, true, true, true]);
    assert_eq!(by(PveVersion::has_import_content), from_8);
    assert_eq!(by(PveVersion::memory_is_string), from_8);
    assert_eq!(by(PveVersion::has_error_message_key), from_8);
    assert_eq!(by(PveVersion::resize_returns_upid), from_8);
    assert_eq!(by(PveVersion::bridge_needs_sdn_use), from_8);
    assert_eq!(by(PveVersion::iso_requires_cdrom), from_8);
    assert_eq!(by(PveVersion::has_zoned_block_stats), from_8);
    assert_eq!(by(PveVersion::names_qga_peer), [false, false, false, true]);
}
