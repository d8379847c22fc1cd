//! `lxc`: the model lives in fake-proxmox-world (re-exported here, so `crate::lxc::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::lxc::*;

pub mod routes;
