//! vmstatus and status/current: which keys appear when, and their JSON types.

use std::collections::BTreeMap;

use super::*;

fn vm(power: Power) -> Vm {
    let config: BTreeMap<String, String> = [
        ("name", "web-1"),
        ("memory", "3072"),
        ("cores", "2"),
        ("scsi0", "local-lvm:vm-100-disk-0,size=32G"),
        ("tags", "prod"),
        ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
        ("ide2", "none,media=cdrom"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut vm = Vm::stopped(100, "pve", config, None);
    vm.power = power;
    vm.started_at = 1000.0;
    vm.pid = Some(4242);
    vm
}

fn json(st: &VmStatus) -> serde_json::Value {
    serde_json::to_value(st).unwrap_or_default()
}

#[test]
fn stopped_vm_has_integer_zeros_and_no_pid() {
    let v = json(&vm(Power::Stopped).vmstatus(1100.0, PveVersion::V9_1));
    assert_eq!(v["status"], "stopped");
    assert!(
        v["cpu"].is_u64(),
        "cpu of a stopped VM is the integer 0: {v}"
    );
    assert_eq!(v["uptime"], 0);
    assert_eq!(v["mem"], 0);
    assert!(v.get("pid").is_none());
    assert_eq!(v["maxmem"], 3072u64 << 20);
    assert_eq!(v["maxdisk"], 32u64 << 30);
    assert_eq!(v["cpus"], 2);
    assert_eq!(v["name"], "web-1");
    assert_eq!(v["tags"], "prod");
    // Route-specific keys stay out unless a route sets them.
    for k in [
        "qmpstatus",
        "ha",
        "id",
        "type",
        "node",
        "maxcpu",
        "template",
        "diskread",
        "diskwrite",
        "blockstat",
    ] {
        assert!(v.get(k).is_none(), "{k} should be absent: {v}");
    }
}

#[test]
fn running_vm_counts_uptime_and_io() {
    let v = json(&vm(Power::Running).vmstatus(1100.0, PveVersion::V9_1));
    assert_eq!(v["status"], "running");
    assert_eq!(v["uptime"], 100);
    assert_eq!(v["pid"], 4242);
    assert_eq!(v["netin"], 180_000);
    assert!(v["cpu"].is_f64());
    assert!(
        v.get("diskread").is_none(),
        "only the full status has it: {v}"
    );
    assert_eq!(
        vm(Power::Running).disk_io(1100.0),
        (100 * DISK_READ_PER_S, 100 * DISK_WRITE_PER_S)
    );
    assert_eq!(vm(Power::Paused).qmpstatus(), "paused");
}

#[test]
fn running_status_current_has_what_qmp_adds() {
    let v = json(&vm(Power::Running).vm_status(1100.0, PveVersion::V9_1));
    assert_eq!(v["qmpstatus"], "running");
    assert_eq!(v["running-qemu"], "10.1.2");
    assert_eq!(v["running-machine"], "pc-i440fx-10.1+pve0");
    assert_eq!(v["proxmox-support"]["pbs-dirty-bitmap"], true);
    assert!(v["proxmox-support"]["pbs-library-version"].is_string());
    // One blockstat per drive QEMU knows, CD-ROM included; totals are their sums.
    let drives: Vec<&String> = v["blockstat"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(drives, ["ide2", "scsi0"]);
    assert_eq!(v["blockstat"]["scsi0"]["rd_bytes"], 100 * DISK_READ_PER_S);
    assert_eq!(v["blockstat"]["ide2"]["rd_bytes"], 0);
    assert_eq!(v["blockstat"]["scsi0"]["account_failed"], true);
    assert_eq!(
        v["blockstat"]["scsi0"]["wr_highest_offset"],
        8 * 100 * DISK_WRITE_PER_S
    );
    assert_eq!(v["diskread"], 100 * DISK_READ_PER_S);
    assert_eq!(v["nics"]["tap100i0"]["netin"], 100 * NET_IN_PER_S);
    assert_eq!(v["netin"], v["nics"]["tap100i0"]["netin"]);
    // The default balloon device: mem comes from the guest's view.
    let info = &v["ballooninfo"];
    assert_eq!(info["max_mem"], 3072u64 << 20);
    assert_eq!(v["balloon"], info["actual"]);
    assert_eq!(v["freemem"], info["free_mem"]);
    let used = info["total_mem"].as_u64().unwrap_or(0) - info["free_mem"].as_u64().unwrap_or(0);
    assert_eq!(v["mem"], used);
    assert!(v["memhost"].as_u64().unwrap_or(0) > used);
    assert!(v["pressurecpusome"].is_f64());
    assert_eq!(v["ha"]["managed"], 0);
    for k in [
        "spice",
        "clipboard",
        "agent",
        "balloon_min",
        "shares",
        "serial",
    ] {
        assert!(v.get(k).is_none(), "{k} should be absent: {v}");
    }
}

#[test]
fn no_balloon_device_means_no_balloon_keys() {
    let mut vm = vm(Power::Running);
    vm.config.insert("balloon".into(), "0".into());
    let v = json(&vm.vm_status(1100.0, PveVersion::V9_1));
    for k in ["balloon", "ballooninfo", "freemem", "balloon_min", "shares"] {
        assert!(v.get(k).is_none(), "{k} should be absent: {v}");
    }
    assert_eq!(v["mem"], (3072u64 << 20) / 3);
}

#[test]
fn balloon_minimum_adds_shares() {
    let mut vm = vm(Power::Stopped);
    vm.config.insert("balloon".into(), "1024".into());
    let v = json(&vm.vmstatus(1100.0, PveVersion::V9_1));
    assert_eq!(v["balloon_min"], 1024u64 << 20);
    assert_eq!(v["shares"], 1000);
}

#[test]
fn stopped_status_current_has_no_qmp_keys() {
    let mut vm = vm(Power::Stopped);
    vm.config.insert("vga".into(), "qxl".into());
    vm.config.insert("serial0".into(), "socket".into());
    vm.config.insert("machine".into(), "q35".into());
    let v = json(&vm.vm_status(1100.0, PveVersion::V9_1));
    assert_eq!(v["qmpstatus"], "stopped");
    assert_eq!(v["memhost"], 0);
    assert_eq!(v["spice"], 1);
    assert_eq!(v["serial"], 1);
    // vm_status copies the unset clipboard of `vga`: a JSON null, as PVE sends it.
    assert!(v["clipboard"].is_null() && v.get("clipboard").is_some());
    for k in [
        "diskread",
        "diskwrite",
        "blockstat",
        "nics",
        "ballooninfo",
        "balloon",
        "proxmox-support",
        "running-machine",
        "running-qemu",
        "pressurecpusome",
        "pid",
    ] {
        assert!(v.get(k).is_none(), "{k} should be absent: {v}");
    }
    let mut running = vm;
    running.power = Power::Running;
    let v = json(&running.vm_status(1100.0, PveVersion::V9_1));
    assert_eq!(v["running-machine"], "pc-q35-10.1+pve0");
}

#[test]
fn keys_serialise_in_alphabetical_order() {
    let mut st = vm(Power::Running).vm_status(1100.0, PveVersion::V9_1);
    st.running_machine = Some("pc".into());
    st.proxmox_support = Some(ProxmoxSupport::of(PveVersion::V9_1));
    st.kind = Some("qemu");
    let text = serde_json::to_string(&st).unwrap_or_default();
    let v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).unwrap_or_default();
    let keys: Vec<&String> = v.keys().collect();
    let positions: Vec<usize> = keys
        .iter()
        .filter_map(|k| text.find(&format!("\"{k}\":")))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "not alphabetical: {text}"
    );
}

#[test]
fn older_releases_show_their_qemu_and_lack_pve9_keys() {
    let running = vm(Power::Running);
    let v = json(&running.vm_status(1100.0, PveVersion::V8_4));
    assert_eq!(v["running-qemu"], "9.2.0");
    assert_eq!(v["running-machine"], "pc-i440fx-9.2+pve0");
    for k in ["memhost", "pressurecpusome", "pressurememoryfull"] {
        assert!(v.get(k).is_none(), "{k} is PVE 9's: {v}");
    }
    assert!(v["proxmox-support"].get("backup-access-api").is_none());
    assert_eq!(v["proxmox-support"]["backup-fleecing"], true);
    assert!(v["blockstat"]["scsi0"]["zone_append_bytes"].is_u64());
    let v = json(&running.vm_status(1100.0, PveVersion::V7_1));
    assert_eq!(v["running-qemu"], "6.1.0");
    assert!(v["proxmox-support"].get("backup-fleecing").is_none());
    assert!(v["blockstat"]["scsi0"].get("zone_append_bytes").is_none());
    assert!(v["blockstat"]["scsi0"]["rd_bytes"].is_u64());
}
