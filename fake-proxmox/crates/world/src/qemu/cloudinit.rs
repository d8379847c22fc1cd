//! Cloud-init as qemu-server models it: the `[special:cloudinit]` section of the config
//! (what the current cloud-init image was generated from, for options changed since on a
//! running VM), `GET …/cloudinit` over it, `PUT …/cloudinit` regenerating the image, and
//! `GET …/cloudinit/dump` rendering the user, network and meta data the image holds.
//!
//! Behaviour follows qemu-server (`QemuServer.pm` `vmconfig_hotplug_pending`'s change
//! recorder, `API2/Qemu.pm` `cloudinit_pending`, `QemuServer/Cloudinit.pm` renderers).
//! Deviation: the node's `/etc/resolv.conf`, which fills in DNS when the VM sets none, is
//! simulated as `nameserver <the gateway of the node's first bridge that has one>` and no
//! search domain.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use crate::wire::PveError;

use super::model::{Nic, Vm, is_ipconfig_key, is_net_key, prop, split_props};

/// The `[special:cloudinit]` section: recorded old values by key, plus `added`.
pub use super::model::CloudinitSection as Section;

/// `$confdesc_cloudinit` without the `ipconfigN` keys; also the API's `$cloudinitoptions`,
/// the keys `GET …/cloudinit` reports values of.
pub const OPTIONS: &[&str] = &[
    "cicustom",
    "cipassword",
    "citype",
    "ciupgrade",
    "ciuser",
    "nameserver",
    "searchdomain",
    "sshkeys",
];

const MASK: &str = "**********";

/// `cloudinit_pending_properties`: cloud-init options, `ipconfigN`, `name` and `netN`.
pub fn is_recorded_key(key: &str) -> bool {
    OPTIONS.contains(&key) || key == "name" || is_ipconfig_key(key) || is_net_key(key)
}

/// Perl truthiness of a config value: unset, empty and `0` are false.
fn truthy(v: Option<&String>) -> Option<&String> {
    v.filter(|s| !s.is_empty() && s.as_str() != "0")
}

/// `PVE::Tools::split_list`.
fn split_list(s: &str) -> impl Iterator<Item = &str> {
    s.split([',', ';', ' ', '\t', '\n', '\0'])
        .filter(|x| !x.is_empty())
}

/// Record a change a running VM took at once, so `GET …/cloudinit` can tell the image's
/// value from the config's until the image is regenerated.
pub fn record_change(ci: &mut Section, key: &str, old: Option<&str>, new: Option<&str>) {
    if !is_recorded_key(key) {
        return;
    }
    let recorded = ci.get(key).cloned();
    let mut added: BTreeSet<String> = ci
        .remove("added")
        .map(|a| split_list(&a).map(str::to_string).collect())
        .unwrap_or_default();
    match (old, new) {
        (_, Some(new)) => match recorded {
            // Back to what the image holds: nothing differs any more.
            Some(r) if r == new => {
                ci.remove(key);
                added.remove(key);
            }
            // Changed again, or was absent from the image: keep what is recorded.
            Some(_) => {}
            None if added.contains(key) => {}
            None => match old {
                Some(old) => {
                    ci.insert(key.to_string(), old.to_string());
                }
                None => {
                    added.insert(key.to_string());
                }
            },
        },
        (None, None) => {}
        (Some(old), None) => {
            if recorded.is_none() && !added.remove(key) {
                ci.insert(key.to_string(), old.to_string());
            }
        }
    }
    if !added.is_empty() {
        ci.insert(
            "added".to_string(),
            added.into_iter().collect::<Vec<_>>().join(","),
        );
    }
}

/// `GET …/cloudinit`: added keys with their pending value, reported options with the
/// image's value (and the config's as `pending` when they differ), then deleted keys.
pub fn pending_list(vm: &Vm) -> Value {
    let mut conf = vm.config.clone();
    let mut ci = vm.cloudinit.clone();
    if conf.contains_key("cipassword") {
        conf.insert("cipassword".into(), MASK.into());
    }
    if ci.contains_key("cipassword") {
        ci.insert("cipassword".into(), MASK.into());
    }
    let added = ci.remove("added").unwrap_or_default();
    let mut out = Vec::new();
    for key in split_list(&added) {
        out.push(json!({"key": key, "pending": conf.get(key)}));
    }
    for opt in OPTIONS {
        let Some(current) = truthy(conf.get(*opt)) else {
            continue;
        };
        // PVE tests `$added =~ m/$opt/`: a substring match.
        if added.contains(opt) {
            continue;
        }
        out.push(match truthy(ci.get(*opt)) {
            Some(image) => json!({"key": opt, "value": image, "pending": current}),
            None => json!({"key": opt, "value": current}),
        });
    }
    for opt in ci.keys() {
        if truthy(conf.get(opt)).is_none() {
            out.push(json!({"key": opt, "delete": 1}));
        }
    }
    Value::Array(out)
}

/// Which of the dump's three documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpType {
    /// `user-data`: hostname, user, password, SSH keys.
    User,
    /// `network-config`: the NICs and their `ipconfigN` addressing.
    Network,
    /// `meta-data`: the instance ID.
    Meta,
}

impl DumpType {
    /// From the API's `type` parameter (`user`, `network`, `meta`); `None` for anything else.
    pub fn parse(s: &str) -> Option<DumpType> {
        match s {
            "user" => Some(DumpType::User),
            "network" => Some(DumpType::Network),
            "meta" => Some(DumpType::Meta),
            _ => None,
        }
    }
}

/// The node's resolver settings, used where the VM sets no `nameserver`/`searchdomain`.
#[derive(Clone, Debug, Default)]
pub struct HostDns {
    /// Search domains, space-separated (`search` in `/etc/resolv.conf`).
    pub search: Option<String>,
    /// Name server addresses, in order.
    pub nameservers: Vec<String>,
}

/// `dump_cloudinit_config`: the document the image holds (for the current config).
pub fn dump(vm: &Vm, what: DumpType, host: &HostDns) -> String {
    let conf = &vm.config;
    let nocloud = format_of(conf) == "nocloud";
    let network = || {
        if nocloud {
            nocloud_network(conf, host)
        } else {
            configdrive2_network(conf, host)
        }
    };
    match what {
        DumpType::User => userdata(conf, vm.vmid),
        DumpType::Network => network(),
        DumpType::Meta => metadata(nocloud, &userdata(conf, vm.vmid), &network()),
    }
}

/// `nocloud_gen_metadata` / `configdrive2_gen_metadata`: the meta data naming the instance
/// by the SHA-1 of its user and network data.
pub(crate) fn metadata(nocloud: bool, user: &str, network: &str) -> String {
    let id = hex::encode(Sha1::digest(format!("{user}{network}").as_bytes()));
    if nocloud {
        format!("instance-id: {id}\n")
    } else {
        format!(
            "{{\n     \"uuid\": \"{id}\",\n     \"network_config\": {{ \"content_path\": \"/content/0000\" }}\n}}\n"
        )
    }
}

/// `get_cloudinit_format`: `citype`, else `configdrive2` for Windows guests, else `nocloud`.
pub(crate) fn format_of(conf: &BTreeMap<String, String>) -> &str {
    if let Some(t) = conf.get("citype") {
        return t;
    }
    const WINDOWS: &[&str] = &[
        "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11",
    ];
    match conf.get("ostype") {
        Some(o) if WINDOWS.contains(&o.as_str()) => "configdrive2",
        _ => "nocloud",
    }
}

fn hostname_fqdn(conf: &BTreeMap<String, String>, vmid: u32) -> (String, String) {
    let name = conf.get("name").cloned().unwrap_or(format!("VM{vmid}"));
    if let Some((host, _)) = name.split_once('.') {
        return (host.to_string(), name.clone());
    }
    match truthy(conf.get("searchdomain")) {
        Some(search) => (name.clone(), format!("{name}.{search}")),
        None => (name.clone(), name),
    }
}

fn userdata(conf: &BTreeMap<String, String>, vmid: u32) -> String {
    let (hostname, fqdn) = hostname_fqdn(conf, vmid);
    let mut s =
        format!("#cloud-config\nhostname: {hostname}\nmanage_etc_hosts: true\nfqdn: {fqdn}\n");
    let user = conf.get("ciuser");
    if let Some(u) = user {
        s.push_str(&format!("user: {u}\n"));
        if u == "root" {
            s.push_str("disable_root: False\n");
        }
    }
    if let Some(p) = conf.get("cipassword") {
        s.push_str(&format!("password: {p}\n"));
    }
    if let Some(keys) = conf.get("sshkeys") {
        let keys = String::from_utf8_lossy(
            &percent_encoding::percent_decode_str(keys).collect::<Vec<u8>>(),
        )
        .into_owned();
        s.push_str("ssh_authorized_keys:\n");
        for k in keys
            .split('\n')
            .filter(|k| k.chars().any(|c| !c.is_whitespace()))
        {
            s.push_str(&format!("  - {k}\n"));
        }
    }
    s.push_str("chpasswd:\n  expire: False\n");
    if user.is_none_or(|u| u != "root") {
        s.push_str("users:\n  - default\n");
    }
    if conf
        .get("ciupgrade")
        .is_none_or(|v| truthy(Some(v)).is_some())
    {
        s.push_str("package_upgrade: true\n");
    }
    s
}

/// `get_dns_conf`: the VM's settings, else the host's.
fn dns(conf: &BTreeMap<String, String>, host: &HostDns) -> (Vec<String>, Vec<String>) {
    let words = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
    let search = match conf.get("searchdomain") {
        Some(s) => words(s),
        None => host.search.as_deref().map(words).unwrap_or_default(),
    };
    let servers = match conf.get("nameserver") {
        Some(s) => words(s),
        None => host.nameservers.clone(),
    };
    (search, servers)
}

/// A NIC with an `ipconfigN`: its index, its `netN` value and the parsed ipconfig.
struct ConfiguredNic {
    id: String,
    net: String,
    ipconfig: Vec<(String, String)>,
}

/// The VM's NICs that have an `ipconfigN`, in Perl's `sort` order (`net10` before `net2`).
fn configured_nics(conf: &BTreeMap<String, String>) -> Vec<ConfiguredNic> {
    conf.iter()
        .filter(|(k, _)| is_net_key(k))
        .filter_map(|(k, v)| {
            let id = k.strip_prefix("net")?;
            let ipconfig = truthy(conf.get(&format!("ipconfig{id}")))?;
            Some(ConfiguredNic {
                id: id.to_string(),
                net: v.clone(),
                ipconfig: split_props(ipconfig, ""),
            })
        })
        .collect()
}

/// `split_ip4`: address and dotted netmask of `a.b.c.d/len`.
fn split_ip4(cidr: &str) -> (String, String) {
    let (addr, len) = cidr.split_once('/').unwrap_or((cidr, "32"));
    let len: u32 = len.parse().unwrap_or(32).min(32);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    (addr.to_string(), std::net::Ipv4Addr::from(mask).to_string())
}

fn nocloud_network(conf: &BTreeMap<String, String>, host: &HostDns) -> String {
    let mut s = String::from("version: 1\nconfig:\n");
    for ConfiguredNic {
        id,
        net,
        ipconfig: ipc,
    } in configured_nics(conf)
    {
        let mac = Nic::parse(&net)
            .mac
            .unwrap_or_default()
            .to_ascii_lowercase();
        s.push_str(&format!(
            "    - type: physical\n      name: eth{id}\n      mac_address: '{mac}'\n      subnets:\n"
        ));
        let i = "      ";
        if let Some(ip) = prop(&ipc, "ip") {
            if ip == "dhcp" {
                s.push_str(&format!("{i}- type: dhcp4\n"));
            } else {
                let (addr, mask) = split_ip4(ip);
                s.push_str(&format!(
                    "{i}- type: static\n{i}  address: '{addr}'\n{i}  netmask: '{mask}'\n"
                ));
                if let Some(gw) = prop(&ipc, "gw") {
                    s.push_str(&format!("{i}  gateway: '{gw}'\n"));
                }
            }
        }
        if let Some(ip6) = prop(&ipc, "ip6") {
            match ip6 {
                "dhcp" => s.push_str(&format!("{i}- type: dhcp6\n")),
                "auto" => s.push_str(&format!("{i}- type: ipv6_slaac\n")),
                _ => {
                    s.push_str(&format!("{i}- type: static6\n{i}  address: '{ip6}'\n"));
                    if let Some(gw) = prop(&ipc, "gw6") {
                        s.push_str(&format!("{i}  gateway: '{gw}'\n"));
                    }
                }
            }
        }
    }
    let (search, servers) = dns(conf, host);
    s.push_str("    - type: nameserver\n");
    if !servers.is_empty() {
        s.push_str("      address:\n");
        for n in &servers {
            s.push_str(&format!("      - '{n}'\n"));
        }
    }
    if !search.is_empty() {
        s.push_str("      search:\n");
        for d in &search {
            s.push_str(&format!("      - '{d}'\n"));
        }
    }
    s
}

fn configdrive2_network(conf: &BTreeMap<String, String>, host: &HostDns) -> String {
    let mut s = String::from("auto lo\niface lo inet loopback\n\n");
    let (search, servers) = dns(conf, host);
    if !servers.is_empty() {
        s.push_str(&format!("        dns_nameservers {}\n", servers.join(" ")));
    }
    if !search.is_empty() {
        s.push_str(&format!("        dns_search {}\n", search.join(" ")));
    }
    for ConfiguredNic {
        id, ipconfig: ipc, ..
    } in configured_nics(conf)
    {
        let dev = format!("eth{id}");
        s.push_str(&format!("auto {dev}\n"));
        if let Some(ip) = prop(&ipc, "ip") {
            if ip == "dhcp" {
                s.push_str(&format!("iface {dev} inet dhcp\n"));
            } else {
                let (addr, mask) = split_ip4(ip);
                s.push_str(&format!(
                    "iface {dev} inet static\n        address {addr}\n        netmask {mask}\n"
                ));
                if let Some(gw) = prop(&ipc, "gw") {
                    s.push_str(&format!("        gateway {gw}\n"));
                }
            }
        }
        if let Some(ip6) = prop(&ipc, "ip6") {
            if ip6 == "auto" || ip6 == "dhcp" {
                s.push_str(&format!("iface {dev} inet6 {ip6}\n"));
            } else {
                let (addr, mask) = ip6.split_once('/').unwrap_or((ip6, ""));
                s.push_str(&format!(
                    "iface {dev} inet6 static\n        address {addr}\n        netmask {mask}\n"
                ));
                if let Some(gw) = prop(&ipc, "gw6") {
                    s.push_str(&format!("        gateway {gw}\n"));
                }
            }
        }
    }
    s
}

impl crate::world::Site {
    /// `PUT …/cloudinit` (`vmconfig_update_cloudinit_drive`): regenerate the image from the
    /// current config, so nothing differs from it any more. A VM without a cloud-init
    /// drive is left alone; a locked VM is refused.
    pub fn regenerate_cloudinit(&mut self, node: &str, vmid: u32) -> Result<(), PveError> {
        let vm = self.vm_on(node, vmid)?;
        if let Some(l) = &vm.lock {
            return Err(PveError::die(format!("VM is locked ({l})")));
        }
        if !has_drive(vm) {
            return Ok(());
        }
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.cloudinit.clear();
        }
        self.write_cloudinit_drives(node, vmid)
            .map_err(PveError::die)?;
        Ok(())
    }

    /// The resolver settings of a node (see the module docs).
    pub fn host_dns(&self, node: &str) -> HostDns {
        let nameservers = self
            .nodes
            .get(node)
            .and_then(|n| n.bridges.iter().find_map(|b| b.gateway.clone()))
            .into_iter()
            .collect();
        HostDns {
            search: None,
            nameservers,
        }
    }
}

/// Whether the VM has a cloud-init drive (`vm-VMID-cloudinit` on some storage).
pub fn has_drive(vm: &Vm) -> bool {
    let name = format!("vm-{}-cloudinit", vm.vmid);
    vm.config
        .iter()
        .filter(|(k, _)| super::model::is_disk_key(k))
        .any(|(_, v)| {
            prop(&split_props(v, "file"), "file").is_some_and(|f| f.contains(name.as_str()))
        })
}

#[cfg(test)]
#[path = "cloudinit_tests.rs"]
mod tests;
