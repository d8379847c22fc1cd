//! `POST …/move_disk`: copy a disk to another storage (or format) in a `qmmove` task; the
//! old volume becomes `unusedN`, or is freed with `delete=1`.
//!
//! The checks and their texts follow qemu-server's `move_vm_disk` (made before the task is
//! forked, so they answer 500). Deviation: a running VM's disk is copied like a stopped
//! one's (PVE mirrors it with `drive-mirror`, with other log lines). Moving a disk to another
//! VM (`target-vmid`) is `reassign`.

use std::collections::BTreeSet;

use super::model::{DiskPlan, Vm, add_unused, prop, split_props};
use super::op::unlocked;
use crate::request::Request;
use crate::storage::volid::parse_volid;
use crate::tasks::model::TransferStyle;
use crate::wire::{Params, PveError};
use crate::world::Site;
use crate::world::work::Work;

impl Site {
    /// `POST …/move_disk`: the `qmmove` task.
    pub fn move_disk(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Config.Disk"])?;
        let vm = vm.clone();
        let (node, vmid, p, now) = (op.node.as_str(), op.vmid, &req.p, req.now);
        let storage = match destination(p, vmid)? {
            Destination::Storage(s) => s,
            Destination::Vm(target) => return self.reassign_disk(req, target),
        };
        let disk = p.req_str("disk")?;
        let format = p.str("format");
        let tsto = self.storage_on(node, &storage)?;
        tsto.check_images()?;
        self.require(
            &req.who,
            &format!("/storage/{storage}"),
            "Datastore.AllocateSpace",
        )?;
        let Movable { props, old_volid } = load_and_check_move(&vm, p, &disk, &storage)?;
        let (old_sid, old_vol) = parse_volid(&old_volid)
            .ok_or_else(|| PveError::die(format!("unable to parse volume ID '{old_volid}'")))?;
        let source = self
            .nodes
            .get(node)
            .and_then(|n| n.storages.get(old_sid))
            .and_then(|s| Some((s.speed_mib_s, s.volumes.get(old_vol)?.clone())));
        let Some((src_speed, src)) = source else {
            return Err(PveError::die(format!(
                "volume '{old_volid}' does not exist"
            )));
        };
        let tsto = self.storage_on(node, &storage)?;
        let fmt = tsto.supported_format(format.as_deref());
        let speed = src_speed.min(tsto.speed_mib_s) * 1024.0 * 1024.0;
        let volname = self.pick_volname(node, &storage, vmid, &fmt, &mut BTreeSet::new());
        let size = prop(&props, "size")
            .and_then(crate::storage::model::parse_size)
            .unwrap_or(src.size);
        let plan = DiskPlan {
            key: disk.clone(),
            storage: storage.clone(),
            volname,
            format: fmt,
            size,
            import_from: Some((old_sid.to_string(), old_vol.to_string())),
            data_bytes: src.used,
            opts: props
                .into_iter()
                .filter(|(k, _)| k != "file" && k != "size")
                .collect(),
            cloudinit: false,
        };
        let secs = (size as f64 / speed).max(0.1);
        let line = format!("create full clone of drive {disk} ({old_volid})");
        let work = Work::MoveDisk {
            vmid,
            plan,
            old_volid,
            delete: p.flag("delete"),
        };
        let mut task = op.plan("qmmove", work);
        task.line(0.1, line);
        task.transfer(0.2, secs, size, TransferStyle::QemuImg);
        task.duration = 0.4 + secs;
        Ok(self.start_task(task, now))
    }

    /// A `qmmove` task finished: the copy replaces the drive; the old volume is freed
    /// (`delete`) or kept as `unusedN`.
    pub(crate) fn finish_move_disk(
        &mut self,
        node: &str,
        vmid: u32,
        plan: &DiskPlan,
        old_volid: &str,
        delete: bool,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let values = self.allocate_volumes(node, vmid, std::slice::from_ref(plan), now)?;
        let Some(vm) = self.vms.get_mut(&vmid) else {
            return Err(format!("VM {vmid} does not exist"));
        };
        let unused_key = plan.key.starts_with("unused");
        for (k, v) in values {
            // An unused volume stays a bare volume id.
            let v = if unused_key {
                prop(&split_props(&v, "file"), "file")
                    .unwrap_or(&v)
                    .to_string()
            } else {
                v
            };
            vm.config.insert(k, v);
        }
        if delete {
            self.free_volume(node, old_volid);
        } else {
            add_unused(&mut vm.config, old_volid.to_string());
        }
        Ok(Vec::new())
    }
}

/// Where a disk goes: another storage (`storage`), or another VM (`target-vmid`, see
/// `reassign`); PVE's parameter errors when both or neither are set.
enum Destination {
    Storage(String),
    Vm(u32),
}

fn destination(p: &Params, vmid: u32) -> Result<Destination, PveError> {
    let target_vmid = p.int("target-vmid");
    match (p.str("storage"), target_vmid) {
        (Some(_), Some(_)) => {
            let msg = "either set 'storage' or 'target-vmid', but not both";
            Err(both_params(msg))
        }
        (None, None) => Err(both_params(
            "both 'storage' and 'target-vmid' missing, either needs to be set",
        )),
        (None, Some(t)) if t == i64::from(vmid) => Err(PveError::param(
            "target-vmid",
            "must be different than source VMID to reassign disk",
        )),
        (None, Some(t)) => u32::try_from(t)
            .map(Destination::Vm)
            .map_err(|_| PveError::param("target-vmid", "invalid VMID")),
        (Some(s), None) => Ok(Destination::Storage(s)),
    }
}

fn both_params(msg: &str) -> PveError {
    let mut errors = std::collections::BTreeMap::new();
    errors.insert("target-vmid".to_string(), msg.to_string());
    errors.insert("storage".to_string(), msg.to_string());
    PveError::params(errors)
}

/// A drive that may move: its options and its volume.
struct Movable {
    props: Vec<(String, String)>,
    old_volid: String,
}

/// qemu-server's `$load_and_check_move`: unlocked, digest, a drive with a volume that is
/// no cdrom, a real change of storage or format, no deleting a source snapshots use.
fn load_and_check_move(
    vm: &Vm,
    p: &Params,
    disk: &str,
    storage: &str,
) -> Result<Movable, PveError> {
    unlocked(vm, false)?;
    if let Some(d) = p.str("digest")
        && d != vm.digest()
    {
        return Err(PveError::die(
            "detected modified configuration - file changed by other user? Try again.",
        ));
    }
    let value = vm
        .config
        .get(disk)
        .ok_or_else(|| PveError::die(format!("disk '{disk}' does not exist")))?;
    let props = split_props(value, "file");
    let old_volid = prop(&props, "file")
        .filter(|f| !f.is_empty())
        .ok_or_else(|| PveError::die(format!("disk '{disk}' has no associated volume")))?
        .to_string();
    if prop(&props, "media") == Some("cdrom") || old_volid == "cdrom" {
        return Err(PveError::die("you can't move a cdrom"));
    }
    let (old_sid, old_vol) = parse_volid(&old_volid)
        .ok_or_else(|| PveError::die(format!("unable to parse volume ID '{old_volid}'")))?;
    let old_fmt = [".raw", ".qcow2", ".vmdk"]
        .iter()
        .find(|ext| old_vol.ends_with(*ext))
        .map(|ext| &ext[1..]);
    let format = p.str("format");
    if old_sid == storage && (format.is_none() || old_fmt.is_none() || old_fmt == format.as_deref())
    {
        return Err(PveError::die(
            "you can't move to the same storage with same format",
        ));
    }
    let snapshotted = vm.snapshots.values().any(|s| {
        s.config
            .get(disk)
            .is_some_and(|v| prop(&split_props(v, "file"), "file") == Some(old_volid.as_str()))
    });
    if snapshotted && p.flag("delete") {
        return Err(PveError::die(
            "you can't move a disk with snapshots and delete the source",
        ));
    }
    Ok(Movable { props, old_volid })
}
