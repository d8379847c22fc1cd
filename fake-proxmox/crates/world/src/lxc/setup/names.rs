//! The names PVE writes into a container (`PVE::LXC::Setup::Base`): `/etc/hostname`, the
//! host's line in `/etc/hosts` (`update_etc_hosts`), `/etc/resolv.conf` (`set_dns`), and
//! root's `authorized_keys` (`set_user_authorized_ssh_keys`).

use std::collections::BTreeMap;

use super::sections::{Place, has_section, modify, remove_sections};
use super::{Setup, SetupError};
use crate::lxc::model::NetConf;

/// The host's `/etc/resolv.conf` as PVE reads it (`search`, the first three nameservers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostDns {
    /// `search` domains, if set.
    pub search: Option<String>,
    /// Nameserver addresses (at most three).
    pub nameservers: Vec<String>,
}

impl HostDns {
    /// Parse a `resolv.conf`.
    pub fn parse(text: &str) -> HostDns {
        let mut dns = HostDns::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("search"), Some(_)) => {
                    let rest: Vec<&str> = line.split_whitespace().skip(1).collect();
                    dns.search = Some(rest.join(" "));
                }
                (Some("nameserver"), Some(ns)) if dns.nameservers.len() < 3 => {
                    dns.nameservers.push(ns.to_string());
                }
                _ => {}
            }
        }
        dns
    }
}

/// `PVE::Tools::split_list`: items separated by commas, semicolons or white space.
fn split_list(s: &str) -> Vec<&str> {
    s.split([',', ';', ' ', '\t', '\n'])
        .filter(|p| !p.is_empty())
        .collect()
}

/// `get_primary_ips`: `net0`'s static IPv4 address, else its static IPv6 one.
fn primary_ip(config: &BTreeMap<String, String>) -> Option<String> {
    let net = NetConf::parse(config.get("net0")?);
    let strip = |v: &str| v.split('/').next().unwrap_or(v).to_string();
    let v4 = net
        .get("ip")
        .filter(|ip| !matches!(*ip, "dhcp" | "manual"))
        .map(strip);
    let v6 = net
        .get("ip6")
        .filter(|ip| !matches!(*ip, "auto" | "dhcp" | "manual"))
        .map(strip);
    v4.or(v6).filter(|ip| !ip.is_empty())
}

/// Whether a line of `data` starts (after blanks) with `prefix` and then a blank.
fn has_entry(data: &str, prefix: &str) -> bool {
    data.lines().any(|l| {
        l.trim_start_matches([' ', '\t'])
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with([' ', '\t']))
    })
}

impl Setup<'_> {
    /// `lookup_dns_conf`: the config's `searchdomain`/`nameserver`, else the host's.
    fn dns(&self) -> (Option<String>, String) {
        let search = self
            .config
            .get("searchdomain")
            .cloned()
            .or_else(|| self.host_dns.search.clone());
        let nameserver = self
            .config
            .get("nameserver")
            .cloned()
            .unwrap_or_else(|| self.host_dns.nameservers.join(" "));
        (search, nameserver)
    }

    /// `set_hostname`: the host's line in `/etc/hosts`, then `/etc/hostname`.
    pub(super) fn set_hostname(&mut self) {
        let hostname = self
            .config
            .get("hostname")
            .filter(|h| !h.is_empty())
            .cloned()
            .unwrap_or_else(|| "localhost".into());
        let namepart = hostname.split('.').next().unwrap_or("").to_string();
        let (search, _) = self.dns();
        self.update_etc_hosts(primary_ip(self.config), &hostname, &namepart, search);
        self.set_contents("/etc/hostname", format!("{namepart}\n"), 0o644);
    }

    fn update_etc_hosts(
        &mut self,
        hostip: Option<String>,
        name: &str,
        namepart: &str,
        search: Option<String>,
    ) {
        const HOSTS: &str = "/etc/hosts";
        if self.ignored(HOSTS) {
            return;
        }
        let all_names = if name.contains('.') {
            format!("{name} {namepart}")
        } else {
            let mut names: Vec<String> = split_list(search.as_deref().unwrap_or(""))
                .into_iter()
                .map(|d| format!("{name}.{d}"))
                .collect();
            names.push(name.to_string());
            names.join(" ")
        };
        let lo4 = "127.0.0.1 localhost.localnet localhost\n";
        let lo6 = "::1 localhost.localnet localhost\n";
        let mut section = String::new();
        match self.read(HOSTS) {
            Some(data) => {
                let own = remove_sections(&data);
                if !has_entry(&own, "127.0.0.1") {
                    section.push_str(lo4);
                }
                if !has_entry(&own, "::1") {
                    section.push_str(lo6);
                }
            }
            None => {
                section.push_str(lo4);
                section.push_str(lo6);
            }
        }
        match hostip {
            Some(ip) => section.push_str(&format!("{ip} {all_names}\n")),
            None if namepart != "localhost" => {
                section.push_str(&format!("127.0.1.1 {all_names}\n"));
            }
            None => section.push_str(&format!("127.0.1.1 {namepart}\n")),
        }
        self.modify_file(HOSTS, &section, Place::Append, 0o644);
    }

    /// `set_dns`: `/etc/resolv.conf` holds PVE's section alone.
    pub(super) fn set_dns(&mut self) {
        let (search, nameserver) = self.dns();
        let mut data = String::new();
        if let Some(s) = search.filter(|s| !s.is_empty()) {
            data.push_str(&format!("search {}\n", split_list(&s).join(" ")));
        }
        for ns in split_list(&nameserver) {
            data.push_str(&format!("nameserver {ns}\n"));
        }
        self.modify_file("/etc/resolv.conf", &data, Place::Replace, 0o644);
    }

    /// `set_user_authorized_ssh_keys` for root: its home from `/etc/passwd`, `.ssh` made,
    /// the keys in PVE's section of `authorized_keys`.
    pub(super) fn set_root_keys(&mut self, keys: &str) -> Result<(), SetupError> {
        let home = match self.read("/etc/passwd") {
            None => "/root/".to_string(),
            Some(passwd) => passwd
                .lines()
                .find_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    (f.len() >= 7 && f[0] == "root").then(|| f[5].to_string())
                })
                .unwrap_or_default(),
        };
        if !self.root.is_dir(&home) {
            return Err(SetupError(format!(
                "home directory '{home}' of root does not exist!"
            )));
        }
        let ssh = format!("{}/.ssh", home.trim_end_matches('/'));
        if !self.root.is_dir(&ssh) {
            self.make_dir(&ssh, 0o700);
        }
        self.modify_file(
            &format!("{ssh}/authorized_keys"),
            keys,
            Place::Append,
            0o700,
        );
        Ok(())
    }

    /// `ct_modify_file`: PVE's section of `path` set to `data`.
    fn modify_file(&mut self, path: &str, data: &str, place: Place, mode: u32) {
        if self.ignored(path) {
            return;
        }
        let old = self.read(path);
        if let Some(new) = modify(old.as_deref(), data, place) {
            // Rewriting an existing section, PVE does not pass its permissions on.
            let mode = if old.as_deref().is_some_and(has_section) {
                0o644
            } else {
                mode
            };
            self.set_contents(path, new, mode);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_resolv_conf_gives_search_and_three_nameservers() {
        let dns = HostDns::parse(
            "# comment\nsearch example.com lab\nnameserver 1.1.1.1\nnameserver 2.2.2.2\nnameserver 3.3.3.3\nnameserver 4.4.4.4\n",
        );
        assert_eq!(dns.search.as_deref(), Some("example.com lab"));
        assert_eq!(dns.nameservers, ["1.1.1.1", "2.2.2.2", "3.3.3.3"]);
    }

    #[test]
    fn the_primary_address_is_net0s_static_one() {
        let c = |v: &str| BTreeMap::from([("net0".to_string(), v.to_string())]);
        assert_eq!(
            primary_ip(&c("name=eth0,ip=10.0.0.5/24,ip6=fd00::5/64")).as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(
            primary_ip(&c("name=eth0,ip=dhcp,ip6=fd00::5/64")).as_deref(),
            Some("fd00::5")
        );
        assert_eq!(primary_ip(&c("name=eth0,ip=dhcp,ip6=auto")), None);
    }
}
