//! The work a container task carries (data only: `apply` carries it out).

use serde::{Deserialize, Serialize};

use super::model::MountPoint;
use crate::qemu::storage_map::StorageMap;

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
        /// `ostemplate` (absent in state files written before containers ran for real, and
        /// for a restore).
        #[serde(default)]
        ostemplate: Option<String>,
        /// `ssh-public-keys`: root's `authorized_keys` in the new container.
        #[serde(default)]
        ssh_keys: Option<String>,
    },
    Start {
        vmid: u32,
    },
    Stop {
        vmid: u32,
    },
    /// `timeout` in seconds (PVE's default 60) and `forceStop`.
    Shutdown {
        vmid: u32,
        #[serde(default)]
        timeout: Option<u64>,
        #[serde(default)]
        force: bool,
    },
    /// `timeout` for the shutdown half (unset: `lxc-stop`'s own); the container is killed
    /// after it.
    Reboot {
        vmid: u32,
        #[serde(default)]
        timeout: Option<u64>,
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
    /// `vzclone`: the new container's mount points made from the source's (or its
    /// snapshot's), then its `create` lock and the source's `disk` lock released.
    Clone {
        src: u32,
        newid: u32,
        snapname: Option<String>,
        /// `storage=`: where full copies go (else the source volume's storage).
        storage: Option<String>,
        /// The mount points to make, in order, each a full copy (`true`) or linked.
        mounts: Vec<(String, bool)>,
        pool: Option<String>,
        /// `target=`: the node the new config moves to at the end.
        target: Option<String>,
    },
    /// `vzmigrate` (offline or in restart mode): volumes and config to `target`.
    Migrate {
        vmid: u32,
        target: String,
        storages: StorageMap,
        /// Restart mode with a running container: it stopped first, it starts there.
        restart: bool,
    },
    /// `move_volume` to a storage: a copy of `key`'s volume on `storage`, the old one kept
    /// as `unusedN` or freed.
    MoveVolume {
        vmid: u32,
        key: String,
        storage: String,
        delete: bool,
    },
    /// `move_volume` to another container of the node: the volume renamed for it.
    ReassignVolume {
        vmid: u32,
        key: String,
        target: u32,
        target_key: String,
    },
}
