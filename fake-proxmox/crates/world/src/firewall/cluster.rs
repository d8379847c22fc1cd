//! The cluster-level firewall state a site holds (its own file, so the world holds it without
//! importing the firewall's rules, which work on the world).

/// The cluster-level firewall state of a site.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ClusterFirewall {
    /// `/etc/pve/firewall/cluster.fw`: the aliases, ipsets and security groups guests may
    /// name, as the scenario's `cluster_firewall` gives it (no cluster-level route writes it).
    pub cluster_fw: String,
    /// `/var/log/pve-firewall.log`, as pvefw-logger writes it:
    /// `VMID LEVEL CHAIN DD/Mon/YYYY:HH:MM:SS +ZZZZ MESSAGE`: the scenario's `firewall_log`
    /// (no traffic is simulated), one log for all nodes.
    pub log: Vec<String>,
}
