//! Property tests for the validator and the property-string parser.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const CREATE: &str = "/nodes/{node}/qemu";

fn base() -> BTreeMap<String, RawValue> {
    [("node", "pve"), ("vmid", "100")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), RawValue::Text(v.to_string())))
        .collect()
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn raw_value() -> impl Strategy<Value = RawValue> {
    prop_oneof![
        "\\PC{0,40}".prop_map(RawValue::Text),
        "[a-z0-9=,:./+-]{0,40}".prop_map(RawValue::Text),
        json_value().prop_map(RawValue::Json),
    ]
}

/// Parameter names: real ones of the create call (with indexes filled in) and junk.
fn param_name() -> impl Strategy<Value = String> {
    let names: Vec<String> = ApiSchema::get(PveVersion::V9_1)
        .method("POST", CREATE)
        .unwrap()
        .parameters
        .keys()
        .cloned()
        .collect();
    prop_oneof![
        (prop::sample::select(names), 0u32..300)
            .prop_map(|(n, i)| n.replace("[n]", &i.to_string())),
        "[a-z_-]{1,12}[0-9]{0,3}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn validate_never_panics_and_errors_name_params(
        params in prop::collection::btree_map(param_name(), raw_value(), 0..12),
        version in prop::sample::select(PveVersion::ALL.to_vec()),
    ) {
        let mut all = base();
        all.extend(params);
        let schema = ApiSchema::get(version);
        match schema.validate("POST", CREATE, &all) {
            Ok(typed) => {
                // Everything typed came from the request.
                for k in typed.keys() {
                    prop_assert!(all.contains_key(k));
                }
            }
            Err(errors) => {
                prop_assert!(!errors.is_empty());
                for (k, msg) in &errors {
                    prop_assert!(!msg.is_empty());
                    // An error is about a parameter that was sent, or a required one.
                    prop_assert!(all.contains_key(k) || k == "_root"
                        || schema.method("POST", CREATE).unwrap().param(k).is_some(), "{k}");
                }
            }
        }
    }

    #[test]
    fn every_route_validates_random_input_without_panicking(
        pick in any::<prop::sample::Index>(),
        params in prop::collection::btree_map(param_name(), raw_value(), 0..6),
    ) {
        let schema = ApiSchema::get(PveVersion::V9_1);
        let pairs: Vec<(String, String)> = schema
            .templates()
            .flat_map(|t| schema.methods(t).map(move |m| (m.to_string(), t.to_string())))
            .collect();
        let (method, template) = pick.get(&pairs);
        let _ = schema.validate(method, template, &params);
    }

    #[test]
    fn property_strings_never_panic(key in prop::sample::select(vec![
        "net0", "scsi0", "virtio3", "ide2", "efidisk0", "ipconfig0", "memory", "agent",
        "pve-qm-boot", "pve-vm-cpu-conf", "smbios1", "rng0", "tpmstate0", "numa0", "usb0",
    ]), value in "\\PC{0,60}") {
        let _ = parse_property_string(key, &value);
    }

    #[test]
    fn integers_accept_exactly_the_perl_integer_syntax(n in any::<i64>(), plus in any::<bool>()) {
        let text = if plus && n >= 0 { format!("+{n}") } else { n.to_string() };
        let mut p = base();
        p.insert("cores".into(), RawValue::Text(text));
        let r = ApiSchema::get(PveVersion::V9_1).validate("POST", CREATE, &p);
        if n >= 1 {
            prop_assert_eq!(&r.unwrap()["cores"], &json!(n));
        } else {
            prop_assert_eq!(&r.unwrap_err()["cores"], "value must have a minimum value of 1");
        }
    }

    #[test]
    fn non_integers_are_type_errors(s in "[^0-9+-]\\PC{0,10}|[0-9]+[.a-z][0-9a-z]*") {
        let mut p = base();
        p.insert("cores".into(), RawValue::Text(s.clone()));
        let e = ApiSchema::get(PveVersion::V9_1).validate("POST", CREATE, &p).unwrap_err();
        prop_assert_eq!(&e["cores"], &format!("type check ('integer') failed - got '{s}'"));
    }

    #[test]
    fn form_booleans_are_exactly_0_or_1(s in "\\PC{0,6}") {
        let mut p = base();
        p.insert("onboot".into(), RawValue::Text(s.clone()));
        let r = ApiSchema::get(PveVersion::V9_1).validate("POST", CREATE, &p);
        match s.as_str() {
            "0" | "1" => prop_assert_eq!(&r.unwrap()["onboot"], &json!(s.parse::<u8>().unwrap())),
            _ => prop_assert_eq!(
                &r.unwrap_err()["onboot"],
                &format!("type check ('boolean') failed - got '{s}'")
            ),
        }
    }

    #[test]
    fn net_strings_round_trip(
        model in prop::sample::select(vec!["virtio", "e1000", "vmxnet3", "rtl8139"]),
        mac in "[0-9A-F][02468ACE](:[0-9A-F]{2}){5}",
        bridge in "vmbr[0-9]{1,3}",
        tag in 1u32..=4094,
        firewall in prop::sample::select(vec![("1", "1"), ("on", "1"), ("yes", "1"), ("false", "0"), ("OFF", "0")]),
        use_key_alias in any::<bool>(),
    ) {
        let head = if use_key_alias { format!("{model}={mac}") } else { format!("model={model},macaddr={mac}") };
        let s = format!("{head},bridge={bridge},tag={tag},firewall={}", firewall.0);
        let parsed = parse_property_string("net0", &s).unwrap();
        prop_assert_eq!(&parsed["model"], model);
        prop_assert_eq!(&parsed["macaddr"], &mac);
        prop_assert_eq!(&parsed["bridge"], &bridge);
        prop_assert_eq!(&parsed["tag"], &tag.to_string());
        prop_assert_eq!(&parsed["firewall"], firewall.1);
    }

    #[test]
    fn net_tag_out_of_range_names_the_sub_property(tag in 4095u32..100_000) {
        let e = parse_property_string("net0", &format!("virtio,bridge=vmbr0,tag={tag}")).unwrap_err();
        prop_assert_eq!(&e["net0.tag"], "value must have a maximum value of 4094");
    }

    #[test]
    fn routes_resolve_every_template_with_concrete_values(
        node in "[a-z][a-z0-9]{0,8}", vmid in 100u32..999_999_999,
    ) {
        let schema = ApiSchema::get(PveVersion::V9_1);
        for template in schema.templates() {
            let Some(method) = schema.methods(template).next() else { continue };
            let path = template
                .replace("{node}", &node)
                .replace("{vmid}", &vmid.to_string());
            match schema.route(method, &path) {
                RouteMatch::Found { template: t, path_params } => {
                    // Literal segments win, so a value that equals a literal could be shadowed;
                    // node names here cannot collide with the literal segments used.
                    prop_assert_eq!(t, template);
                    if template.contains("{vmid}") {
                        prop_assert_eq!(&path_params["vmid"], &vmid.to_string());
                    }
                }
                RouteMatch::NotImplemented => prop_assert!(false, "{path} did not route"),
            }
        }
    }
}
