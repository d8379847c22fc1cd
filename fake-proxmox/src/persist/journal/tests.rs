#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

use super::*;
use crate::persist::tests::{busy_inner, runners};
use crate::persist::{encode, load, restored_inner};
use crate::qemu::model::Vm;
use crate::world::work::TaskPlan;
use crate::world::work::Work;
use fake_proxmox_world::storage::volumes::Volume;

/// The whole state as the export shows it, to compare worlds by.
fn doc(inner: &Inner) -> Value {
    serde_json::from_slice(&encode(inner)).unwrap()
}

/// What a server starting on `dir` would serve.
fn restart(dir: &Path) -> Inner {
    let st = load(dir).unwrap().expect("a state");
    restored_inner(st, runners(), None)
}

/// Write what changed in `inner` as the writer thread does.
fn persist(j: &mut Journal, inner: &mut Inner) {
    let p = j.take(inner);
    j.write(p).unwrap();
}

fn volume(vmid: u32) -> Volume {
    Volume {
        volname: format!("vm-{vmid}-disk-0"),
        vtype: fake_proxmox_world::storage::model::Content::Images,
        format: "raw".into(),
        size: 1 << 30,
        used: u64::from(vmid),
        vmid: Some(vmid),
        ctime: 0,
        notes: None,
        protected: false,
        image: None,
        text: None,
    }
}

/// One change of each kind the journal carries: a VM made and one changed, a container
/// gone, a task started and a running one changed, a node's storage, a fault, a snapshot.
fn change(inner: &mut Inner, vmid: u32) {
    let now = inner.clock.now();
    let site = &mut inner.world.sites[0];
    let node = site.nodes.keys().next().unwrap().clone();
    site.vms
        .insert(vmid, Vm::stopped(vmid, &node, Default::default(), None));
    if let Some(vm) = site.vms.get_mut(&100) {
        vm.config
            .insert("description".into(), format!("after {vmid}"));
    }
    site.cts.remove(&200);
    if let Some(n) = site.nodes.get_mut(&node) {
        n.online = vmid.is_multiple_of(2);
        if let Some(st) = n.storages.values_mut().next() {
            st.volumes
                .insert(volume(vmid).volname.clone(), volume(vmid));
            st.volumes.remove(&volume(vmid - 2).volname);
        }
    }
    let mut plan = TaskPlan::new("qmstart", vmid.to_string(), &node, "root@pam", Work::Noop);
    plan.line(0.5, "starting");
    site.start_task(plan, now);
    site.tick(now + 1.0);
    site.access.users.clear();
    inner.faults.clear();
    if vmid.is_multiple_of(5) {
        inner.world.scenario.seed += 1;
    }
    if vmid.is_multiple_of(3) {
        let id = inner.next_snapshot.to_string();
        inner.next_snapshot += 1;
        let w = inner.world.clone();
        inner.snapshots.insert(id, w);
    }
}

#[test]
fn records_replayed_on_the_snapshot_give_the_world_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    for vmid in 300..306 {
        change(&mut inner, vmid);
        persist(&mut j, &mut inner);
    }
    let journal = std::fs::read(dir.path().join(JOURNAL)).unwrap();
    assert_eq!(journal.iter().filter(|b| **b == b'\n').count(), 6);
    let back = restart(dir.path());
    assert_eq!(doc(&back), doc(&inner));
    assert!(back.world.sites[0].vms.contains_key(&305));
    assert!(!back.world.sites[0].cts.contains_key(&200));
}

#[test]
fn a_record_carries_the_change_not_the_world() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let site = &mut inner.world.sites[0];
    let node = site.nodes.keys().next().unwrap().clone();
    for vmid in 1000..3000 {
        site.vms
            .insert(vmid, Vm::stopped(vmid, &node, Default::default(), None));
    }
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    inner.world.sites[0]
        .vms
        .insert(3000, Vm::stopped(3000, &node, Default::default(), None));
    let Pending::Record(rec) = j.take(&mut inner) else {
        panic!("a record was due, not a snapshot");
    };
    let rec = j.encode(*rec).unwrap();
    let v: Value = serde_json::from_slice(&rec).unwrap();
    let vms = &v["sites"][0]["vms"];
    assert_eq!(vms["full"], false);
    assert_eq!(
        vms["set"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["3000"]
    );
    assert_eq!(v["sites"][0]["nodes"]["set"], serde_json::json!({}));
    // A volume more on a node: the node and that volume, not the node's other volumes.
    let n = inner.world.sites[0].nodes.get_mut(&node).unwrap();
    let st = n.storages.values_mut().next().unwrap();
    for vmid in 1000..1100 {
        st.volumes
            .insert(volume(vmid).volname.clone(), volume(vmid));
    }
    let Pending::Record(_) = j.take(&mut inner) else {
        panic!("a record was due");
    };
    let n = inner.world.sites[0].nodes.get_mut(&node).unwrap();
    let st = n.storages.values_mut().next().unwrap();
    st.volumes
        .insert(volume(3000).volname.clone(), volume(3000));
    let Pending::Record(rec) = j.take(&mut inner) else {
        panic!("a record was due");
    };
    let rec = j.encode(*rec).unwrap();
    let v: Value = serde_json::from_slice(&rec).unwrap();
    let set = v["sites"][0]["nodes"]["set"].as_object().unwrap();
    assert_eq!(set.keys().collect::<Vec<_>>(), [&node]);
    let vols = set[&node]["volumes"].as_object().unwrap();
    let changed: Vec<&String> = vols
        .values()
        .flat_map(|d| d["set"].as_object().unwrap().keys())
        .collect();
    assert_eq!(changed, ["vm-3000-disk-0"]);
    let snapshot = std::fs::metadata(dir.path().join(FILE)).unwrap().len();
    assert!(
        (rec.len() as u64) * 50 < snapshot,
        "{} vs {snapshot}",
        rec.len()
    );
}

/// The next record's JSON, written.
fn next_record(j: &mut Journal, inner: &mut Inner) -> Value {
    let Pending::Record(rec) = j.take(inner) else {
        panic!("a record was due, not a snapshot");
    };
    let bytes = j.encode(*rec).unwrap();
    j.append(&[&bytes[..], b"\n"].concat()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_record_repeats_neither_small_parts_nor_nodes_that_did_not_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    let node = inner.world.sites[0].nodes.keys().next().unwrap().clone();
    let add_volume = |inner: &mut Inner, vmid: u32| {
        let n = inner.world.sites[0].nodes.get_mut(&node).unwrap();
        let st = n.storages.values_mut().next().unwrap();
        st.volumes
            .insert(volume(vmid).volname.clone(), volume(vmid));
    };
    // The first record after the snapshot has nothing to compare with: all of it.
    add_volume(&mut inner, 300);
    let first = next_record(&mut j, &mut inner);
    let site = &first["sites"][0];
    assert_eq!(site.get("patch"), None);
    assert!(site["site"].get("access").is_some());
    assert!(site["nodes"]["set"][&node]["node"].is_object());
    // Then a volume more, and a user: the node as it was, of the small parts the access.
    add_volume(&mut inner, 301);
    inner.world.sites[0].access.users.clear();
    let second = next_record(&mut j, &mut inner);
    let site = &second["sites"][0];
    assert_eq!(site["patch"], true);
    let fields: Vec<&String> = site["site"].as_object().unwrap().keys().collect();
    assert_eq!(fields, ["access", "name"]);
    let entry = &site["nodes"]["set"][&node];
    assert_eq!(entry["node"], Value::Null);
    let vols: Vec<&String> = entry["volumes"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|d| d["set"].as_object().unwrap().keys())
        .collect();
    assert_eq!(vols, ["vm-301-disk-0"]);
    // The node itself changed: written again.
    inner.world.sites[0].nodes.get_mut(&node).unwrap().online = false;
    let third = next_record(&mut j, &mut inner);
    assert_eq!(
        third["sites"][0]["nodes"]["set"][&node]["node"]["online"],
        false
    );
    // And all of it reads back to the same world.
    let back = restart(dir.path());
    assert_eq!(doc(&back), doc(&inner));
    let vols = &back.world.sites[0].nodes[&node].storages;
    assert!(
        vols.values()
            .any(|s| s.volumes.contains_key("vm-301-disk-0"))
    );
}

#[test]
fn a_patch_for_a_site_or_node_that_is_not_there_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    change(&mut inner, 300);
    persist(&mut j, &mut inner);
    change(&mut inner, 301);
    persist(&mut j, &mut inner);
    let path = dir.path().join(JOURNAL);
    let text = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[1]["sites"][0]["patch"], true);
    // Without the first record, the second patches a site replay does not have.
    let name = lines[1]["sites"][0]["site"]["name"].clone();
    lines[1]["sites"][0]["site"]["name"] = Value::from("elsewhere");
    let write = |lines: &[Value]| {
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, body).unwrap();
    };
    write(&lines);
    let err = load(dir.path()).err().expect("an error");
    assert!(err.to_string().contains("line 2"), "{err}");
    // A node said unchanged that the site does not have.
    lines[1]["sites"][0]["site"]["name"] = name;
    let set = lines[1]["sites"][0]["nodes"]["set"]
        .as_object_mut()
        .unwrap();
    set.insert(
        "nowhere".into(),
        serde_json::json!({"node": null, "volumes": {}}),
    );
    write(&lines);
    let err = load(dir.path()).err().expect("an error");
    assert!(err.to_string().contains("nowhere"), "{err}");
}

#[test]
fn a_snapshot_folds_the_journal_and_records_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    change(&mut inner, 300);
    persist(&mut j, &mut inner);
    j.fold = true;
    change(&mut inner, 301);
    persist(&mut j, &mut inner);
    assert_eq!(
        std::fs::metadata(dir.path().join(JOURNAL)).unwrap().len(),
        0
    );
    change(&mut inner, 302);
    persist(&mut j, &mut inner);
    let back = restart(dir.path());
    assert_eq!(doc(&back), doc(&inner));
}

#[test]
fn records_a_snapshot_already_holds_are_skipped() {
    // The process died after the snapshot was renamed in, before the journal was emptied.
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    for vmid in 300..303 {
        change(&mut inner, vmid);
        persist(&mut j, &mut inner);
    }
    let journal = std::fs::read(dir.path().join(JOURNAL)).unwrap();
    // Later changes, then a snapshot naming record 3, and the old records still there.
    inner.world.sites[0].vms.remove(&300);
    crate::persist::write_atomic(dir.path(), FILE, &crate::persist::encode_file(&inner, 3))
        .unwrap();
    std::fs::write(dir.path().join(JOURNAL), &journal).unwrap();
    let back = restart(dir.path());
    assert!(!back.world.sites[0].vms.contains_key(&300));
    assert_eq!(doc(&back), doc(&inner));
}

#[test]
fn a_record_cut_short_is_dropped_and_the_next_start_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    change(&mut inner, 300);
    persist(&mut j, &mut inner);
    let acknowledged = doc(&inner);
    change(&mut inner, 301);
    let Pending::Record(rec) = j.take(&mut inner) else {
        panic!("a record was due");
    };
    let rec = j.encode(*rec).unwrap();
    // The process died half way through appending it.
    let path = dir.path().join(JOURNAL);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&rec[..rec.len() / 2]).unwrap();
    drop(f);
    let mut back = restart(dir.path());
    assert_eq!(doc(&back), acknowledged);
    // The next start writes a snapshot and an empty journal; its records read back.
    let seq = load(dir.path()).unwrap().unwrap().journal_seq;
    assert_eq!(seq, 1);
    let mut j = Journal::start(dir.path(), &mut back, seq).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    change(&mut back, 302);
    persist(&mut j, &mut back);
    assert_eq!(doc(&restart(dir.path())), doc(&back));
}

#[test]
fn a_bad_record_before_good_ones_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    change(&mut inner, 300);
    persist(&mut j, &mut inner);
    let path = dir.path().join(JOURNAL);
    let good = std::fs::read(&path).unwrap();
    let mut bad = b"{\"seq\":1,\"cut\n".to_vec();
    bad.extend_from_slice(&good);
    std::fs::write(&path, bad).unwrap();
    let err = load(dir.path()).err().expect("an error");
    assert!(err.to_string().contains("line 1"), "{err}");
}

#[test]
fn a_restart_after_many_changes_and_folds_is_the_same_world() {
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    for vmid in 300..700 {
        change(&mut inner, vmid);
        if vmid.is_multiple_of(97) {
            j.fold = true;
        }
        persist(&mut j, &mut inner);
    }
    let back = restart(dir.path());
    assert_eq!(doc(&back), doc(&inner));
    assert_eq!(
        back.world.sites[0].vms.len(),
        inner.world.sites[0].vms.len()
    );
    // And once more on top of the restart.
    let seq = load(dir.path()).unwrap().unwrap().journal_seq;
    let mut again = back;
    let mut j = Journal::start(dir.path(), &mut again, seq).unwrap();
    change(&mut again, 700);
    persist(&mut j, &mut again);
    assert_eq!(doc(&restart(dir.path())), doc(&again));
}

#[test]
fn snapshots_replaced_under_the_same_ids_are_written_again() {
    // An import brings its own snapshots, which may reuse the ids on disk.
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0).unwrap();
    change(&mut inner, 300);
    let other = inner.world.clone();
    inner.snapshots = [("1".to_string(), other)].into_iter().collect();
    persist(&mut j, &mut inner);
    let back = restart(dir.path());
    assert!(back.snapshots["1"].sites[0].vms.contains_key(&300));
    assert_eq!(doc(&back), doc(&inner));
}

#[test]
fn records_written_but_not_yet_synced_are_read_back_by_the_next_process() {
    // `StateSync::Write`, the server's default: the answer waits for the write only; the
    // next process (after a SIGKILL, say) reads the records from the kernel's copy.
    let dir = tempfile::tempdir().unwrap();
    let mut inner = busy_inner();
    let mut j = Journal::start(dir.path(), &mut inner, 0)
        .unwrap()
        .with_sync(StateSync::Write)
        .unwrap();
    for vmid in 300..304 {
        change(&mut inner, vmid);
        persist(&mut j, &mut inner);
    }
    let back = restart(dir.path());
    assert_eq!(doc(&back), doc(&inner));
    drop(j);
}

#[test]
fn the_sync_policy_reads_from_its_flag_values() {
    assert_eq!("write".parse::<StateSync>(), Ok(StateSync::Write));
    assert_eq!("data".parse::<StateSync>(), Ok(StateSync::Data));
    assert!(
        "fsync"
            .parse::<StateSync>()
            .unwrap_err()
            .contains("write or data")
    );
}
