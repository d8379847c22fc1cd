//! Cluster-wide views: next free VMID, resources, status.
//!
//! # Deviations from real PVE
//! - `nextid` honours no `next-id` range from datacenter.cfg (always 100..1,000,000).
//! - Resource usage figures (cpu, mem, disk I/O) are synthetic.

pub mod model;
pub mod resources;
