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
        .collect();
    let listed = pairs(include_str!("modelled_outside_subset.txt"));
    let added: Vec<_> = outside.difference(&listed).collect();
    let dropped: Vec<_> = listed.difference(&outside).collect();
    assert!(
        added.is_empty() && dropped.is_empty(),
        "update tests/api/modelled_outside_subset.txt (and README's route list): modelled but not listed {added:#?}; listed but not modelled {dropped:#?}"
    );
}
