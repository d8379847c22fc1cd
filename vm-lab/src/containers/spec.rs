//! What a container is made of: the description a hypervisor's container config carries
//! (PVE's `rootfs`, `hostname`, `netN`, `mpN`, `memory`, `swap`), in the lab's terms.

use std::path::PathBuf;

/// One container to start on a [`crate::guests::GuestHost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// Unique per host, e.g. `pve1-ct105`; names its run directory.
    pub name: String,
    /// A directory holding the unpacked root file system (it must have `/sbin/init`).
    pub rootfs: PathBuf,
    /// Set in the container's UTS namespace before init runs.
    pub hostname: String,
    /// Its network interfaces, each a veth pair onto a segment.
    pub nics: Vec<ContainerNic>,
    /// Host directories bind-mounted into the container (PVE's `mpN`).
    pub mounts: Vec<BindMount>,
    /// Memory limit in MiB: the cgroup's `memory.max` where cgroups can be written, else
    /// only counted against the host's budget.
    pub memory_mib: u64,
    /// Swap in MiB (`memory.swap.max` where the limit is enforced).
    pub swap_mib: u64,
    /// Where init's stdout and stderr go; default `<run_dir>/<name>/console.log`.
    pub console_log: Option<PathBuf>,
}

impl ContainerSpec {
    /// A container named `name` on `rootfs`: hostname = name, no NICs, no mounts, 512 MiB of
    /// memory and 512 MiB of swap (PVE's defaults), the console log in the run directory.
    pub fn new(name: &str, rootfs: impl Into<PathBuf>) -> ContainerSpec {
        ContainerSpec {
            name: name.to_string(),
            rootfs: rootfs.into(),
            hostname: name.to_string(),
            nics: Vec::new(),
            mounts: Vec::new(),
            memory_mib: 512,
            swap_mib: 512,
            console_log: None,
        }
    }
}

/// One network interface of a container: a veth pair whose host end is enslaved to `bridge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerNic {
    /// The interface name inside the container, e.g. `eth0` (PVE's `name=`).
    pub name: String,
    /// The segment; created when new, as [`crate::guests::GuestHost::launch`] does for guests.
    pub bridge: String,
    /// The MAC inside the container (PVE's `hwaddr`, e.g. `BC:24:11:00:00:01`); random when
    /// `None`.
    pub mac: Option<String>,
    /// The MTU of both ends; the kernel's default (1500) when `None`.
    pub mtu: Option<u16>,
    /// False for PVE's `link_down=1`: the host end stays down, so no frame passes.
    pub link_up: bool,
}

impl ContainerNic {
    /// NIC `name` on `bridge`, link up, random MAC, default MTU.
    pub fn new(name: &str, bridge: &str) -> ContainerNic {
        ContainerNic {
            name: name.to_string(),
            bridge: bridge.to_string(),
            mac: None,
            mtu: None,
            link_up: true,
        }
    }
}

/// A host directory bind-mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    /// The host directory (it must exist).
    pub source: PathBuf,
    /// An absolute path inside the container; made when missing.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}
