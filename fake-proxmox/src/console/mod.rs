//! `console`: the model lives in fake-proxmox-world (re-exported here, so `crate::console::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::console::*;

pub mod routes;
