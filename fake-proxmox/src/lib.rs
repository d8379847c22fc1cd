//! fake-proxmox: a stateful simulator of the Proxmox VE HTTP API.
pub mod schema;
