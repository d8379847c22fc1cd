//! Real Linux containers on a [`GuestHost`], beside its QEMU guests and on the same segments.
//!
//! A container is a process tree in its own mount, UTS, IPC, PID and network namespaces,
//! nested in the host's lab namespace (whose user namespace gives the capabilities over them,
//! no root needed): the rootfs directory as its root, `/proc`, `/sys`, a `/dev` of bind-mounted
//! host device nodes and a devpts, the spec's bind mounts, one veth pair per NIC (the host end
//! enslaved to the segment's bridge, the container end renamed and given the MAC), and the
//! rootfs's own `/sbin/init` as PID 1.
//!
//! Nothing outlives the host: every container process lives inside the lab's PID namespace
//! (its init dying kills them all) and every mount inside the container's own mount namespace.

mod container;
mod spec;

use std::sync::Arc;

pub use container::{Container, ContainerIface};
pub use spec::{BindMount, ContainerNic, ContainerSpec};

use crate::error::{Error, Result};
use crate::guests::GuestHost;

impl GuestHost {
    /// Start the container: new mount, UTS, IPC, PID and net namespaces inside the lab's user
    /// namespace, the rootfs as its root, `/proc`, `/sys`, `/dev` (bind-mounted host device
    /// nodes `null`, `zero`, `full`, `random`, `urandom`, `tty`; a devpts), the bind mounts, one
    /// veth per NIC (host end enslaved to the bridge, container end renamed to `nic.name` with
    /// the MAC), then exec the rootfs's `/sbin/init`.
    ///
    /// Returns once init runs and the NICs are in place; does not wait for an address.
    /// Refuses ([`Error::Spec`] or [`Error::Lab`], saying why): the rootfs missing or without
    /// `/sbin/init`, a mount source missing, a name already running, memory beyond the host's
    /// budget (the same budget as guests).
    pub fn start_container(&self, spec: ContainerSpec) -> Result<Arc<Container>> {
        let _ = spec;
        Err(Error::Lab("not implemented yet".into()))
    }

    /// A started container (running or ended) by name.
    pub fn container(&self, name: &str) -> Option<Arc<Container>> {
        let _ = name;
        None
    }

    /// Names of the containers the host knows (running or ended).
    pub fn container_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// Kill the container if it runs, remove its veths, its run directory and its cgroup, and
    /// forget it. The rootfs is the caller's and stays. Unknown names are not an error.
    pub fn remove_container(&self, name: &str) -> Result<()> {
        let _ = name;
        Err(Error::Lab("not implemented yet".into()))
    }
}
