//! What a container task does when it completes, and how a failed one is undone.

use super::lifecycle::CtMade;
use super::work::CtWork;
use crate::world::Site;

impl Site {
    /// Apply a container task that reached its end. `Err` is its exit status.
    pub(crate) fn apply_ct_work(
        &mut self,
        node: &str,
        work: &CtWork,
        now: f64,
    ) -> Result<Vec<String>, String> {
        match work {
            CtWork::Create {
                vmid,
                config,
                volumes,
                start_after,
                pool,
                ostemplate,
                ssh_keys,
            } => {
                let made = CtMade {
                    ostemplate: ostemplate.as_deref(),
                    ssh_keys: ssh_keys.as_deref(),
                };
                let r = self.finish_create_ct(node, *vmid, config, volumes, &made, now);
                if r.is_ok() {
                    if let Some(pool) = pool {
                        self.access.add_vm_to_pool(*vmid, pool);
                    }
                    if *start_after {
                        self.finish_start_ct(*vmid, now)?;
                    }
                }
                r
            }
            CtWork::Start { vmid } | CtWork::Resume { vmid } => {
                self.finish_start_ct(*vmid, now)?;
                Ok(Vec::new())
            }
            CtWork::Reboot { vmid, timeout } => {
                // `vm_reboot`: `vm_stop` killing after the timeout, then `vm_start`.
                self.shut_down_ct(*vmid, *timeout, true, now)?;
                self.finish_start_ct(*vmid, now)?;
                Ok(Vec::new())
            }
            CtWork::Stop { vmid } => {
                self.kill_ct(*vmid, now)?;
                Ok(Vec::new())
            }
            CtWork::Shutdown {
                vmid,
                timeout,
                force,
            } => {
                self.shut_down_ct(*vmid, *timeout, *force, now)?;
                Ok(Vec::new())
            }
            CtWork::Suspend { vmid } => {
                self.run_ct(*vmid, now, |exec, ct, _| exec.suspend_ct(ct))?;
                Ok(Vec::new())
            }
            CtWork::Destroy { vmid, unreferenced } => {
                self.finish_destroy_ct(*vmid, *unreferenced);
                Ok(Vec::new())
            }
            CtWork::Template { vmid } => {
                self.finish_template_ct(*vmid);
                Ok(Vec::new())
            }
            CtWork::Resize {
                vmid,
                disk,
                new_size,
            } => self.finish_resize_ct(*vmid, disk, *new_size),
            CtWork::SnapshotCreate {
                vmid,
                snapname,
                description,
            } => {
                self.finish_snapshot_ct(*vmid, snapname, description.clone(), now);
                Ok(Vec::new())
            }
            CtWork::SnapshotDelete { vmid, snapname } => {
                self.finish_delsnapshot_ct(*vmid, snapname);
                Ok(Vec::new())
            }
            CtWork::Clone { .. } => self.finish_clone_ct(node, work, now),
            CtWork::Migrate {
                vmid,
                target,
                storages,
                restart,
            } => self.finish_migrate_ct(node, *vmid, target, storages, *restart, now),
            CtWork::MoveVolume {
                vmid,
                key,
                storage,
                delete,
            } => self.finish_move_volume_ct(node, *vmid, key, storage, *delete, now),
            CtWork::ReassignVolume {
                vmid,
                key,
                target,
                target_key,
            } => self.finish_reassign_volume_ct(node, *vmid, key, *target, target_key),
            CtWork::SnapshotRollback {
                vmid,
                snapname,
                start,
            } => {
                self.finish_rollback_ct(*vmid, snapname);
                if *start {
                    self.finish_start_ct(*vmid, now)?;
                }
                Ok(Vec::new())
            }
        }
    }

    /// Undo what a failed or killed container task left: a create's locked config goes, a
    /// lock the task took is released.
    pub(crate) fn rollback_ct_work(&mut self, work: &CtWork, now: f64) {
        match work {
            CtWork::Create { vmid, .. }
                if self
                    .cts
                    .get(vmid)
                    .is_some_and(|c| c.lock.as_deref() == Some("create")) =>
            {
                self.cts.remove(vmid);
            }
            CtWork::Destroy { vmid, .. } | CtWork::Template { vmid } => {
                if let Some(ct) = self.cts.get_mut(vmid) {
                    ct.lock = None;
                }
            }
            CtWork::SnapshotCreate { vmid, snapname, .. } => {
                if let Some(ct) = self.cts.get_mut(vmid) {
                    ct.lock = None;
                    ct.snapshots.remove(snapname);
                }
            }
            CtWork::SnapshotDelete { vmid, .. } | CtWork::SnapshotRollback { vmid, .. } => {
                if let Some(ct) = self.cts.get_mut(vmid) {
                    ct.lock = None;
                }
            }
            CtWork::Clone { src, newid, .. } => {
                if self
                    .cts
                    .get(newid)
                    .is_some_and(|c| c.lock.as_deref() == Some("create"))
                {
                    self.cts.remove(newid);
                }
                if let Some(ct) = self.cts.get_mut(src)
                    && ct.lock.as_deref() == Some("disk")
                {
                    ct.lock = None;
                }
            }
            CtWork::Migrate { vmid, restart, .. } => self.abort_migrate_ct(*vmid, *restart, now),
            CtWork::MoveVolume { vmid, .. } => {
                if let Some(ct) = self.cts.get_mut(vmid)
                    && ct.lock.as_deref() == Some("disk")
                {
                    ct.lock = None;
                }
            }
            _ => {}
        }
    }
}
