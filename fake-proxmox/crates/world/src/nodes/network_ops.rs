//! The node network API's changes, with `PVE::API2::Network`'s checks and error texts:
//! create, update and delete write `interfaces.new`; apply makes it the running config
//! (bridges appear and disappear for the VMs); revert drops it.

use std::collections::BTreeMap;

use crate::exec::NodeFault;
use crate::nodes::network::{Iface, Ifaces, netmask_bits, running_bridges, split_list, truthy};
use crate::qemu::model::{Nic, Power, is_net_key};
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// The parameters of one interface, as text (`type`, addresses, ports, options).
pub type IfaceParams = BTreeMap<String, String>;

impl Site {
    fn node_network_mut(
        &mut self,
        node: &str,
    ) -> Result<&mut crate::nodes::network::NodeNetwork, PveError> {
        self.nodes
            .get_mut(node)
            .map(|n| &mut n.network)
            .ok_or_else(|| PveError::die(format!("no such node '{node}'")))
    }

    /// `POST /nodes/{node}/network`
    pub fn create_iface(
        &mut self,
        node: &str,
        iface: &str,
        mut p: IfaceParams,
        now: f64,
    ) -> Result<(), PveError> {
        let net = self.node_network_mut(node)?;
        let mut cfg = net.working();
        if cfg.contains_key(iface) {
            return Err(PveError::param("iface", "interface already exists"));
        }
        check_gateways(&cfg, iface, &p)?;
        check_ports(&cfg, iface, &p)?;
        map_cidr(&mut p)?;
        let kind = p.remove("type").unwrap_or_default();
        if kind.starts_with("OVS") {
            // A node has Open vSwitch only if someone installed it; the fake's never do.
            return Err(PveError::die(
                "Open VSwitch is not installed (need package 'openvswitch-switch')",
            ));
        }
        normalize_vids(&mut p)?;
        let mut d = Iface {
            kind,
            autostart: p.remove("autostart").is_some_and(|v| truthy(&v)),
            ..Iface::default()
        };
        set_families(&mut d, &p);
        d.opts = p;
        cfg.insert(iface.to_string(), d);
        self.node_network_mut(node)?.write(cfg, now)
    }

    /// `PUT /nodes/{node}/network/{iface}`
    pub fn update_iface(
        &mut self,
        node: &str,
        iface: &str,
        mut p: IfaceParams,
        delete: Option<&str>,
        now: f64,
    ) -> Result<(), PveError> {
        let net = self.node_network_mut(node)?;
        let mut cfg = net.working();
        let Some(mut d) = cfg.get(iface).cloned() else {
            return Err(PveError::param("iface", "interface does not exist"));
        };
        for k in split_list(delete.unwrap_or_default()) {
            match k.as_str() {
                "autostart" => d.autostart = false,
                "cidr" => {
                    d.opts.remove("address");
                    d.opts.remove("netmask");
                }
                "cidr6" => {
                    d.opts.remove("address6");
                    d.opts.remove("netmask6");
                }
                _ => {}
            }
            d.opts.remove(&k);
        }
        map_cidr(&mut p)?;
        check_gateways(&cfg, iface, &p)?;
        check_ports(&cfg, iface, &p)?;
        // As PVE: the method follows the request, so an update without `address` turns a
        // static interface to `manual` (the web UI always sends every field).
        set_families(&mut d, &p);
        for (k, v) in &p {
            match k.as_str() {
                "type" => d.kind = v.clone(),
                "autostart" => d.autostart = truthy(v),
                _ => {
                    d.opts.insert(k.clone(), v.clone());
                }
            }
        }
        normalize_vids(&mut d.opts)?;
        cfg.insert(iface.to_string(), d);
        self.node_network_mut(node)?.write(cfg, now)
    }

    /// `DELETE /nodes/{node}/network/{iface}`
    pub fn delete_iface(&mut self, node: &str, iface: &str, now: f64) -> Result<(), PveError> {
        let net = self.node_network_mut(node)?;
        let mut cfg = net.working();
        if cfg.remove(iface).is_none() {
            return Err(PveError::param("iface", "interface does not exist"));
        }
        net.write(cfg, now)
    }

    /// `DELETE /nodes/{node}/network`: the pending changes are dropped.
    pub fn revert_network(&mut self, node: &str) -> Result<(), PveError> {
        self.node_network_mut(node)?.revert();
        Ok(())
    }

    /// `PUT /nodes/{node}/network`: `interfaces.new` replaces `interfaces` and `ifreload -a`
    /// brings the node to it in a `srvreload` task. Bridges the file no longer has go away:
    /// running guests with a NIC on one keep running without a link (their tap device lost
    /// its bridge); a stopped one fails to start (`bridge '…' does not exist`).
    pub fn apply_network(&mut self, node: &str, user: &str, now: f64) -> Result<String, PveError> {
        let net = self.node_network_mut(node)?;
        net.apply();
        let running = net.running();
        let before = self
            .nodes
            .get(node)
            .map(|n| n.bridges.clone())
            .unwrap_or_default();
        let after = running_bridges(&running, &before);
        let mut lines = Vec::new();
        for gone in before
            .iter()
            .filter(|b| !after.iter().any(|a| a.name == b.name))
        {
            if self.guests_on_bridge(node, &gone.name) {
                let fault = NodeFault::LinkDown {
                    bridge: gone.name.clone(),
                };
                if let Err(e) = self.node_fault(node, &fault) {
                    tracing::warn!(node, bridge = %gone.name, "guests on a removed bridge: {e}");
                }
            }
            lines.push(gone.name.clone());
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.bridges = after;
        }
        tracing::debug!(node, removed = ?lines, "network reloaded");
        let mut plan = TaskPlan::new("srvreload", "networking", node, user, Work::Noop);
        plan.duration = 1.0;
        Ok(self.start_task(plan, now))
    }

    fn guests_on_bridge(&self, node: &str, bridge: &str) -> bool {
        self.vms_on(node)
            .filter(|v| v.power != Power::Stopped)
            .any(|v| {
                v.config
                    .iter()
                    .any(|(k, val)| is_net_key(k) && Nic::parse(val).bridge() == Some(bridge))
            })
    }
}

/// One default gateway per family across the node's interfaces.
fn check_gateways(cfg: &Ifaces, iface: &str, p: &IfaceParams) -> Result<(), PveError> {
    for (key, what) in [
        ("gateway", "Default gateway"),
        ("gateway6", "Default ipv6 gateway"),
    ] {
        if !p.get(key).is_some_and(|v| truthy(v)) {
            continue;
        }
        if let Some((other, _)) = cfg
            .iter()
            .find(|(name, d)| name.as_str() != iface && d.opt(key).is_some())
        {
            return Err(PveError::param(
                key,
                format!("{what} already exists on interface '{other}'."),
            ));
        }
    }
    Ok(())
}

/// A port enslaved by another interface cannot be taken again.
fn check_ports(cfg: &Ifaces, iface: &str, p: &IfaceParams) -> Result<(), PveError> {
    let keys = ["bridge_ports", "ovs_ports", "slaves", "ovs_bonds"];
    let given: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| p.get(*k).is_some_and(|v| truthy(v)))
        .collect();
    let Some(param_name) = given.first() else {
        return Ok(());
    };
    let new: Vec<String> = given.iter().flat_map(|k| split_list(&p[*k])).collect();
    for (name, d) in cfg.iter().filter(|(n, _)| n.as_str() != iface) {
        if let Some(port) = d.port_list().into_iter().find(|x| new.contains(x)) {
            return Err(PveError::param(
                param_name,
                format!("{port} is already used on interface '{name}'."),
            ));
        }
    }
    Ok(())
}

/// `cidr`/`cidr6` become `address` + `netmask`; giving both forms is refused.
fn map_cidr(p: &mut IfaceParams) -> Result<(), PveError> {
    for suffix in ["", "6"] {
        let Some(cidr) = p.remove(&format!("cidr{suffix}")).filter(|c| truthy(c)) else {
            continue;
        };
        for k in ["address", "netmask"] {
            let key = format!("{k}{suffix}");
            if p.get(&key).is_some_and(|v| truthy(v)) {
                return Err(PveError::param(
                    &key,
                    format!("{key} conflicts with cidr{suffix}"),
                ));
            }
        }
        let (addr, mask) = cidr.rsplit_once('/').unwrap_or((cidr.as_str(), ""));
        p.insert(format!("address{suffix}"), addr.to_string());
        p.insert(format!("netmask{suffix}"), mask.to_string());
    }
    if let Some(m) = p.get("netmask")
        && !m.bytes().all(|b| b.is_ascii_digit())
        && netmask_bits(m).is_none()
    {
        return Err(PveError::param(
            "netmask",
            format!("value '{m}' is not a netmask"),
        ));
    }
    Ok(())
}

/// `families`, `method` and `method6` from the addresses the request gives.
fn set_families(d: &mut Iface, p: &IfaceParams) {
    let v4 = p.get("address").is_some_and(|v| truthy(v));
    let v6 = p.get("address6").is_some_and(|v| truthy(v));
    d.families.clear();
    if v4 {
        d.families.push("inet".into());
    }
    if v6 {
        d.families.push("inet6".into());
    }
    if d.families.is_empty() {
        d.families.push("inet".into());
    }
    d.method = if v4 { "static" } else { "manual" }.into();
    d.method6 = if v6 { "static" } else { "manual" }.into();
}

/// `bridge_vids` as a space separated list; a list of nothing is refused.
fn normalize_vids(p: &mut IfaceParams) -> Result<(), PveError> {
    if let Some(v) = p.get_mut("bridge_vids").filter(|v| truthy(v)) {
        let items = split_list(v);
        if items.is_empty() {
            return Err(PveError::param("bridge_vids", "VLAN list items are empty"));
        }
        *v = items.join(" ");
    }
    Ok(())
}
