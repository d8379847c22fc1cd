//! QEMU VMs: create, config, power, clone, resize, destroy — with PVE's locks and tasks.
//!
//! Config changes go through the config's `[PENDING]` section (`pending`): a stopped VM
//! applies them at once; a running one takes fast-plug options (name, description, tags,
//! onboot, protection, cloud-init options …) at once and devices as its `hotplug` option
//! allows (`hotplug`, default `network,disk,usb`); the rest waits until the QEMU process
//! stops (stop, shutdown, reboot) or starts. `GET …/config` shows pending values unless
//! `current=1`; `GET …/pending` lists both; the digest covers the pending section.
//!
//! # Deviations from real PVE
//! - Hot-plug never fails: where PVE reports a `hotplug problem` (changing a drive's media
//!   type, QMP errors) the value simply stays pending. No boot-order bookkeeping when drives
//!   come and go. With simulated disks the cloud-init image is not built (`…/cloudinit/dump`
//!   renders what it would hold); with real disks it is (`cloudinit_drive`).
//! - No backup/restore (`archive`) or templates' linked clones. Migration to another
//!   cluster never reaches the remote endpoint (see `remote`). Snapshot deviations are in
//!   `snapshot`.
//! - Guest memory is only checked against the node's total at start (no overcommit model).
//! - Absolute paths as `import-from` sources are accepted only from `root@pam` with a ticket
//!   (as PVE) and then fail: the simulated node has no filesystem.

pub mod cloudinit;
mod cloudinit_drive;
pub mod create;
pub mod disks;
pub mod facts;
mod guest_boot;
pub mod hotplug;
pub mod lifecycle;
pub mod migrate;
pub mod model;
pub mod move_disk;
pub mod op;
pub mod pending;
pub mod power;
pub mod reassign;
pub mod remote;
pub mod snapshot;
pub mod status;
pub mod storage_map;
pub mod work;
