//! QEMU VMs: create, config, power, clone, resize, destroy — with PVE's locks and tasks.
//!
//! # Deviations from real PVE
//! - Config changes to a running VM apply at once (no pending section for hotplug).
//! - No snapshots, migration, backup/restore (`archive`), firewall, consoles or templates'
//!   linked clones; those routes answer 501 like any route the fake does not implement.
//! - Guest memory is only checked against the node's total at start (no overcommit model).
//! - Absolute paths as `import-from` sources are accepted only from `root@pam` with a ticket
//!   (as PVE) and then fail: the simulated node has no filesystem.

pub mod create;
pub mod disks;
pub mod lifecycle;
pub mod model;
pub mod power;
pub mod routes;
pub mod work;
