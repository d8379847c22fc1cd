//! The guest firewall (pve-firewall): options, rules, aliases, ipsets, references and the
//! log of `/nodes/{node}/qemu/{vmid}/firewall` and `/nodes/{node}/lxc/{vmid}/firewall` (the
//! same module in PVE: `PVE::API2::Firewall::VM` and `::CT` differ only in the rule
//! environment, which checks the same). A guest's firewall is its `<vmid>.fw` file, kept
//! with the guest (`GuestCore::firewall`, whatever the kind): destroyed with it, copied by
//! a clone. Every verb reads the file, decides as PVE does and writes it back (`conf`), so
//! PVE's normalisations on the way hold here too. Rules are checked as `verify_rule` checks
//! them (`rule`, `addr`, `formats`, `macros`); what they name must exist, in the guest's
//! file or in the site's `cluster.fw` (`model::ClusterFirewall`).
//!
//! # Deviations from real PVE
//! - PVE reads `/etc/pve/firewall/<vmid>.fw` whether or not the guest exists (an empty
//!   firewall); here a VMID without a guest of either kind answers as for the path
//!   family's missing config (500). Like PVE, any node of the path will do, and a VM's file
//!   is reached through the container path too (the file is the VMID's).
//! - The cluster-level firewall routes are not modelled: `cluster.fw` is what the scenario's
//!   `cluster_firewall` says (nothing by default) and only its aliases, ipsets and group
//!   names are read. SDN ipsets do not exist.
//! - A `group` rule's security group is not checked to exist (PVE does not check either).
//! - No traffic is simulated: the firewall log holds the scenario's `firewall_log` lines
//!   (none by default: `no content`), one log for all the site's nodes.
//! - `/etc/services` and `/etc/protocols` are Debian's (netbase) as of 2021.

pub mod cluster;
pub mod conf;
pub mod log;
pub mod macros;
pub mod model;
pub mod objects;
pub mod rule;
pub mod sets;

// The address syntax and the formats are schema facts: they live in fake-proxmox-schema.
pub use fake_proxmox_schema::{firewall_addr as addr, firewall_formats as formats};
