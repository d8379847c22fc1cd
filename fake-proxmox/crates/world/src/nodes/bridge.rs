//! A node's Linux bridge as the world runs it (what VMs attach to): its own file, so the network
//! config (`network`) and the node (`model`) both use it without importing each other.

use std::net::Ipv4Addr;

use serde::Serialize;

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Bridge {
    pub name: String,
    pub cidr: Option<String>,
    pub gateway: Option<String>,
    pub ports: Option<String>,
    pub dhcp: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The node's link on this bridge is down (a control API fault, not config): its guests'
    /// NICs on it have no carrier, including those started while it lasts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link_cut: bool,
}

impl Bridge {
    pub fn prefix_len(&self) -> u8 {
        self.cidr
            .as_deref()
            .and_then(|c| c.split_once('/'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(24)
    }
}
