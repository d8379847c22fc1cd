//! fake-proxmox-world: the simulated Proxmox VE world, with no HTTP: sites, nodes, storages,
//! access (users, tokens, ACLs), tasks on a clock, guests, faults, and the execution seam that
//! runs guests (simulated, or real QEMU guests through vm-lab). fake-proxmox serves it over
//! PVE's HTTP API; everything here is reachable from there under the same paths
//! (`fake_proxmox::qemu::model::Vm` is `fake_proxmox_world::qemu::model::Vm`).

//!
//! # Layers (file by file, lower never imports higher; `tests/import_cycles.rs` checks it)
//! ```text
//! verbs        impl Site blocks named after what they decide: qemu/create.rs, qemu/power.rs,
//!              storage/download.rs, access/verbs.rs, world/tasks.rs, world/guests.rs, …
//!  └ world      world/mod.rs: Site (nodes, guests, storages, access, tasks, rng, executor);
//!  │            world/work.rs: the work a task does (Work) and the world's task types
//!  └ kinds      qemu/model.rs (Vm = GuestCore + agent, cloud-init, guest OS), qemu/facts, status
//!  └ seams      exec (Executor, Disks: simulated or vm-lab), nodes/model (capacity over Guest)
//!  └ families   access/model, storage/{kinds,volid,volumes,model}, firewall/*, agent/guest_os,
//!  │            scenario (the YAML's types), pools, rrd
//!  └ guest      record (GuestCore, GuestKind, Power, the Guest trait), sections ([PENDING], snapshots)
//!  └ tasks      Task<W>, TaskPlan<W>, TaskStore<W>, UPIDs, the log timeline: generic over the
//!  │            work the caller gives; imports no other module
//!  └ wire, clock, rng_state; fake-proxmox-schema below the crate
//! ```
//! The second guest kind, `lxc`, sits beside `qemu`: its record (`lxc::model::Ct`) holds a
//! `GuestCore`, its task work is one variant of `world::work::Work` (`Work::Ct`), its map
//! is in `world/guests.rs`; `tasks`, `storage` and `access` did not change for it.

#![warn(missing_docs)]
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
pub mod lxc;
pub mod nodes;
pub mod pools;
pub mod qemu;
pub mod request;
pub mod rng_state;
pub mod rrd;
pub mod scenario;
pub mod storage;
pub mod tasks;
pub mod tracked;
pub mod wire;
pub mod world;

/// The README's example compiles and runs as a doc test, so what it shows stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
