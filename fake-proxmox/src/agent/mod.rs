//! The QEMU guest agent: PVE's checks (`model`), the answers from the site's executor
//! (`exec`; simulated: after a boot delay on the clock, with network interfaces whose
//! addresses come from the bridge's simulated DHCP pool).
//!
//! # Deviations from real PVE
//! - No real guest: `exec`, file-read/write and freeze commands are not implemented (501).
//! - Interface names follow the virtio naming of Ubuntu cloud images (`ens18`, `ens19`, ...).

pub mod model;
pub mod routes;
