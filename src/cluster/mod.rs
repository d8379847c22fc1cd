//! The cluster provisioner: seed 002's bring-up (T036) as code. S3 makes a CA and per-node
//! certificates ([`tls`]), S4 the node configs and hosts mappings ([`config`]), both checked
//! before use; S5 provisions netbooted nodes over SSH ([`provision`], through the small
//! [`transport::NodeShell`] trait) or hands them to the user's own command ([`external`]); S6
//! checks the Raft quorum, health, CRUD and metrics ([`quorum`], [`etcd`]). The lab itself
//! (S1, S2) is vm-lab's. [`lab::Bringup`] runs the steps in order on a lab, each method named
//! after what it does (`start_lab`, `check_ssh`, `make_certificates`, `stage_configs`,
//! `provision_over_ssh`, `wait_for_quorum`). [`stack::StackCluster`] runs S2–S6 on VMs a
//! deployer made through a PVE API instead (VMs and containers): files onto each cloud image's
//! persistent disk with a cloud-init per-boot script to start the member, or into a container's
//! root file system, every restart through the API ([`stack::VmPower`]); [`console`] reads what
//! each guest's boots print.

pub mod config;
pub mod console;
pub mod error;
pub mod etcd;
pub mod external;
pub mod lab;
pub mod provision;
pub mod quorum;
pub mod stack;
pub mod tls;
pub mod topology;
pub mod transport;

pub use error::ClusterError;
pub use topology::{ClusterSpec, GuestLayout, NodeIdentity, Ports};
