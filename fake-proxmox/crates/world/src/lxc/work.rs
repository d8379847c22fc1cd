//! The work a container task carries (data only: `apply` carries it out).

use serde::{Deserialize, Serialize};

use super::model::MountPoint;
use crate::qemu::storage_map::StorageMap;

/// A mount point the task allocates: `STORAGE:SIZE_GB` in the request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewVolume {
    /// `rootfs` or `mpN`.
    pub key: String,
    /// Storage id the volume is allocated on.
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
    /// `vzcreate` (or a restore): allocate the volumes, write the config, unpack the template.
    Create {
        /// The new container's id.
        vmid: u32,
        /// Config options to write, in order.
        config: Vec<(String, String)>,
        /// Mount points to allocate.
        volumes: Vec<NewVolume>,
        /// `start=1`: start the container once created.
        start_after: bool,
        /// `pool=`: the pool it joins.
        pool: Option<String>,
        /// `ostemplate` (absent in state files written before containers ran for real, and
        /// for a restore).
        #[serde(default)]
        ostemplate: Option<String>,
        /// `ssh-public-keys`: root's `authorized_keys` in the new container.
        #[serde(default)]
        ssh_keys: Option<String>,
    },
    /// `vzstart`.
    Start {
        /// The container.
        vmid: u32,
    },
    /// `vzstop`: hard stop.
    Stop {
        /// The container.
        vmid: u32,
    },
    /// `timeout` in seconds (PVE's default 60) and `forceStop`.
    Shutdown {
        /// The container.
        vmid: u32,
        /// Seconds the init gets to stop.
        #[serde(default)]
        timeout: Option<u64>,
        /// Kill it after `timeout` instead of failing.
        #[serde(default)]
        force: bool,
    },
    /// `timeout` for the shutdown half (unset: `lxc-stop`'s own); the container is killed
    /// after it.
    Reboot {
        /// The container.
        vmid: u32,
        /// Seconds the init gets to stop.
        #[serde(default)]
        timeout: Option<u64>,
    },
    /// `vzsuspend`: `lxc-checkpoint` saves the container's state and it stops.
    Suspend {
        /// The container.
        vmid: u32,
    },
    /// `vzresume`: `lxc-checkpoint -r` restores a suspended container.
    Resume {
        /// The container.
        vmid: u32,
    },
    /// `vzdestroy`: config and volumes go.
    Destroy {
        /// The container.
        vmid: u32,
        /// `destroy-unreferenced-disks=1`: also free volumes of this VMID the config does not name.
        unreferenced: bool,
    },
    /// `template`: the volumes become base volumes, the config `template: 1`.
    Template {
        /// The container.
        vmid: u32,
    },
    /// `resize` of a mount point.
    Resize {
        /// The container.
        vmid: u32,
        /// Mount point key (`rootfs`, `mpN`).
        disk: String,
        /// New size, bytes.
        new_size: u64,
    },
    /// `vzsnapshot`.
    SnapshotCreate {
        /// The container.
        vmid: u32,
        /// Snapshot name.
        snapname: String,
        /// Snapshot description, if given.
        description: Option<String>,
    },
    /// `vzdelsnapshot`.
    SnapshotDelete {
        /// The container.
        vmid: u32,
        /// Snapshot name.
        snapname: String,
    },
    /// `vzrollback`.
    SnapshotRollback {
        /// The container.
        vmid: u32,
        /// Snapshot name.
        snapname: String,
        /// `start=1`: start the container after the rollback.
        start: bool,
    },
    /// `vzclone`: the new container's mount points made from the source's (or its
    /// snapshot's), then its `create` lock and the source's `disk` lock released.
    Clone {
        /// The source container.
        src: u32,
        /// The new container's id.
        newid: u32,
        /// The source's snapshot to clone from; `None`: its current state.
        snapname: Option<String>,
        /// `storage=`: where full copies go (else the source volume's storage).
        storage: Option<String>,
        /// The mount points to make, in order, each a full copy (`true`) or linked.
        mounts: Vec<(String, bool)>,
        /// `pool=`: the pool the new container joins.
        pool: Option<String>,
        /// `target=`: the node the new config moves to at the end.
        target: Option<String>,
    },
    /// `vzmigrate` (offline or in restart mode): volumes and config to `target`.
    Migrate {
        /// The container.
        vmid: u32,
        /// The node it moves to.
        target: String,
        /// `target-storage`: where each source storage's volumes go.
        storages: StorageMap,
        /// Restart mode with a running container: it stopped first, it starts there.
        restart: bool,
    },
    /// `move_volume` to a storage: a copy of `key`'s volume on `storage`, the old one kept
    /// as `unusedN` or freed.
    MoveVolume {
        /// The container.
        vmid: u32,
        /// Mount point key (`rootfs`, `mpN`).
        key: String,
        /// Target storage id.
        storage: String,
        /// `delete=1`: free the old volume instead of keeping it as `unusedN`.
        delete: bool,
    },
    /// `move_volume` to another container of the node: the volume renamed for it.
    ReassignVolume {
        /// The source container.
        vmid: u32,
        /// Its mount point key.
        key: String,
        /// The container that gets the volume.
        target: u32,
        /// The key it gets there.
        target_key: String,
    },
}
