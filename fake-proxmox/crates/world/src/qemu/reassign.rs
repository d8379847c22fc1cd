//! `POST …/move_disk` with `target-vmid`: the disk changes owner instead of being copied
//! (qemu-server's `$load_and_check_reassign_configs` and `$disk_reassignfn`): the volume is
//! renamed for the target VM, leaves the source's config (and its boot order) and joins the
//! target's under `target-disk`, in a `qmmove` task named `SRC-DISK>DST-DISK`.

use std::collections::BTreeSet;

use super::model::{Power, Vm, is_unused_key, prop, split_props};
use super::op::unlocked;
use crate::request::Request;
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// A reassignment the checks allowed: where it happens and the storage it renames on.
struct Reassign {
    node: String,
    storage: String,
}

fn digest_ok(vm: &Vm, digest: Option<String>) -> Result<(), PveError> {
    match digest {
        Some(d) if d != vm.digest() => Err(PveError::die(format!(
            "VM {}: detected modified configuration - file changed by other user? Try again.\n",
            vm.vmid
        ))),
        _ => Ok(()),
    }
}

impl Site {
    fn check_reassign(
        &self,
        req: &Request,
        vmid: u32,
        disk: &str,
        target: u32,
        target_disk: &str,
    ) -> Result<Reassign, PveError> {
        let src = self
            .vms
            .get(&vmid)
            .ok_or_else(|| PveError::die(format!("could not find VM {vmid}\n")))?;
        let dst = self
            .vms
            .get(&target)
            .ok_or_else(|| PveError::die(format!("could not find target VM {target}\n")))?;
        if src.node != dst.node {
            return Err(PveError::die(format!(
                "Both VMs need to be on the same node ({} != {})\n",
                src.node, dst.node
            )));
        }
        unlocked(src, false)?;
        unlocked(dst, false)?;
        if src.is_template() || dst.is_template() {
            return Err(PveError::die("Can't move disks from or to template VMs\n"));
        }
        digest_ok(src, req.p.str("digest"))?;
        digest_ok(dst, req.p.str("target-digest"))?;
        let value = src.config.get(disk).ok_or_else(|| {
            PveError::die(format!("Disk '{disk}' for VM '{vmid}' does not exist\n"))
        })?;
        if dst.config.contains_key(target_disk) {
            return Err(PveError::die(format!(
                "Target disk key '{target_disk}' is already in use for VM '{target}'\n"
            )));
        }
        let props = split_props(value, "file");
        let volid = prop(&props, "file")
            .filter(|f| !f.is_empty() && *f != "none")
            .ok_or_else(|| PveError::die(format!("disk '{disk}' has no associated volume\n")))?;
        if prop(&props, "media") == Some("cdrom") || volid == "cdrom" {
            return Err(PveError::die(
                "CD drive contents can't be moved to another VM\n",
            ));
        }
        let (storage, _) = parse_volid(volid)
            .ok_or_else(|| PveError::die(format!("Volume '{volid}' not managed by PVE\n")))?;
        let in_snapshot = src.snapshots.values().any(|s| {
            s.config
                .values()
                .any(|v| prop(&split_props(v, "file"), "file") == Some(volid))
        });
        if in_snapshot {
            return Err(PveError::die(
                "Can't move disk used by a snapshot to another VM\n",
            ));
        }
        if src.power != Power::Stopped && !is_unused_key(disk) {
            return Err(PveError::die(
                "Cannot move disk to another VM while the source VM is running - detach first\n",
            ));
        }
        Ok(Reassign {
            node: src.node.clone(),
            storage: storage.to_string(),
        })
    }

    /// The `qmmove` task of a reassignment; the checks made before it answer 500.
    pub fn reassign_disk(&mut self, req: &Request, target: u32) -> Result<String, PveError> {
        let node = req.node()?;
        let vmid = req.p.vmid()?;
        let disk = req.p.req_str("disk")?;
        let target_disk = req.p.str("target-disk").unwrap_or_else(|| disk.clone());
        if req.task_user() != "root@pam" {
            self.require(&req.who, &format!("/vms/{target}"), "VM.Config.Disk")?;
        }
        self.vm_on(&node, vmid)?;
        let r = self.check_reassign(req, vmid, &disk, target, &target_disk)?;
        self.require(
            &req.who,
            &format!("/storage/{}", r.storage),
            "Datastore.AllocateSpace",
        )?;
        let mut plan = TaskPlan::new(
            "qmmove",
            format!("{vmid}-{disk}>{target}-{target_disk}"),
            &r.node,
            &req.task_user(),
            Work::ReassignDisk {
                vmid,
                disk: disk.clone(),
                target,
                target_disk: target_disk.clone(),
            },
        );
        plan.line(
            0.1,
            format!("reassign disk '{disk}' from VM '{vmid}' as '{target_disk}' to VM '{target}'"),
        );
        plan.duration = 0.5;
        Ok(self.start_task(plan, req.now))
    }

    /// The task's work: checked again (things may have changed), then the rename.
    pub(crate) fn finish_reassign(
        &mut self,
        vmid: u32,
        disk: &str,
        target: u32,
        target_disk: &str,
    ) -> Result<Vec<String>, String> {
        let (node, volid, storage, volname, value) = {
            let src = self
                .vms
                .get(&vmid)
                .ok_or(format!("could not find VM {vmid}"))?;
            let value = src
                .config
                .get(disk)
                .cloned()
                .ok_or(format!("Disk '{disk}' for VM '{vmid}' does not exist"))?;
            let props = split_props(&value, "file");
            let volid = prop(&props, "file").unwrap_or_default().to_string();
            let (sid, vol) =
                parse_volid(&volid).ok_or(format!("Volume '{volid}' not managed by PVE"))?;
            (
                src.node.clone(),
                volid.clone(),
                sid.to_string(),
                vol.to_string(),
                value,
            )
        };
        if self
            .vms
            .get(&target)
            .is_some_and(|t| t.config.contains_key(target_disk))
        {
            return Err(format!(
                "Target disk key '{target_disk}' is already in use for VM '{target}'"
            ));
        }
        let format = [".raw", ".qcow2", ".vmdk"]
            .iter()
            .find(|ext| volname.ends_with(*ext))
            .map_or("raw", |ext| &ext[1..]);
        let new_name = self.pick_volname(&node, &storage, target, format, &mut BTreeSet::new());
        let moved = self
            .nodes
            .get_mut(&node)
            .and_then(|n| n.storages.get_mut(&storage))
            .and_then(|s| {
                let mut v = s.volumes.remove(&volname)?;
                v.volname = new_name.clone();
                v.vmid = Some(target);
                s.volumes.insert(new_name.clone(), v);
                Some(())
            });
        if moved.is_none() {
            return Err(format!("volume '{volid}' does not exist"));
        }
        let new_volid = format!("{storage}:{new_name}");
        let mut lines = Vec::new();
        if let Some(src) = self.vms.get_mut(&vmid) {
            if let Some(boot) = src.config.get("boot").cloned()
                && let Some(order) = boot.strip_prefix("order=")
                && order.split(';').any(|d| d == disk)
            {
                let kept: Vec<&str> = order.split(';').filter(|d| *d != disk).collect();
                lines.push(format!("removing disk '{disk}' from boot order config"));
                src.config
                    .insert("boot".into(), format!("order={}", kept.join(";")));
            }
            src.config.remove(disk);
            lines.push(format!("removing disk '{disk}' from VM '{vmid}' config"));
        }
        let drive = if is_unused_key(target_disk) {
            new_volid.clone()
        } else {
            value.replacen(&volid, &new_volid, 1)
        };
        if let Some(dst) = self.vms.get_mut(&target) {
            dst.config.insert(target_disk.to_string(), drive);
        }
        Ok(lines)
    }
}
