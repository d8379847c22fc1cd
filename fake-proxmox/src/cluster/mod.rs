//! `cluster`: the model lives in fake-proxmox-world (re-exported here, so `crate::cluster::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::cluster::*;

pub mod routes;
