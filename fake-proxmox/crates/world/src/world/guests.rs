//! The site's guests of every kind, as the kind-neutral verbs see them: one VMID space, one
//! set of guests per node. VMs and containers each have their map; every verb that goes
//! through these (nextid, "already exists", node load and memory, DHCP leases) counts both.

use crate::guest::{Guest, GuestCore, GuestKind};
use crate::lxc::model::Ct;
use crate::qemu::model::Vm;
use crate::wire::PveError;
use crate::world::Site;

impl Site {
    /// The guest `vmid`, whatever its kind.
    pub fn guest(&self, vmid: u32) -> Option<&dyn Guest> {
        match self.vms.get(&vmid) {
            Some(vm) => Some(vm as &dyn Guest),
            None => self.cts.get(&vmid).map(|ct| ct as &dyn Guest),
        }
    }

    /// The record of guest `vmid`, whatever its kind, to change it.
    pub fn guest_core_mut(&mut self, vmid: u32) -> Option<&mut GuestCore> {
        match self.vms.get_mut(&vmid) {
            Some(vm) => Some(&mut vm.core),
            None => self.cts.get_mut(&vmid).map(|ct| &mut ct.core),
        }
    }

    /// Every guest of the site: VMs, then containers.
    pub fn guests(&self) -> impl Iterator<Item = &dyn Guest> {
        self.vms
            .values()
            .map(|vm| vm as &dyn Guest)
            .chain(self.cts.values().map(|ct| ct as &dyn Guest))
    }

    /// The guests of every kind whose config is on `node`, in VMID order (indexed: no walk
    /// over the site's other guests).
    pub fn guest_ids_on(&self, node: &str) -> Vec<u32> {
        self.index.ids_on(&self.vms, &self.cts, node)
    }

    /// The VMs whose config is on `node`, in VMID order.
    pub fn vms_on(&self, node: &str) -> impl Iterator<Item = &Vm> {
        self.guest_ids_on(node)
            .into_iter()
            .filter_map(|id| self.vms.get(&id))
    }

    /// The containers whose config is on `node`, in VMID order.
    pub fn cts_on(&self, node: &str) -> impl Iterator<Item = &Ct> {
        self.guest_ids_on(node)
            .into_iter()
            .filter_map(|id| self.cts.get(&id))
    }

    /// The guests of every kind whose config is on `node`, in VMID order.
    pub fn guests_on(&self, node: &str) -> impl Iterator<Item = &dyn Guest> {
        self.guest_ids_on(node)
            .into_iter()
            .filter_map(|id| self.guest(id))
    }

    /// The lowest VMID from 100 up that no guest of either kind holds.
    pub fn lowest_free_vmid(&self) -> u32 {
        self.index.lowest_free(&self.vms, &self.cts)
    }

    /// The VMIDs in use from `from` up, in order, across kinds.
    pub fn vmids_from(&self, from: u32) -> impl Iterator<Item = u32> + '_ {
        let mut vms = self.vms.range(from..).map(|(id, _)| *id).peekable();
        let mut cts = self.cts.range(from..).map(|(id, _)| *id).peekable();
        std::iter::from_fn(move || match (vms.peek(), cts.peek()) {
            (Some(a), Some(b)) if a <= b => vms.next(),
            (Some(_), Some(_)) => cts.next(),
            (Some(_), None) => vms.next(),
            (None, _) => cts.next(),
        })
    }
}

/// PVE's error for a guest config that is not where a path of `kind`'s family looks
/// (`load_config`: `Configuration file 'nodes/pve1/lxc/100.conf' does not exist`).
pub fn no_config(kind: GuestKind, node: &str, vmid: u32) -> PveError {
    PveError::die(format!(
        "Configuration file 'nodes/{node}/{}/{vmid}.conf' does not exist",
        kind.config_dir()
    ))
}
