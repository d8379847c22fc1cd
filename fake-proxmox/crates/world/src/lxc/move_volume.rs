//! `POST …/move_volume`: a container's volume to another storage (a copy; the old one
//! kept as `unusedN` unless `delete=1`) or to another container of the node (the volume
//! renamed for it), after pve-container `src/PVE/API2/LXC.pm` (`move_volume`:
//! `$move_to_storage_checks`, `$storage_realcmd`, `$load_and_check_reassign_configs`,
//! `$volume_reassignfn`). Both run as a `move_volume` task; the checks before it answer
//! 500 (or 400 where PVE raises a parameter exception).

use super::model::{Ct, MountPoint, MountType, is_mp_key, is_unused_key};
use super::work::CtWork;
use crate::qemu::model::add_unused;
use crate::request::Request;
use crate::storage::model::Storage;
use crate::storage::volid::parse_volid;
use crate::tasks::model::TransferStyle;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

fn digest_ok(ct: &Ct, digest: Option<String>) -> Result<(), String> {
    match digest {
        Some(d) if !d.is_empty() && d != ct.digest() => {
            Err("detected modified configuration - file changed by other user? Try again.\n".into())
        }
        _ => Ok(()),
    }
}

fn die(msg: impl Into<String>) -> PveError {
    PveError::die(msg)
}

/// Whether a snapshot of the container names the volume (`is_volume_in_use_by_snapshots`).
fn in_snapshots(ct: &Ct, volid: &str) -> bool {
    ct.snapshots.values().any(|s| {
        s.config
            .iter()
            .filter(|(k, _)| is_mp_key(k))
            .any(|(_, v)| MountPoint::parse(v).volume == volid)
    })
}

/// `rename_volume`'s new name: the volume's kind of name (`vm-`/`subvol-`, the directory
/// and extension of a file storage) with the target's VMID and the first free number.
fn renamed_for(sto: &Storage, volname: &str, target: u32) -> String {
    let short = volname.rsplit('/').next().unwrap_or(volname);
    let prefix = if short.starts_with("subvol-") {
        "subvol"
    } else {
        "vm"
    };
    let ext = short.rsplit_once('.').map(|(_, e)| format!(".{e}"));
    (0..)
        .map(|n| {
            let base = format!(
                "{prefix}-{target}-disk-{n}{}",
                ext.clone().unwrap_or_default()
            );
            if sto.kind.is_file_based() {
                format!("{target}/{base}")
            } else {
                base
            }
        })
        .find(|name| !sto.volumes.contains_key(name))
        .unwrap_or_default()
}

impl Site {
    /// `POST /nodes/{node}/lxc/{vmid}/move_volume`
    pub fn move_volume_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid, p) = (req.node()?, req.vmid()?, &req.p);
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Config.Disk")?;
        let target = p
            .int("target-vmid")
            .map(|t| u32::try_from(t).unwrap_or(u32::MAX));
        let storage = p.str("storage");
        let key = p.req_str("volume")?;
        let target_key = p.str("target-volume").unwrap_or_else(|| key.clone());
        if storage.is_some() && target.is_some() {
            return Err(die("either set storage or target-vmid, but not both\n"));
        }
        match (target, storage) {
            (Some(target), _) => self.reassign_volume_ct(req, vmid, &key, target, &target_key),
            (None, Some(sid)) => self.move_volume_to_storage(req, &node, vmid, &key, &sid),
            (None, None) => {
                let msg = "both 'storage' and 'target-vmid' missing, either needs to be set";
                Err(PveError::params(
                    [("target-vmid", msg), ("storage", msg)]
                        .into_iter()
                        .map(|(k, m)| (k.to_string(), m.to_string()))
                        .collect(),
                ))
            }
        }
    }

    /// `$move_to_storage_checks`, then the task of `$storage_realcmd`.
    fn move_volume_to_storage(
        &mut self,
        req: &Request,
        node: &str,
        vmid: u32,
        key: &str,
        sid: &str,
    ) -> Result<String, PveError> {
        self.require(
            &req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateSpace",
        )?;
        let ct = self.ct_on(node, vmid)?;
        if let Some(l) = &ct.lock {
            return Err(die(format!("CT is locked ({l})\n")));
        }
        if ct.is_running() {
            return Err(die("cannot move volumes of a running container\n"));
        }
        if is_unused_key(key) {
            return Err(die(format!(
                "cannot move volume '{key}', only configured volumes can be moved to another storage\n"
            )));
        }
        let value = ct.config.get(key).ok_or_else(|| {
            die(format!(
                "volume '{key}' for container '{vmid}' does not exist\n"
            ))
        })?;
        let m = MountPoint::parse(value);
        let delete = req.p.flag("delete");
        if delete && in_snapshots(ct, &m.volume) {
            return Err(die(
                "you can't move a volume with snapshots and delete the source\n",
            ));
        }
        digest_ok(ct, req.p.str("digest")).map_err(die)?;
        let mut plan = self.ct_plan(
            req,
            "move_volume",
            node,
            vmid,
            CtWork::MoveVolume {
                vmid,
                key: key.to_string(),
                storage: sid.to_string(),
                delete,
            },
        );
        let mut t = 0.2;
        // `copy_volume`'s refusals and the new volume's allocation fail the task.
        let failure = if m.kind() != MountType::Volume {
            let ty = if m.kind() == MountType::Bind {
                "bind"
            } else {
                "device"
            };
            Some(format!("cannot copy volumes of type {ty}"))
        } else if self.node(node).and_then(|n| n.storages.get(sid)).is_none() {
            Some(format!("storage '{sid}' does not exist"))
        } else {
            None
        };
        match failure {
            Some(e) => plan.planned_error = Some(e),
            None => {
                let used = self.volume_used(node, &m.volume);
                let from = parse_volid(&m.volume).map_or("", |(s, _)| s);
                let secs = self.copy_secs((node, from), (node, sid), used);
                plan.transfer(t, secs, used, TransferStyle::QemuImg);
                t += secs;
            }
        }
        plan.duration = t + 0.2;
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("disk".into());
        }
        Ok(self.start_task(plan, req.now))
    }

    /// The end of a move to a storage: the copy (a base volume for a template) in the
    /// config, the old volume kept as `unusedN` or freed, the lock released.
    pub(crate) fn finish_move_volume_ct(
        &mut self,
        node: &str,
        vmid: u32,
        key: &str,
        storage: &str,
        delete: bool,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let Some(ct) = self.cts.get_mut(&vmid) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        ct.lock = None;
        let template = ct.is_template();
        let m = MountPoint::parse(ct.config.get(key).map_or("", String::as_str));
        let (new_volid, mut value) = self.copy_ct_volume(node, key, &m, vmid, storage, now)?;
        if template && let Some((sid, volname)) = parse_volid(&new_volid) {
            // `vdisk_create_base`: the copy becomes the template's base volume.
            let base = volname.replacen("vm-", "base-", 1);
            if let Some(mut vol) = self.remove_volume(node, sid, volname)
                && let Some(s) = self
                    .nodes
                    .get_mut(node)
                    .and_then(|n| n.storages.get_mut(sid))
            {
                vol.volname = base.clone();
                s.volumes.insert(base.clone(), vol);
            }
            value = value.replacen(volname, &base, 1);
        }
        if delete && let Some((sid, volname)) = parse_volid(&m.volume) {
            self.remove_volume(node, sid, volname);
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.config.insert(key.to_string(), value);
            if !delete {
                add_unused(&mut ct.config, m.volume);
            }
        }
        Ok(Vec::new())
    }

    /// `$load_and_check_reassign_configs`: both containers on one node, unlocked, not
    /// templates; the volume a volume of its own, in no snapshot, not in use.
    fn check_reassign_ct(
        &self,
        req: &Request,
        vmid: u32,
        key: &str,
        target: u32,
        target_key: &str,
    ) -> Result<(String, MountPoint), String> {
        if key == "rootfs" || target_key == "rootfs" {
            return Err("Cannot move to/from 'rootfs'\n".into());
        }
        if is_unused_key(key) && !is_unused_key(target_key) {
            return Err("Moving an unused volume to a used one is not possible\n".into());
        }
        let find = |id: u32| {
            self.guest(id)
                .map(|g| g.core().node.clone())
                .ok_or(format!("could not find CT {id}\n"))
        };
        let (source_node, target_node) = (find(vmid)?, find(target)?);
        if source_node != target_node {
            return Err(format!(
                "Both containers need to be on the same node ({source_node} != {target_node})\n"
            ));
        }
        let load = |id: u32| {
            self.ct_on(&source_node, id)
                .map_err(|e| format!("{}\n", e.message.trim_end()))
        };
        let src = load(vmid)?;
        if let Some(l) = &src.lock {
            return Err(format!("CT is locked ({l})\n"));
        }
        let dst = load(target)?;
        if let Some(l) = &dst.lock {
            return Err(format!("CT is locked ({l})\n"));
        }
        if src.is_template() || dst.is_template() {
            return Err("Can't move volumes from or to template CT\n".into());
        }
        digest_ok(src, req.p.str("digest")).map_err(|e| format!("Container {vmid}: {e}"))?;
        digest_ok(dst, req.p.str("target-digest"))
            .map_err(|e| format!("Container {target}: {e}"))?;
        let value = src.config.get(key).ok_or(format!(
            "volume '{key}' for container '{vmid}' does not exist\n"
        ))?;
        if dst.config.contains_key(target_key) {
            return Err(format!(
                "Target volume key '{target_key}' is already in use for container '{target}'\n"
            ));
        }
        let m = MountPoint::parse(value);
        if m.volume.is_empty() {
            return Err(format!("Volume '{key}' has no associated image\n"));
        }
        if in_snapshots(src, &m.volume) {
            return Err("Cannot move volume used by a snapshot to another container\n".into());
        }
        // `volume_has_feature('rename', …)` parses the volume ID first.
        let (sid, volname) = parse_volid(&m.volume)
            .ok_or_else(|| format!("unable to parse volume ID '{}'\n", m.volume))?;
        let renames = self
            .node(&source_node)
            .and_then(|n| n.storages.get(sid))
            .is_some_and(|s| {
                let format = s.volumes.get(volname).map_or("raw", |v| v.format.as_str());
                !(s.kind.is_file_based() && format == "subvol")
            });
        if !renames {
            return Err(
                "Storage does not support moving of this disk to another container\n".into(),
            );
        }
        if m.kind() != MountType::Volume {
            return Err("Cannot move a bindmount or device mount to another container\n".into());
        }
        if src.is_running() && !is_unused_key(key) {
            return Err(
                "Cannot move in-use volume while the source CT is running - detach or shutdown first\n"
                    .into(),
            );
        }
        Ok((source_node, m))
    }

    /// Moving a volume to another container: the checks, then a `move_volume` task named
    /// `SRC-KEY>DST-KEY`.
    fn reassign_volume_ct(
        &mut self,
        req: &Request,
        vmid: u32,
        key: &str,
        target: u32,
        target_key: &str,
    ) -> Result<String, PveError> {
        if req.task_user() != "root@pam" {
            self.require(&req.who, &format!("/vms/{target}"), "VM.Config.Disk")?;
        }
        let (node, m) = self
            .check_reassign_ct(req, vmid, key, target, target_key)
            .map_err(die)?;
        let sid = parse_volid(&m.volume).map_or("", |(s, _)| s);
        self.require(
            &req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateSpace",
        )?;
        let mut plan = TaskPlan::new(
            "move_volume",
            format!("{vmid}-{key}>{target}-{target_key}"),
            &node,
            &req.task_user(),
            Work::Ct(CtWork::ReassignVolume {
                vmid,
                key: key.to_string(),
                target,
                target_key: target_key.to_string(),
            }),
        );
        plan.line(
            0.1,
            format!("moving volume '{key}' from container '{vmid}' to '{target}'"),
        );
        plan.duration = 0.5;
        Ok(self.start_task(plan, req.now))
    }

    /// The end of a reassignment: the volume renamed for the target, gone from the source's
    /// config, in the target's under its key.
    pub(crate) fn finish_reassign_volume_ct(
        &mut self,
        node: &str,
        vmid: u32,
        key: &str,
        target: u32,
        target_key: &str,
    ) -> Result<Vec<String>, String> {
        let m = self
            .cts
            .get(&vmid)
            .and_then(|c| c.config.get(key))
            .map(|v| MountPoint::parse(v))
            .ok_or(format!(
                "volume '{key}' for container '{vmid}' does not exist"
            ))?;
        let (sid, volname) = parse_volid(&m.volume)
            .map(|(s, v)| (s.to_string(), v.to_string()))
            .ok_or(format!("unable to parse volume ID '{}'", m.volume))?;
        let sto = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.storages.get_mut(&sid))
            .ok_or(format!("storage '{sid}' does not exist"))?;
        let new_name = renamed_for(sto, &volname, target);
        let mut vol = sto
            .volumes
            .remove(&volname)
            .ok_or(format!("volume '{}' does not exist", m.volume))?;
        vol.volname = new_name.clone();
        vol.vmid = Some(target);
        sto.volumes.insert(new_name.clone(), vol);
        let new_volid = format!("{sid}:{new_name}");
        if let Some(src) = self.cts.get_mut(&vmid) {
            src.config.remove(key);
        }
        let value = if is_unused_key(target_key) {
            new_volid
        } else {
            let mut moved = m;
            moved.volume = new_volid;
            moved.print(false)
        };
        if let Some(dst) = self.cts.get_mut(&target) {
            dst.config.insert(target_key.to_string(), value);
        }
        Ok(vec![
            format!("removing volume '{key}' from container '{vmid}' config"),
            format!("target container '{target}' updated with '{target_key}'"),
        ])
    }
}
