//! A node's link on one of its bridges going down and up (a control API fault): every NIC
//! of the node's guests on that bridge loses its carrier, as when the node's uplink port or
//! switch fails; guests started while it lasts come up without carrier too. PVE's API shows
//! nothing of it (it reports no carrier state), so neither does the fake: only the guests
//! notice. Deviation: the guests' own NICs lose carrier, so two guests of the same node on
//! that bridge cannot reach each other either (on a real node they still could).

use crate::exec::{GuestFault, NodeFault};
use crate::qemu::model::{Nic, Power, is_net_key};
use crate::world::Site;

/// A NIC a node fault reached: the VM and its `netN`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReachedNic {
    /// The VM's ID.
    pub vmid: u32,
    /// Its config key, e.g. `net0`.
    pub net: String,
}

impl Site {
    /// Cut or restore `node`'s link on the fault's bridge; the running guests' NICs on it
    /// follow (a simulated guest only records the state). `Err` for an unknown bridge, or
    /// when a guest refused (the link state is kept either way).
    pub fn node_fault(&mut self, node: &str, fault: &NodeFault) -> Result<Vec<ReachedNic>, String> {
        let (bridge, cut) = match fault {
            NodeFault::LinkDown { bridge } => (bridge.as_str(), true),
            NodeFault::LinkUp { bridge } => (bridge.as_str(), false),
        };
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| format!("no node '{node}'"))?;
        let b = n
            .bridges
            .iter_mut()
            .find(|b| b.name == bridge)
            .ok_or_else(|| format!("node '{node}' has no bridge '{bridge}'"))?;
        b.link_cut = cut;
        let exec = self.exec_on(node).clone();
        let mut reached = Vec::new();
        let mut refused = Vec::new();
        for vm in self
            .vms
            .values_mut()
            .filter(|v| v.node == node && v.power != Power::Stopped)
        {
            let nets: Vec<String> = vm
                .config
                .iter()
                .filter(|(k, v)| is_net_key(k) && Nic::parse(v).bridge() == Some(bridge))
                .map(|(k, _)| k.clone())
                .collect();
            for net in nets {
                let f = if cut {
                    GuestFault::LinkDown { net: net.clone() }
                } else {
                    GuestFault::LinkUp { net: net.clone() }
                };
                if !exec.observes_guests() {
                    reached.push(ReachedNic { vmid: vm.vmid, net });
                    continue;
                }
                match exec.fault(vm, &f) {
                    Ok(()) => reached.push(ReachedNic { vmid: vm.vmid, net }),
                    Err(e) => refused.push(format!("VM {} {net}: {e}", vm.vmid)),
                }
            }
        }
        if refused.is_empty() {
            Ok(reached)
        } else {
            Err(refused.join("; "))
        }
    }
}
