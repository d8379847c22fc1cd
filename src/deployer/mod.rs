//! The deployer: seed 000's Proxmox rollout (ProxmoxVM manifests and a ProviderConfig in, VMs on
//! two PVE sites out), done the way real PVE needs it.

pub mod cleanup;
pub mod config;
pub mod deploy;
pub mod errors;
pub mod examples;
pub mod guest;
pub mod image;
pub mod lifecycle;
pub mod manifest;
pub mod order;
pub mod pipeline;
pub mod plan;
pub mod pve;
pub mod rehearse;
pub mod rehearse_stack;
pub mod report;
pub mod report_html;
pub mod retry;
pub mod rollout;
pub mod site;
pub mod state;
pub mod validate;
