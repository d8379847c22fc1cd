//! Firewall config files as pve-firewall reads and writes them (`generic_fw_config_parser`,
//! `save_vmfw_conf`): `[OPTIONS]`, `[ALIASES]`, `[IPSET name] # comment`, `[RULES]` and,
//! in `cluster.fw`, `[group name]`. Every change the API makes is saved and read back, as
//! PVE does, so what PVE normalises on the way (lower-case ipset and alias keys, sorted
//! ipset entries, a dropped `/32`, an alias' `ipversion`) is normalised here too.

use std::collections::BTreeMap;

use super::addr;
use super::rule::{Rule, Scope, truthy};

// The named objects rules refer to live below both the parser and the rule checks.
pub use super::objects::{Alias, IpsetEntry};

/// A parsed firewall config file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FwConf {
    /// Option values as the parser types them (booleans as `0`/`1`).
    pub options: BTreeMap<String, String>,
    /// By lower-case name.
    pub aliases: BTreeMap<String, Alias>,
    /// By name (lower case once read back).
    pub ipset: BTreeMap<String, Vec<IpsetEntry>>,
    /// `[IPSET name] # comment`: each ipset's comment, by name.
    pub ipset_comments: BTreeMap<String, String>,
    /// `[RULES]` in file order.
    pub rules: Vec<Rule>,
    /// `cluster.fw` only: security groups by name, with their comments.
    pub groups: BTreeMap<String, Option<String>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Options,
    Aliases,
    Ipset,
    Rules,
    Group,
}

/// `[name] # comment` headers: the section keyword, its argument and comment.
fn header(line: &str) -> Option<(String, Option<&str>, Option<String>)> {
    let rest = line.strip_prefix('[')?;
    let close = rest.find(']')?;
    let inner = &rest[..close];
    let after = rest[close + 1..].trim();
    let comment = match after.strip_prefix('#') {
        Some(c) => Some(c.trim().to_string()),
        None if after.is_empty() => None,
        None => return None,
    };
    let mut words = inner.split_whitespace();
    let kw = words.next()?.to_lowercase();
    let arg = words.next();
    if words.next().is_some() {
        return None;
    }
    Some((kw, arg, comment))
}

impl FwConf {
    /// A guest's `<vmid>.fw`, its rules verified against `cluster` (bad lines skipped, as
    /// PVE skips them with a warning).
    pub fn parse_guest(text: &str, cluster: &FwConf) -> FwConf {
        Self::parse(text, Some(cluster))
    }

    /// `cluster.fw`: options, aliases, ipsets and the names of its security groups (its own
    /// rules and the groups' rules are not modelled).
    pub fn parse_cluster(text: &str) -> FwConf {
        Self::parse(text, None)
    }

    fn parse(text: &str, cluster: Option<&FwConf>) -> FwConf {
        let mut conf = FwConf::default();
        let mut section = None;
        let mut current = String::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((kw, arg, comment)) = header(line) {
                match (kw.as_str(), arg) {
                    ("options", None) => section = Some(Section::Options),
                    ("aliases", None) => section = Some(Section::Aliases),
                    ("rules", None) => section = Some(Section::Rules),
                    ("ipset", Some(name)) if addr::is_name(name) && name.len() <= 64 => {
                        current = name.to_lowercase();
                        conf.ipset.insert(current.clone(), Vec::new());
                        if let Some(c) = comment.filter(|c| !c.is_empty()) {
                            conf.ipset_comments.insert(current.clone(), c);
                        }
                        section = Some(Section::Ipset);
                    }
                    ("group", Some(name))
                        if cluster.is_none() && addr::is_name(name) && name.len() <= 18 =>
                    {
                        current = name.to_lowercase();
                        conf.groups
                            .insert(current.clone(), comment.filter(|c| !c.is_empty()));
                        section = Some(Section::Group);
                    }
                    _ => section = None,
                }
                continue;
            }
            match section {
                Some(Section::Options) => conf.parse_option(line, cluster.is_some()),
                Some(Section::Aliases) => conf.parse_alias(line),
                Some(Section::Ipset) => conf.parse_ipset_entry(&current, line, cluster),
                Some(Section::Rules) => {
                    if let Some(cluster) = cluster {
                        conf.parse_rule(line, cluster);
                    }
                }
                Some(Section::Group) | None => {}
            }
        }
        conf
    }

    /// `parse_vmfw_option` (a guest) or the option kept as written (the cluster).
    fn parse_option(&mut self, line: &str, guest: bool) {
        let Some((key, value)) = line.split_once(':') else {
            return;
        };
        let (key, value) = (key.trim().to_lowercase(), value.trim());
        if !guest {
            self.options.insert(key, value.to_string());
            return;
        }
        let parsed = match key.as_str() {
            "enable" | "dhcp" | "ndp" | "radv" | "macfilter" | "ipfilter" | "ips"
                if matches!(value, "0" | "1") =>
            {
                value.to_string()
            }
            "log_level_in" | "log_level_out" => value.to_lowercase(),
            "policy_in" | "policy_out"
                if matches!(value.to_uppercase().as_str(), "ACCEPT" | "DROP" | "REJECT") =>
            {
                value.to_uppercase()
            }
            _ => return,
        };
        self.options.insert(key, parsed);
    }

    /// `parse_alias`: `name cidr # comment`.
    fn parse_alias(&mut self, line: &str) {
        let (line, comment) = match line.split_once('#') {
            Some((l, c)) => (l.trim(), Some(c.trim().to_string())),
            None => (line, None),
        };
        let mut words = line.split_whitespace();
        let (Some(name), Some(cidr), None) = (words.next(), words.next(), words.next()) else {
            return;
        };
        let Ok((cidr, ipversion)) = addr::parse_ip_or_cidr(cidr) else {
            return;
        };
        self.aliases.insert(
            name.to_lowercase(),
            Alias {
                name: name.to_string(),
                cidr,
                ipversion: Some(ipversion),
                comment: comment.filter(|c| truthy(Some(c))),
            },
        );
    }

    fn parse_ipset_entry(&mut self, set: &str, line: &str, cluster: Option<&FwConf>) {
        let (line, comment) = match line.split_once('#') {
            Some((l, c)) => (l.trim(), Some(c.trim().to_string())),
            None => (line, None),
        };
        let (nomatch, cidr) = match line.strip_prefix('!') {
            Some(c) => (true, c.trim()),
            None => (false, line),
        };
        let mut errors = BTreeMap::new();
        let mut cidr = cidr.to_string();
        let checked = if let Some((scope, alias)) = addr::alias_ref(&cidr) {
            self.resolve_alias(cluster, alias, scope).map(|_| ())
        } else {
            addr::parse_ip_or_cidr(&cidr)
                .map(|(c, _)| cidr = c)
                .map_err(|e| e.trim_end().to_string())
        };
        let entries = self.ipset.entry(set.to_string()).or_default();
        let checked = checked.and_then(|()| {
            if entries.iter().any(|e| e.cidr == cidr) {
                Err(format!("duplicate ipset entry for '{cidr}'"))
            } else {
                Ok(())
            }
        });
        if let Err(e) = checked {
            errors.insert("cidr".to_string(), e);
        }
        if cidr
            .rsplit_once('/')
            .is_some_and(|(_, l)| !l.is_empty() && l.bytes().all(|b| b == b'0'))
        {
            errors.insert(
                "cidr".to_string(),
                "a zero prefix is not allowed in ipset entries\n".to_string(),
            );
        }
        entries.push(IpsetEntry {
            cidr,
            nomatch,
            comment: comment.filter(|c| truthy(Some(c))),
            errors,
        });
    }

    /// `resolve_alias`: the guest's alias (unless `dc/`), else the cluster's (unless
    /// `guest/`). On the cluster level the cluster's own aliases are the only ones.
    pub fn resolve_alias<'a>(
        &'a self,
        cluster: Option<&'a FwConf>,
        name: &str,
        scope: &str,
    ) -> Result<&'a Alias, String> {
        let (cluster_conf, local) = match cluster {
            Some(c) => (c, Some(self)),
            None => (self, None),
        };
        let key = name.to_lowercase();
        let mut found = None;
        if scope != "dc/" {
            found = local.and_then(|l| l.aliases.get(&key));
        }
        if scope != "guest/" && found.is_none() {
            found = cluster_conf.aliases.get(&key);
        }
        found.ok_or_else(|| format!("no such alias '{name}'"))
    }

    fn parse_rule(&mut self, line: &str, cluster: &FwConf) {
        let Ok(mut rule) = Rule::parse(line) else {
            return;
        };
        let scope = Scope {
            cluster_aliases: &cluster.aliases,
            cluster_ipsets: &cluster.ipset,
            aliases: &self.aliases,
            ipsets: &self.ipset,
        };
        if rule.verify(&scope, false).is_ok() {
            self.rules.push(rule);
        }
    }

    /// The file `save_vmfw_conf` writes; empty when there is nothing to keep (PVE then
    /// removes the file).
    pub fn format(&self) -> String {
        let mut raw = String::new();
        if !self.options.is_empty() {
            raw.push_str("[OPTIONS]\n\n");
            for (k, v) in &self.options {
                raw.push_str(&format!("{k}: {v}\n"));
            }
            raw.push('\n');
        }
        if !self.aliases.is_empty() {
            raw.push_str("[ALIASES]\n\n");
            for a in self.aliases.values() {
                raw.push_str(&format!("{} {}", a.name, a.cidr));
                push_comment(&mut raw, a.comment.as_deref());
                raw.push('\n');
            }
            raw.push('\n');
        }
        for (name, entries) in &self.ipset {
            match self.ipset_comments.get(name).filter(|c| truthy(Some(c))) {
                Some(c) => raw.push_str(&format!("[IPSET {name}] # {c}\n\n")),
                None => raw.push_str(&format!("[IPSET {name}]\n\n")),
            }
            // Entries by CIDR, the first of duplicates kept.
            let mut by_cidr: BTreeMap<&str, &IpsetEntry> = BTreeMap::new();
            for e in entries {
                by_cidr.entry(e.cidr.as_str()).or_insert(e);
            }
            for e in by_cidr.values() {
                if e.nomatch {
                    raw.push('!');
                }
                raw.push_str(&e.cidr);
                push_comment(&mut raw, e.comment.as_deref());
                raw.push('\n');
            }
            raw.push('\n');
        }
        if !self.rules.is_empty() {
            raw.push_str("[RULES]\n\n");
            for r in &self.rules {
                raw.push_str(&r.line());
                raw.push('\n');
            }
            raw.push('\n');
        }
        raw
    }
}

fn push_comment(raw: &mut String, comment: Option<&str>) {
    if let Some(c) = comment
        && truthy(Some(c))
        && !c.trim().is_empty()
    {
        raw.push_str(&format!(" # {c}"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_guest_file_reads_back_as_written() {
        let cluster = FwConf::parse_cluster("[ALIASES]\n\nOffice 192.0.2.0/24 # hq\n");
        let text = "[OPTIONS]\n\nenable: 1\npolicy_in: DROP\n\n[ALIASES]\n\nweb 10.0.0.5/32\n\n\
                    [IPSET Admins] # ops\n\n10.0.0.0/24\n!10.0.0.9\n\n[RULES]\n\n\
                    IN ACCEPT -source office -p tcp -dport 22\nIN ACCEPT -source +missing\n";
        let conf = FwConf::parse_guest(text, &cluster);
        assert_eq!(conf.options["enable"], "1");
        assert_eq!(conf.aliases["web"].cidr, "10.0.0.5");
        assert_eq!(conf.aliases["web"].ipversion, Some(4));
        assert_eq!(conf.ipset["admins"].len(), 2);
        assert_eq!(conf.ipset_comments["admins"], "ops");
        assert_eq!(conf.rules.len(), 2);
        assert_eq!(conf.rules[0].get("ipversion"), Some("4"));
        assert_eq!(conf.rules[1].errors["source"], "no such ipset 'missing'");
        let again = FwConf::parse_guest(&conf.format(), &cluster);
        assert_eq!(again, conf);
        assert!(FwConf::default().format().is_empty());
    }
}
