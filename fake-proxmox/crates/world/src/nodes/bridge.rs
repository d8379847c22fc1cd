//! A node's Linux bridge as the world runs it (what VMs attach to): its own file, so the network
//! config (`network`) and the node (`model`) both use it without importing each other.

use std::net::Ipv4Addr;

use serde::Serialize;

/// A bridge the node runs (`vmbrN`), as its active `/etc/network/interfaces` stanza sets it up.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Bridge {
    /// Interface name, e.g. `vmbr0`: what a NIC's `bridge=` names.
    pub name: String,
    /// The bridge's own address with prefix (`address` as `a.b.c.d/nn`); `None` when unaddressed.
    pub cidr: Option<String>,
    /// Default gateway set on the stanza (`gateway`).
    pub gateway: Option<String>,
    /// Physical ports it is built on, space-separated (`bridge_ports`, or `ovs_ports`).
    pub ports: Option<String>,
    /// First and last address the scenario's DHCP server leases to guests on it (inclusive);
    /// `None`: guests get no lease. A scenario setting, not in PVE's config.
    pub dhcp: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The node's link on this bridge is down (a control API fault, not config): its guests'
    /// NICs on it have no carrier, including those started while it lasts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link_cut: bool,
}

impl Bridge {
    /// The prefix length of `cidr`; 24 when it has none.
    pub fn prefix_len(&self) -> u8 {
        self.cidr
            .as_deref()
            .and_then(|c| c.split_once('/'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(24)
    }
}
