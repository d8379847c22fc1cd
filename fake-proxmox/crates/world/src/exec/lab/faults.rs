//! Faults on a real guest ([`GuestFault`]), each done the way it happens to a real VM and
//! left for the API to show the way PVE would:
//!
//! - `kill`: QEMU gets SIGKILL. Nothing is recorded here; the next request's `refresh` finds
//!   the process gone and `status/current` shows `stopped`, as PVE shows a crashed VM.
//! - `pause`: QMP `stop` from outside PVE. PVE reads QMP's run state, so the VM is `paused`
//!   (`qmpstatus` too); its agent calls fail with `QEMU guest agent is not running` (PVE's
//!   `guest-ping` check times out first); `status/resume` continues it.
//! - `link_down` / `link_up`: QMP `set_link` on `netN`. A fault is not a config change: the
//!   config keeps no `link_down=1` (that is the admin's setting, applied at start); the guest
//!   loses its carrier, peers and pings fail, the agent still answers over virtio-serial.
//! - `disk_write_error`: every write to the disk fails with EIO from now until QEMU stops;
//!   reads still work. QEMU 7.2 has no QMP verb that fails a `-drive`'s I/O, so a qcow2
//!   overlay whose file sits on a `blkdebug` node injecting EIO on every write is put on top
//!   of the drive (`blockdev-add` + `blockdev-snapshot`): the guest's writes go to the overlay
//!   and fail; the volume keeps what was written before. With the default `werror=enospc`
//!   QEMU reports EIO to the guest and keeps running (`qmpstatus` stays `running`, as PVE
//!   would show it; an `io-error` stop needs ENOSPC or `werror=stop`, not done here).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use vm_lab::guests::Guest;

use super::LabExecutor;
use super::power::qmp_failed;
use crate::exec::GuestFault;
use crate::qemu::model::{Power, Vm, prop, split_props};

/// Bound on one QMP command of a fault.
const QMP_TIMEOUT: Duration = Duration::from_secs(5);

impl LabExecutor {
    /// Do `fault` to `vm`'s running guest.
    pub(super) fn inject(&self, vm: &mut Vm, fault: &GuestFault) -> Result<(), String> {
        let target = fault.target()?;
        if let Some(key) = target
            && !vm.config.contains_key(key)
        {
            return Err(format!("VM {} has no {key}", vm.vmid));
        }
        let g = self
            .running_guest(vm)
            .ok_or_else(|| format!("VM {} not running", vm.vmid))?;
        match fault {
            GuestFault::Kill => {
                g.kill();
                Ok(())
            }
            GuestFault::Pause => {
                g.pause().map_err(|e| qmp_failed(vm.vmid, "stop", &e))?;
                vm.power = Power::Paused;
                Ok(())
            }
            GuestFault::LinkDown { net } | GuestFault::LinkUp { net } => {
                let index = nic_index(net)?;
                let up = matches!(fault, GuestFault::LinkUp { .. });
                g.set_link(index, up)
                    .map_err(|e| qmp_failed(vm.vmid, "set_link", &e))
            }
            GuestFault::DiskWriteError { disk } => {
                let value = vm.config.get(disk).map(String::as_str).unwrap_or("");
                if is_cdrom(value) {
                    return Err(format!("{disk} is a CD-ROM: it takes no writes"));
                }
                fail_writes(&g, vm.vmid, disk)
            }
        }
    }
}

/// `net3` → 3.
pub fn nic_index(net: &str) -> Result<u32, String> {
    net.strip_prefix("net")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("'{net}' is not a NIC (net0 … net31)"))
}

/// A drive value with `media=cdrom` (or `none`, an empty drive).
pub fn is_cdrom(value: &str) -> bool {
    let props = split_props(value, "file");
    prop(&props, "media") == Some("cdrom") || prop(&props, "file") == Some("none")
}

/// The overlay that fails every write of drive `drive-{disk}`.
fn fail_writes(g: &Guest, vmid: u32, disk: &str) -> Result<(), String> {
    let node = format!("fault-{disk}");
    let blocks = g
        .qmp("query-block", None, QMP_TIMEOUT)
        .map_err(|e| qmp_failed(vmid, "query-block", &e))?;
    let drive = block(&blocks, &format!("drive-{disk}"))
        .ok_or_else(|| format!("VM {vmid}: QEMU has no drive for {disk}"))?;
    if drive.pointer("/inserted/node-name").and_then(Value::as_str) == Some(node.as_str()) {
        // This QEMU's writes to the disk fail already.
        return Ok(());
    }
    let size = drive
        .pointer("/inserted/image/virtual-size")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("VM {vmid}: {disk} has no medium"))?;
    // A file left by an earlier run of the guest is overwritten.
    let overlay = g.dir().join(format!("{node}.qcow2"));
    create_overlay(&overlay, size)?;
    g.qmp(
        "blockdev-add",
        Some(overlay_node(&node, &overlay)),
        QMP_TIMEOUT,
    )
    .map_err(|e| qmp_failed(vmid, "blockdev-add", &e))?;
    g.qmp(
        "blockdev-snapshot",
        Some(json!({"node": format!("drive-{disk}"), "overlay": node})),
        QMP_TIMEOUT,
    )
    .map_err(|e| qmp_failed(vmid, "blockdev-snapshot", &e))?;
    tracing::info!("VM {vmid}: writes to {disk} now fail with EIO");
    Ok(())
}

/// The entry of `device` in a `query-block` answer.
pub fn block<'a>(blocks: &'a Value, device: &str) -> Option<&'a Value> {
    blocks
        .as_array()?
        .iter()
        .find(|b| b.get("device").and_then(Value::as_str) == Some(device))
}

/// `blockdev-add`'s arguments: a qcow2 node without backing (the snapshot gives it the
/// drive), whose file is a `blkdebug` node failing every write with EIO.
pub fn overlay_node(node: &str, file: &Path) -> Value {
    json!({
        "driver": "qcow2",
        "node-name": node,
        "backing": null,
        "file": {
            "driver": "blkdebug",
            "inject-error": [{"event": "none", "iotype": "write", "errno": 5, "once": false}],
            "image": {"driver": "file", "filename": file.display().to_string()},
        },
    })
}

fn create_overlay(path: &Path, size: u64) -> Result<(), String> {
    let out = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(path)
        .arg(size.to_string())
        .output()
        .map_err(|e| format!("running qemu-img: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "qemu-img create {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<GuestFault, String> {
        serde_json::from_str::<GuestFault>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn faults_parse_from_the_control_apis_json() {
        assert_eq!(parse(r#"{"fault":"kill"}"#), Ok(GuestFault::Kill));
        assert_eq!(parse(r#"{"fault":"pause"}"#), Ok(GuestFault::Pause));
        assert_eq!(
            parse(r#"{"fault":"link_down","net":"net1"}"#),
            Ok(GuestFault::LinkDown { net: "net1".into() })
        );
        assert_eq!(
            parse(r#"{"fault":"disk_write_error","disk":"scsi0"}"#),
            Ok(GuestFault::DiskWriteError {
                disk: "scsi0".into()
            })
        );
    }

    #[test]
    fn unknown_or_incomplete_faults_are_refused() {
        assert!(parse(r#"{"fault":"explode"}"#).is_err());
        assert!(parse(r#"{"fault":"link_down"}"#).is_err(), "no net");
        assert!(
            parse(r#"{"fault":"link_up","net":"net0","up":true}"#).is_err(),
            "stray field"
        );
        assert!(parse(r#"{"net":"net0"}"#).is_err(), "no fault");
    }

    #[test]
    fn targets_must_be_a_nic_or_a_disk_key() {
        let f = |s: &str| parse(s)?.target().map(|t| t.map(str::to_string));
        assert_eq!(
            f(r#"{"fault":"link_up","net":"net31"}"#),
            Ok(Some("net31".into()))
        );
        assert!(f(r#"{"fault":"link_up","net":"net32"}"#).is_err());
        assert!(f(r#"{"fault":"link_up","net":"eth0"}"#).is_err());
        assert!(f(r#"{"fault":"disk_write_error","disk":"net0"}"#).is_err());
        assert_eq!(
            f(r#"{"fault":"disk_write_error","disk":"virtio2"}"#),
            Ok(Some("virtio2".into()))
        );
        assert_eq!(f(r#"{"fault":"kill"}"#), Ok(None));
        assert_eq!(nic_index("net7"), Ok(7));
        assert!(nic_index("nic7").is_err());
    }

    #[test]
    fn cdroms_are_told_from_disks() {
        assert!(is_cdrom("local:iso/d.iso,media=cdrom"));
        assert!(is_cdrom("none,media=cdrom"));
        assert!(is_cdrom("none"));
        assert!(!is_cdrom("local-lvm:vm-100-disk-0,size=4G"));
    }

    #[test]
    fn the_drive_is_found_by_device_and_the_overlay_file_fails_writes() {
        let blocks = json!([
            {"device": "drive-ide2", "inserted": {"image": {"virtual-size": 4_194_304}}},
            {"device": "drive-scsi0", "inserted": {"image": {"virtual-size": 268_435_456}}},
        ]);
        let scsi0 = block(&blocks, "drive-scsi0").map(|b| &b["inserted"]["image"]["virtual-size"]);
        assert_eq!(scsi0.and_then(Value::as_u64), Some(268_435_456));
        assert!(block(&blocks, "drive-scsi1").is_none());
        let n = overlay_node("fault-scsi0", Path::new("/run/g/fault-scsi0.qcow2"));
        assert_eq!(n["backing"], Value::Null);
        let rule = &n["file"]["inject-error"][0];
        assert_eq!(
            (rule["iotype"].as_str(), rule["errno"].as_u64()),
            (Some("write"), Some(5))
        );
        assert_eq!(n["file"]["image"]["filename"], "/run/g/fault-scsi0.qcow2");
    }
}
