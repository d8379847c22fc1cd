//! `/etc/network/interfaces` as `PVE::LXC::Setup::Debian::setup_network` writes it at every
//! start: the `netN` entries with a `name` become `auto`/`iface` stanzas (`inet dhcp`,
//! `inet static` with `address A/P` and `gateway G`, `inet6 …`), merged into the file the
//! container has. Stanzas of other interfaces, comments and the user's extra options
//! (`mtu`, `up …`) stay; PVE's own lines (`address`, `netmask`, `gateway`, `broadcast`, the
//! marked gateway-route scripts) are written anew.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::sections::{HEAD, TAIL, perl_lines};
use crate::lxc::model::{NetConf, is_net_key};

/// What PVE makes of one `netN` for the file (`$networks->{name}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Net {
    /// `dhcp`, `manual`, or the address without its prefix.
    address: Option<String>,
    netmask: Option<String>,
    cidr: Option<String>,
    gateway: Option<String>,
    needs_route: bool,
    /// `auto`, `dhcp`, `manual`, or the address without its prefix.
    address6: Option<String>,
    netmask6: Option<String>,
    cidr6: Option<String>,
    gateway6: Option<String>,
    needs_route6: bool,
}

impl Net {
    fn is_empty(&self) -> bool {
        self.address.is_none()
            && self.gateway.is_none()
            && self.address6.is_none()
            && self.gateway6.is_none()
    }
}

/// `PVE::LXC::parse_ipv4_cidr`: `A/P` with 8 ≤ P ≤ 32.
fn parse_ipv4_cidr(cidr: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = cidr.split_once('/')?;
    let addr: Ipv4Addr = a.parse().ok()?;
    let prefix: u8 = p
        .parse()
        .ok()
        .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))?;
    (8..=32).contains(&prefix).then_some((addr, prefix))
}

fn parse_ipv6_cidr(cidr: &str) -> Option<(Ipv6Addr, u8)> {
    let (a, p) = cidr.split_once('/')?;
    let addr: Ipv6Addr = a.parse().ok()?;
    let prefix: u8 = p
        .parse()
        .ok()
        .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))?;
    (prefix <= 128).then_some((addr, prefix))
}

fn ipv4_mask(prefix: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0))
}

/// `PVE::Network::is_ip_in_cidr`.
fn ip_in_cidr(ip: &str, cidr: &str) -> bool {
    let Some((net, p)) = cidr.split_once('/') else {
        return false;
    };
    let Ok(prefix) = p.parse::<u32>() else {
        return false;
    };
    match (ip.parse::<IpAddr>(), net.parse::<IpAddr>()) {
        (Ok(IpAddr::V4(a)), Ok(IpAddr::V4(n))) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (Ok(IpAddr::V6(a)), Ok(IpAddr::V6(n))) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The interfaces PVE configures, by name, from the config's `netN` entries.
fn networks(config: &BTreeMap<String, String>) -> Result<BTreeMap<String, Net>, String> {
    let mut out = BTreeMap::new();
    for (_, value) in config.iter().filter(|(k, _)| is_net_key(k)) {
        let d = NetConf::parse(value);
        let Some(name) = d.get("name") else {
            continue;
        };
        let mut net = Net::default();
        let mut cidr4 = None;
        if let Some(ip) = d.get("ip") {
            if ip == "dhcp" || ip == "manual" {
                net.address = Some(ip.to_string());
            } else {
                let (addr, prefix) =
                    parse_ipv4_cidr(ip).ok_or("unable to parse ipv4 address/mask")?;
                net.address = Some(addr.to_string());
                net.netmask = Some(ipv4_mask(prefix).to_string());
                net.cidr = Some(ip.to_string());
                cidr4 = Some(ip);
            }
        }
        if let Some(gw) = d.get("gw") {
            net.gateway = Some(gw.to_string());
            net.needs_route = cidr4.is_some_and(|c| !ip_in_cidr(gw, c));
        }
        let mut cidr6 = None;
        if let Some(ip6) = d.get("ip6") {
            if matches!(ip6, "auto" | "dhcp" | "manual") {
                net.address6 = Some(ip6.to_string());
            } else {
                let (addr, prefix) =
                    parse_ipv6_cidr(ip6).ok_or("unable to parse ipv6 address/prefix")?;
                net.address6 = Some(addr.to_string());
                net.netmask6 = Some(prefix.to_string());
                net.cidr6 = Some(ip6.to_string());
                cidr6 = Some(ip6);
            }
        }
        if let Some(gw6) = d.get("gw6") {
            net.gateway6 = Some(gw6.to_string());
            net.needs_route6 =
                cidr6.is_some_and(|c| !ip_in_cidr(gw6, c) && !ip_in_cidr(gw6, "fe80::/10"));
        }
        if !net.is_empty() {
            out.insert(name.to_string(), net);
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// One `iface NAME inet[6] …` stanza being read, with the user's extra options.
struct Section {
    family: Family,
    ifname: String,
    attrs: Vec<String>,
}

/// The file being written.
struct Writer<'a> {
    networks: &'a BTreeMap<String, Net>,
    /// Debian 10 and later take `address A/P`; older ones `address` and `netmask`.
    cidr_address: bool,
    out: String,
    done_auto: BTreeSet<String>,
    done_v4: BTreeSet<String>,
    done_v6: BTreeSet<String>,
}

/// The route scripts PVE writes when the gateway is outside the address's subnet.
fn gateway_scripts(ifname: &str, gw: &str) -> String {
    format!(
        "{HEAD}\n\tpost-up ip route add {gw} dev {ifname}\n\tpost-up ip route add default via {gw} dev {ifname}\n\tpre-down ip route del default via {gw} dev {ifname}\n\tpre-down ip route del {gw} dev {ifname}\n{TAIL}\n"
    )
}

/// Drop the route scripts an earlier start wrote: the marked lines, or (files from before
/// the markers) the four bare `post-up`/`pre-down` lines for one gateway and device.
fn remove_gateway_scripts(attrs: &mut Vec<String>) {
    let mut found = false;
    let mut keep = true;
    attrs.retain(|a| {
        if a == HEAD {
            found = true;
            keep = false;
            false
        } else if a == TAIL {
            found = true;
            keep = true;
            false
        } else {
            keep
        }
    });
    if found {
        return;
    }
    // `WORDS… IP dev IF`: the address and the device.
    let route = |line: &str, words: &[&str]| -> Option<(String, String)> {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let n = words.len();
        (parts.len() == n + 3 && parts[..n] == *words && parts[n + 1] == "dev")
            .then(|| (parts[n].to_string(), parts[n + 2].to_string()))
    };
    let mut i = 0;
    while i + 3 < attrs.len() {
        let first = route(&attrs[i], &["post-up", "ip", "route", "add"]);
        let matches = first.as_ref().is_some_and(|(ip, dev)| {
            let same = |x: Option<(String, String)>| x.is_some_and(|(a, d)| &a == ip && &d == dev);
            same(route(
                &attrs[i + 1],
                &["post-up", "ip", "route", "add", "default", "via"],
            )) && same(route(
                &attrs[i + 2],
                &["pre-down", "ip", "route", "del", "default", "via"],
            )) && same(route(&attrs[i + 3], &["pre-down", "ip", "route", "del"]))
        });
        if matches {
            attrs.drain(i..i + 4);
        } else {
            i += 1;
        }
    }
}

impl Writer<'_> {
    fn print(&mut self, section: Option<Section>) {
        let Some(mut section) = section else {
            return;
        };
        let ifname = section.ifname.clone();
        let Some(net) = self.networks.get(&ifname) else {
            return;
        };
        if self.done_auto.insert(ifname.clone()) {
            let _ = writeln!(self.out, "auto {ifname}");
        }
        let (address, cidr, netmask, gateway, needs_route, family_word, simple): (
            _,
            _,
            _,
            _,
            _,
            _,
            &[&str],
        ) = match section.family {
            Family::V4 => {
                self.done_v4.insert(ifname.clone());
                (
                    &net.address,
                    &net.cidr,
                    &net.netmask,
                    &net.gateway,
                    net.needs_route,
                    "inet",
                    &["dhcp", "manual"],
                )
            }
            Family::V6 => {
                self.done_v6.insert(ifname.clone());
                (
                    &net.address6,
                    &net.cidr6,
                    &net.netmask6,
                    &net.gateway6,
                    net.needs_route6,
                    "inet6",
                    &["auto", "dhcp", "manual"],
                )
            }
        };
        let Some(address) = address else {
            return;
        };
        if simple.contains(&address.as_str()) {
            let _ = writeln!(self.out, "iface {ifname} {family_word} {address}\n");
            return;
        }
        let _ = writeln!(self.out, "iface {ifname} {family_word} static");
        if self.cidr_address {
            if let Some(c) = cidr {
                let _ = writeln!(self.out, "\taddress {c}");
            }
        } else {
            let _ = writeln!(self.out, "\taddress {address}");
            if let Some(m) = netmask {
                let _ = writeln!(self.out, "\tnetmask {m}");
            }
        }
        remove_gateway_scripts(&mut section.attrs);
        if let Some(gw) = gateway {
            if needs_route {
                self.out.push_str(&gateway_scripts(&ifname, gw));
            } else {
                let _ = writeln!(self.out, "\tgateway {gw}");
            }
        }
        for a in &section.attrs {
            let _ = writeln!(self.out, "\t{a}");
        }
        self.out.push('\n');
    }
}

/// `^\s*iface\s+(\S+)\s+inet6?\s+(\S+)\s*$`: the interface and the family.
fn iface_line(line: &str) -> Option<(String, Family)> {
    let parts: Vec<&str> = line.split_whitespace().collect();
    match parts.as_slice() {
        ["iface", name, "inet", _] => Some((name.to_string(), Family::V4)),
        ["iface", name, "inet6", _] => Some((name.to_string(), Family::V6)),
        _ => None,
    }
}

/// The new `/etc/network/interfaces` from the config's `netN` entries and the file the
/// container has (`old`), for a Debian of major version `version`; `Ok(None)` when no NIC
/// has a `name` and an address or gateway (PVE leaves the file alone then).
pub fn interfaces_file(
    config: &BTreeMap<String, String>,
    version: u32,
    old: Option<&str>,
) -> Result<Option<String>, String> {
    let networks = networks(config)?;
    if networks.is_empty() {
        return Ok(None);
    }
    let mut w = Writer {
        networks: &networks,
        cidr_address: version >= 10,
        out: String::new(),
        done_auto: BTreeSet::new(),
        done_v4: BTreeSet::new(),
        done_v6: BTreeSet::new(),
    };
    let mut section: Option<Section> = None;
    for line in old.map(perl_lines).unwrap_or_default() {
        if line.starts_with(HEAD) || line.starts_with(TAIL) {
            // Kept with the section, so the old route scripts are found and dropped.
            if let Some(s) = section.as_mut() {
                s.attrs.push(line);
            }
            continue;
        }
        if line.starts_with('#') {
            let _ = writeln!(w.out, "{line}");
            continue;
        }
        if line.trim().is_empty() {
            if section.is_some() {
                w.print(section.take());
            } else {
                let _ = writeln!(w.out, "{line}");
            }
            continue;
        }
        if let Some((ifname, family)) = iface_line(&line) {
            w.print(section.take());
            if networks.contains_key(&ifname) {
                section = Some(Section {
                    family,
                    ifname,
                    attrs: Vec::new(),
                });
            } else {
                let _ = writeln!(w.out, "{line}");
            }
            continue;
        }
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("auto") {
            w.done_auto
                .extend(rest.split_whitespace().map(str::to_string));
            w.print(section.take());
            let _ = writeln!(w.out, "{line}");
            continue;
        }
        let delimiter = ["mapping", "source", "source-directory"].iter().any(|k| {
            trimmed
                .strip_prefix(k)
                .is_some_and(|r| r.starts_with(char::is_whitespace))
        }) || trimmed.starts_with("allow-");
        if delimiter {
            w.print(section.take());
            let _ = writeln!(w.out, "{line}");
            continue;
        }
        if let Some(s) = section.as_mut()
            && let Some((name, _)) = trimmed.split_once(char::is_whitespace)
        {
            if !matches!(name, "address" | "netmask" | "gateway" | "broadcast") {
                s.attrs.push(trimmed.to_string());
            }
            continue;
        }
        let _ = writeln!(w.out, "{line}");
    }
    w.print(section.take());

    let mut need_separator = !w.out.is_empty() && !w.out.ends_with("\n\n");
    for (ifname, net) in &networks {
        for (family, wanted) in [
            (
                Family::V4,
                !w.done_v4.contains(ifname) && net.address.is_some(),
            ),
            (
                Family::V6,
                !w.done_v6.contains(ifname) && net.address6.is_some(),
            ),
        ] {
            if wanted {
                if need_separator {
                    w.out.push('\n');
                    need_separator = false;
                }
                w.print(Some(Section {
                    family,
                    ifname: ifname.clone(),
                    attrs: Vec::new(),
                }));
            }
        }
    }
    if !w.done_auto.contains("lo") {
        w.out.insert_str(
            0,
            "auto lo\niface lo inet loopback\niface lo inet6 loopback\n\n",
        );
    }
    Ok(Some(w.out))
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
