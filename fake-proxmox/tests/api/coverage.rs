//! Route coverage: every method of the VM subset is modelled (none answers 501), and the
//! routes modelled beyond it are the ones `modelled_outside_subset.txt` names — so a route
//! added or dropped is a visible change to that list, not a silent one.

use std::collections::BTreeSet;

use fake_proxmox::router::{handler_for, table};

fn pairs(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect()
}

const LXC: &str = "/nodes/{node}/lxc";

fn subset() -> BTreeSet<(String, String)> {
    pairs(include_str!("vm_subset.txt"))
}

#[test]
fn every_method_of_the_vm_subset_is_modelled() {
    let subset = subset();
    assert_eq!(subset.len(), 147, "the subset's method count");
    let missing: Vec<String> = subset
        .iter()
        .filter(|(m, p)| handler_for(m, p).is_none())
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert!(missing.is_empty(), "answer 501: {missing:#?}");
}

#[test]
fn the_routes_modelled_outside_the_subset_are_listed() {
    let subset = subset();
    let outside: BTreeSet<(String, String)> = table()
        .iter()
        .map(|r| (r.method.to_string(), r.template.to_string()))
        .filter(|k| !subset.contains(k))
        // The container family has its own list (below).
        .filter(|(_, t)| !t.starts_with(LXC))
        .collect();
    let listed = pairs(include_str!("modelled_outside_subset.txt"));
    let added: Vec<_> = outside.difference(&listed).collect();
    let dropped: Vec<_> = listed.difference(&outside).collect();
    assert!(
        added.is_empty() && dropped.is_empty(),
        "update tests/api/modelled_outside_subset.txt (and the route list in docs/src/fake-proxmox/api-coverage.md): modelled but not listed {added:#?}; listed but not modelled {dropped:#?}"
    );
}

/// Every method of the 9.1 API's container family is modelled, and no container route is
/// served that 9.1 does not have.
#[test]
fn every_container_method_is_modelled() {
    let schema = fake_proxmox::schema::ApiSchema::get(fake_proxmox::PveVersion::V9_1);
    let family: BTreeSet<(String, String)> = schema
        .templates()
        .filter(|t| t.starts_with(LXC))
        .flat_map(|t| {
            schema
                .methods(t)
                .map(move |m| (m.to_string(), t.to_string()))
        })
        .collect();
    assert_eq!(family.len(), 62, "the 9.1 container family's method count");
    let missing: Vec<String> = family
        .iter()
        .filter(|(m, p)| handler_for(m, p).is_none())
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert!(missing.is_empty(), "answer 501: {missing:#?}");
    let extra: Vec<_> = table()
        .iter()
        .filter(|r| r.template.starts_with(LXC))
        .filter(|r| !family.contains(&(r.method.to_string(), r.template.to_string())))
        .map(|r| format!("{} {}", r.method, r.template))
        .collect();
    assert!(
        extra.is_empty(),
        "container routes 9.1 does not have: {extra:?}"
    );
}
