//! `GET|DELETE /nodes/{node}/storage/{storage}/prunebackups` (PruneBackups.pm): the prune
//! list of a storage's backups by a retention, and the `prunebackups` task that removes what
//! it marks `remove`. Protected backups and backups without the standard name stay.

use std::collections::BTreeMap;

use crate::request::Request;
use crate::storage::backup::{
    Keep, Mark, PruneEntry, archive_info, listed_vmid, prune_mark_backup_group,
    validate_prune_backups,
};
use crate::storage::model::{Content, Storage};
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// The `type` and `vmid` a prune is limited to.
struct Filter {
    guest: Option<String>,
    vmid: Option<u32>,
}

impl Filter {
    fn of(req: &Request) -> Filter {
        Filter {
            guest: req.p.str("type"),
            vmid: req.p.int("vmid").and_then(|v| u32::try_from(v).ok()),
        }
    }
}

/// The `prune-backups` parameter, parsed and validated like the schema's format (its
/// errors were given by the parameter check already).
fn requested_keep(req: &Request) -> Result<Option<Keep>, PveError> {
    let Some(raw) = req.p.str("prune-backups") else {
        return Ok(None);
    };
    parse_keep(&raw)
        .map(Some)
        .map_err(|e| PveError::param("prune-backups", format!("invalid format - {e}")))
}

fn parse_keep(raw: &str) -> Result<Keep, String> {
    let mut parsed = BTreeMap::new();
    for part in raw.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| "missing key in comma-separated list property\n".to_string())?;
        let v = match crate::schema::parse_boolean(v) {
            Some(b) if k == "keep-all" => if b { "1" } else { "0" }.to_string(),
            _ => v.to_string(),
        };
        parsed.insert(k.to_string(), v);
    }
    validate_prune_backups(&parsed)
}

/// `PVE::Storage::prune_backups` up to the marking: the storage must hold backups and have
/// a retention (the request's, else its own); then its backups' prune list.
fn prune_list(s: &Storage, keep: Option<Keep>, f: &Filter) -> Result<Vec<PruneEntry>, String> {
    if !s.supports(Content::Backup) {
        return Err(format!("storage '{}' does not support backups", s.name));
    }
    let keep = match keep {
        Some(k) => k,
        None => {
            let own = s.prune_backups.as_deref().ok_or_else(|| {
                format!(
                    "no prune-backups options configured for storage '{}'",
                    s.name
                )
            })?;
            parse_keep(own)?
        }
    };
    if !s.enabled {
        return Err(format!("storage '{}' is disabled", s.name));
    }
    let mut list = Vec::new();
    for v in s.volumes.values().filter(|v| v.vtype == Content::Backup) {
        let file = v.volname.trim_start_matches("backup/");
        // Listing with a VMID keeps the files that name it (`\S+-<vmid>-\S+`).
        if let Some(id) = f.vmid
            && !file.contains(&format!("-{id}-"))
        {
            continue;
        }
        let info = archive_info(file);
        let guest = info.as_ref().map_or("unknown", |i| i.guest.as_str());
        if f.guest.as_deref().is_some_and(|g| g != guest) {
            continue;
        }
        let mut e = PruneEntry {
            volid: s.volid(&v.volname),
            ctime: v.ctime,
            guest: guest.to_string(),
            vmid: info
                .as_ref()
                .and_then(|i| i.std.map(|(id, _)| id))
                .or(f.vmid)
                .or_else(|| listed_vmid(file)),
            mark: None,
        };
        match info.and_then(|i| i.std) {
            Some((_, ctime)) => e.ctime = ctime,
            None => e.mark = Some(Mark::Renamed),
        }
        if v.protected {
            e.mark = Some(Mark::Protected);
        }
        list.push(e);
    }
    // Groups by guest type and VMID, the standard-named backups only.
    let mut groups: BTreeMap<(String, u32), Vec<&mut PruneEntry>> = BTreeMap::new();
    for e in list.iter_mut() {
        if e.mark == Some(Mark::Renamed) {
            continue;
        }
        if let Some(id) = e.vmid {
            groups.entry((e.guest.clone(), id)).or_default().push(e);
        }
    }
    for group in groups.values_mut() {
        prune_mark_backup_group(group, &keep);
    }
    Ok(list)
}

impl Site {
    /// `GET …/prunebackups`: what a prune would keep and remove.
    pub fn prune_dry_run(&self, req: &Request) -> Result<Vec<PruneEntry>, PveError> {
        let sid = req.p.req_str("storage")?;
        self.require_any(&req.who, &format!("/storage/{sid}"), super::content::AUDIT)?;
        let keep = requested_keep(req)?;
        let s = self.configured_storage(req)?;
        prune_list(s, keep, &Filter::of(req)).map_err(PveError::die)
    }

    /// `DELETE …/prunebackups`: the `prunebackups` task; its refusals are the task's errors,
    /// as PVE's worker makes them.
    pub fn prune_backups(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let sid = req.p.req_str("storage")?;
        let keep = requested_keep(req)?;
        let f = Filter::of(req);
        let on_storage = format!("/storage/{sid}");
        match f.vmid {
            Some(id) => {
                self.require(&req.who, &on_storage, "Datastore.AllocateSpace")?;
                self.require(&req.who, &format!("/vms/{id}"), "VM.Backup")?;
            }
            None => self.require(&req.who, &on_storage, "Datastore.Allocate")?,
        }
        let id = match f.vmid {
            Some(v) => format!("{v}@{sid}"),
            None => sid.clone(),
        };
        let planned = self
            .configured_storage(req)
            .map_err(|e| e.message.trim_end().to_string())
            .and_then(|s| prune_list(s, keep, &f));
        let remove: Vec<String> = planned
            .as_ref()
            .map(|l| {
                l.iter()
                    .filter(|e| e.mark == Some(Mark::Remove))
                    .map(|e| e.volid.clone())
                    .collect()
            })
            .unwrap_or_default();
        let work = Work::PruneBackups {
            storage: sid,
            volids: remove.clone(),
        };
        let mut plan = TaskPlan::new("prunebackups", id, &node, &req.task_user(), work);
        plan.duration = 0.2 + 0.05 * remove.len() as f64;
        match planned {
            Err(e) => plan.planned_error = Some(e),
            Ok(_) => {
                for (i, volid) in remove.iter().enumerate() {
                    plan.line(0.1 + 0.05 * i as f64, format!("removing backup '{volid}'"));
                }
            }
        }
        Ok(self.start_task(plan, req.now))
    }

    /// The end of a `prunebackups` task: its backups go, unless one was protected since
    /// (`archive_remove` refuses it and the prune fails).
    pub(crate) fn finish_prune(
        &mut self,
        node: &str,
        sid: &str,
        volids: &[String],
    ) -> Result<Vec<String>, String> {
        let mut failed = false;
        for volid in volids {
            let volname = volid.split_once(':').map_or(volid.as_str(), |(_, n)| n);
            let protected = self
                .node(node)
                .and_then(|n| n.storages.get(sid))
                .and_then(|s| s.volumes.get(volname))
                .map(|v| v.protected);
            match protected {
                Some(true) => failed = true,
                Some(false) => {
                    self.remove_volume(node, sid, volname);
                }
                None => {}
            }
        }
        if failed {
            return Err("error pruning backups - check log".into());
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keep_options_parse_like_the_format() {
        assert_eq!(
            parse_keep("keep-last=2").unwrap().counts.get("keep-last"),
            Some(&2)
        );
        assert!(parse_keep("keep-all=yes").unwrap().all);
        assert!(parse_keep("keep-all=1,keep-daily=1").is_err());
    }
}
