//! `storage`: the model lives in fake-proxmox-world (re-exported here, so `crate::storage::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::storage::*;

pub mod routes;
