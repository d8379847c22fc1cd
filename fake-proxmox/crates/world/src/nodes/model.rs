//! Nodes as the world holds them: hardware, bridges, storages, armed task failures, and the
//! synthetic load figures derived from the VMs that run on them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::guest::{Guest, Power};
use crate::storage::model::Storage;

pub use super::bridge::Bridge;

/// A task failure armed by the control plane for the next task of a type on a node.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ArmedFailure {
    /// Task type it fails, as in the UPID (e.g. `qmstart`).
    pub task_type: String,
    /// Exit status that task ends with instead of `OK`.
    pub exitstatus: String,
}

/// A cluster node (`/nodes/{node}`): its hardware, state, network and storages.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Node {
    /// Node name (hostname), the `{node}` of API paths.
    pub name: String,
    /// Cluster address, as `/cluster/status` lists it.
    pub ip: String,
    /// Up and in the cluster; `false` while powered off or rebooting.
    pub online: bool,
    /// CPU model name, as `cpuinfo.model` reports it.
    pub cpu_model: String,
    /// CPU sockets.
    pub sockets: u32,
    /// CPU cores per socket.
    pub cores: u32,
    /// Hardware threads per core.
    pub threads: u32,
    /// Total RAM in bytes.
    pub memory: u64,
    /// When the node last booted (Unix seconds): the base of its `uptime`.
    pub booted_at: f64,
    /// Shut down or rebooting (`POST /nodes/{node}/status`): down until `boot_at`, or,
    /// without one, until the control plane brings it back online.
    #[serde(default)]
    pub powered_off: bool,
    /// When a rebooting node is up again.
    #[serde(default)]
    pub boot_at: Option<f64>,
    /// The bridges the node runs now (what VMs attach to): the active network config's.
    pub bridges: Vec<Bridge>,
    /// `/etc/network/interfaces` and its pending `interfaces.new`.
    pub network: crate::nodes::network::NodeNetwork,
    /// The storages this node has, by storage ID, with their contents.
    pub storages: BTreeMap<String, Storage>,
    /// Failures armed for the node's next tasks: the first of a task's type is used up when
    /// such a task starts.
    pub armed_failures: Vec<ArmedFailure>,
}

impl Node {
    /// The running bridge of that name; `None` when the active config has none.
    pub fn bridge(&self, name: &str) -> Option<&Bridge> {
        self.bridges.iter().find(|b| b.name == name)
    }

    /// The physical ports the bridges are built on (`bridge_ports`), each once.
    pub fn ports(&self) -> BTreeSet<&str> {
        self.bridges
            .iter()
            .filter_map(|b| b.ports.as_deref())
            .flat_map(str::split_whitespace)
            .collect()
    }

    /// Memory used on the node: the host itself plus its running guests.
    pub fn mem_used<'a>(&self, guests: impl IntoIterator<Item = &'a dyn Guest>) -> u64 {
        let share: u64 = guests
            .into_iter()
            .filter(|g| g.core().node == self.name && g.core().power != Power::Stopped)
            .map(|g| g.memory_bytes() / 3)
            .sum();
        self.mem_used_with(share)
    }

    /// Node memory used given the sum of its running VMs' share (`memory / 3` each).
    pub fn mem_used_with(&self, vms: u64) -> u64 {
        (self.memory / 20).saturating_add(vms).min(self.memory)
    }

    /// CPU load from the VMs running on the node.
    pub fn cpu<'a>(&self, guests: impl IntoIterator<Item = &'a dyn Guest>) -> f64 {
        let running = guests
            .into_iter()
            .filter(|g| g.core().node == self.name && g.core().power == Power::Running)
            .count();
        cpu_with(running)
    }
}

/// Node CPU load given how many of its VMs are running.
pub fn cpu_with(running: usize) -> f64 {
    ((0.01 + running as f64 * 0.004) * 1000.0).round() / 1000.0
}

/// Per node: how many of its VMs run, and their memory share (`memory / 3` each) — one
/// pass over the VMs for every node, not one pass per node.
pub fn node_loads<'a>(
    guests: impl IntoIterator<Item = &'a dyn Guest>,
) -> HashMap<&'a str, (usize, u64)> {
    let mut load: HashMap<&str, (usize, u64)> = HashMap::new();
    for g in guests {
        let core = g.core();
        let e = load.entry(core.node.as_str()).or_default();
        if core.power == Power::Running {
            e.0 += 1;
        }
        if core.power != Power::Stopped {
            e.1 = e.1.saturating_add(g.memory_bytes() / 3);
        }
    }
    load
}
