//! Nodes: the node list, node status (CPU threads, memory), network interfaces.
//!
//! # Deviations from real PVE
//! - Node load, CPU and memory usage are synthetic (derived from running VMs).
//! - Network configuration is read-only: bridges come from the scenario.
//! - An offline node answers every `/nodes/{node}/...` request with `595 No route to host`
//!   (what pveproxy reports when it cannot reach the node); no connection is refused.

pub mod links;
pub mod lookup;
pub mod model;
pub mod routes;
