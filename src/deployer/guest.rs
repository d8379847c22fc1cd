//! The kinds of guest a manifest asks for: a QEMU VM (`kind: ProxmoxVM`) or an LXC container
//! (`kind: ProxmoxContainer`). They share the VMID space, the node and the rollout; PVE names
//! their API families `qemu` and `lxc`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestKind {
    #[default]
    Vm,
    Container,
}

impl GuestKind {
    /// The manifest `kind` that asks for this guest.
    pub fn manifest_kind(self) -> &'static str {
        match self {
            GuestKind::Vm => "ProxmoxVM",
            GuestKind::Container => "ProxmoxContainer",
        }
    }

    /// The guest kind of a manifest `kind`, if it is one.
    pub fn of_manifest(kind: &str) -> Option<GuestKind> {
        match kind {
            "ProxmoxVM" => Some(GuestKind::Vm),
            "ProxmoxContainer" => Some(GuestKind::Container),
            _ => None,
        }
    }

    /// PVE's API family and `cluster/resources` type: `qemu` or `lxc`.
    pub fn family(self) -> &'static str {
        match self {
            GuestKind::Vm => "qemu",
            GuestKind::Container => "lxc",
        }
    }

    /// How PVE's messages name one: `VM 100`, `CT 100`.
    pub fn label(self) -> &'static str {
        match self {
            GuestKind::Vm => "VM",
            GuestKind::Container => "CT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_kinds_round_trip() {
        for k in [GuestKind::Vm, GuestKind::Container] {
            assert_eq!(GuestKind::of_manifest(k.manifest_kind()), Some(k));
        }
        assert_eq!(GuestKind::of_manifest("Secret"), None);
    }
}
