//! The guest firewall verbs (pve-firewall's `API2/Firewall/{VM,Rules}.pm`, whose
//! `PVE::API2::Firewall::CT` is the same code with rule environment `ct`): each one loads
//! the guest's `<vmid>.fw` and the cluster's `cluster.fw`, decides as PVE does, and saves the
//! file back. The aliases and ipsets verbs are in `sets`; the config grammar in `conf`.

use serde_json::{Map, Value};
use sha1::{Digest, Sha1};

use super::conf::{Alias, FwConf, IpsetEntry};
use super::rule::{INTEGER_FIELDS, PROPERTIES, Refusal, Rule, Scope};
use crate::guest::GuestCore;
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

pub use super::cluster::ClusterFirewall;

/// The VM options (`$vm_option_properties`) and whether each is a boolean.
pub const OPTIONS: &[(&str, bool)] = &[
    ("dhcp", true),
    ("enable", true),
    ("ipfilter", true),
    ("log_level_in", false),
    ("log_level_out", false),
    ("macfilter", true),
    ("ndp", true),
    ("policy_in", false),
    ("policy_out", false),
    ("radv", true),
];

pub(crate) const AUDIT: &str = "VM.Audit";
pub(crate) const MODIFY: &str = "VM.Config.Network";

/// `copy_list_with_digest`: the entries with the digest of all of them added to each
/// (nested values, such as a rule's `errors`, do not count).
pub fn list_with_digest(entries: Vec<Map<String, Value>>) -> (Vec<Value>, String) {
    let mut sha = Sha1::new();
    for e in &entries {
        add_to_digest(&mut sha, e);
    }
    let digest = hex::encode(sha.finalize());
    let list = entries
        .into_iter()
        .map(|mut e| {
            e.insert("digest".into(), Value::from(digest.clone()));
            Value::Object(e)
        })
        .collect();
    (list, digest)
}

/// `copy_opject_with_digest`: one object and its digest.
pub fn object_with_digest(mut object: Map<String, Value>) -> (Map<String, Value>, String) {
    let mut sha = Sha1::new();
    add_to_digest(&mut sha, &object);
    let digest = hex::encode(sha.finalize());
    object.insert("digest".into(), Value::from(digest.clone()));
    (object, digest)
}

fn add_to_digest(sha: &mut Sha1, entry: &Map<String, Value>) {
    let mut keys: Vec<&String> = entry.keys().collect();
    keys.sort();
    for k in keys {
        let text = match &entry[k] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        sha.update(format!("{k}:{text}\n").as_bytes());
    }
}

/// `assert_if_modified`
pub fn assert_unmodified(current: &str, given: Option<&str>) -> Result<(), PveError> {
    match given {
        Some(g) if !g.is_empty() && g != current => Err(PveError::die(
            "detected modified configuration - file changed by other user? Try again.",
        )),
        _ => Ok(()),
    }
}

/// A string field, typed as PVE's parser types it.
fn typed(k: &str, v: &str) -> Value {
    if INTEGER_FIELDS.contains(&k) {
        v.parse::<i64>()
            .map_or_else(|_| Value::from(v), Value::from)
    } else {
        Value::from(v)
    }
}

/// A rule as the API lists it (before `digest` and `pos`).
pub fn rule_entry(rule: &Rule) -> Map<String, Value> {
    let mut m: Map<String, Value> = rule
        .f
        .iter()
        .map(|(k, v)| (k.clone(), typed(k, v)))
        .collect();
    if !rule.errors.is_empty() {
        let errors = rule
            .errors
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        m.insert("errors".into(), Value::Object(errors));
    }
    m
}

/// An alias as a row of `GET …/firewall/aliases` (name, cidr, ipversion, comment).
pub fn alias_entry(a: &Alias) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), Value::from(a.name.clone()));
    m.insert("cidr".into(), Value::from(a.cidr.clone()));
    if let Some(v) = a.ipversion {
        m.insert("ipversion".into(), Value::from(v));
    }
    if let Some(c) = &a.comment {
        m.insert("comment".into(), Value::from(c.clone()));
    }
    m
}

/// An ipset entry as a row of `GET …/firewall/ipset/{name}` (`nomatch` and `errors` only when set).
pub fn ipset_entry(e: &IpsetEntry) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("cidr".into(), Value::from(e.cidr.clone()));
    if e.nomatch {
        m.insert("nomatch".into(), Value::from(1));
    }
    if let Some(c) = &e.comment {
        m.insert("comment".into(), Value::from(c.clone()));
    }
    if !e.errors.is_empty() {
        let errors = e
            .errors
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        m.insert("errors".into(), Value::Object(errors));
    }
    m
}

impl From<Refusal> for PveError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Param(name, msg) => PveError::param(&name, msg),
            Refusal::Die(msg) => PveError::die(msg),
        }
    }
}

/// The rule properties a request sets, as text.
fn rule_params(req: &Request) -> std::collections::BTreeMap<String, String> {
    PROPERTIES
        .iter()
        .filter_map(|k| req.p.str(k).map(|v| ((*k).to_string(), v)))
        .collect()
}

/// `pos` of the path (an integer the schema checked).
fn position(req: &Request) -> Result<usize, PveError> {
    Ok(usize::try_from(req.p.req_int("pos")?).unwrap_or(usize::MAX))
}

fn no_rule(pos: usize) -> PveError {
    PveError::die(format!("no rule at position {pos}"))
}

impl Site {
    /// The cluster's firewall config, as `load_clusterfw_conf` reads it.
    pub fn cluster_firewall(&self) -> FwConf {
        FwConf::parse_cluster(&self.firewall.cluster_fw)
    }

    /// The privilege on `/vms/{vmid}`, then the guest's firewall config (and the cluster's).
    pub(crate) fn load_firewall(
        &self,
        req: &Request,
        privilege: &str,
    ) -> Result<(FwConf, FwConf), PveError> {
        let (node, vmid) = (req.node()?, req.vmid()?);
        self.require(&req.who, &format!("/vms/{vmid}"), privilege)?;
        let guest = self.firewall_guest(req, &node, vmid)?;
        let cluster = self.cluster_firewall();
        let conf = FwConf::parse_guest(&guest.firewall, &cluster);
        Ok((cluster, conf))
    }

    /// The guest whose `<vmid>.fw` the request is about, of either kind: the file is named
    /// by the VMID alone (`load_vmfw_conf`), so a VM's is reached through the container
    /// family's path too, and any node of the path will do, as in PVE (which also answers
    /// for a VMID without a guest). Without a guest: the path family's missing config.
    pub(crate) fn firewall_guest(
        &self,
        req: &Request,
        node: &str,
        vmid: u32,
    ) -> Result<&GuestCore, PveError> {
        self.guest(vmid)
            .map(|g| g.core())
            .ok_or_else(|| crate::world::guests::no_config(req.guest_kind(), node, vmid))
    }

    /// `save_vmfw_conf`
    pub(crate) fn save_firewall(&mut self, req: &Request, conf: &FwConf) -> Result<(), PveError> {
        let vmid = req.vmid()?;
        if let Some(guest) = self.guest_core_mut(vmid) {
            guest.firewall = conf.format();
        }
        Ok(())
    }

    /// `GET …/firewall/options`
    pub fn firewall_options(&self, req: &Request) -> Result<Map<String, Value>, PveError> {
        let (_, conf) = self.load_firewall(req, AUDIT)?;
        Ok(object_with_digest(options_object(&conf)).0)
    }

    /// `PUT …/firewall/options`
    pub fn set_firewall_options(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let (_, digest) = object_with_digest(options_object(&conf));
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        if let Some(list) = req.p.str("delete") {
            for opt in crate::schema::formats::split_list(&list) {
                if !OPTIONS.iter().any(|(o, _)| *o == opt) {
                    return Err(PveError::param("delete", format!("no such option '{opt}'")));
                }
                conf.options.remove(opt);
            }
        }
        for (opt, boolean) in OPTIONS {
            let value = if *boolean {
                req.p
                    .bool(opt)
                    .map(|b| if b { "1" } else { "0" }.to_string())
            } else {
                req.p.str(opt)
            };
            if let Some(v) = value {
                conf.options.insert((*opt).to_string(), v);
            }
        }
        self.save_firewall(req, &conf)
    }

    /// `GET …/firewall/rules`: the rules in order, each with its `pos` and the digest.
    pub fn firewall_rules(&self, req: &Request) -> Result<Vec<Value>, PveError> {
        let (_, conf) = self.load_firewall(req, AUDIT)?;
        let (mut list, _) = list_with_digest(conf.rules.iter().map(rule_entry).collect());
        for (pos, rule) in list.iter_mut().enumerate() {
            if let Value::Object(m) = rule {
                m.insert("pos".into(), Value::from(pos));
            }
        }
        Ok(list)
    }

    /// `GET …/firewall/rules/{pos}`
    pub fn firewall_rule(&self, req: &Request) -> Result<Value, PveError> {
        let pos = position(req)?;
        self.firewall_rules(req)?
            .into_iter()
            .nth(pos)
            .ok_or_else(|| no_rule(pos))
    }

    /// `POST …/firewall/rules`: the new rule goes first (`pos` is not used); without
    /// `enable` it is disabled.
    pub fn create_firewall_rule(&mut self, req: &Request) -> Result<(), PveError> {
        let (cluster, mut conf) = self.load_firewall(req, MODIFY)?;
        let mut rule = Rule::default();
        rule.copy_from(&rule_params(req));
        rule.verify(&scope(&cluster, &conf), true)?;
        if !req.p.has("enable") {
            rule.f.insert("enable".into(), "0".into());
        }
        conf.rules.insert(0, rule);
        self.save_firewall(req, &conf)
    }

    /// `PUT …/firewall/rules/{pos}`: `moveto` moves the rule before the rule now at that
    /// position (after the last one when past the end) and ignores everything else;
    /// otherwise the given properties are set, `delete`d ones removed, and the rule checked.
    pub fn update_firewall_rule(&mut self, req: &Request) -> Result<(), PveError> {
        let (cluster, mut conf) = self.load_firewall(req, MODIFY)?;
        let (_, digest) = list_with_digest(conf.rules.iter().map(rule_entry).collect());
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        let pos = position(req)?;
        if pos >= conf.rules.len() {
            return Err(no_rule(pos));
        }
        let moveto = req
            .p
            .int("moveto")
            .map(|m| usize::try_from(m).unwrap_or(usize::MAX));
        match moveto {
            Some(to) if to != pos => {
                let rule = conf.rules[pos].clone();
                let mut moved = Vec::with_capacity(conf.rules.len());
                for (i, r) in conf.rules.iter().enumerate() {
                    if i == pos {
                        continue;
                    }
                    if i == to {
                        moved.push(rule.clone());
                    }
                    moved.push(r.clone());
                }
                if to >= conf.rules.len() {
                    moved.push(rule);
                }
                conf.rules = moved;
            }
            _ => {
                let mut rule = conf.rules[pos].clone();
                rule.copy_from(&rule_params(req));
                if let Some(list) = req.p.str("delete") {
                    let opts: Vec<&str> = crate::schema::formats::split_list(&list).collect();
                    rule.delete(&opts)?;
                }
                rule.verify(&scope(&cluster, &conf), true)?;
                conf.rules[pos] = rule;
            }
        }
        self.save_firewall(req, &conf)
    }

    /// `DELETE …/firewall/rules/{pos}`
    pub fn delete_firewall_rule(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let (_, digest) = list_with_digest(conf.rules.iter().map(rule_entry).collect());
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        let pos = position(req)?;
        if pos >= conf.rules.len() {
            return Err(no_rule(pos));
        }
        conf.rules.remove(pos);
        self.save_firewall(req, &conf)
    }

    /// `GET …/firewall/refs`: what `source`/`dest` may name, the cluster's (`dc`) then
    /// the guest's (`guest`), ipsets before aliases, optionally of one `type`.
    pub fn firewall_refs(&self, req: &Request) -> Result<Vec<Value>, PveError> {
        let (cluster, conf) = self.load_firewall(req, AUDIT)?;
        let kind = req.p.str("type");
        let mut refs = collect_refs(&cluster, kind.as_deref(), "dc");
        refs.extend(collect_refs(&conf, kind.as_deref(), "guest"));
        Ok(refs)
    }
}

fn scope<'a>(cluster: &'a FwConf, conf: &'a FwConf) -> Scope<'a> {
    Scope {
        cluster_aliases: &cluster.aliases,
        cluster_ipsets: &cluster.ipset,
        aliases: &conf.aliases,
        ipsets: &conf.ipset,
    }
}

/// The options as the parser types them: booleans as integers.
fn options_object(conf: &FwConf) -> Map<String, Value> {
    conf.options
        .iter()
        .map(|(k, v)| {
            let boolean = OPTIONS.iter().any(|(o, b)| o == k && *b);
            let value = match v.parse::<i64>() {
                Ok(n) if boolean => Value::from(n),
                _ => Value::from(v.clone()),
            };
            (k.clone(), value)
        })
        .collect()
}

/// `collect_refs`
fn collect_refs(conf: &FwConf, kind: Option<&str>, scope: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let entry = |kind: &str, name: &str, r: String, comment: Option<&String>| {
        let mut m = Map::new();
        m.insert("type".into(), Value::from(kind));
        m.insert("name".into(), Value::from(name));
        m.insert("ref".into(), Value::from(r));
        m.insert("scope".into(), Value::from(scope));
        if let Some(c) = comment.filter(|c| !c.is_empty() && c.as_str() != "0") {
            m.insert("comment".into(), Value::from(c.clone()));
        }
        Value::Object(m)
    };
    if kind.is_none_or(|k| k == "ipset") {
        for name in conf.ipset.keys() {
            out.push(entry(
                "ipset",
                name,
                format!("+{name}"),
                conf.ipset_comments.get(name),
            ));
        }
    }
    if kind.is_none_or(|k| k == "alias") {
        for (name, a) in &conf.aliases {
            out.push(entry("alias", name, name.clone(), a.comment.as_ref()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_digest_covers_every_plain_field_in_order() {
        let mut a = Map::new();
        a.insert("name".into(), Value::from("web"));
        a.insert("cidr".into(), Value::from("10.0.0.5"));
        let (list, digest) = list_with_digest(vec![a.clone()]);
        let expected = hex::encode(Sha1::digest(b"cidr:10.0.0.5\nname:web\n"));
        assert_eq!(digest, expected);
        assert_eq!(list[0]["digest"], Value::from(expected));
        a.insert("errors".into(), serde_json::json!({"cidr": "x"}));
        assert_eq!(list_with_digest(vec![a]).1, digest);
    }

    #[test]
    fn an_unmodified_or_absent_digest_passes() {
        assert!(assert_unmodified("abc", None).is_ok());
        assert!(assert_unmodified("abc", Some("abc")).is_ok());
        assert_eq!(
            assert_unmodified("abc", Some("def")).unwrap_err().status,
            500
        );
    }
}
