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
    /// Nothing beyond the task's log (a refused or instant task, a `srvreload`).
    Noop,
    /// A console proxy (`vncproxy`, `termproxy`) listening on `port` until it ends.
    Console {
        /// The guest the console shows.
        vmid: u32,
        /// The local TCP port the proxy listens on.
        port: u16,
    },
    /// `qmcreate`: the placeholder VM gets its config and disks.
    CreateVm {
        /// The new VM's ID.
        vmid: u32,
        /// The config keys and values it gets.
        config: Vec<(String, String)>,
        /// The disks to allocate or import.
        disks: Vec<DiskPlan>,
        /// `start=1`: a `qmstart` follows once it exists.
        start_after: bool,
        /// `pool=`: joined once the VM exists (added after state format 1).
        #[serde(default)]
        pool: Option<String>,
    },
    /// `qmconfig` of a config change that allocates disks.
    UpdateConfig {
        /// The VM changed.
        vmid: u32,
        /// The disks the change allocates.
        disks: Vec<DiskPlan>,
    },
    /// `qmstart`: the VM runs (see `Site::finish_start`).
    Start {
        /// The VM started.
        vmid: u32,
    },
    /// `qmstop`: the VM is stopped at once.
    Stop {
        /// The VM stopped.
        vmid: u32,
    },
    /// `qmshutdown`: the guest is asked to power off.
    Shutdown {
        /// The VM shut down.
        vmid: u32,
    },
    /// `qmreboot`: the guest restarts.
    Reboot {
        /// The VM rebooted.
        vmid: u32,
    },
    /// `qmreset`: a hard reset of the running VM.
    Reset {
        /// The VM reset.
        vmid: u32,
    },
    /// `qmsuspend`: the VM is paused.
    Suspend {
        /// The VM suspended.
        vmid: u32,
    },
    /// `qmresume`: a paused VM runs again.
    Resume {
        /// The VM resumed.
        vmid: u32,
    },
    /// `qmdestroy`: the VM and its volumes go.
    Destroy {
        /// The VM destroyed.
        vmid: u32,
        /// `destroy-unreferenced-disks`: also free the node's other volumes of this VMID.
        unreferenced: bool,
    },
    /// `qmclone`: the placeholder `newid` gets copies of the source's disks.
    Clone {
        /// The source VM (or template).
        src: u32,
        /// The clone's VMID.
        newid: u32,
        /// `name=` of the clone.
        name: Option<String>,
        /// `storage=`: where the copies go; unset: each disk's own storage.
        target_storage: Option<String>,
        /// `format=` of the copies (`raw`, `qcow2`, `vmdk`).
        format: Option<String>,
        /// `snapname=`: copy the disks as of this snapshot.
        snapname: Option<String>,
        /// `pool=`: joined once the clone is complete (added after state format 1).
        #[serde(default)]
        pool: Option<String>,
    },
    /// `resize` of a VM disk.
    Resize {
        /// The VM whose disk grows.
        vmid: u32,
        /// The drive key (`scsi0`, `virtio1`, ...).
        disk: String,
        /// The size it grows to, in bytes.
        new_size: u64,
    },
    /// `download` (`download-url`, `aplinfo`): the volume appears on the storage.
    Download {
        /// The target storage ID.
        storage: String,
        /// The new volume's name on that storage.
        volname: String,
        /// Its size in bytes.
        size: u64,
        /// The local file the scenario says stands for the URL (real disks copy it).
        file: Option<std::path::PathBuf>,
    },
    /// An uploaded file (`tmp`, removed when the task ends) becomes volume `volname`,
    /// replacing one of that name.
    Upload {
        /// The target storage ID.
        storage: String,
        /// The volume's name on that storage.
        volname: String,
        /// Where the upload was spooled.
        tmp: std::path::PathBuf,
    },
    /// `imgdel`: a volume is freed.
    DeleteVolume {
        /// The storage ID.
        storage: String,
        /// The volume's name on that storage.
        volname: String,
    },
    /// The backups a `prunebackups` task marked `remove`.
    PruneBackups {
        /// The storage ID.
        storage: String,
        /// The full volume IDs (`storage:volname`) to remove.
        volids: Vec<String>,
    },
    /// `POST …/content/{volume}`: the volume copied to `target` on `target_node`.
    CopyVolume {
        /// The source storage ID.
        storage: String,
        /// The source volume's name.
        volname: String,
        /// The node the copy goes to (the request's node when unset).
        target_node: String,
        /// The copy's volume name on the same storage ID.
        target: String,
    },
    /// `qmmove` to another storage: the copy replaces the drive.
    MoveDisk {
        /// The VM whose drive moves.
        vmid: u32,
        /// The new volume to allocate.
        plan: DiskPlan,
        /// The drive's volume before the move.
        old_volid: String,
        /// `delete=1`: free the old volume rather than keep it as `unusedN`.
        delete: bool,
    },
    /// `qmsnapshot`: a snapshot is taken.
    SnapshotCreate {
        /// The VM.
        vmid: u32,
        /// The new snapshot's name.
        snapname: String,
    },
    /// `qmdelsnapshot`: a snapshot and its volume states go.
    SnapshotDelete {
        /// The VM.
        vmid: u32,
        /// The snapshot removed.
        snapname: String,
    },
    /// `qmrollback`: the VM goes back to a snapshot.
    SnapshotRollback {
        /// The VM.
        vmid: u32,
        /// The snapshot returned to.
        snapname: String,
        /// `start=1`: the VM runs afterwards.
        start: bool,
    },
    /// A disk handed to another VM of the node (`move_disk` with `target-vmid`).
    ReassignDisk {
        /// The VM giving the disk.
        vmid: u32,
        /// Its drive key there.
        disk: String,
        /// The VM receiving it.
        target: u32,
        /// The drive key it gets there.
        target_disk: String,
    },
    /// pve-guests' `stopall` as its node shuts down: the running VMs shut down, then the
    /// node is off (back after its boot time when it reboots).
    NodeDown {
        /// A reboot (the node comes back) rather than a shutdown.
        reboot: bool,
    },
    /// pve-guests' `startall` on a node that booted: its `onboot` VMs start.
    NodeUp,
    /// A migration tunnel (`mtunnel`) waiting for its client; its placeholder config goes
    /// when it ends.
    Mtunnel {
        /// The incoming VM's ID.
        vmid: u32,
    },
    /// `qmigrate`: the VM and its local disks move to `target`.
    Migrate {
        /// The VM migrated.
        vmid: u32,
        /// The target node.
        target: String,
        /// `targetstorage`: where each local disk goes on the target.
        storages: crate::qemu::storage_map::StorageMap,
        /// `online=1`: a live migration of a running VM.
        online: bool,
    },
    /// A container task's work (see `lxc::work`).
    Ct(crate::lxc::work::CtWork),
}
