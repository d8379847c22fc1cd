//! The site's guests of every kind, as the kind-neutral verbs see them: one VMID space, one
//! set of guests per node. Only QEMU VMs exist today; a second kind adds its map here and
//! every verb that goes through these (nextid, "already exists", node load and memory)
//! counts it without change.

use crate::guest::Guest;
use crate::world::Site;

impl Site {
    /// The guest `vmid`, whatever its kind.
    pub fn guest(&self, vmid: u32) -> Option<&dyn Guest> {
        self.vms.get(&vmid).map(|vm| vm as &dyn Guest)
    }

    /// Every guest of the site, in VMID order.
    pub fn guests(&self) -> impl Iterator<Item = &dyn Guest> {
        self.vms.values().map(|vm| vm as &dyn Guest)
    }

    /// The VMIDs in use from `from` up, in order, across kinds.
    pub fn vmids_from(&self, from: u32) -> impl Iterator<Item = u32> + '_ {
        self.vms.range(from..).map(|(id, _)| *id)
    }
}
