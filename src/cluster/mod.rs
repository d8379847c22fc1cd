//! The cluster provisioner: seed 002's bring-up (T036) as code. S3 makes a CA and per-node
//! certificates ([`tls`]), S4 the node configs and hosts mappings ([`config`]), both checked
//! before use; S5 provisions netbooted nodes over SSH ([`provision`], through the small
//! [`transport::NodeShell`] trait) or hands them to the user's own command ([`external`]); S6
//! validates the Raft cluster ([`validate`], [`etcd`]). The lab itself (S1, S2) is vm-lab's.

pub mod config;
pub mod error;
pub mod etcd;
pub mod external;
pub mod lab;
pub mod provision;
pub mod tls;
pub mod topology;
pub mod transport;
pub mod validate;

pub use error::ClusterError;
pub use topology::{ClusterSpec, GuestLayout, NodeIdentity, Ports};
