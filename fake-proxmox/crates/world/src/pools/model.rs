//! The pools' decisions: who may see and change which pool, membership rules (a VM is in
//! at most one pool; nested pools up to three levels), and PVE's texts (`API2/Pool.pm`).
//! Changes are all-or-nothing, as PVE writes `user.cfg` only at the end.

use std::sync::LazyLock;

use regex::Regex;

use crate::access::model::PoolConfig;
use crate::request::Request;
use crate::schema::formats::split_list;
use crate::wire::PveError;
use crate::world::Site;

static POOLID: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9.\-_]+(?:/[A-Za-z0-9.\-_]+){0,2}$").ok());

/// `verify_poolname`'s `die` text for a bad pool id.
fn bad_poolid(p: &str) -> Option<String> {
    if p.split('/').count() > 3 {
        return Some(format!(
            "pool name '{p}' nested too deeply (max levels = 3)"
        ));
    }
    (!POOLID.as_ref().is_some_and(|r| r.is_match(p)))
        .then(|| format!("pool name '{p}' contains invalid characters"))
}

impl Site {
    /// The request's `poolid`, checked as PVE's `pve-poolid` format does.
    fn poolid(req: &Request) -> Result<String, PveError> {
        let p = req.p.req_str("poolid")?;
        match bad_poolid(&p) {
            Some(msg) => Err(PveError::param(
                "poolid",
                format!("invalid format - {msg}\n"),
            )),
            None => Ok(p),
        }
    }

    /// `GET /pools` without `poolid`: the pools with `Pool.Audit`.
    pub fn list_pools(&self, req: &Request) -> Vec<(&String, &PoolConfig)> {
        self.access
            .pools
            .iter()
            .filter(|(p, _)| {
                self.access
                    .has(&req.who, &format!("/pool/{p}"), "Pool.Audit")
            })
            .collect()
    }

    /// One pool, for `GET /pools?poolid=` (no privilege needed, as in PVE) or, with
    /// `strict`, for the deprecated `GET /pools/{poolid}` (`Pool.Audit`).
    pub fn read_pool(
        &self,
        req: &Request,
        strict: bool,
    ) -> Result<(String, &PoolConfig), PveError> {
        let p = Site::poolid(req)?;
        if strict {
            self.require(&req.who, &format!("/pool/{p}"), "Pool.Audit")?;
        }
        match self.access.pools.get(&p) {
            Some(cfg) => Ok((p, cfg)),
            None => Err(PveError::die(format!("pool '{p}' does not exist"))),
        }
    }

    /// `POST /pools`: a nested pool's parent must exist.
    pub fn create_pool(&mut self, req: &Request) -> Result<(), PveError> {
        let p = Site::poolid(req)?;
        self.require(&req.who, &format!("/pool/{p}"), "Pool.Allocate")?;
        let failed = |e: String| PveError::die(format!("create pool failed: {e}"));
        if self.access.pools.contains_key(&p) {
            return Err(failed(format!("pool '{p}' already exists")));
        }
        let leaf = match p.rsplit_once('/') {
            Some((parent, leaf)) => {
                if !self.access.pools.contains_key(parent) {
                    return Err(failed(format!(
                        "parent '{parent}' of pool '{p}' does not exist"
                    )));
                }
                leaf
            }
            None => p.as_str(),
        };
        if !leaf.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(failed("pool name must start with a letter".into()));
        }
        let cfg = PoolConfig {
            comment: req.p.str("comment").filter(|c| !c.is_empty()),
            ..PoolConfig::default()
        };
        self.access.pools.insert(p, cfg);
        Ok(())
    }

    /// `PUT /pools`: the comment, and VMs or storages added (or with `delete` removed);
    /// a VM in another pool moves only with `allow-move`.
    pub fn update_pool(&mut self, req: &Request) -> Result<(), PveError> {
        let p = Site::poolid(req)?;
        self.require(&req.who, &format!("/pool/{p}"), "Pool.Allocate")?;
        let failed = |e: String| PveError::die(format!("update pools failed: {e}"));
        let mut pools = self.access.pools.clone();
        let Some(mut cfg) = pools.get(&p).cloned() else {
            return Err(failed(format!("pool '{p}' does not exist")));
        };
        if req.p.has("comment") {
            cfg.comment = req.p.str("comment").filter(|c| !c.is_empty());
        }
        let delete = req.p.flag("delete");
        let vms = req.p.str("vms").unwrap_or_default();
        for id in split_list(&vms) {
            let vmid: u32 = id
                .parse()
                .map_err(|_| failed(format!("invalid vmid '{id}'")))?;
            self.modify_check(req, &format!("/vms/{vmid}"))
                .map_err(failed)?;
            if delete {
                if !cfg.vms.remove(&vmid) {
                    return Err(failed(format!("VM {vmid} is not a pool member")));
                }
                continue;
            }
            if cfg.vms.contains(&vmid) {
                return Err(failed(format!("VM {vmid} is already a pool member")));
            }
            let other = pools
                .iter()
                .find(|(name, o)| **name != p && o.vms.contains(&vmid))
                .map(|(name, _)| name.clone());
            if let Some(other) = other {
                if !req.p.flag("allow-move") {
                    return Err(failed(format!(
                        "VM {vmid} belongs already to pool '{other}' and 'allow-move' is not set"
                    )));
                }
                self.require(&req.who, &format!("/pool/{other}"), "Pool.Allocate")
                    .map_err(|e| failed(e.message.trim_end().to_string()))?;
                if let Some(o) = pools.get_mut(&other) {
                    o.vms.remove(&vmid);
                }
            }
            cfg.vms.insert(vmid);
        }
        let storage = req.p.str("storage").unwrap_or_default();
        for sid in split_list(&storage) {
            self.modify_check(req, &format!("/storage/{sid}"))
                .map_err(failed)?;
            if delete {
                if !cfg.storage.remove(sid) {
                    return Err(failed(format!("Storage '{sid}' is not a pool member")));
                }
            } else if !cfg.storage.insert(sid.to_string()) {
                return Err(failed(format!("Storage '{sid}' is already a pool member")));
            }
        }
        pools.insert(p, cfg);
        self.access.pools = pools;
        Ok(())
    }

    /// `check_perm_modify` on a member, as its text inside the pool update's error.
    fn modify_check(&self, req: &Request, path: &str) -> Result<(), String> {
        if self.access.may_modify_perms(&req.who, path) {
            return Ok(());
        }
        let what = if path.starts_with("/vms/") {
            "VM.Allocate"
        } else {
            "Datastore.Allocate"
        };
        Err(format!(
            "Permission check failed ({path}, Permissions.Modify|{what})"
        ))
    }

    /// `DELETE /pools`: only an empty pool (no sub-pool, no existing VM or storage); the
    /// ACL entries on it and below go with it.
    pub fn delete_pool(&mut self, req: &Request) -> Result<(), PveError> {
        let p = Site::poolid(req)?;
        self.require(&req.who, &format!("/pool/{p}"), "Pool.Allocate")?;
        let failed = |e: String| PveError::die(format!("delete pool failed: {e}"));
        let Some(cfg) = self.access.pools.get(&p) else {
            return Err(failed(format!("pool '{p}' does not exist")));
        };
        let prefix = format!("{p}/");
        if let Some(sub) = self.access.pools.keys().find(|k| {
            k.strip_prefix(&prefix)
                .is_some_and(|rest| !rest.contains('/'))
        }) {
            return Err(failed(format!(
                "pool '{p}' is not empty (contains pool '{sub}')"
            )));
        }
        if let Some(vmid) = cfg.vms.iter().find(|v| self.guest(**v).is_some()) {
            return Err(failed(format!(
                "pool '{p}' is not empty (contains VM {vmid})"
            )));
        }
        let exists = |sid: &String| self.nodes.values().any(|n| n.storages.contains_key(sid));
        if let Some(sid) = cfg.storage.iter().find(|s| exists(s)) {
            return Err(failed(format!(
                "pool '{p}' is not empty (contains storage '{sid}')"
            )));
        }
        self.access.pools.remove(&p);
        let acl_path = format!("/pool/{p}");
        self.access.acls.retain(|a| {
            let n = crate::access::model::normalize_path(&a.path);
            n != acl_path && !n.starts_with(&format!("{acl_path}/"))
        });
        Ok(())
    }

    /// The pool a new VM joins (`pool=` on create): it must exist.
    pub fn check_pool_exists(&self, pool: &str) -> Result<(), PveError> {
        if self.access.pools.contains_key(pool) {
            Ok(())
        } else {
            Err(PveError::perm(Some(format!(
                "pool '{pool}' does not exist"
            ))))
        }
    }

    /// The pool `vmid` is a member of.
    pub fn pool_of_vm(&self, vmid: u32) -> Option<&str> {
        self.access
            .pools
            .iter()
            .find(|(_, c)| c.vms.contains(&vmid))
            .map(|(n, _)| n.as_str())
    }
}
