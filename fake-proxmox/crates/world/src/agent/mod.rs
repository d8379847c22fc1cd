//! The QEMU guest agent: PVE's checks and call sequences (`model`, `files`), the answers
//! from the site's executor (`exec`; simulated: after a boot delay on the clock, with
//! network interfaces whose addresses come from the bridge's simulated DHCP pool, a guest
//! file system and processes in `guest_os`, programs in `shell`, scripted results from the
//! control API's `…/qemu/{vmid}/agent`).
//!
//! # Deviations from real PVE
//! - Interface names follow the virtio naming of Ubuntu cloud images (`ens18`, `ens19`, ...).
//! - The simulated guest runs a small set of programs (`shell`); others are not found unless
//!   scripted. Its `suspend-ram`/`suspend-hybrid` show the VM `paused`, where QEMU reports
//!   `suspended`.
//! - The simulated guest's files live with the VM, not in its volumes: snapshots, rollbacks
//!   and clones do not carry them, and the lab backend's real guest never sees them.
//! - The agent answers as the VM's boot image allows (`cloud_init`): an image without
//!   `qemu-guest-agent` stays silent unless its user-data installs and starts it.
//! - A Perl die inside PVE's handler (`Wide character in subroutine entry`) comes without
//!   Perl's ` at …/Agent.pm line N.` suffix.

pub mod cloud_config;
pub mod cloud_init;
mod coreutils;
pub mod guest_os;
pub mod model;
mod sh_expand;
mod sh_parse;
pub mod shell;
