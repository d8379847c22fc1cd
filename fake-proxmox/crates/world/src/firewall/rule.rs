//! One firewall rule: its line in the config file (`parse_fw_rule`, `$format_rules`) and
//! PVE's `verify_rule` for a VM's rule set, with its error texts.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::addr::{self, NAME_PATTERN};
use super::formats::{self, ICMP_TYPES, ICMPV6_TYPES};
use super::macros;
use super::objects::{Alias, IpsetEntry};

/// The properties a rule has in the API (`$rule_properties`), `pos` and `digest` included.
pub const PROPERTIES: &[&str] = &[
    "pos",
    "digest",
    "type",
    "action",
    "macro",
    "iface",
    "source",
    "dest",
    "proto",
    "enable",
    "log",
    "sport",
    "dport",
    "comment",
    "icmp-type",
];

/// Fields PVE's parser types as integers.
pub const INTEGER_FIELDS: &[&str] = &["enable", "ipversion", "pos"];

/// A rule as PVE's parser leaves it: the line's fields (`type`, `action`, `macro`, `iface`,
/// `source`, `dest`, `proto`, `dport`, `sport`, `log`, `icmp-type`, `comment`), `enable`
/// as 0/1, the `ipversion` verification found, and its errors (a rule read back that no
/// longer verifies, e.g. naming a deleted alias, keeps them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    /// The rule's fields by PVE name (`type`, `action`, `dport`, ...), values as text.
    pub f: BTreeMap<String, String>,
    /// Why the rule does not verify, by parameter (empty when it does).
    pub errors: BTreeMap<String, String>,
}

/// Perl's truth of a string: neither empty nor `0`.
pub fn truthy(s: Option<&str>) -> bool {
    s.is_some_and(|s| !s.is_empty() && s != "0")
}

/// What a rule may refer to: the cluster's aliases and ipsets, and the guest's own.
pub struct Scope<'a> {
    /// The cluster's aliases (`cluster.fw`), by lower-case name.
    pub cluster_aliases: &'a BTreeMap<String, Alias>,
    /// The cluster's ipsets, by name.
    pub cluster_ipsets: &'a BTreeMap<String, Vec<IpsetEntry>>,
    /// The aliases of the rule's own file (a guest's or node's; at cluster level, the cluster's).
    pub aliases: &'a BTreeMap<String, Alias>,
    /// The ipsets of the rule's own file (a guest's or node's; at cluster level, the cluster's).
    pub ipsets: &'a BTreeMap<String, Vec<IpsetEntry>>,
}

/// Why a rule does not verify: a parameter error (`raise_param_exc`, 400) or a plain `die`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A 400 parameter error: parameter name, message.
    Param(String, String),
    /// A plain error message (500).
    Die(String),
}

static IFACE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z][a-zA-Z0-9_]{1,20}([:\.]\d+)?$").ok());
static GROUP_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(&format!("^{NAME_PATTERN}$")).ok());
static IPSET_REF: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(&format!(r"^\+(guest/|dc/|sdn/)?({NAME_PATTERN})$")).ok());
static MACRO_ACTION: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(\S+)\((ACCEPT|DROP|REJECT)\)$").ok());

fn matches(re: &LazyLock<Option<Regex>>, s: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(s))
}

const LOG_LEVELS: &[&str] = &[
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug", "nolog",
];

impl Rule {
    /// A field of the rule by PVE name, if set.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.f.get(k).map(String::as_str)
    }

    fn is(&self, k: &str) -> bool {
        truthy(self.get(k))
    }

    /// `parse_fw_rule` of one line of a `[RULES]` section (before verification).
    pub fn parse(line: &str) -> Result<Rule, String> {
        let mut rule = Rule::default();
        let mut line = line.to_string();
        if let Some(hash) = line.find('#') {
            rule.f
                .insert("comment".into(), line[hash + 1..].trim().to_string());
            line.truncate(hash);
        }
        let disabled = line.starts_with('|');
        if disabled {
            line.remove(0);
        }
        rule.f
            .insert("enable".into(), if disabled { "0" } else { "1" }.into());
        let mut words = line.split_whitespace();
        let (Some(ty), Some(action)) = (words.next(), words.next()) else {
            return Err(format!("unable to parse rule: {line}"));
        };
        let ty = ty.to_lowercase();
        let mut action = action.to_string();
        if matches!(ty.as_str(), "in" | "out" | "forward")
            && let Some(c) = MACRO_ACTION.as_ref().and_then(|r| r.captures(&action))
        {
            let (m, a) = (c[1].to_string(), c[2].to_string());
            rule.f.insert("macro".into(), m);
            action = a;
        }
        let group = ty == "group";
        rule.f.insert("type".into(), ty);
        rule.f.insert("action".into(), action);
        let mut rest: Vec<&str> = words.collect();
        rest.reverse();
        while let Some(flag) = rest.pop() {
            let key = match flag {
                "-i" => "iface",
                _ if group => {
                    rest.push(flag);
                    break;
                }
                "-p" | "-proto" | "--proto" => "proto",
                "-dport" | "--dport" => "dport",
                "-sport" | "--sport" => "sport",
                "-source" | "--source" => "source",
                "-dest" | "--dest" => "dest",
                "-log" | "--log" => "log",
                "-icmp-type" | "--icmp-type" => "icmp-type",
                _ => {
                    rest.push(flag);
                    break;
                }
            };
            match rest.pop() {
                Some(v) if key != "log" || LOG_LEVELS.contains(&v) => {
                    rule.f.insert(key.into(), v.to_string());
                }
                other => {
                    rest.extend(other);
                    rest.push(flag);
                    break;
                }
            }
        }
        if !rest.is_empty() {
            rest.reverse();
            return Err(format!(
                "unable to parse rule parameters: {}",
                rest.join(" ")
            ));
        }
        Ok(rule)
    }

    /// The rule's line as `$format_rules` writes it (`allow_iface` as for a guest).
    pub fn line(&self) -> String {
        let mut s = String::new();
        if self.get("enable").is_some_and(|e| !truthy(Some(e))) {
            s.push('|');
        }
        let ty = self.get("type").unwrap_or_default();
        s.push_str(&ty.to_uppercase());
        let action = self.get("action").unwrap_or_default();
        match self.get("macro").filter(|_| self.is("macro")) {
            Some(m) => s.push_str(&format!(" {m}({action})")),
            None => s.push_str(&format!(" {action}")),
        }
        if self.is("iface") {
            s.push_str(&format!(" -i {}", self.get("iface").unwrap_or_default()));
        }
        if ty != "group" {
            for (key, flag) in [
                ("source", "-source"),
                ("dest", "-dest"),
                ("proto", "-p"),
                ("dport", "-dport"),
                ("sport", "-sport"),
                ("log", "-log"),
            ] {
                if self.is(key) {
                    s.push_str(&format!(" {flag} {}", self.get(key).unwrap_or_default()));
                }
            }
            if let Some(t) = self.get("icmp-type").filter(|t| !t.is_empty()) {
                s.push_str(&format!(" -icmp-type {t}"));
            }
        }
        if let Some(c) = self.get("comment")
            && truthy(Some(c))
            && !c.trim().is_empty()
        {
            s.push_str(&format!(" # {c}"));
        }
        s
    }

    /// `copy_rule_data`: every rule property the request sets; `''` or `-` removes it.
    pub fn copy_from(&mut self, params: &BTreeMap<String, String>) {
        for k in PROPERTIES {
            if let Some(v) = params.get(*k) {
                if v.is_empty() || v == "-" {
                    self.f.remove(*k);
                } else {
                    self.f.insert((*k).to_string(), v.clone());
                }
            }
        }
    }

    /// `delete_rule_properties`
    pub fn delete(&mut self, list: &[&str]) -> Result<(), Refusal> {
        for opt in list {
            if !PROPERTIES.contains(opt) {
                return Err(param("delete", format!("no such property ('{opt}')")));
            }
            if *opt == "type" || *opt == "action" {
                return Err(param(
                    "delete",
                    format!("unable to delete required property '{opt}'"),
                ));
            }
            self.f.remove(*opt);
        }
        Ok(())
    }

    /// `verify_rule` for a guest's rule (`rule_env` `vm`). `strict`: the first error is
    /// the answer (the API); otherwise errors are kept on the rule (reading the file back).
    /// A `Die` either way drops the rule when reading.
    pub fn verify(&mut self, scope: &Scope, strict: bool) -> Result<(), Refusal> {
        let mut v = Verifier {
            rule: self,
            scope,
            strict,
            errors: BTreeMap::new(),
            ipversion: None,
        };
        v.run()?;
        let (errors, ipversion) = (v.errors, v.ipversion);
        if let Some(ip) = ipversion {
            self.f.insert("ipversion".into(), ip.to_string());
        }
        self.errors = errors;
        Ok(())
    }
}

fn param(name: &str, msg: impl Into<String>) -> Refusal {
    Refusal::Param(name.to_string(), msg.into())
}

struct Verifier<'r, 's> {
    rule: &'r mut Rule,
    scope: &'s Scope<'s>,
    strict: bool,
    errors: BTreeMap<String, String>,
    ipversion: Option<u8>,
}

const MIXED: &str = "detected mixed ipv4/ipv6 addresses in rule";

impl Verifier<'_, '_> {
    fn get(&self, k: &str) -> Option<String> {
        self.rule.get(k).map(str::to_string)
    }

    fn add(&mut self, name: &str, msg: &str) -> Result<(), Refusal> {
        let msg = msg.strip_suffix('\n').unwrap_or(msg);
        if self.strict {
            return Err(param(name, msg));
        }
        self.errors
            .entry(name.to_string())
            .or_insert_with(|| msg.to_string());
        Ok(())
    }

    fn set_ip_version(&mut self, v: Option<u8>) -> Result<(), String> {
        if let Some(v) = v {
            if self.ipversion.is_some_and(|old| old != v) {
                return Err(MIXED.to_string());
            }
            self.ipversion = Some(v);
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Refusal> {
        let ty = self.get("type").filter(|t| truthy(Some(t)));
        let action = self.get("action").filter(|a| truthy(Some(a)));
        if ty.is_none() {
            self.add("type", "missing property")?;
        }
        if action.is_none() {
            self.add("action", "missing property")?;
        }
        if let Some(ty) = &ty {
            self.check_type(ty, action.as_deref())?;
        }
        if let Some(iface) = self.get("iface").filter(|i| truthy(Some(i))) {
            if !matches(&IFACE, &iface) {
                self.add(
                    "iface",
                    &format!("invalid network interface name '{iface}'"),
                )?;
            }
            if !iface
                .strip_prefix("net")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            {
                self.add("iface", "value does not match the regex pattern 'net\\d+'")?;
            }
        }
        if let Some(m) = self.get("macro").filter(|m| truthy(Some(m))) {
            match macros::preferred_name(&m) {
                Some(name) => {
                    self.rule.f.insert("macro".into(), name.to_string());
                }
                None => self.add("macro", &format!("unknown macro '{m}'"))?,
            }
        }
        let proto = self.get("proto").filter(|p| truthy(Some(p)));
        let is_icmp = proto.as_deref().is_some_and(formats::is_icmp);
        if let Some(p) = &proto {
            if let Err(e) = formats::verify_protocol(p) {
                self.add("proto", &e)?;
            }
            let family = match p.as_str() {
                "icmp" => Some(4),
                "icmpv6" | "ipv6-icmp" => Some(6),
                _ => None,
            };
            self.set_ip_version(family).map_err(Refusal::Die)?;
        }
        let p = proto.clone().unwrap_or_default();
        self.check_ports("dport", &p, proto.is_some(), is_icmp)?;
        self.check_icmp_type(&p, is_icmp)?;
        self.check_ports("sport", &p, proto.is_some(), is_icmp)?;
        for key in ["source", "dest"] {
            let Some(value) = self.get(key).filter(|v| truthy(Some(v))) else {
                continue;
            };
            let family = addr::parse_address_list(&value).and_then(|v| self.set_ip_version(v));
            if let Err(e) = family {
                self.add(key, &e)?;
            }
            self.check_reference(key, &value)?;
        }
        if let Some(m) = self.get("macro").filter(|m| truthy(Some(m)))
            && self.errors.is_empty()
        {
            self.check_macro(&m)?;
        }
        Ok(())
    }

    fn check_type(&mut self, ty: &str, action: Option<&str>) -> Result<(), Refusal> {
        if !matches!(ty, "in" | "out" | "group") {
            self.add(
                "type",
                &format!("invalid rule type '{ty}' for rule_env 'vm'"),
            )?;
        }
        match ty {
            "in" | "out" | "forward" => {
                if ty == "forward" && action == Some("REJECT") {
                    self.add("action", "cannot define REJECT rules on forward chain")?;
                }
                if let Some(a) = action
                    && !matches!(a, "ACCEPT" | "DROP" | "REJECT")
                {
                    self.add("action", &format!("unknown action '{a}'"))?;
                }
            }
            "group" => {
                if action.is_some_and(|a| !matches(&GROUP_NAME, a)) {
                    self.add("action", "invalid characters in security group name")?;
                }
            }
            _ => self.add("type", &format!("unknown rule type '{ty}'"))?,
        }
        Ok(())
    }

    fn check_ports(
        &mut self,
        key: &str,
        proto: &str,
        has_proto: bool,
        is_icmp: bool,
    ) -> Result<(), Refusal> {
        let Some(ports) = self.get(key).filter(|v| truthy(Some(v))) else {
            return Ok(());
        };
        let dport = key == "dport";
        if let Err(e) = formats::parse_ports(&ports, dport && is_icmp) {
            self.add(key, &e)?;
        }
        if !has_proto {
            self.add(
                "proto",
                &format!("missing property - '{key}' requires this property"),
            )?;
        }
        if !(formats::has_ports(proto) || dport && is_icmp) {
            self.add(key, &format!("protocol '{proto}' does not support ports"))?;
        }
        Ok(())
    }

    fn check_icmp_type(&mut self, proto: &str, is_icmp: bool) -> Result<(), Refusal> {
        let Some(t) = self.get("icmp-type").filter(|v| truthy(Some(v))) else {
            return Ok(());
        };
        if !is_icmp {
            self.add(
                "proto",
                "missing property - 'icmp-type' requires this property",
            )?;
        }
        if self.rule.is("dport") {
            self.add(
                "icmp-type",
                "'icmp-type' cannot be specified together with 'dport'",
            )?;
        }
        if proto == "icmp" && !ICMP_TYPES.contains(&t.as_str()) {
            self.add(
                "icmp-type",
                &format!("invalid icmp-type '{t}' for proto 'icmp'"),
            )?;
        } else if matches!(proto, "icmpv6" | "ipv6-icmp") && !ICMPV6_TYPES.contains(&t.as_str()) {
            self.add(
                "icmp-type",
                &format!("invalid icmp-type '{t}' for proto '{proto}'"),
            )?;
        }
        Ok(())
    }

    /// An ipset (`+name`) or alias the rule names must exist, the guest's or the cluster's
    /// (whatever scope prefix it has); an alias also gives the rule its address family.
    fn check_reference(&mut self, key: &str, value: &str) -> Result<(), Refusal> {
        let s = self.scope;
        if value.starts_with('+') {
            match IPSET_REF.as_ref().and_then(|r| r.captures(value)) {
                Some(c) => {
                    let name = &c[2];
                    if !s.cluster_ipsets.contains_key(name) && !s.ipsets.contains_key(name) {
                        self.add(key, &format!("no such ipset '{name}'"))?;
                    }
                }
                None => self.add(key, &format!("invalid ipset name '{value}'"))?,
            }
        } else if let Some((scope, alias)) = addr::alias_ref(value) {
            let alias = alias.to_lowercase();
            if !s.cluster_aliases.contains_key(&alias) && !s.aliases.contains_key(&alias) {
                self.add(key, &format!("no such alias '{value}'"))?;
            }
            let mut found = None;
            if scope != "dc/" {
                found = s.aliases.get(&alias);
            }
            if scope != "guest/" && found.is_none() {
                found = s.cluster_aliases.get(&alias);
            }
            self.set_ip_version(found.and_then(|a| a.ipversion))
                .map_err(Refusal::Die)?;
        }
        Ok(())
    }

    /// `apply_macro` in verify mode: the rule may not contradict what the macro sets.
    fn check_macro(&mut self, name: &str) -> Result<(), Refusal> {
        for t in macros::templates(name, self.ipversion) {
            for (key, set) in [("proto", t.proto), ("dport", t.dport), ("sport", t.sport)] {
                if let (Some(set), Some(own)) = (set, self.rule.get(key))
                    && own != set
                {
                    return self.add(
                        key,
                        &format!("parameter '{key}' already define in macro (value = '{set}')"),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn empty() -> BTreeMap<String, Alias> {
        BTreeMap::new()
    }

    #[test]
    fn a_line_round_trips() {
        let line = "|IN SSH(ACCEPT) -i net0 -source 10.0.0.0/8 -log info # admin access";
        let rule = Rule::parse(line).unwrap();
        assert_eq!(rule.get("macro"), Some("SSH"));
        assert_eq!(rule.get("enable"), Some("0"));
        assert_eq!(rule.get("comment"), Some("admin access"));
        assert_eq!(rule.line(), line);
        assert!(Rule::parse("IN ACCEPT -bogus 1").is_err());
    }

    #[test]
    fn verification_stops_at_the_first_error_for_the_api() {
        let (a, i) = (empty(), BTreeMap::new());
        let scope = Scope {
            cluster_aliases: &a,
            cluster_ipsets: &i,
            aliases: &a,
            ipsets: &i,
        };
        let mut r = Rule::parse("IN ACCEPT -dport 22").unwrap();
        assert_eq!(
            r.verify(&scope, true),
            Err(param(
                "proto",
                "missing property - 'dport' requires this property"
            ))
        );
        let mut r = Rule::parse("IN ssh(ACCEPT) -p udp").unwrap();
        assert_eq!(
            r.verify(&scope, true),
            Err(param(
                "proto",
                "parameter 'proto' already define in macro (value = 'tcp')"
            ))
        );
        let mut r = Rule::parse("IN ACCEPT -source +nope").unwrap();
        r.verify(&scope, false).unwrap();
        assert_eq!(r.errors["source"], "no such ipset 'nope'");
    }
}
