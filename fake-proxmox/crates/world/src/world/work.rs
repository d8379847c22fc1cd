//! What the site's tasks do when they complete: the work each family lays out (`Work`), and
//! the task types over it. The `tasks` module keeps tasks generic over their work and never
//! looks into it; applying it to the world is `qemu::work`'s and the other families'.

use serde::Serialize;

use crate::qemu::model::DiskPlan;

/// A task of this world.
pub type Task = crate::tasks::model::Task<Work>;
/// How a task of this world is laid out when it starts.
pub type TaskPlan = crate::tasks::model::TaskPlan<Work>;
/// A site's tasks.
pub type TaskStore = crate::tasks::store::TaskStore<Work>;

/// The work a task does when it completes.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub enum Work {
    Noop,
    /// A console proxy (`vncproxy`, `termproxy`) listening on `port` until it ends.
    Console {
        vmid: u32,
        port: u16,
    },
    CreateVm {
        vmid: u32,
        config: Vec<(String, String)>,
        disks: Vec<DiskPlan>,
        start_after: bool,
        /// `pool=`: joined once the VM exists (added after state format 1).
        #[serde(default)]
        pool: Option<String>,
    },
    UpdateConfig {
        vmid: u32,
        disks: Vec<DiskPlan>,
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
    Reset {
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
    Clone {
        src: u32,
        newid: u32,
        name: Option<String>,
        target_storage: Option<String>,
        format: Option<String>,
        snapname: Option<String>,
        /// `pool=`: joined once the clone is complete (added after state format 1).
        #[serde(default)]
        pool: Option<String>,
    },
    Resize {
        vmid: u32,
        disk: String,
        new_size: u64,
    },
    Download {
        storage: String,
        volname: String,
        size: u64,
        /// The local file the scenario says stands for the URL (real disks copy it).
        file: Option<std::path::PathBuf>,
    },
    /// An uploaded file (`tmp`, removed when the task ends) becomes volume `volname`,
    /// replacing one of that name.
    Upload {
        storage: String,
        volname: String,
        tmp: std::path::PathBuf,
    },
    DeleteVolume {
        storage: String,
        volname: String,
    },
    /// The backups a `prunebackups` task marked `remove`.
    PruneBackups {
        storage: String,
        volids: Vec<String>,
    },
    /// `POST …/content/{volume}`: the volume copied to `target` on `target_node`.
    CopyVolume {
        storage: String,
        volname: String,
        target_node: String,
        target: String,
    },
    MoveDisk {
        vmid: u32,
        plan: DiskPlan,
        old_volid: String,
        delete: bool,
    },
    SnapshotCreate {
        vmid: u32,
        snapname: String,
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
    /// A disk handed to another VM of the node (`move_disk` with `target-vmid`).
    ReassignDisk {
        vmid: u32,
        disk: String,
        target: u32,
        target_disk: String,
    },
    /// pve-guests' `stopall` as its node shuts down: the running VMs shut down, then the
    /// node is off (back after its boot time when it reboots).
    NodeDown {
        reboot: bool,
    },
    /// pve-guests' `startall` on a node that booted: its `onboot` VMs start.
    NodeUp,
    /// A migration tunnel (`mtunnel`) waiting for its client; its placeholder config goes
    /// when it ends.
    Mtunnel {
        vmid: u32,
    },
    Migrate {
        vmid: u32,
        target: String,
        storages: crate::qemu::storage_map::StorageMap,
        online: bool,
    },
    /// A container task's work (see `lxc::work`).
    Ct(crate::lxc::work::CtWork),
}
