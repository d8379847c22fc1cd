//! `qemu`: the model lives in fake-proxmox-world (re-exported here, so `crate::qemu::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::qemu::*;

pub mod routes;
