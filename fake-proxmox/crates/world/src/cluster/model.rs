//! Cluster-wide rules: the next free VMID and quorum.

use crate::wire::PveError;
use crate::world::Site;

impl Site {
    /// `GET /cluster/nextid`: the requested VMID if it is free, else the lowest free one.
    /// Nothing is reserved, so concurrent callers get the same answer.
    pub fn next_vmid(&self, requested: Option<i64>) -> Result<u32, PveError> {
        if let Some(v) = requested {
            let v = u32::try_from(v).unwrap_or(0);
            if self.guest(v).is_some() {
                return Err(PveError::param("vmid", format!("VM {v} already exists")));
            }
            return Ok(v);
        }
        // The lowest free id from 100 up; the index walks only the ids taken since its last
        // answer (a rollout asks once per VM it creates).
        let next = self.lowest_free_vmid();
        (next < 1_000_000)
            .then_some(next)
            .ok_or_else(|| PveError::die("unable to get any free VMID in range [100, 1000000)"))
    }

    /// More than half of the nodes online.
    pub fn quorate(&self) -> bool {
        let online = self.nodes.values().filter(|n| n.online).count();
        online * 2 > self.nodes.len()
    }

    /// `PVE::Cluster::check_cfs_quorum`, for a handler that calls it after checks of its
    /// own (a standalone node is always quorate).
    pub fn check_cfs_quorum(&self) -> Result<(), PveError> {
        if self.cluster_name.is_none() || self.quorate() {
            Ok(())
        } else {
            Err(PveError::die("cluster not ready - no quorum?\n"))
        }
    }
}

/// What needs quorum in PVE without it: the routes that call `check_cfs_quorum` first
/// (create, start, clone, migration) refuse with its text; every other write to the cluster
/// file system (`/etc/pve`, read-only without quorum) fails as writing its file fails.
/// Reads, logins, power verbs that write no config, the agent, local storage and the node's
/// network keep working.
pub fn quorum_refusal(
    site: &Site,
    method: &str,
    template: &str,
    caps: &std::collections::BTreeMap<String, String>,
    now: f64,
) -> Option<PveError> {
    // A standalone node (no cluster) is always quorate.
    if (method == "GET" && !template.ends_with("/migrate"))
        || site.cluster_name.is_none()
        || site.quorate()
    {
        return None;
    }
    const CHECKS_QUORUM: &[&str] = &[
        "/nodes/{node}/qemu",
        "/nodes/{node}/qemu/{vmid}/status/start",
        "/nodes/{node}/qemu/{vmid}/clone",
        "/nodes/{node}/qemu/{vmid}/migrate",
        "/nodes/{node}/qemu/{vmid}/remote_migrate",
    ];
    // `mtunnel` checks its node, storages and bridges first: its handler asks itself.
    if template == "/nodes/{node}/qemu/{vmid}/mtunnel" {
        return None;
    }
    if CHECKS_QUORUM.contains(&template) && (method == "POST" || template.ends_with("/migrate")) {
        return Some(PveError::die("cluster not ready - no quorum?\n"));
    }
    if method == "GET" {
        return None;
    }
    let node = caps.get("node").map_or("", String::as_str);
    let vmid = caps.get("vmid").map_or("", String::as_str);
    let file = if template.starts_with("/nodes/{node}/qemu/{vmid}/firewall") {
        format!("/etc/pve/firewall/{vmid}.fw")
    } else if template.starts_with("/nodes/{node}/qemu/{vmid}/status/")
        || template.starts_with("/nodes/{node}/qemu/{vmid}/agent")
        || matches!(
            template,
            "/nodes/{node}/qemu/{vmid}/vncproxy"
                | "/nodes/{node}/qemu/{vmid}/termproxy"
                | "/nodes/{node}/qemu/{vmid}/spiceproxy"
                | "/nodes/{node}/qemu/{vmid}/sendkey"
                | "/nodes/{node}/qemu/{vmid}/monitor"
                | "/nodes/{node}/qemu/{vmid}/dbus-vmstate"
        )
    {
        // Power verbs, the agent and consoles write no cluster file.
        return None;
    } else if template.starts_with("/nodes/{node}/qemu/{vmid}") {
        format!("/etc/pve/nodes/{node}/qemu-server/{vmid}.conf")
    } else if template.starts_with("/access/users/{userid}/token") {
        "/etc/pve/priv/token.cfg".to_string()
    } else if template.starts_with("/access/domains") {
        "/etc/pve/domains.cfg".to_string()
    } else if template.starts_with("/access/ticket") || template.starts_with("/access/vncticket") {
        return None;
    } else if template.starts_with("/access") || template.starts_with("/pools") {
        "/etc/pve/user.cfg".to_string()
    } else if template.starts_with("/cluster") {
        "/etc/pve/datacenter.cfg".to_string()
    } else {
        // Node-local state: storages' volumes, the node's network, tasks.
        return None;
    };
    // `file_set_contents` writes `<file>.tmp.<pid>` of the daemon's worker first.
    let pid = 2000 + (now.max(0.0) as u64 % 60_000);
    Some(PveError::die(format!(
        "unable to open file '{file}.tmp.{pid}' - Permission denied\n"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use crate::qemu::model::Vm;
    use crate::world::Site;

    #[test]
    fn nextid_is_the_lowest_free_id_from_100() {
        let spec = &crate::scenario::Scenario::embedded_default().sites[0];
        let mut s = Site::from_spec(spec, 1, 0.0);
        assert_eq!(s.next_vmid(None).unwrap(), 100);
        for id in [100, 101, 103, 104] {
            s.vms
                .insert(id, Vm::stopped(id, "ml110-01", BTreeMap::new(), None));
        }
        assert_eq!(s.next_vmid(None).unwrap(), 102);
        s.vms
            .insert(102, Vm::stopped(102, "ml110-01", BTreeMap::new(), None));
        assert_eq!(s.next_vmid(None).unwrap(), 105);
        s.vms.remove(&100);
        assert_eq!(s.next_vmid(None).unwrap(), 100);
        assert!(s.next_vmid(Some(101)).is_err(), "a taken id is refused");
        assert_eq!(s.next_vmid(Some(100)).unwrap(), 100);
    }
}
