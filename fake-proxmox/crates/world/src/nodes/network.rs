//! A node's network configuration as PVE keeps it: `/etc/network/interfaces` (what runs),
//! `/etc/network/interfaces.new` (pending changes the API wrote), and the physical NICs.
//!
//! The API handlers of `PVE::API2::Network` read the pending file when it exists, change one
//! stanza, check the whole file as `__write_etc_network_interfaces` does and write it back
//! as `interfaces.new`. Applying renames it over the active file and reloads; reverting
//! removes it. The node's running bridges (`Node::bridges`, what VMs attach to) follow the
//! active file only, so a bridge that is only pending does not exist for a starting VM.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::nodes::bridge::Bridge;
use crate::wire::PveError;

/// One `iface` stanza as the API handlers hold it (`$ifaces->{$iface}`): every value as the
/// file's text, besides the keys the parser gives structure.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Iface {
    /// `type`: as the caller gave it until the file is read back (then derived, see `read_kind`).
    pub kind: String,
    /// Position in the file (from 2: `lo` comes first); `None` until written.
    pub priority: Option<u32>,
    /// Listed in an `auto` line: brought up at boot.
    pub autostart: bool,
    /// Address families it has `iface` lines for (`inet`, `inet6`), in file order.
    pub families: Vec<String>,
    /// IPv4 configuration method (`static`, `manual`, `dhcp`, `loopback`).
    pub method: String,
    /// IPv6 configuration method, same values as `method`.
    pub method6: String,
    /// Every other key: address, netmask, gateway, bridge_ports, slaves, mtu, comments, ...
    pub opts: BTreeMap<String, String>,
}

impl Iface {
    /// Value of an option key, `None` when absent or false in Perl terms (empty, `0`).
    pub fn opt(&self, k: &str) -> Option<&str> {
        self.opts.get(k).map(String::as_str).filter(|v| truthy(v))
    }

    /// The ports it enslaves (`bridge_ports ovs_ports slaves ovs_bonds`), in that order.
    pub fn port_list(&self) -> Vec<String> {
        ["bridge_ports", "ovs_ports", "slaves", "ovs_bonds"]
            .iter()
            .filter_map(|k| self.opt(k))
            .flat_map(split_list)
            .collect()
    }

    /// `address` with its prefix as the file writes it (`10.0.0.1/24`).
    pub fn cidr(&self, suffix: &str) -> Option<String> {
        let addr = self.opt(&format!("address{suffix}"))?;
        if addr.contains('/') {
            return Some(addr.to_string());
        }
        let Some(mask) = self.opt(&format!("netmask{suffix}")) else {
            return Some(addr.to_string());
        };
        if mask.bytes().all(|b| b.is_ascii_digit()) {
            return Some(format!("{addr}/{mask}"));
        }
        Some(match netmask_bits(mask) {
            Some(bits) => format!("{addr}/{bits}"),
            None => addr.to_string(),
        })
    }

    fn stub_eth() -> Iface {
        Iface {
            kind: "eth".into(),
            families: vec!["inet".into()],
            method: "manual".into(),
            method6: "manual".into(),
            ..Iface::default()
        }
    }
}

/// Perl truthiness of a text value.
pub fn truthy(v: &str) -> bool {
    !v.is_empty() && v != "0"
}

/// `PVE::Tools::split_list`: items separated by spaces, commas or semicolons.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Prefix length of a dotted netmask (`255.255.255.0` → 24); `None` if not contiguous.
pub fn netmask_bits(mask: &str) -> Option<u32> {
    let ip: std::net::Ipv4Addr = mask.parse().ok()?;
    let n = u32::from(ip);
    let bits = n.leading_ones();
    (n.checked_shl(bits).unwrap_or(0) == 0).then_some(bits)
}

/// The stanzas of one interfaces file, by interface name.
pub type Ifaces = BTreeMap<String, Iface>;

/// A node's `/etc/network/interfaces` and its pending `interfaces.new`.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct NodeNetwork {
    /// `/etc/network/interfaces`: what the node runs.
    pub active: Ifaces,
    /// `/etc/network/interfaces.new`: changes written by the API, not applied yet; `None`
    /// when that file does not exist.
    pub pending: Option<Ifaces>,
    /// The NICs the hardware has (`ip link`): listed with `exists` even when unconfigured.
    pub physical: BTreeSet<String>,
    /// Modification time of `interfaces`, Unix seconds (the `changes` diff shows it).
    pub active_mtime: f64,
    /// Modification time of `interfaces.new`, likewise.
    pub pending_mtime: f64,
}

impl NodeNetwork {
    /// The file a freshly installed node has for the scenario's bridges and their ports.
    pub fn from_bridges(bridges: &[Bridge], mtime: f64) -> NodeNetwork {
        let mut ifaces = Ifaces::new();
        ifaces.insert(
            "lo".into(),
            Iface {
                kind: "loopback".into(),
                autostart: true,
                families: vec!["inet".into()],
                method: "loopback".into(),
                method6: "manual".into(),
                ..Iface::default()
            },
        );
        let mut physical = BTreeSet::new();
        for b in bridges {
            for p in b.ports.as_deref().map(split_list).unwrap_or_default() {
                physical.insert(p.clone());
                ifaces.entry(p).or_insert_with(Iface::stub_eth);
            }
        }
        for b in bridges {
            let mut i = Iface {
                kind: "bridge".into(),
                autostart: true,
                families: vec!["inet".into()],
                method: if b.cidr.is_some() { "static" } else { "manual" }.into(),
                method6: "manual".into(),
                ..Iface::default()
            };
            if let Some(c) = &b.cidr {
                i.opts.insert("address".into(), c.clone());
            }
            if let Some(g) = &b.gateway {
                i.opts.insert("gateway".into(), g.clone());
            }
            i.opts
                .insert("bridge_ports".into(), b.ports.clone().unwrap_or_default());
            i.opts.insert("bridge_stp".into(), "off".into());
            i.opts.insert("bridge_fd".into(), "0".into());
            ifaces.insert(b.name.clone(), i);
        }
        let mut net = NodeNetwork {
            active: ifaces,
            pending: None,
            physical,
            active_mtime: mtime,
            pending_mtime: mtime,
        };
        renumber(&mut net.active);
        net
    }

    /// What `read_file('interfaces')` gives the handlers: the pending file if there is one,
    /// as the parser reads it back, plus the physical NICs the file does not name.
    pub fn working(&self) -> Ifaces {
        let file = self.pending.as_ref().unwrap_or(&self.active);
        self.read_back(file)
    }

    /// The active file as the parser reads it.
    pub fn running(&self) -> Ifaces {
        self.read_back(&self.active)
    }

    fn read_back(&self, file: &Ifaces) -> Ifaces {
        let mut out: Ifaces = file
            .iter()
            .map(|(name, i)| {
                let mut i = i.clone();
                i.kind = read_kind(name, &i, &self.physical);
                (name.clone(), i)
            })
            .collect();
        for p in &self.physical {
            out.entry(p.clone()).or_insert_with(Iface::stub_eth);
        }
        out
    }

    /// Check the whole file as `__write_etc_network_interfaces` does and store it as
    /// `interfaces.new`; an error leaves the files as they were.
    pub fn write(&mut self, mut ifaces: Ifaces, now: f64) -> Result<(), PveError> {
        check_file(&mut ifaces)?;
        renumber(&mut ifaces);
        self.pending = Some(ifaces);
        self.pending_mtime = now;
        Ok(())
    }

    /// `DELETE /nodes/{node}/network`: `unlink interfaces.new`.
    pub fn revert(&mut self) {
        self.pending = None;
    }

    /// `PUT /nodes/{node}/network`: the pending file becomes the active one.
    pub fn apply(&mut self) {
        if let Some(p) = self.pending.take() {
            self.active = p;
            self.active_mtime = self.pending_mtime;
        }
    }
}

/// `type` as the parser derives it from the stanza and the name (it is never written).
pub fn read_kind(name: &str, i: &Iface, physical: &BTreeSet<String>) -> String {
    let ovs = i.opts.get("ovs_type").map(String::as_str);
    let kind = if i.kind == "bridge" || i.opts.contains_key("bridge_ports") {
        "bridge"
    } else if ovs == Some("OVSBridge") {
        "OVSBridge"
    } else if is_bond_name(name) {
        if ovs == Some("OVSBond") {
            "OVSBond"
        } else {
            "bond"
        }
    } else if name.split_once(':').is_some_and(|(_, n)| is_digits(n)) {
        "alias"
    } else if dotted_vlan(name).is_some() || i.opts.contains_key("vlan-raw-device") {
        "vlan"
    } else if physical.contains(name) || is_physical_name(name) {
        if ovs == Some("OVSPort") {
            "OVSPort"
        } else {
            "eth"
        }
    } else if name == "lo" {
        "loopback"
    } else if i.opts.contains_key("vxlan-id") {
        "vxlan"
    } else if ovs == Some("OVSIntPort") {
        "OVSIntPort"
    } else if i.opts.get("link-type").is_some_and(|t| t == "dummy") {
        "dummy"
    } else {
        "unknown"
    };
    kind.to_string()
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_bond_name(name: &str) -> bool {
    name.strip_prefix("bond").is_some_and(is_digits)
}

/// `eno1.20` → (`eno1`, 20).
pub fn dotted_vlan(name: &str) -> Option<(&str, u32)> {
    let (parent, id) = name.rsplit_once('.')?;
    if parent.is_empty() || parent.contains(char::is_whitespace) || !is_digits(id) {
        return None;
    }
    Some((parent, id.parse().ok()?))
}

/// `$PHYSICAL_NIC_RE`: `eth0`, `en*`, `ib*`, `nic0`, `if0` (no `:` or `.`).
pub fn is_physical_name(name: &str) -> bool {
    let rest_ok = |r: &str| !r.is_empty() && !r.contains([':', '.']);
    name.strip_prefix("eth").is_some_and(is_digits)
        || name.strip_prefix("en").is_some_and(rest_ok)
        || name.strip_prefix("ib").is_some_and(rest_ok)
        || name.strip_prefix("nic").is_some_and(is_digits)
        || name.strip_prefix("if").is_some_and(is_digits)
}

/// Type order of the writer (`$if_type_hash`), by the type of the name's root interface.
fn type_prio(name: &str, ifaces: &Ifaces) -> Option<u32> {
    let mut parts = name.split(['.', ':']);
    let root = parts.next().unwrap_or(name);
    let level = parts.count() as u32;
    let base = match ifaces.get(root)?.kind.as_str() {
        "loopback" | "dummy" => 100_000,
        "eth" | "OVSPort" => 200_000,
        "OVSIntPort" => 300_000,
        "OVSBond" | "bond" => 400_000,
        "bridge" | "OVSBridge" => 500_000,
        "vlan" | "vxlan" => 600_000,
        _ => return None,
    };
    Some(base + level)
}

/// The order the writer puts the stanzas in.
pub fn file_order(ifaces: &Ifaces) -> Vec<&str> {
    let mut names: Vec<&str> = ifaces.keys().map(String::as_str).collect();
    names.sort_by(|a, b| {
        let (ta, tb) = match (type_prio(a, ifaces), type_prio(b, ifaces)) {
            (Some(x), Some(y)) => (x, y),
            _ => (0, 0),
        };
        let pa = ta + ifaces[*a].priority.unwrap_or(50_000);
        let pb = tb + ifaces[*b].priority.unwrap_or(50_000);
        pa.cmp(&pb).then_with(|| a.cmp(b))
    });
    names
}

/// Priorities as reading the written file assigns them: file order, from 2.
fn renumber(ifaces: &mut Ifaces) {
    let order: Vec<String> = file_order(ifaces).into_iter().map(str::to_string).collect();
    for (n, name) in order.iter().enumerate() {
        if let Some(i) = ifaces.get_mut(name) {
            i.priority = Some(n as u32 + 2);
        }
    }
}

/// The checks `__write_etc_network_interfaces` makes before it writes (and its side effect
/// on bond slaves); their `die`s are the handlers' 500s.
fn check_file(ifaces: &mut Ifaces) -> Result<(), PveError> {
    let mut used: BTreeMap<String, String> = BTreeMap::new();
    for (name, i) in ifaces.iter() {
        for p in i.port_list() {
            if let Some(other) = used.get(&p)
                && other != name
            {
                return Err(PveError::die(format!(
                    "port '{p}' is already used on interface '{other}'"
                )));
            }
            used.insert(p, name.clone());
        }
    }
    let bonds: Vec<String> = ifaces
        .iter()
        .filter(|(_, i)| i.kind == "bond" && i.opt("slaves").is_some())
        .map(|(n, _)| n.clone())
        .collect();
    for bond in bonds {
        let d = ifaces[&bond].clone();
        let mut primary_is_slave = false;
        for p in split_list(d.opt("slaves").unwrap_or_default()) {
            let Some(n) = ifaces.get_mut(&p) else {
                return Err(PveError::die(format!(
                    "bond '{bond}' - unable to find slave '{p}'"
                )));
            };
            n.autostart = true;
            if n.kind != "eth" && n.kind != "bond" {
                return Err(PveError::die(format!(
                    "bond '{bond}' - wrong interface type on slave '{p}' ('{}' != 'eth or bond')",
                    n.kind
                )));
            }
            primary_is_slave |= d.opt("bond-primary") == Some(p.as_str());
        }
        if d.opt("bond-primary").is_some() && !primary_is_slave {
            // PVE dies without a newline here, so Perl adds ` at <file> line <n>.`; the
            // fake leaves that location out (it differs between pve-common releases).
            return Err(PveError::die(format!(
                "bond '{bond}' - bond-primary interface is not a slave"
            )));
        }
    }
    for (name, d) in ifaces.iter().filter(|(_, i)| i.kind == "vlan") {
        let (parent, id) = match dotted_vlan(name) {
            Some((p, id)) => (p.to_string(), id),
            None => {
                let Some(p) = d.opt("vlan-raw-device") else {
                    return Err(PveError::die("missing vlan-raw-device option"));
                };
                let id = match name.strip_prefix("vlan").filter(|n| is_digits(n)) {
                    Some(n) => n.parse().unwrap_or(u32::MAX),
                    None => match d.opt("vlan-id") {
                        Some(v) => v.parse().unwrap_or(u32::MAX),
                        None => return Err(PveError::die("missing vlan-id option")),
                    },
                };
                (p.to_string(), id)
            }
        };
        if id > 4094 {
            return Err(PveError::die(format!(
                "vlan '{name}' - vlan-id {id} should be <= 4094"
            )));
        }
        let Some(n) = ifaces.get(&parent) else {
            return Err(PveError::die(format!(
                "vlan '{name}' - unable to find parent '{parent}'"
            )));
        };
        if !["eth", "bridge", "bond", "vlan"].contains(&n.kind.as_str()) {
            return Err(PveError::die(format!(
                "vlan '{name}' - wrong interface type on parent '{parent}' ('{}' != 'eth|bond|bridge|vlan' )",
                n.kind
            )));
        }
    }
    for (name, d) in ifaces.iter().filter(|(_, i)| i.kind == "bridge") {
        for p in d
            .opts
            .get("bridge_ports")
            .map(|s| split_list(s))
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p != "none")
        {
            // A VLAN of an interface (`eno1.20`) need not be declared: ifupdown2 creates it.
            let Some(n) = ifaces.get(&p) else {
                if dotted_vlan(&p).is_some() {
                    continue;
                }
                return Err(PveError::die(format!(
                    "bridge '{name}' - unable to find bridge port '{p}'"
                )));
            };
            let static4 =
                n.method == "static" && n.opts.get("address").is_some_and(|a| a != "0.0.0.0");
            let static6 =
                n.method6 == "static" && n.opts.get("address6").is_some_and(|a| a != "::");
            if static4 || static6 {
                return Err(PveError::die(format!(
                    "iface {p} - ip address can't be set on interface if bridged in {name}"
                )));
            }
        }
    }
    Ok(())
}

/// The bridges a node runs for an active file: those it had keep their runtime state (DHCP
/// pool, link faults); new ones come without a DHCP pool.
pub fn running_bridges(running: &Ifaces, before: &[Bridge]) -> Vec<Bridge> {
    let is_bridge = |i: &Iface| i.kind == "bridge" || i.kind == "OVSBridge";
    let mut out: Vec<Bridge> = before
        .iter()
        .filter(|b| running.get(&b.name).is_some_and(is_bridge))
        .cloned()
        .collect();
    for name in running.iter().filter(|(_, i)| is_bridge(i)).map(|(n, _)| n) {
        if !out.iter().any(|b| &b.name == name) {
            out.push(Bridge {
                name: name.clone(),
                cidr: None,
                gateway: None,
                ports: None,
                dhcp: None,
                link_cut: false,
            });
        }
    }
    for b in &mut out {
        let i = &running[&b.name];
        b.cidr = i.cidr("").filter(|c| c.contains('/'));
        b.gateway = i.opt("gateway").map(str::to_string);
        b.ports = i
            .opt("bridge_ports")
            .or_else(|| i.opt("ovs_ports"))
            .map(str::to_string);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netmasks_convert_to_prefixes() {
        assert_eq!(netmask_bits("255.255.255.0"), Some(24));
        assert_eq!(netmask_bits("255.255.0.0"), Some(16));
        assert_eq!(netmask_bits("0.0.0.0"), Some(0));
        assert_eq!(netmask_bits("255.0.255.0"), None);
    }

    #[test]
    fn types_are_derived_from_names_as_the_parser_does() {
        let none = BTreeSet::new();
        let plain = Iface::default();
        assert_eq!(read_kind("bond0", &plain, &none), "bond");
        assert_eq!(read_kind("mybond", &plain, &none), "unknown");
        assert_eq!(read_kind("eno1.20", &plain, &none), "vlan");
        assert_eq!(read_kind("enp3s0", &plain, &none), "eth");
        assert_eq!(read_kind("eth0:1", &plain, &none), "alias");
        let mut br = Iface::default();
        br.opts.insert("bridge_ports".into(), String::new());
        assert_eq!(read_kind("anything", &br, &none), "bridge");
    }
}
