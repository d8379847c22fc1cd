//! Nodes: the node list, node status (CPU threads, memory), network interfaces.
//!
//! # Deviations from real PVE
//! - Node load, CPU and memory usage are synthetic (derived from running VMs).
//! - Network configuration follows PVE's pending model (`interfaces.new`, apply, revert);
//!   Open vSwitch types are refused as on a node without `openvswitch-switch`, SDN vnets
//!   and fabrics are not listed, and the IPv6 address-type check is left out.
//! - An offline node answers every `/nodes/{node}/...` request with `595 No route to host`
//!   (what pveproxy reports when it cannot reach the node); no connection is refused.

pub mod bridge;
pub mod interfaces;
pub mod links;
pub mod lookup;
pub mod model;
pub mod network;
pub mod network_ops;
pub mod power;
