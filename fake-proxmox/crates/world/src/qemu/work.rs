//! What finished tasks do to the world, and how an aborted or failed task is undone.

use crate::qemu::model::DiskPlan;
use crate::world::Site;
use crate::world::work::Work;

impl Site {
    /// Apply the effect of a task that reached its end time. `Err` is the exit status.
    pub(crate) fn apply_work(
        &mut self,
        node: &str,
        user: &str,
        work: &Work,
        now: f64,
    ) -> Result<Vec<String>, String> {
        match work {
            Work::Noop | Work::Console { .. } => Ok(Vec::new()),
            Work::Ct(w) => self.apply_ct_work(node, w, now),
            // Only reached if its planned failure was lifted: the tunnel still closes.
            Work::Mtunnel { vmid } => {
                self.abort_mtunnel(*vmid);
                Ok(Vec::new())
            }
            Work::CreateVm {
                vmid,
                config,
                disks,
                start_after,
                pool,
            } => {
                let start = start_after.then_some(user);
                let r = self.finish_create(node, *vmid, config, disks, start, now);
                if r.is_ok()
                    && let Some(pool) = pool
                {
                    self.access.add_vm_to_pool(*vmid, pool);
                }
                r
            }
            Work::UpdateConfig { vmid, disks } => {
                self.finish_update_config(node, *vmid, disks, now)
            }
            Work::Start { vmid } => self.finish_start(node, *vmid, now),
            Work::Stop { .. }
            | Work::Shutdown { .. }
            | Work::Reboot { .. }
            | Work::Reset { .. }
            | Work::Suspend { .. }
            | Work::Resume { .. } => self.finish_power(work, now),
            Work::Destroy { vmid, unreferenced } => {
                self.finish_destroy(*vmid, *unreferenced);
                Ok(Vec::new())
            }
            Work::Clone {
                src,
                newid,
                target_storage,
                format,
                snapname,
                pool,
                ..
            } => {
                let opts = super::lifecycle::CloneOptions {
                    target: target_storage.as_deref(),
                    format: format.as_deref(),
                    snapname: snapname.as_deref(),
                };
                let r = self.finish_clone(node, *src, *newid, &opts, now);
                match (&r, pool) {
                    (Err(_), _) => {
                        self.vms.remove(newid);
                    }
                    (Ok(_), Some(pool)) => self.access.add_vm_to_pool(*newid, pool),
                    (Ok(_), None) => {}
                }
                r
            }
            Work::Resize {
                vmid,
                disk,
                new_size,
            } => self.finish_resize(node, *vmid, disk, *new_size),
            Work::Download {
                storage,
                volname,
                size,
                file,
            } => self.finish_download(node, storage, volname, (*size, file.as_deref()), now),
            Work::Upload {
                storage,
                volname,
                tmp,
            } => self.finish_upload(node, storage, volname, tmp, now),
            Work::NodeDown { reboot } => Ok(self.finish_node_down(node, *reboot, now)),
            Work::NodeUp => Ok(self.finish_node_up(node, now)),
            Work::ReassignDisk {
                vmid,
                disk,
                target,
                target_disk,
            } => self.finish_reassign(*vmid, disk, *target, target_disk),
            Work::Migrate {
                vmid,
                target,
                storages,
                ..
            } => self.finish_migrate(node, *vmid, target, storages),
            Work::DeleteVolume { storage, volname } => {
                self.finish_delete_volume(node, storage, volname)
            }
            Work::PruneBackups { storage, volids } => self.finish_prune(node, storage, volids),
            Work::CopyVolume {
                storage,
                volname,
                target_node,
                target,
            } => self.finish_copy(node, storage, volname, target_node, target, now),
            Work::MoveDisk {
                vmid,
                plan,
                old_volid,
                delete,
            } => self.finish_move_disk(node, *vmid, plan, old_volid, *delete, now),
            Work::SnapshotCreate { vmid, snapname } => self.finish_snapshot(*vmid, snapname),
            Work::SnapshotDelete { vmid, snapname } => {
                self.finish_snapshot_delete(node, *vmid, snapname)
            }
            Work::SnapshotRollback {
                vmid,
                snapname,
                start,
            } => self.finish_rollback(node, *vmid, snapname, *start, now),
        }
    }

    /// A create's disks are allocated (or the placeholder VM goes with the error PVE
    /// prefixes); then the lock is lifted and, with `start=1`, a start task follows as `user`.
    fn finish_create(
        &mut self,
        node: &str,
        vmid: u32,
        config: &[(String, String)],
        disks: &[DiskPlan],
        start_as: Option<&str>,
        now: f64,
    ) -> Result<Vec<String>, String> {
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.config = config.iter().cloned().collect();
        }
        if let Err(e) = self.allocate_disks(node, vmid, disks, now) {
            self.vms.remove(&vmid);
            return Err(format!("unable to create VM {vmid} - {e}"));
        }
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.lock = None;
        }
        if let Some(user) = start_as {
            self.spawn_start(node, vmid, user, now);
        }
        Ok(Vec::new())
    }

    fn finish_resize(
        &mut self,
        node: &str,
        vmid: u32,
        disk: &str,
        new_size: u64,
    ) -> Result<Vec<String>, String> {
        if !self
            .vms
            .get(&vmid)
            .is_some_and(|v| v.config.contains_key(disk))
        {
            return Err(format!("disk '{disk}' does not exist"));
        }
        self.apply_resize(node, vmid, disk, new_size)?;
        Ok(Vec::new())
    }

    /// Undo what starting the task did (a create's placeholder config, a clone's target).
    pub(crate) fn rollback_work(&mut self, work: &Work, now: f64) {
        match work {
            Work::Ct(w) => self.rollback_ct_work(w, now),
            Work::CreateVm { vmid, .. }
                if self
                    .vms
                    .get(vmid)
                    .is_some_and(|v| v.lock.as_deref() == Some("create")) =>
            {
                self.vms.remove(vmid);
            }
            Work::Clone { newid, .. }
                if self
                    .vms
                    .get(newid)
                    .is_some_and(|v| v.lock.as_deref() == Some("clone")) =>
            {
                self.vms.remove(newid);
            }
            Work::Destroy { vmid, .. } => {
                if let Some(vm) = self.vms.get_mut(vmid) {
                    vm.lock = None;
                }
            }
            Work::Migrate { vmid, .. } => self.abort_migrate(*vmid),
            Work::Mtunnel { vmid } => self.abort_mtunnel(*vmid),
            Work::SnapshotCreate { .. }
            | Work::SnapshotDelete { .. }
            | Work::SnapshotRollback { .. } => self.abort_snapshot_work(work),
            // A failed or stopped upload copy removes its spooled file, as PVE's worker does.
            Work::Upload { tmp, .. } => {
                if let Err(e) = std::fs::remove_file(tmp)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(
                        "unable to clean up temporary file '{}' - {e}",
                        tmp.display()
                    );
                }
            }
            _ => {}
        }
    }
}
