//! The record every guest has, whatever runs it: its id and node, its config file (current
//! values, `[PENDING]`, snapshots), its lock, its power and run state, its DHCP leases and
//! its firewall file. A kind (`qemu::model::Vm`; containers next) holds one and adds what
//! only it has.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::sections::{Pending, Snapshot};

/// The kinds of guest a PVE node runs; each has its own API family (`/nodes/{node}/qemu`,
/// `/nodes/{node}/lxc`), config directory and task types, and shares the VMID space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestKind {
    /// A QEMU virtual machine.
    #[default]
    Qemu,
    /// An LXC container.
    Lxc,
}

impl GuestKind {
    /// The `type` of the guest's `cluster/resources` row and its API family's path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            GuestKind::Qemu => "qemu",
            GuestKind::Lxc => "lxc",
        }
    }

    /// How PVE names a guest of this kind in messages (`VM 100 …`, `CT 100 …`).
    pub fn label(self) -> &'static str {
        match self {
            GuestKind::Qemu => "VM",
            GuestKind::Lxc => "CT",
        }
    }

    /// The directory of the kind's config files under `nodes/{node}/`.
    pub fn config_dir(self) -> &'static str {
        match self {
            GuestKind::Qemu => "qemu-server",
            GuestKind::Lxc => "lxc",
        }
    }
}

/// A guest's run state as the model tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Power {
    /// Not running.
    Stopped,
    /// Running.
    Running,
    /// A VM's vCPUs stopped (`qm suspend`, QMP `stop`): `status` stays `running`, `qmpstatus`
    /// is `paused`.
    Paused,
    /// QEMU stopped the vCPUs on a drive error (`werror`/`rerror` `stop`): `status` stays
    /// `running`, `qmpstatus` is `io-error`; `status/resume` retries the I/O.
    IoError,
}

/// A guest of any kind, as the kind-neutral code (node load, VMID space) sees it; each kind
/// implements it over its own record.
pub trait Guest {
    /// The record every kind has.
    fn core(&self) -> &GuestCore;
    /// The memory the config gives the guest, in bytes (a VM's `memory` is a property
    /// string, a container's a number of MiB: the kind knows).
    fn memory_bytes(&self) -> u64;
}

/// What every guest kind has. Fields are public: the families' verbs decide on them under
/// the site's lock, as PVE's do on the config file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GuestCore {
    /// Absent in state files written before containers: those hold only VMs.
    #[serde(default)]
    pub kind: GuestKind,
    /// The guest's id (VMID), unique across kinds in the cluster.
    pub vmid: u32,
    /// The node the guest is on.
    pub node: String,
    /// The config file, values as text exactly as PVE writes them.
    pub config: BTreeMap<String, String>,
    /// The config's `lock` (`backup`, `migrate`, `snapshot`, ...), if locked.
    pub lock: Option<String>,
    /// Run state.
    pub power: Power,
    /// Site time (seconds) of the last start; uptime counts from it.
    pub started_at: f64,
    /// The guest's process id while running (QEMU's or the container's init).
    pub pid: Option<u32>,
    /// DHCP leases per NIC key (`net0`), from the bridge's simulated pool.
    pub leases: BTreeMap<String, Ipv4Addr>,
    /// The config file's `[PENDING]` section.
    pub pending: Pending,
    /// The config file's snapshot sections by name.
    pub snapshots: BTreeMap<String, Snapshot>,
    /// The guest's firewall config file, `/etc/pve/firewall/<vmid>.fw`.
    pub firewall: String,
}

impl GuestCore {
    /// A guest that is not running, with no pending changes, snapshots or leases.
    pub fn stopped(
        kind: GuestKind,
        vmid: u32,
        node: &str,
        config: BTreeMap<String, String>,
        lock: Option<&str>,
    ) -> GuestCore {
        GuestCore {
            kind,
            vmid,
            node: node.to_string(),
            config,
            lock: lock.map(str::to_string),
            power: Power::Stopped,
            started_at: 0.0,
            pid: None,
            leases: BTreeMap::new(),
            pending: Pending::default(),
            snapshots: BTreeMap::new(),
            firewall: String::new(),
        }
    }

    /// The process that ran the guest is gone: stopped, as after a node crash.
    pub fn power_lost(&mut self) {
        self.power = Power::Stopped;
        self.pid = None;
        self.started_at = 0.0;
    }

    /// `template: 1` in the config.
    pub fn is_template(&self) -> bool {
        self.config.get("template").is_some_and(|v| v == "1")
    }

    /// The `name` (a VM) or `hostname` (a container) PVE shows for the guest.
    pub fn name(&self) -> Option<&str> {
        self.config
            .get("name")
            .or_else(|| self.config.get("hostname"))
            .map(String::as_str)
    }
}
