//! LXC containers: the `/nodes/{node}/lxc` family as pve-container answers it. A container
//! is a guest like a VM (one VMID space, locks, tasks, pools, ACL paths `/vms/{vmid}`,
//! firewall file, snapshots, node capacity) with its own config grammar (`rootfs`, `mpN`,
//! `netN`, `features`, `unprivileged`), its task types (`vzcreate`, `vzstart`, `vzstop`,
//! `vzshutdown`, `vzreboot`, `vzsuspend`, `vzresume`, `vzdestroy`, `vztemplate`,
//! `vzsnapshot`, `vzdelsnapshot`, `vzrollback`, `vzclone`, `vzmigrate`, `move_volume`,
//! `vzmtunnel`) and its refusals' texts.
//!
//! Every method of 9.1's `/nodes/{node}/lxc` family is served. What containers share
//! with VMs is served by the same verbs, which tell the kinds apart by the request's path
//! (`Request::guest_kind`): the firewall (`firewall`: one `<vmid>.fw` per VMID), `rrd` and
//! `rrddata` (`rrd`: the container's figures in the same `pve-vm-9.0` layout), the consoles
//! (`console`: pve-container's password and ticket rules, a `spiceterm` for SPICE), and
//! remote migration with its tunnel (`qemu::remote`). What only containers do is here:
//! `clone`, `migrate`, `move_volume` (with `volumes`, what they share).
//!
//! # Deviations from real PVE
//! - What runs a container is the node's executor (`exec`): the simulated one keeps it in the
//!   model; the lab backend runs a real container (`exec::lab::ct`), with PVE's setup files
//!   (`setup`) written into its root file system.
//! - On the simulated backend templates are not unpacked: a template volume's size stands for
//!   its content, the extraction takes its time from it, and the OS type comes from the file
//!   name (the lab backend unpacks the real archive and detects the OS in it).
//! - No restore from backups (`restore=1`), no OCI images, no HA.
//! - Tag privileges (`assert_tag_permissions`) are not checked.
//! - Clone: a linked clone does not remember its base (destroying a template with linked
//!   clones is not refused); a full copy's data is the source volume's `used` figure, no
//!   `rsync` output is logged; `bwlimit` is accepted and ignored; bridge access (`SDN.Use`)
//!   is not checked.
//! - Migrate: offline and restart mode only, as in PVE; replication jobs, HA
//!   (`hamigrate`, `dependent-ha-resources`) and `bwlimit` are not modelled; the
//!   restart-mode shutdown is immediate; `storage_migrate`'s transfer lines are not
//!   PVE's (the copy shows as a transfer of the volume's used bytes); snapshots on local
//!   storages other than ZFS and btrfs refuse as PVE's `phase1` does, and the snapshots'
//!   volume ids are not remapped to a target storage.
//! - Move volume: a `move_volume` to a storage for a mount point the config does not have
//!   answers with the reassignment's text (`volume '…' for container '…' does not
//!   exist`); the target storage's content types are not checked (as `vdisk_alloc`);
//!   replication snapshots are not removed.
//! - Remote migration: as for VMs, no connection is ever made (the call fails where PVE's
//!   API client first reaches the endpoint); the tunnel takes the VMID and times out.
//! - SPICE: the `spiceterm` task ends OK after its 10 s wait; its exit status without a
//!   client is not known here.
//! - `rrd`/`rrddata`: only the current run is kept; `memhost` is the container's `mem`
//!   and the pressure sources are 0.

mod apply;
pub mod clone;
pub mod create;
pub mod lifecycle;
pub mod migrate;
pub mod model;
pub mod move_volume;
pub mod perms;
pub mod power;
pub mod restore;
pub mod setup;
pub mod snapshot;
pub mod status;
pub mod update;
mod volumes;
pub mod work;

pub use model::Ct;
