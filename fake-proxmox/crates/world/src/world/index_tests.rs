#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::lxc::model::Ct;
use crate::qemu::model::Vm;
use crate::tracked::Tracked;
use crate::world::Site;

const NODES: [&str; 4] = ["ml110-01", "n2", "n3", "gone"];

fn site() -> Site {
    let spec = &crate::scenario::Scenario::embedded_default().sites[0];
    Site::from_spec(spec, 1, 0.0)
}

/// What the index must answer, by a walk over every guest of the site.
fn by_walk(s: &Site, node: &str) -> Vec<u32> {
    s.guests()
        .filter(|g| g.core().node == node)
        .map(|g| g.core().vmid)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn lowest_by_walk(s: &Site) -> u32 {
    (100..).find(|id| s.guest(*id).is_none()).unwrap()
}

fn check(s: &Site, step: usize) {
    for node in NODES {
        assert_eq!(
            s.guest_ids_on(node),
            by_walk(s, node),
            "step {step}, {node}"
        );
        let vms: Vec<u32> = s.vms_on(node).map(|v| v.vmid).collect();
        let walk: Vec<u32> = s
            .vms
            .values()
            .filter(|v| v.node == node)
            .map(|v| v.vmid)
            .collect();
        assert_eq!(vms, walk, "step {step}, VMs on {node}");
        let cts: Vec<u32> = s.cts_on(node).map(|c| c.vmid).collect();
        let walk: Vec<u32> = s
            .cts
            .values()
            .filter(|c| c.node == node)
            .map(|c| c.vmid)
            .collect();
        assert_eq!(cts, walk, "step {step}, containers on {node}");
    }
    assert_eq!(s.lowest_free_vmid(), lowest_by_walk(s), "step {step}");
}

fn node(rng: &mut ChaCha8Rng) -> &'static str {
    NODES[rng.random_range(0..NODES.len())]
}

/// Creates, destroys and migrations of both kinds, the maps replaced as a state-file load,
/// a copy (snapshot restore, reset) and the journal's take-and-put-back do it, and
/// whole-map changes, in a seeded random order, with questions at random points between.
#[test]
fn answers_as_a_walk_over_every_guest_after_random_changes() {
    let mut rng = ChaCha8Rng::seed_from_u64(32);
    let mut s = site();
    for step in 0..20_000 {
        // Ids around the dense run's start, and some below 100 (never answered by nextid).
        let id = rng.random_range(95..170);
        match rng.random_range(0..100) {
            0..25 if s.cts.get(&id).is_none() => {
                s.vms
                    .insert(id, Vm::stopped(id, node(&mut rng), BTreeMap::new(), None));
            }
            25..35 if s.vms.get(&id).is_none() => {
                s.cts
                    .insert(id, Ct::stopped(id, node(&mut rng), BTreeMap::new(), None));
            }
            35..55 => {
                s.vms.remove(&id);
            }
            55..62 => {
                s.cts.remove(&id);
            }
            // Migration: the node changes through the `&mut` handed out.
            62..75 => {
                let to = node(&mut rng);
                if let Some(v) = s.vms.get_mut(&id) {
                    v.node = to.to_string();
                }
            }
            75..82 => {
                let to = node(&mut rng);
                if let Some(core) = s.guest_core_mut(id) {
                    core.node = to.to_string();
                }
            }
            82..85 => {
                let to = node(&mut rng);
                for c in s.cts.values_mut().filter(|c| c.vmid % 2 == 0) {
                    c.node = to.to_string();
                }
            }
            85..87 => {
                s.vms.retain(|k, _| k % 3 != 0);
            }
            // A state file read back: the maps as new ones.
            87..89 => {
                let vms = std::mem::take(&mut s.vms).into_inner();
                s.vms = Tracked::from(vms);
            }
            // The journal's take and put back (`persist`): the same map again.
            89..92 => {
                let vms = std::mem::take(&mut s.vms);
                let cts = std::mem::take(&mut s.cts);
                s.vms = vms;
                s.cts = cts;
            }
            // A copy of the site (snapshot restore, reset to a saved world).
            92..94 => s = s.clone(),
            // A copy of one map put in place of the other site's (swap of whole maps).
            94..95 => {
                let mut other = site();
                std::mem::swap(&mut s.cts, &mut other.cts);
                let _ = other.lowest_free_vmid();
                std::mem::swap(&mut s.cts, &mut other.cts);
            }
            _ => {}
        }
        if rng.random_bool(0.3) {
            check(&s, step);
        }
    }
    check(&s, usize::MAX);
}

#[test]
fn a_site_read_back_from_its_state_indexes_its_guests() {
    let mut s = site();
    for id in [100, 101, 102, 104] {
        s.vms
            .insert(id, Vm::stopped(id, "n2", BTreeMap::new(), None));
    }
    s.cts
        .insert(103, Ct::stopped(103, "n3", BTreeMap::new(), None));
    check(&s, 0);
    let text = serde_json::to_string(&s).unwrap();
    let back: Site = serde_json::from_str(&text).unwrap();
    assert_eq!(back.guest_ids_on("n2"), vec![100, 101, 102, 104]);
    assert_eq!(back.guest_ids_on("n3"), vec![103]);
    assert_eq!(back.lowest_free_vmid(), 105);
}

/// `nextid` on a dense run walks only past the ids taken since its last answer.
#[test]
fn nextid_after_a_run_of_creates_starts_where_it_stopped() {
    let mut s = site();
    for id in 100..5_000 {
        s.vms
            .insert(id, Vm::stopped(id, "n2", BTreeMap::new(), None));
    }
    assert_eq!(s.lowest_free_vmid(), 5_000);
    s.vms
        .insert(5_000, Vm::stopped(5_000, "n2", BTreeMap::new(), None));
    assert_eq!(s.lowest_free_vmid(), 5_001);
    assert_eq!(s.index.dense_end(), 5_001);
    s.vms.remove(&4_321);
    assert_eq!(
        s.lowest_free_vmid(),
        4_321,
        "a freed id below the run is found"
    );
    s.cts
        .insert(4_321, Ct::stopped(4_321, "n3", BTreeMap::new(), None));
    assert_eq!(s.lowest_free_vmid(), 5_001, "a container's id is taken too");
}
