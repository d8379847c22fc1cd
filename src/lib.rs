//! provision-harness: the deployer (seed 000's Proxmox rollout, done the way real PVE needs it) and
//! the cluster provisioner (seed 002's bring-up), driven by the Gherkin features in `features/`.

pub mod cluster;
pub mod config;
pub mod deploy;
pub mod errors;
pub mod examples;
pub mod image;
pub mod lifecycle;
pub mod manifest;
pub mod mutants;
pub mod order;
pub mod pipeline;
pub mod plan;
pub mod pve;
pub mod rehearse;
pub mod report;
pub mod report_html;
pub mod retry;
pub mod site;
pub mod state;
pub mod validate;
