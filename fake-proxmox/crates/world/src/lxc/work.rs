//! What a container task does when it completes, and how a failed one is undone.

use serde::{Deserialize, Serialize};

use super::model::MountPoint;
use crate::world::Site;

/// A mount point the task allocates: `STORAGE:SIZE_GB` in the request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewVolume {
    /// `rootfs` or `mpN`.
    pub key: String,
    pub storage: String,
    /// Bytes; 0 asks a directory storage for a subvolume.
    pub size: u64,
    /// The request's value; its volume is replaced by the allocated one.
    #[serde(with = "mount_text")]
    pub mount: MountPoint,
}

/// A mount point is kept in state files as the text it was parsed from.
mod mount_text {
    use super::MountPoint;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &MountPoint, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&m.print(false))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MountPoint, D::Error> {
        Ok(MountPoint::parse(&String::deserialize(d)?))
    }
}

/// The work of a container task.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CtWork {
    Create {
        vmid: u32,
        config: Vec<(String, String)>,
        volumes: Vec<NewVolume>,
        start_after: bool,
        pool: Option<String>,
    },
    Start {
        vmid: u32,
    },
    Stop {
        vmid: u32,
    },
    Shutdown {
        vmid: u32,
    },
    Reboot {
        vmid: u32,
    },
    Suspend {
        vmid: u32,
    },
    Resume {
        vmid: u32,
    },
    Destroy {
        vmid: u32,
        unreferenced: bool,
    },
    /// `template`: the volumes become base volumes, the config `template: 1`.
    Template {
        vmid: u32,
    },
    Resize {
        vmid: u32,
        disk: String,
        new_size: u64,
    },
    SnapshotCreate {
        vmid: u32,
        snapname: String,
        description: Option<String>,
    },
    SnapshotDelete {
        vmid: u32,
        snapname: String,
    },
    SnapshotRollback {
        vmid: u32,
        snapname: String,
        start: bool,
    },
}

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
            } => {
                let r = self.finish_create_ct(node, *vmid, config, volumes, now);
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
            CtWork::Reboot { vmid } => {
                self.ct_power_off(*vmid);
                self.finish_start_ct(*vmid, now)?;
                Ok(Vec::new())
            }
            CtWork::Stop { vmid } | CtWork::Shutdown { vmid } | CtWork::Suspend { vmid } => {
                self.ct_power_off(*vmid);
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
    pub(crate) fn rollback_ct_work(&mut self, work: &CtWork) {
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
            _ => {}
        }
    }
}
