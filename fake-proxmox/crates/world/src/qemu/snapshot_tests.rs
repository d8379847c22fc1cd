#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn drives_come_in_pves_order() {
    let mut keys = vec!["virtio0", "scsi10", "efidisk0", "scsi2", "ide2", "sata1"];
    keys.sort_by_key(|k| drive_order(k));
    assert_eq!(
        keys,
        ["ide2", "sata1", "scsi2", "scsi10", "virtio0", "efidisk0"]
    );
}

#[test]
fn a_snapshot_keeps_all_but_description_and_unused_disks() {
    let config: BTreeMap<String, String> = [
        ("memory", "2048"),
        ("description", "web"),
        ("unused0", "local-lvm:vm-100-disk-1"),
        ("parent", "a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let c = copied(&config);
    assert_eq!(c.keys().collect::<Vec<_>>(), ["memory", "parent"]);
}
