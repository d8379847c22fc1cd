//! `access`: the model lives in fake-proxmox-world (re-exported here, so `crate::access::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::access::*;

pub mod admin_routes;
pub mod routes;
