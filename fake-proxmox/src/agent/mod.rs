//! `agent`: the model lives in fake-proxmox-world (re-exported here, so `crate::agent::…` paths
//! reach it); the wire side of its routes is here.

pub use fake_proxmox_world::agent::*;

pub mod control;
pub mod routes;
