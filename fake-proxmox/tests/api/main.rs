//! Integration tests of fake-proxmox over HTTPS with reqwest: one module per area, one
//! test per fidelity fact. Auth delay off, stepped clocks: fast and deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod access_acl;
mod access_realms;
mod access_users;
mod agent;
mod aplinfo;
mod auth;
mod cloudinit;
mod cloudinit_guest;
mod console;
mod control;
mod control_token;
mod coverage;
mod exec;
mod firewall;
mod lxc;
mod lxc_guest;
mod lxc_ops;
mod lxc_restore;
mod migrate;
mod move_disk;
mod network;
mod node_power;
mod pending;
mod pools;
mod quorum;
mod releases;
mod remote_migrate;
mod rrd;
mod shapes;
mod shared_storage;
mod snapshot;
mod storage;
mod storage_backups;
mod storage_content;
mod upload;
mod vms;
mod wire;
