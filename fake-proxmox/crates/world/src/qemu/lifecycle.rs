//! Clone, resize and destroy.

use std::collections::{BTreeMap, BTreeSet};

use super::op::{VmOp, unlocked};
use crate::exec::Vol;
use crate::qemu::model::{
    DiskPlan, Nic, Power, Vm, is_disk_key, is_net_key, is_unused_key, prop, split_props,
};
use crate::request::Request;
use crate::storage::volid::parse_volid;
use crate::tasks::model::TransferStyle;
use crate::wire::{Params, PveError};
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

impl Site {
    /// `POST .../clone`
    pub fn clone_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let op = VmOp::of(req)?;
        let (node, vmid, p, now) = (op.node.as_str(), op.vmid, &req.p, req.now);
        let newid = u32::try_from(p.req_int("newid")?).map_err(|_| {
            PveError::param("newid", "value must have a maximum value of 999999999")
        })?;
        let src = self.clone_source(&op)?;
        self.check_clone(&op, &src, newid)?;
        let cfg = self.clone_config(&src, p);
        let mut clone = Vm::stopped(newid, node, cfg, Some("clone"));
        // `clone_vmfw_conf`: the clone starts with the source's firewall config.
        clone.firewall = src.firewall.clone();
        self.vms.insert(newid, clone);
        let target_storage = p.str("storage");
        let mut plan = op.plan("qmclone", Work::Noop);
        let (t, err) = self.lay_out_clone(node, &src, target_storage.as_deref(), &mut plan);
        plan.duration = t + 0.2;
        plan.planned_error = err;
        plan.work = Work::Clone {
            src: vmid,
            newid,
            name: p.str("name"),
            target_storage,
            format: p.str("format"),
            snapname: p.str("snapname"),
            pool: p.str("pool"),
        };
        Ok(self.start_task(plan, now))
    }

    /// What a clone is made of: the VM, or with `snapname` its snapshot's config and disks.
    fn clone_source(&self, op: &VmOp) -> Result<Vm, PveError> {
        let src = self.vm_on(&op.node, op.vmid)?.clone();
        let Some(s) = op.req.p.str("snapname") else {
            return Ok(src);
        };
        let snap = src
            .snapshots
            .get(&s)
            .ok_or_else(|| PveError::die(format!("snapshot '{s}' does not exist")))?;
        let config = snap.config.clone();
        let mut vm = src;
        vm.config = config;
        Ok(vm)
    }

    /// Privileges on both VMs (and the target storage), full or linked, the target node,
    /// the source's lock, the new VMID free.
    fn check_clone(&self, op: &VmOp, src: &Vm, newid: u32) -> Result<(), PveError> {
        let (node, req, p) = (op.node.as_str(), op.req, &op.req.p);
        op.require(self, &["VM.Clone"])?;
        // `['or', /vms/{newid}, /pool/{pool}]`, then the pool must exist.
        let pool = p.str("pool");
        let on_pool = pool.as_ref().is_some_and(|pool| {
            self.access
                .has(&req.who, &format!("/pool/{pool}"), "VM.Allocate")
        });
        if !on_pool {
            self.require(&req.who, &format!("/vms/{newid}"), "VM.Allocate")?;
        }
        if let Some(pool) = &pool {
            self.check_pool_exists(pool)?;
        }
        let full = p.bool("full").unwrap_or(!src.is_template());
        if !full && p.has("storage") {
            return Err(PveError::param(
                "storage",
                "parameter 'storage' not allowed for linked clones",
            ));
        }
        if !full && !src.is_template() {
            return Err(PveError::die(
                "linked clone feature is not supported for drive 'scsi0'",
            ));
        }
        if let Some(sid) = &p.str("storage") {
            self.storage_on(node, sid)?.check_images()?;
            self.require(
                &req.who,
                &format!("/storage/{sid}"),
                "Datastore.AllocateSpace",
            )?;
        }
        if let Some(t) = p.str("target")
            && t != node
        {
            return Err(PveError::die(format!(
                "can't clone VM to node '{t}' (VM uses local storage)"
            )));
        }
        unlocked(src, false)?;
        if self.guest(newid).is_some() {
            return Err(PveError::die(format!(
                "unable to create VM {newid}: config file already exists"
            )));
        }
        Ok(())
    }

    /// The clone's config: the source's without drives, `unusedN`, `template` and
    /// `parent`; new MACs; `name` (or `Copy-of-VM-…`) and `description` from the request.
    fn clone_config(&mut self, src: &Vm, p: &Params) -> BTreeMap<String, String> {
        let mut cfg = BTreeMap::new();
        for (k, v) in &src.config {
            if is_disk_key(k) || is_unused_key(k) || k == "template" || k == "parent" {
                continue;
            }
            if is_net_key(k) {
                let mut nic = Nic::parse(v);
                nic.mac = Some(self.random_mac());
                cfg.insert(k.clone(), nic.print());
            } else {
                cfg.insert(k.clone(), v.clone());
            }
        }
        cfg.insert(
            "name".into(),
            p.str("name")
                .unwrap_or_else(|| format!("Copy-of-VM-{}", src.name())),
        );
        if let Some(d) = p.str("description") {
            cfg.insert("description".into(), d);
        }
        cfg
    }

    /// One full copy per disk, one after the other; the end offset, or a missing storage.
    fn lay_out_clone(
        &self,
        node: &str,
        src: &Vm,
        target: Option<&str>,
        plan: &mut TaskPlan,
    ) -> (f64, Option<String>) {
        let mut t = 0.3;
        let Some(n) = self.nodes.get(node) else {
            return (t, None);
        };
        for (key, volid, size) in src.disks() {
            let Some((sid, _)) = parse_volid(&volid) else {
                continue;
            };
            let tsid = target.unwrap_or(sid);
            let (Some(ssto), Some(tsto)) = (n.storages.get(sid), n.storages.get(tsid)) else {
                return (
                    t,
                    Some(format!("clone failed: storage '{tsid}' does not exist")),
                );
            };
            plan.line(t, format!("create full clone of drive {key} ({volid})"));
            let speed = ssto.speed_mib_s.min(tsto.speed_mib_s) * 1024.0 * 1024.0;
            let secs = (size as f64 / speed).max(0.1);
            plan.transfer(t, secs, size, TransferStyle::QemuImg);
            t += secs;
        }
        (t, None)
    }

    /// Complete a clone: copy every disk of the source (or of its snapshot) onto the
    /// target storage.
    pub fn finish_clone(
        &mut self,
        node: &str,
        src: u32,
        newid: u32,
        opts: &CloneOptions<'_>,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let CloneOptions {
            target,
            format,
            snapname,
        } = *opts;
        let Some(mut source) = self.vms.get(&src).cloned() else {
            return Err(format!(
                "clone failed: Configuration file 'nodes/{node}/qemu-server/{src}.conf' does not exist"
            ));
        };
        if let Some(s) = snapname {
            let snap = source
                .snapshots
                .get(s)
                .ok_or_else(|| format!("clone failed: snapshot '{s}' does not exist"))?;
            source.config = snap.config.clone();
        }
        let mut taken = BTreeSet::new();
        let mut plans = Vec::new();
        for (key, volid, size) in source.disks() {
            let Some((sid, vol)) = parse_volid(&volid) else {
                continue;
            };
            let tsid = target
                .map(str::to_string)
                .unwrap_or_else(|| sid.to_string());
            let Some(tsto) = self.nodes.get(node).and_then(|n| n.storages.get(&tsid)) else {
                return Err(format!("clone failed: storage '{tsid}' does not exist"));
            };
            let fmt = tsto.supported_format(format);
            let volname = self.pick_volname(node, &tsid, newid, &fmt, &mut taken);
            let props = split_props(source.config.get(&key).map_or("", |s| s.as_str()), "file");
            let opts: Vec<(String, String)> = props
                .into_iter()
                .filter(|(k, _)| k != "file" && k != "size")
                .collect();
            let used = self
                .nodes
                .get(node)
                .and_then(|n| n.storages.get(sid))
                .and_then(|s| s.volumes.get(vol))
                .map_or(0, |v| v.used);
            plans.push(DiskPlan {
                key,
                storage: tsid,
                volname,
                format: fmt,
                size,
                import_from: Some((sid.to_string(), vol.to_string())),
                data_bytes: used,
                opts,
                cloudinit: false,
            });
        }
        self.allocate_disks(node, newid, &plans, now)
            .map_err(|e| format!("clone failed: {e}"))?;
        if let Some(vm) = self.vms.get_mut(&newid) {
            vm.lock = None;
        }
        Ok(Vec::new())
    }

    /// `PUT .../resize`: returns a UPID (PVE ≥ 8.0) or does it inline (7.x).
    pub fn resize_vm(&mut self, req: &Request) -> Result<Option<String>, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Config.Disk"])?;
        let (node, vmid, p, now) = (op.node.as_str(), op.vmid, &req.p, req.now);
        if let Some(d) = p.str("digest")
            && d != vm.digest()
        {
            return Err(PveError::die(
                "checksum mismatch (file change by other user?)",
            ));
        }
        let disk = p.req_str("disk")?;
        let size = p.req_str("size")?;
        let check = self.resize_target(node, vmid, &disk, &size);
        if !self.version.resize_returns_upid() {
            let new_size = check.map_err(PveError::die)?;
            self.apply_resize(node, vmid, &disk, new_size)
                .map_err(PveError::die)?;
            return Ok(None);
        }
        let mut plan = op.plan("resize", Work::Noop);
        match check {
            Ok(new_size) => {
                plan.work = Work::Resize {
                    vmid,
                    disk,
                    new_size,
                };
                plan.duration = 0.5;
            }
            Err(e) => {
                plan.planned_error = Some(e);
                plan.duration = 0.1;
            }
        }
        Ok(Some(self.start_task(plan, now)))
    }

    /// The size a resize request leads to, or the task error PVE gives.
    pub fn resize_target(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<u64, String> {
        let vm = self
            .vms
            .get(&vmid)
            .filter(|v| v.node == node)
            .ok_or_else(|| {
                format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
            })?;
        if let Some(l) = &vm.lock {
            return Err(format!("VM is locked ({l})"));
        }
        let val = vm
            .config
            .get(disk)
            .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
        let props = split_props(val, "file");
        if prop(&props, "media") == Some("cdrom") {
            return Err("you can't resize a cdrom".into());
        }
        let cur = prop(&props, "size")
            .and_then(crate::storage::model::parse_size)
            .unwrap_or(0);
        let (grow, num) = match size.strip_prefix('+') {
            Some(r) => (true, r),
            None => (false, size),
        };
        let bytes = crate::storage::model::parse_size(num)
            .ok_or_else(|| format!("invalid size '{size}'"))?;
        let new = if grow {
            cur.saturating_add(bytes)
        } else {
            bytes
        };
        if new < cur {
            return Err("shrinking disks is not supported".into());
        }
        Ok(new)
    }

    /// Grow `disk` of the VM to `new_size` bytes: extend its volume (through QEMU when the VM
    /// runs) and write the new `size=` into the drive's config. `Err` with LVM's message when a
    /// thick storage lacks the room, or when the disk or the guest refuses.
    pub fn apply_resize(
        &mut self,
        node: &str,
        vmid: u32,
        disk: &str,
        new_size: u64,
    ) -> Result<(), String> {
        let val = self
            .vms
            .get(&vmid)
            .and_then(|v| v.config.get(disk))
            .cloned()
            .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
        let props = split_props(&val, "file");
        let file = prop(&props, "file").unwrap_or("").to_string();
        let disks = self.disks_on(node).clone();
        let exec = self.exec_on(node).clone();
        if let Some((sid, vol)) = parse_volid(&file)
            && let Some(sto) = self
                .nodes
                .get_mut(node)
                .and_then(|n| n.storages.get_mut(sid))
        {
            let thick = sto.kind.is_thick();
            let avail = sto.avail();
            if let Some(v) = sto.volumes.get(vol) {
                let extra = new_size.saturating_sub(v.size);
                if thick && extra > avail {
                    return Err(format!(
                        "lvextend 'pve/{vol}' error:   Insufficient free space: {} extents needed, but only {} available",
                        extra.div_ceil(4 << 20),
                        avail / (4 << 20)
                    ));
                }
                // A running VM's QEMU grows its open image itself; else the data is resized.
                let by_qemu = match self.vms.get(&vmid) {
                    Some(vm) if vm.power != crate::qemu::model::Power::Stopped => {
                        exec.resize_running_disk(vm, disk, new_size)?
                    }
                    _ => false,
                };
                if !by_qemu {
                    disks.resize(Vol::new(node, sid, vol), &v.format, new_size)?;
                }
                sto.volumes.update(vol, |v| {
                    if thick {
                        v.used = new_size;
                    }
                    v.size = new_size;
                });
            }
        }
        let opts: Vec<(String, String)> = props.into_iter().filter(|(k, _)| k != "file").collect();
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.config.insert(
                disk.to_string(),
                crate::qemu::model::allocated_drive(&file, &opts, new_size),
            );
        }
        Ok(())
    }

    /// `POST …/template`: a stopped, unlocked VM becomes a template.
    pub fn template_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Allocate"])?;
        unlocked(vm, false)?;
        if vm.power != Power::Stopped {
            return Err(PveError::die(
                "you can't convert a running VM to a template",
            ));
        }
        let mut plan = op.plan("qmtemplate", Work::Noop);
        plan.duration = 0.3;
        if let Some(vm) = self.vms.get_mut(&op.vmid) {
            vm.config.insert("template".into(), "1".into());
        }
        Ok(self.start_task(plan, req.now))
    }

    /// `DELETE /nodes/{node}/qemu/{vmid}`
    pub fn destroy_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Allocate"])?;
        let (node, vmid, p, now) = (op.node.as_str(), op.vmid, &req.p, req.now);
        unlocked(vm, op.skiplock())?;
        if vm.power != Power::Stopped {
            return Err(PveError::die(format!(
                "VM {vmid} is running - destroy failed"
            )));
        }
        if vm.config.get("protection").is_some_and(|v| v == "1") {
            return Err(PveError::die(format!(
                "can't remove VM {vmid} - protection mode enabled"
            )));
        }
        let mut plan = op.plan("qmdestroy", Work::Noop);
        let mut t = 0.2;
        for volid in vm.referenced_volumes() {
            if let Some((sid, vol)) = parse_volid(&volid) {
                let block = self
                    .nodes
                    .get(node)
                    .and_then(|n| n.storages.get(sid))
                    .is_some_and(|s| !s.kind.is_file_based());
                if block {
                    plan.line(
                        t,
                        format!("  Logical volume \"{vol}\" successfully removed."),
                    );
                }
                t += 0.1;
            }
        }
        if p.flag("purge") {
            plan.line(
                t,
                format!("purging VM {vmid} from related configurations.."),
            );
        }
        plan.duration = t + 0.2;
        plan.work = Work::Destroy {
            vmid,
            unreferenced: p.flag("destroy-unreferenced-disks"),
        };
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.lock = Some("destroyed".into());
        }
        Ok(self.start_task(plan, now))
    }

    /// Remove the VM at the end of its destroy task: its referenced volumes and snapshot RAM
    /// states are freed, with `unreferenced` also every other volume of its VMID on the node;
    /// its ACL entries and pool membership go.
    pub fn finish_destroy(&mut self, vmid: u32, unreferenced: bool) {
        let Some(vm) = self.vms.remove(&vmid) else {
            return;
        };
        self.exec_on(&vm.node).destroy(&vm);
        for volid in vm.referenced_volumes() {
            self.free_volume(&vm.node, &volid);
        }
        // Snapshots' RAM states go with the VM (disks they reference are the VM's own).
        for state in vm.snapshots.values().filter_map(|s| s.vmstate.as_deref()) {
            self.free_volume(&vm.node, state);
        }
        if unreferenced {
            self.remove_volumes_of(&vm.node, vmid);
        }
        // `remove_vm_access`, whatever `purge` says (it covers replication, backup jobs
        // and HA): the ACL entries on the VM and its pool membership go.
        self.access.remove_vm_access(vmid);
    }
}

/// Where a clone's disks go and what it is taken from.
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneOptions<'a> {
    /// Target storage (default: each disk's own).
    pub target: Option<&'a str>,
    /// Image format of the new disks (`raw`, `qcow2`, `vmdk`); the target storage's default
    /// when unset or not one it supports.
    pub format: Option<&'a str>,
    /// Clone the snapshot of this name instead of the current state.
    pub snapname: Option<&'a str>,
}
