//! Cluster-wide rules: the next free VMID and quorum.

use crate::wire::PveError;
use crate::world::Site;

impl Site {
    /// `GET /cluster/nextid`: the requested VMID if it is free, else the lowest free one.
    /// Nothing is reserved, so concurrent callers get the same answer.
    pub fn next_vmid(&self, requested: Option<i64>) -> Result<u32, PveError> {
        if let Some(v) = requested {
            let v = u32::try_from(v).unwrap_or(0);
            if self.vms.contains_key(&v) {
                return Err(PveError::param("vmid", format!("VM {v} already exists")));
            }
            return Ok(v);
        }
        (100u32..1_000_000)
            .find(|i| !self.vms.contains_key(i))
            .ok_or_else(|| PveError::die("unable to get any free VMID in range [100, 1000000)"))
    }

    /// More than half of the nodes online.
    pub fn quorate(&self) -> bool {
        let online = self.nodes.values().filter(|n| n.online).count();
        online * 2 > self.nodes.len()
    }
}
