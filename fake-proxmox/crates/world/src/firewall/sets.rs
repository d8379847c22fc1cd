//! A VM's firewall aliases and ipsets (pve-firewall's `API2/Firewall/{Aliases,IPSet}.pm`).

use serde_json::{Map, Value};

use super::addr;
use super::conf::{Alias, IpsetEntry};
use super::model::{AUDIT, MODIFY, alias_entry, assert_unmodified, ipset_entry, list_with_digest};
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

fn no_such_ipset(name: &str) -> PveError {
    PveError::die(format!("no such IPSet '{name}'"))
}

impl Site {
    /// `GET …/firewall/aliases`: by name, each with the list's digest.
    pub fn firewall_aliases(&self, req: &Request) -> Result<Vec<Value>, PveError> {
        let (_, conf) = self.load_firewall(req, AUDIT)?;
        Ok(list_with_digest(conf.aliases.values().map(alias_entry).collect()).0)
    }

    /// `GET …/firewall/aliases/{name}` (no digest).
    pub fn firewall_alias(&self, req: &Request) -> Result<Map<String, Value>, PveError> {
        let (_, conf) = self.load_firewall(req, AUDIT)?;
        let name = req.p.req_str("name")?;
        conf.aliases
            .get(&name.to_lowercase())
            .map(alias_entry)
            .ok_or_else(|| PveError::param("name", "no such alias"))
    }

    /// `POST …/firewall/aliases`
    pub fn create_firewall_alias(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let name = req.p.req_str("name")?;
        let key = name.to_lowercase();
        if conf.aliases.contains_key(&key) {
            return Err(PveError::param(
                "name",
                format!("alias '{name}' already exists"),
            ));
        }
        conf.aliases.insert(key, new_alias(req, name)?);
        self.save_firewall(req, &conf)
    }

    /// `PUT …/firewall/aliases/{name}`: `cidr` and `comment` replace the old ones (no
    /// `comment` drops it); `rename` gives it another name.
    pub fn update_firewall_alias(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let (_, digest) = list_with_digest(conf.aliases.values().map(alias_entry).collect());
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        let name = req.p.req_str("name")?;
        let key = name.to_lowercase();
        if !conf.aliases.contains_key(&key) {
            return Err(PveError::param("name", "no such alias"));
        }
        let mut alias = new_alias(req, name)?;
        if let Some(rename) = req.p.str("rename").filter(|r| !r.is_empty())
            && rename.to_lowercase() != key
        {
            if conf.aliases.contains_key(&rename.to_lowercase()) {
                return Err(PveError::param(
                    "name",
                    format!("alias '{rename}' already exists"),
                ));
            }
            conf.aliases.remove(&key);
            let new_key = rename.to_lowercase();
            alias.name = rename;
            conf.aliases.insert(new_key, alias);
        } else {
            conf.aliases.insert(key, alias);
        }
        self.save_firewall(req, &conf)
    }

    /// `DELETE …/firewall/aliases/{name}` (a missing alias is no error).
    pub fn delete_firewall_alias(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let (_, digest) = list_with_digest(conf.aliases.values().map(alias_entry).collect());
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        conf.aliases.remove(&req.p.req_str("name")?.to_lowercase());
        self.save_firewall(req, &conf)
    }

    /// `GET …/firewall/ipset`: the sets by name with their comments and the digest.
    pub fn firewall_ipsets(&self, req: &Request) -> Result<Vec<Value>, PveError> {
        let (_, conf) = self.load_firewall(req, AUDIT)?;
        Ok(ipset_list(&conf).0)
    }

    /// `POST …/firewall/ipset`: a new empty set, or with `rename` the set `rename` under
    /// the new `name` (the same name updates its comment).
    pub fn create_firewall_ipset(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let name = req.p.req_str("name")?;
        let comment = req.p.str("comment");
        if let Some(rename) = req.p.str("rename").filter(|r| !r.is_empty()) {
            assert_unmodified(&ipset_list(&conf).1, req.p.str("digest").as_deref())?;
            if !conf.ipset.contains_key(&rename) {
                return Err(PveError::param(
                    "name",
                    format!("IPSet '{rename}' does not exist"),
                ));
            }
            if conf.ipset.contains_key(&name) && name != rename {
                return Err(PveError::param(
                    "name",
                    format!("IPSet '{name}' does already exist"),
                ));
            }
            let entries = conf.ipset.remove(&rename).unwrap_or_default();
            conf.ipset.insert(name.clone(), entries);
            if let Some(old) = conf.ipset_comments.remove(&rename) {
                conf.ipset_comments.insert(name.clone(), old);
            }
        } else {
            if conf.ipset.contains_key(&name) {
                return Err(PveError::param(
                    "name",
                    format!("IPSet '{name}' already exists"),
                ));
            }
            conf.ipset.insert(name.clone(), Vec::new());
        }
        if let Some(c) = comment {
            conf.ipset_comments.insert(name, c);
        }
        self.save_firewall(req, &conf)
    }

    /// `GET …/firewall/ipset/{name}`: the set's entries with their digest.
    pub fn firewall_ipset(&self, req: &Request) -> Result<Vec<Value>, PveError> {
        let (_, conf) = self.load_firewall(req, AUDIT)?;
        let name = req.p.req_str("name")?;
        let set = conf.ipset.get(&name).ok_or_else(|| no_such_ipset(&name))?;
        Ok(list_with_digest(set.iter().map(ipset_entry).collect()).0)
    }

    /// `DELETE …/firewall/ipset/{name}`: only an empty set, unless `force`.
    pub fn delete_firewall_ipset(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let name = req.p.req_str("name")?;
        let set = conf.ipset.get(&name).ok_or_else(|| no_such_ipset(&name))?;
        if !set.is_empty() && !req.p.flag("force") {
            return Err(PveError::die(format!("IPSet '{name}' is not empty")));
        }
        conf.ipset.remove(&name);
        conf.ipset_comments.remove(&name);
        self.save_firewall(req, &conf)
    }

    /// `POST …/firewall/ipset/{name}`: an address, network (host bits cleared) or alias
    /// the VM or the cluster defines.
    pub fn add_firewall_ipset_entry(&mut self, req: &Request) -> Result<(), PveError> {
        let (cluster, mut conf) = self.load_firewall(req, MODIFY)?;
        let name = req.p.req_str("name")?;
        if !conf.ipset.contains_key(&name) {
            return Err(no_such_ipset(&name));
        }
        let mut cidr = req.p.req_str("cidr")?;
        if let Some((scope, alias)) = addr::alias_ref(&cidr) {
            conf.resolve_alias(Some(&cluster), alias, scope)
                .map_err(PveError::die)?;
        } else {
            cidr = addr::parse_ip_or_cidr(&addr::clean_cidr(&cidr))
                .map_err(PveError::die)?
                .0;
        }
        let set = conf.ipset.entry(name).or_default();
        if set.iter().any(|e| e.cidr == cidr) {
            return Err(PveError::param(
                "cidr",
                format!("address '{cidr}' already exists"),
            ));
        }
        if cidr
            .rsplit_once('/')
            .is_some_and(|(_, l)| !l.is_empty() && l.bytes().all(|b| b == b'0'))
        {
            return Err(PveError::param(
                "cidr",
                "a zero prefix is not allowed in ipset entries",
            ));
        }
        set.insert(
            0,
            IpsetEntry {
                cidr,
                nomatch: req.p.flag("nomatch"),
                comment: req.p.str("comment").filter(|c| !c.is_empty()),
                errors: Default::default(),
            },
        );
        self.save_firewall(req, &conf)
    }

    /// `GET …/firewall/ipset/{name}/{cidr}`: the entry as listed (with the set's digest).
    pub fn firewall_ipset_entry(&self, req: &Request) -> Result<Value, PveError> {
        let cidr = req.p.req_str("cidr")?;
        self.firewall_ipset(req)?
            .into_iter()
            .find(|e| e["cidr"].as_str() == Some(cidr.as_str()))
            .ok_or_else(|| PveError::param("cidr", "no such IP/Network"))
    }

    /// `PUT …/firewall/ipset/{name}/{cidr}`: `nomatch` and `comment` as given (absent ones
    /// are cleared).
    pub fn update_firewall_ipset_entry(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let name = req.p.req_str("name")?;
        let cidr = req.p.req_str("cidr")?;
        let set = conf
            .ipset
            .get_mut(&name)
            .ok_or_else(|| no_such_ipset(&name))?;
        let (_, digest) = list_with_digest(set.iter().map(ipset_entry).collect());
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        let entry = set
            .iter_mut()
            .find(|e| e.cidr == cidr)
            .ok_or_else(|| PveError::param("cidr", "no such IP/Network"))?;
        entry.nomatch = req.p.flag("nomatch");
        entry.comment = req.p.str("comment");
        self.save_firewall(req, &conf)
    }

    /// `DELETE …/firewall/ipset/{name}/{cidr}` (a missing entry is no error).
    pub fn delete_firewall_ipset_entry(&mut self, req: &Request) -> Result<(), PveError> {
        let (_, mut conf) = self.load_firewall(req, MODIFY)?;
        let name = req.p.req_str("name")?;
        let cidr = req.p.req_str("cidr")?;
        let set = conf
            .ipset
            .get_mut(&name)
            .ok_or_else(|| no_such_ipset(&name))?;
        let (_, digest) = list_with_digest(set.iter().map(ipset_entry).collect());
        assert_unmodified(&digest, req.p.str("digest").as_deref())?;
        set.retain(|e| e.cidr != cidr);
        self.save_firewall(req, &conf)
    }
}

/// An alias from the request's `cidr` and `comment` (an empty comment is none).
fn new_alias(req: &Request, name: String) -> Result<Alias, PveError> {
    Ok(Alias {
        name,
        cidr: req.p.req_str("cidr")?,
        ipversion: None,
        comment: req.p.str("comment").filter(|c| !c.is_empty() && c != "0"),
    })
}

/// The ipset index and its digest.
fn ipset_list(conf: &super::conf::FwConf) -> (Vec<Value>, String) {
    let entries = conf
        .ipset
        .keys()
        .map(|name| {
            let mut m = Map::new();
            m.insert("name".into(), Value::from(name.clone()));
            if let Some(c) = conf.ipset_comments.get(name).filter(|c| !c.is_empty()) {
                m.insert("comment".into(), Value::from(c.clone()));
            }
            m
        })
        .collect();
    list_with_digest(entries)
}
