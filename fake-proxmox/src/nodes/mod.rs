//! `nodes`: the model lives in fake-proxmox-world (re-exported here, so `crate::nodes::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::nodes::*;

pub mod network_routes;
pub mod power_routes;
pub mod routes;
