//! VM snapshots as pve-guest-common's `AbstractConfig` and qemu-server take them: a
//! `qmsnapshot` task copies the config into a `[snapname]` section (lock `snapshot`,
//! `snapstate: prepare` while it runs), `qmdelsnapshot` removes it (lock
//! `snapshot-delete`) and re-links the children, `qmrollback` stops the VM and puts the
//! snapshot's config back (lock `rollback`), unused volumes kept as `unusedN`.
//!
//! Which disks can be snapshotted follows the storage plugins' `volume_has_feature`:
//! lvm-thin, RBD, ZFS and Btrfs always, directory-like storages for qcow2 only, thick LVM
//! and CephFS never. Deviations: volume snapshots take no space; a RAM snapshot's state
//! volume is sized at twice the VM's memory plus 500 MiB.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::model::{
    Power, Vm, add_unused, is_disk_key, is_unused_key, prop, split_props, typed_value,
};
use crate::exec::Vol;
use crate::qemu::op::unlocked;
use crate::request::Request;
use crate::storage::features::{Feature, VolumeState, has_feature};
use crate::storage::model::StorageType;
use crate::storage::volid::parse_volid;
use crate::version::PveVersion;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

pub use crate::guest::sections::Snapshot;

impl Snapshot {
    /// `GET …/snapshot/{snapname}/config`: every key, typed as the config parser types them.
    pub fn config_json(&self, version: PveVersion) -> Value {
        let mut m = Map::new();
        for (k, v) in self.lines() {
            let typed = if k == "snaptime" {
                v.parse::<u64>().map_or_else(|_| json!(v), Value::from)
            } else {
                typed_value(&k, &v, version)
            };
            m.insert(k, typed);
        }
        Value::Object(m)
    }
}

/// `__snapshot_copy_config`: what of the current config a snapshot keeps.
fn copied(config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    config
        .iter()
        .filter(|(k, _)| k.as_str() != "description" && !is_unused_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// PVE's drive order (`valid_drive_names`): ide, sata, scsi, virtio by index, then EFI and TPM.
fn drive_order(key: &str) -> (usize, u32) {
    let buses = ["ide", "sata", "scsi", "virtio", "efidisk", "tpmstate"];
    for (i, bus) in buses.iter().enumerate() {
        if let Some(n) = key.strip_prefix(bus).and_then(|n| n.parse().ok()) {
            return (i, n);
        }
    }
    (buses.len(), 0)
}

/// The config's disks that hold a storage volume (no CD-ROMs, cloud-init drives or
/// pass-through paths), in PVE's drive order: `(key, volid)`.
fn volumes(config: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = config
        .iter()
        .filter(|(k, _)| is_disk_key(k))
        .filter_map(|(k, v)| {
            let p = split_props(v, "file");
            let file = prop(&p, "file")?;
            if prop(&p, "media") == Some("cdrom") || parse_volid(file).is_none() {
                return None;
            }
            Some((k.clone(), file.to_string()))
        })
        .collect();
    out.sort_by_key(|(k, _)| drive_order(k));
    out
}

impl Site {
    fn storage_of(&self, node: &str, volid: &str) -> Option<&crate::storage::model::Storage> {
        let (sid, _) = parse_volid(volid)?;
        self.nodes.get(node)?.storages.get(sid)
    }

    /// `has_feature` over the config's volumes (CD-ROMs skipped): every one must support
    /// `feature` (on its snapshot when `of_snapshot`).
    fn has_volume_feature(
        &self,
        node: &str,
        config: &BTreeMap<String, String>,
        feature: Feature,
        of_snapshot: bool,
    ) -> bool {
        volumes(config).iter().all(|(_, volid)| {
            let (Some(sto), Some((_, vol))) = (self.storage_of(node, volid), parse_volid(volid))
            else {
                return false;
            };
            let format = sto.volumes.get(vol).map_or_else(
                || {
                    if vol.ends_with(".qcow2") {
                        "qcow2"
                    } else {
                        "raw"
                    }
                    .to_string()
                },
                |v| v.format.clone(),
            );
            has_feature(
                sto.kind,
                feature,
                VolumeState::of(vol, of_snapshot),
                &format,
            )
        })
    }

    fn can_snapshot(&self, node: &str, config: &BTreeMap<String, String>) -> bool {
        self.has_volume_feature(node, config, Feature::Snapshot, false)
    }

    /// `GET …/feature`: whether the VM (or its snapshot) supports `feature`, and the nodes
    /// it could run on (`shared_nodes`: only this one once any volume is on local storage).
    pub fn vm_feature(
        &self,
        node: &str,
        vmid: u32,
        feature: Feature,
        snapname: Option<&str>,
    ) -> Result<Value, PveError> {
        let vm = self.vm_on(node, vmid)?;
        let config = match snapname {
            Some(s) => &self.snapshot(node, vmid, s)?.config,
            None => &vm.config,
        };
        let has = self.has_volume_feature(node, config, feature, snapname.is_some());
        let local = config
            .iter()
            .filter(|(k, _)| is_disk_key(k) || is_unused_key(k))
            .filter_map(|(_, v)| prop(&split_props(v, "file"), "file").map(str::to_string))
            .any(|volid| self.storage_of(node, &volid).is_some_and(|s| !s.shared));
        let nodes: Vec<&String> = if local {
            self.nodes.keys().filter(|n| n.as_str() == node).collect()
        } else {
            self.nodes.keys().collect()
        };
        Ok(json!({"hasFeature": u8::from(has), "nodes": nodes}))
    }

    /// The log lines a storage prints for one volume's snapshot `action`.
    fn volume_lines(&self, node: &str, volid: &str, snapname: &str, action: &str) -> Vec<String> {
        let Some(sto) = self.storage_of(node, volid) else {
            return Vec::new();
        };
        let vol = parse_volid(volid).map_or("", |(_, v)| v);
        if sto.kind != StorageType::LvmThin {
            return Vec::new();
        }
        let snap = format!("snap_{vol}_{snapname}");
        match action {
            "create" => vec![format!("  Logical volume \"{snap}\" created.")],
            "delete" => vec![format!("  Logical volume \"{snap}\" successfully removed.")],
            _ => vec![
                format!("  Logical volume \"{vol}\" successfully removed."),
                format!("  Logical volume \"{vol}\" created."),
            ],
        }
    }

    /// `GET …/snapshot`: every snapshot, then `current` ("You are here!").
    pub fn snapshot_list(&self, node: &str, vmid: u32) -> Result<Value, PveError> {
        let vm = self.vm_on(node, vmid)?;
        let mut out = Vec::new();
        for (name, s) in &vm.snapshots {
            let mut item = json!({
                "name": name,
                "snaptime": s.snaptime,
                "vmstate": u8::from(s.vmstate.is_some()),
                "description": s.description.clone().unwrap_or_default(),
            });
            if let Some(p) = s.config.get("parent") {
                item["parent"] = json!(p);
            }
            if let Some(st) = &s.snapstate {
                item["snapstate"] = json!(st);
            }
            out.push(item);
        }
        let mut current = json!({
            "name": "current",
            "digest": vm.digest(),
            "running": u8::from(vm.power != Power::Stopped),
            "description": "You are here!",
        });
        if let Some(p) = vm.config.get("parent") {
            current["parent"] = json!(p);
        }
        out.push(current);
        Ok(Value::Array(out))
    }

    /// A snapshot of the VM, or PVE's error for a missing one.
    pub fn snapshot(&self, node: &str, vmid: u32, name: &str) -> Result<&Snapshot, PveError> {
        self.vm_on(node, vmid)?
            .snapshots
            .get(name)
            .ok_or_else(|| PveError::die(format!("snapshot '{name}' does not exist")))
    }

    /// `PUT …/snapshot/{snapname}/config`: only the description changes.
    pub fn set_snapshot_description(&mut self, req: &Request) -> Result<(), PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Snapshot"])?;
        let name = &req.p.req_str("snapname")?;
        let description = req.p.str("description");
        unlocked(vm, false)?;
        let vmid = op.vmid;
        self.snapshot(&op.node, vmid, name)?;
        if let (Some(d), Some(vm)) = (description, self.vms.get_mut(&vmid))
            && let Some(s) = vm.snapshots.get_mut(name)
        {
            s.description = Some(d);
        }
        Ok(())
    }

    /// `POST …/snapshot`: the `qmsnapshot` task. Its checks and preparation run as it
    /// starts (`__snapshot_prepare`), their errors end the task.
    pub fn start_snapshot(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Snapshot"])?;
        let vm = vm.clone();
        let name = &req.p.req_str("snapname")?;
        let (save_vmstate, description) = (req.p.flag("vmstate"), req.p.str("description"));
        let (node, vmid, now) = (op.node.as_str(), op.vmid, req.now);
        if name == "current" {
            return Err(PveError::die(
                "unable to use snapshot name 'current' (reserved name)",
            ));
        }
        if name.eq_ignore_ascii_case("pending") {
            return Err(PveError::die(
                "unable to use snapshot name 'pending' (reserved name)",
            ));
        }
        let work = Work::SnapshotCreate {
            vmid,
            snapname: name.to_string(),
        };
        let mut plan = op.plan("qmsnapshot", work);
        let refused = if vm.is_template() {
            Some("you can't take a snapshot if it's a template".to_string())
        } else if let Some(l) = &vm.lock {
            Some(format!("VM is locked ({l})"))
        } else if vm.snapshots.contains_key(name) {
            Some(format!("snapshot name '{name}' already used"))
        } else if !self.can_snapshot(node, &vm.config) {
            Some("snapshot feature is not available".to_string())
        } else {
            None
        };
        if let Some(e) = refused {
            return Ok(self.fail_at_start(plan, e, now));
        }
        let mut snap = Snapshot {
            config: copied(&vm.config),
            snaptime: now as u64,
            description: description.filter(|d| !d.is_empty()),
            vmstate: None,
            snapstate: Some("prepare".into()),
        };
        let mut offset = 0.2;
        if save_vmstate && vm.power != Power::Stopped {
            match self.save_vmstate(node, &vm, name, now) {
                Ok((volid, sid, secs)) => {
                    plan.line(
                        0.0,
                        format!("saving VM state and RAM using storage '{sid}'"),
                    );
                    offset += secs;
                    plan.line(
                        offset,
                        format!("completed saving the VM state in {secs:.0}s"),
                    );
                    snap.vmstate = Some(volid);
                }
                Err(e) => return Ok(self.fail_at_start(plan, e, now)),
            }
        }
        for (key, volid) in volumes(&vm.config) {
            plan.line(offset, format!("snapshotting 'drive-{key}' ({volid})"));
            for l in self.volume_lines(node, &volid, name, "create") {
                plan.line(offset + 0.1, l);
            }
            offset += 0.2;
        }
        plan.duration = offset + 0.3;
        if let Some(v) = self.vms.get_mut(&vmid) {
            v.lock = Some("snapshot".into());
            v.snapshots.insert(name.to_string(), snap);
        }
        Ok(self.start_task(plan, now))
    }

    /// Allocates the RAM state volume (`find_vmstate_storage`: `vmstatestorage`, else a
    /// storage the VM's disks use, file-based preferred): `(volid, storage, seconds)`.
    fn save_vmstate(
        &mut self,
        node: &str,
        vm: &Vm,
        name: &str,
        now: f64,
    ) -> Result<(String, String, f64), String> {
        let sid = match vm.config.get("vmstatestorage") {
            Some(s) => s.clone(),
            None => {
                let used: Vec<String> = volumes(&vm.config)
                    .iter()
                    .filter_map(|(_, v)| parse_volid(v).map(|(s, _)| s.to_string()))
                    .collect();
                let node_storages = self.nodes.get(node).map(|n| &n.storages);
                let pick = |shared: bool| {
                    let mut found: Option<&String> = None;
                    for s in &used {
                        let Some(sto) = node_storages.and_then(|m| m.get(s)) else {
                            continue;
                        };
                        if sto.shared == shared && (found.is_none() || sto.path.is_some()) {
                            found = Some(s);
                        }
                    }
                    found.cloned()
                };
                pick(true)
                    .or_else(|| pick(false))
                    .unwrap_or_else(|| "local".to_string())
            }
        };
        let size = vm
            .memory_bytes()
            .saturating_mul(2)
            .saturating_add(500 << 20);
        let sto = self
            .nodes
            .get(node)
            .and_then(|n| n.storages.get(&sid))
            .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
        let volname = match sto.kind {
            StorageType::Dir | StorageType::Nfs | StorageType::Cifs | StorageType::Btrfs => {
                format!("{}/vm-{}-state-{name}.raw", vm.vmid, vm.vmid)
            }
            _ => format!("vm-{}-state-{name}", vm.vmid),
        };
        let secs = sto.write_secs(size).max(0.5);
        let volname = self.alloc_volume_data(node, &sid, vm.vmid, volname, "raw", size, now)?;
        let volid = format!("{sid}:{volname}");
        let written = match self
            .disks_on(node)
            .save_state(vm, Vol::new(node, &sid, &volname), size)
        {
            Ok(w) => w,
            Err(e) => {
                self.remove_volume(node, &sid, &volname);
                return Err(e);
            }
        };
        // A thin storage accounts what is written; the state is written in full.
        if let Some(sto) = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.storages.get_mut(&sid))
        {
            let _ = sto.write_data(&volname, written);
        }
        Ok((volid, sid, secs))
    }

    /// `DELETE …/snapshot/{snapname}`: the `qmdelsnapshot` task.
    pub fn start_snapshot_delete(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Snapshot"])?;
        let vm = vm.clone();
        let name = &req.p.req_str("snapname")?;
        let (node, vmid, now) = (op.node.as_str(), op.vmid, req.now);
        let work = Work::SnapshotDelete {
            vmid,
            snapname: name.to_string(),
        };
        let mut plan = op.plan("qmdelsnapshot", work);
        let refused = match vm.snapshots.get(name) {
            None => Some(format!("snapshot '{name}' does not exist")),
            Some(_) if vm.lock.is_some() => Some(format!(
                "VM is locked ({})",
                vm.lock.as_deref().unwrap_or("")
            )),
            Some(_) if vm.is_template() => {
                Some("you can't delete a snapshot if vm is a template".to_string())
            }
            Some(_) => None,
        };
        if let Some(e) = refused {
            return Ok(self.fail_at_start(plan, e, now));
        }
        let mut offset = 0.2;
        if let Some(s) = vm.snapshots.get(name) {
            for (_, volid) in volumes(&s.config) {
                for l in self.volume_lines(node, &volid, name, "delete") {
                    plan.line(offset, l);
                }
                offset += 0.2;
            }
        }
        plan.duration = offset + 0.2;
        if let Some(v) = self.vms.get_mut(&vmid) {
            v.lock = Some("snapshot-delete".into());
            if let Some(s) = v.snapshots.get_mut(name) {
                s.snapstate = Some("delete".into());
            }
        }
        Ok(self.start_task(plan, now))
    }

    /// `POST …/snapshot/{snapname}/rollback`: the `qmrollback` task; a running VM is
    /// stopped first.
    pub fn start_rollback(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Snapshot", "VM.Snapshot.Rollback"])?;
        let vm = vm.clone();
        let name = &req.p.req_str("snapname")?;
        let start = req.p.flag("start");
        let (node, vmid, now) = (op.node.as_str(), op.vmid, req.now);
        let work = Work::SnapshotRollback {
            vmid,
            snapname: name.to_string(),
            start,
        };
        let mut plan = op.plan("qmrollback", work);
        let refused = if vm.is_template() {
            Some("you can't rollback if vm is a template".to_string())
        } else {
            match vm.snapshots.get(name) {
                None => Some(format!("snapshot '{name}' does not exist")),
                Some(s) if s.snapstate.is_some() => Some(format!(
                    "unable to rollback to incomplete snapshot (snapstate = {})",
                    s.snapstate.as_deref().unwrap_or("")
                )),
                Some(_) => vm.lock.as_ref().map(|l| format!("VM is locked ({l})")),
            }
        };
        if let Some(e) = refused {
            return Ok(self.fail_at_start(plan, e, now));
        }
        let mut offset = 0.2;
        if let Some(s) = vm.snapshots.get(name) {
            for (_, volid) in volumes(&s.config) {
                for l in self.volume_lines(node, &volid, name, "rollback") {
                    plan.line(offset, l);
                }
                offset += 0.3;
            }
        }
        plan.duration = offset + 0.2;
        if vm.power != Power::Stopped
            && let Err(e) = self.stop_now(vmid, now)
        {
            return Ok(self.fail_at_start(plan, e, now));
        }
        if let Some(v) = self.vms.get_mut(&vmid) {
            v.lock = Some("rollback".into());
        }
        Ok(self.start_task(plan, now))
    }

    /// A task whose checks failed as it started: it ends at once with that error and
    /// changes nothing.
    fn fail_at_start(&mut self, mut plan: TaskPlan, error: String, now: f64) -> String {
        plan.work = Work::Noop;
        plan.planned_error = Some(error);
        plan.duration = 0.1;
        self.start_task(plan, now)
    }

    /// QEMU is gone: what `vm_stop` leaves behind.
    fn stop_now(&mut self, vmid: u32, now: f64) -> Result<(), String> {
        self.run_vm(vmid, now, |exec, vm, host| exec.stop(vm, host))?;
        self.apply_pending(vmid);
        Ok(())
    }

    /// A `qmsnapshot` task finished: the snapshot is complete (`__snapshot_commit`).
    pub(crate) fn finish_snapshot(&mut self, vmid: u32, name: &str) -> Result<Vec<String>, String> {
        let vm = self
            .vms
            .get_mut(&vmid)
            .ok_or_else(|| format!("VM {vmid} does not exist"))?;
        if vm.lock.as_deref() != Some("snapshot") {
            return Err("missing snapshot lock".into());
        }
        let snap = vm
            .snapshots
            .get_mut(name)
            .ok_or_else(|| format!("snapshot '{name}' does not exist"))?;
        snap.snapstate = None;
        vm.lock = None;
        vm.config.insert("parent".into(), name.to_string());
        Ok(Vec::new())
    }

    /// A `qmdelsnapshot` task finished: children and the current state point at the
    /// deleted snapshot's parent, its RAM state is freed.
    pub(crate) fn finish_snapshot_delete(
        &mut self,
        node: &str,
        vmid: u32,
        name: &str,
    ) -> Result<Vec<String>, String> {
        let vm = self
            .vms
            .get_mut(&vmid)
            .ok_or_else(|| format!("VM {vmid} does not exist"))?;
        if vm.lock.as_deref() != Some("snapshot-delete") {
            return Err("encountered invalid lock, expected 'snapshot-delete'".into());
        }
        let snap = vm
            .snapshots
            .remove(name)
            .ok_or_else(|| format!("snapshot '{name}' does not exist"))?;
        let new_parent = snap.config.get("parent").cloned();
        let relink = |config: &mut BTreeMap<String, String>| {
            if config.get("parent").map(String::as_str) == Some(name) {
                match &new_parent {
                    Some(p) => {
                        config.insert("parent".into(), p.clone());
                    }
                    None => {
                        config.remove("parent");
                    }
                }
            }
        };
        relink(&mut vm.config);
        for s in vm.snapshots.values_mut() {
            relink(&mut s.config);
        }
        vm.lock = None;
        if let Some(state) = snap.vmstate {
            self.free_volume(node, &state);
        }
        Ok(Vec::new())
    }

    /// A `qmrollback` task finished: the snapshot's config is the VM's again (description
    /// and `unusedN` kept, volumes only the current config used become `unusedN`, the
    /// pending section is gone); a RAM snapshot resumes, `start=1` starts the VM.
    pub(crate) fn finish_rollback(
        &mut self,
        node: &str,
        vmid: u32,
        name: &str,
        start: bool,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let (snap, current) = {
            let vm = self
                .vms
                .get(&vmid)
                .ok_or_else(|| format!("VM {vmid} does not exist"))?;
            if vm.lock.as_deref() != Some("rollback") {
                return Err("got wrong lock".into());
            }
            let snap = vm
                .snapshots
                .get(name)
                .cloned()
                .ok_or_else(|| format!("snapshot '{name}' does not exist"))?;
            (snap, vm.config.clone())
        };
        let kept: Vec<String> = volumes(&snap.config).into_iter().map(|(_, v)| v).collect();
        let mut config: BTreeMap<String, String> = current
            .iter()
            .filter(|(k, _)| k.as_str() == "description" || is_unused_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (_, volid) in volumes(&current) {
            let owned = self
                .storage_of(node, &volid)
                .and_then(|s| s.volumes.get(parse_volid(&volid)?.1))
                .is_some_and(|v| v.vmid == Some(vmid));
            if owned && !kept.contains(&volid) && !config.values().any(|v| *v == volid) {
                add_unused(&mut config, volid);
            }
        }
        config.extend(snap.config.clone());
        config.insert("parent".into(), name.to_string());
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.config = config;
            vm.pending = Default::default();
            vm.lock = None;
        }
        if let Some(state) = &snap.vmstate {
            self.run_vm(vmid, now, |exec, vm, host| {
                exec.start_from_state(vm, state, host)
            })?;
        } else if start {
            self.finish_start(node, vmid, now)?;
        }
        Ok(Vec::new())
    }

    /// A snapshot task that was stopped or failed: undo its preparation.
    pub(crate) fn abort_snapshot_work(&mut self, work: &Work) {
        match work {
            Work::SnapshotCreate { vmid, snapname } => {
                let node = self
                    .vms
                    .get(vmid)
                    .map(|v| v.node.clone())
                    .unwrap_or_default();
                let mut state = None;
                if let Some(vm) = self.vms.get_mut(vmid)
                    && vm.lock.as_deref() == Some("snapshot")
                {
                    vm.lock = None;
                    state = vm.snapshots.remove(snapname).and_then(|s| s.vmstate);
                }
                if let Some(s) = state {
                    self.free_volume(&node, &s);
                }
            }
            Work::SnapshotDelete { vmid, .. } | Work::SnapshotRollback { vmid, .. } => {
                if let Some(vm) = self.vms.get_mut(vmid)
                    && matches!(vm.lock.as_deref(), Some("snapshot-delete" | "rollback"))
                {
                    vm.lock = None;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
