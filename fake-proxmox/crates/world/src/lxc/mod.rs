//! LXC containers: the `/nodes/{node}/lxc` family as pve-container answers it. A container
//! is a guest like a VM (one VMID space, locks, tasks, pools, ACL paths `/vms/{vmid}`,
//! firewall file, snapshots, node capacity) with its own config grammar (`rootfs`, `mpN`,
//! `netN`, `features`, `unprivileged`), its task types (`vzcreate`, `vzstart`, `vzstop`,
//! `vzshutdown`, `vzreboot`, `vzsuspend`, `vzresume`, `vzdestroy`, `vztemplate`,
//! `vzsnapshot`, `vzdelsnapshot`, `vzrollback`) and its refusals' texts.
//!
//! # Deviations from real PVE
//! - Containers run in the model: no executor backs them, on the lab backend neither.
//! - Templates are not unpacked: a template volume's size stands for its content, the
//!   extraction takes its time from it, and the OS type comes from the file name.
//! - No restore from backups (`restore=1`), no OCI images, no HA.
//! - Tag privileges (`assert_tag_permissions`) are not checked.

mod apply;
pub mod clone;
pub mod create;
pub mod lifecycle;
pub mod migrate;
pub mod model;
pub mod move_volume;
pub mod perms;
pub mod power;
pub mod snapshot;
pub mod status;
pub mod update;
mod volumes;
pub mod work;

pub use model::Ct;
