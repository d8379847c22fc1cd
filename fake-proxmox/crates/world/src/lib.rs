//! fake-proxmox-world: the simulated Proxmox VE world, with no HTTP: sites, nodes, storages,
//! access (users, tokens, ACLs), tasks on a clock, guests, faults, and the execution seam that
//! runs guests (simulated, or real QEMU guests through vm-lab). fake-proxmox serves it over
//! PVE's HTTP API; everything here is reachable from there under the same paths
//! (`fake_proxmox::qemu::model::Vm` is `fake_proxmox_world::qemu::model::Vm`).

// A library reports through its return values and `tracing`, never by printing.
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub use fake_proxmox_schema as schema;
pub use fake_proxmox_schema::release as version;

pub mod access;
pub mod agent;
pub mod clock;
pub mod cluster;
pub mod console;
pub mod exec;
pub mod faults;
pub mod firewall;
pub mod guest;
pub mod nodes;
pub mod pools;
pub mod qemu;
pub mod request;
pub mod rng_state;
pub mod rrd;
pub mod scenario;
pub mod storage;
pub mod tasks;
pub mod wire;
pub mod world;
