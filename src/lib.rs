//! provision-harness: the deployer (seed 000's Proxmox rollout, done the way real PVE needs it) and
//! the cluster provisioner (seed 002's bring-up), driven by the Gherkin features in `features/`.
pub mod cluster;
