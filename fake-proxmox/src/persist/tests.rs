#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rand::Rng;
use serde_json::Value;

use super::*;
use crate::clock::ClockMode;
use crate::exec::{Simulated, SimulatedDisks};
use crate::faults::FaultRule;
use crate::lxc::model::Ct;
use crate::qemu::model::Vm;
use crate::world::work::{TaskPlan, Work};

pub(super) fn runners() -> Runners {
    Runners {
        exec: Arc::new(Simulated),
        disks: Arc::new(SimulatedDisks),
    }
}

/// The seed world on a stepped clock, with a VM being created (its task running), a
/// finished task, a fault rule and a snapshot.
pub(super) fn busy_inner() -> Inner {
    let mut inner = Inner::fresh(
        &Scenario::embedded_default(),
        ClockMode::Stepped,
        runners(),
        None,
    );
    let now = inner.clock.now();
    let site = &mut inner.world.sites[0];
    let node = site.nodes.keys().next().unwrap().clone();
    site.vms.insert(
        100,
        Vm::stopped(100, &node, Default::default(), Some("create")),
    );
    let mut ct_config = std::collections::BTreeMap::new();
    ct_config.insert("hostname".to_string(), "cache-1".to_string());
    ct_config.insert(
        "rootfs".to_string(),
        "local-lvm:vm-200-disk-0,size=8G".to_string(),
    );
    site.cts
        .insert(200, Ct::stopped(200, &node, ct_config, None));
    let mut done = TaskPlan::new("qmstart", "99", &node, "root@pam", Work::Noop);
    done.line(0.1, "starting");
    site.start_task(done, now - 10.0);
    site.tick(now);
    let mut plan = TaskPlan::new("qmcreate", "100", &node, "root@pam", Work::Noop);
    plan.line(0.0, "creating");
    plan.line(30.0, "later");
    plan.duration = 60.0;
    site.start_task(plan, now - 5.0);
    inner
        .faults
        .add(FaultRule {
            method: Some("POST".into()),
            path_pattern: Some("/nodes/*/qemu".into()),
            status: Some(500),
            count: Some(2),
            ..FaultRule::default()
        })
        .unwrap();
    inner.snapshots.insert("1".into(), inner.world.clone());
    inner.next_snapshot = 2;
    inner
}

fn reread(bytes: &[u8]) -> Inner {
    let st = decode(bytes).unwrap();
    restored_inner(st, runners(), None)
}

#[test]
fn a_state_reads_back_to_the_same_document() {
    let inner = busy_inner();
    let first = encode(&inner);
    let again = encode(&reread(&first));
    assert_eq!(
        serde_json::from_slice::<Value>(&first).unwrap(),
        serde_json::from_slice::<Value>(&again).unwrap()
    );
    let v: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(v["format"], FORMAT);
    assert_eq!(v["version"], VERSION);
}

#[test]
fn what_a_state_holds_comes_back() {
    let inner = busy_inner();
    let back = reread(&encode(&inner));
    let site = &back.world.sites[0];
    assert_eq!(site.vms[&100].lock.as_deref(), Some("create"));
    // A container keeps its kind, config and VMID (one space with the VMs).
    let ct = &site.cts[&200];
    assert_eq!(ct.core.kind, crate::guest::GuestKind::Lxc);
    assert_eq!(ct.config["hostname"], "cache-1");
    assert_eq!(site.vmids_from(100).collect::<Vec<_>>(), [100, 200]);
    assert_eq!(site.tasks.len(), 2);
    assert_eq!(site.tasks.running_count(), 1);
    assert_eq!(back.faults.list(), inner.faults.list());
    assert!(back.snapshots.contains_key("1"));
    assert_eq!(back.next_snapshot, 2);
    assert_eq!(back.clock.mode(), ClockMode::Stepped);
    assert_eq!(back.clock.now(), inner.clock.now());
    // Secrets too: a restarted server must accept the same tokens and passwords.
    let (a, b) = (&inner.world.sites[0].access, &site.access);
    assert_eq!(
        a.tokens.values().map(|t| &t.secret).collect::<Vec<_>>(),
        b.tokens.values().map(|t| &t.secret).collect::<Vec<_>>()
    );
}

#[test]
fn the_random_source_goes_on_where_it_was() {
    let mut inner = busy_inner();
    let _: u64 = inner.world.sites[0].rng.random();
    let mut back = reread(&encode(&inner));
    let want: [u64; 4] = inner.world.sites[0].rng.random();
    let got: [u64; 4] = back.world.sites[0].rng.random();
    assert_eq!(want, got);
}

#[test]
fn a_task_running_at_the_crash_stops_with_unexpected_status() {
    let inner = busy_inner();
    let at = inner.clock.now();
    let mut back = reread(&encode(&inner));
    assert_eq!(interrupt_running(&mut back, at), 1);
    let site = &back.world.sites[0];
    let t = site.tasks.iter().find(|t| t.ttype == "qmcreate").unwrap();
    assert_eq!(t.status_json()["status"], "stopped");
    assert_eq!(t.status_json()["exitstatus"], "unexpected status");
    // The log ends where the worker got to, with no TASK OK / TASK ERROR line.
    assert_eq!(t.log_lines(at + 100.0), ["creating"]);
    // No worker is left to clean up: the create's lock stays.
    assert_eq!(site.vms[&100].lock.as_deref(), Some("create"));
    // A task that had finished keeps its status.
    let done = site.tasks.iter().find(|t| t.ttype == "qmstart").unwrap();
    assert_eq!(done.exitstatus.as_deref(), Some("OK"));
}

fn with(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(bytes).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn another_version_is_named_not_misread() {
    let good = encode(&busy_inner());
    let newer = with(&good, |v| v["version"] = Value::from(VERSION + 1));
    let e = decode(&newer).err().unwrap();
    assert!(matches!(e, PersistError::Version { found } if found == VERSION + 1));
    assert!(
        e.to_string().contains("cannot be read by this build"),
        "{e}"
    );
}

#[test]
fn other_files_are_refused_with_what_is_wrong() {
    let good = encode(&busy_inner());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "not a JSON object"),
        (b"[1,2]".to_vec(), "not a JSON object"),
        (b"{}".to_vec(), "no 'format' field"),
        (
            with(&good, |v| v["format"] = "something-else".into()),
            "format is 'something-else'",
        ),
        (
            with(&good, |v| {
                v.as_object_mut().unwrap().remove("version");
            }),
            "no 'version' field",
        ),
        (
            with(&good, |v| v["world"]["sites"] = Value::Array(Vec::new())),
            "are not the scenario's sites",
        ),
        (
            with(&good, |v| {
                v["world"]["sites"][0]["vms"]["100"]["node"] = "nowhere".into()
            }),
            "which the site does not have",
        ),
        (
            with(&good, |v| v["faults"]["rules"] = "x".into()),
            "invalid state file",
        ),
        (good[..good.len() / 2].to_vec(), "not a JSON object"),
    ];
    for (bytes, want) in cases {
        let e = decode(&bytes).err().expect(want).to_string();
        assert!(e.contains(want), "{e:?} does not say {want:?}");
    }
}

#[test]
fn an_atomic_write_replaces_the_file_and_leaves_no_temp() {
    let dir = tempfile::tempdir().unwrap();
    write_atomic(dir.path(), FILE, b"one").unwrap();
    write_atomic(dir.path(), FILE, b"two").unwrap();
    assert_eq!(std::fs::read(dir.path().join(FILE)).unwrap(), b"two");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [FILE]);
    assert!(load(dir.path()).is_err(), "'two' is not a state");
    assert!(load(&dir.path().join("none")).unwrap().is_none());
}

#[test]
fn times_read_back_to_the_same_bits() {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for _ in 0..20_000 {
        let t: f64 = 1.7e9 + rng.random::<f64>() * 1e8;
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(
            serde_json::from_str::<f64>(&text).unwrap().to_bits(),
            t.to_bits(),
            "{text}"
        );
    }
}

#[test]
fn a_state_written_before_groups_roles_realms_and_pools_still_loads() {
    let mut inner = busy_inner();
    {
        let access = &mut inner.world.sites[0].access;
        access.groups.insert("ops".into(), Default::default());
        access.pools.insert("prod".into(), Default::default());
        access
            .roles
            .insert("Deployer".into(), ["VM.Audit".to_string()].into());
    }
    let mut v: Value = serde_json::from_slice(&encode(&inner)).unwrap();
    // What an older build wrote: the access state without the later fields.
    let sites = v["world"]["sites"].as_array_mut().unwrap();
    for site in sites {
        let access = site["access"].as_object_mut().unwrap();
        for k in ["groups", "roles", "realms", "pools"] {
            access.remove(k);
        }
        for user in access["users"].as_object_mut().unwrap().values_mut() {
            let user = user.as_object_mut().unwrap();
            for k in [
                "expire",
                "firstname",
                "lastname",
                "email",
                "comment",
                "keys",
            ] {
                user.remove(k);
            }
        }
    }
    let old = serde_json::to_vec(&v).unwrap();
    let back = reread(&old);
    let access = &back.world.sites[0].access;
    assert!(access.groups.is_empty() && access.pools.is_empty() && access.roles.is_empty());
    let realms: Vec<&String> = access.realms.keys().collect();
    assert_eq!(realms, ["pam", "pve"], "the built-in realms are there");
    assert_eq!(access.users["root@pam"].expire, 0);
    // And the new fields round-trip.
    let now = encode(&inner);
    let again = encode(&reread(&now));
    let a: Value = serde_json::from_slice(&now).unwrap();
    let b: Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(
        a["world"]["sites"][0]["access"],
        b["world"]["sites"][0]["access"]
    );
    assert!(a["world"]["sites"][0]["access"]["pools"]["prod"].is_object());
}
