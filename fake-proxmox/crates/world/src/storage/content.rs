//! A node's storages as the API addresses them, and their content verbs: allocate a volume,
//! delete one (an `imgdel` task).

use std::sync::LazyLock;

use regex::Regex;

use crate::access::model::Identity;
use crate::request::Request;
use crate::storage::model::{Content, Storage};
use crate::storage::volid::{parse_volid, parse_volname, unparsable};
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

static ALLOC_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(vm|base)-(\d+)-(\S+)$").ok());

/// The privileges that let a caller see a storage.
pub const AUDIT: &[&str] = &["Datastore.Audit", "Datastore.AllocateSpace"];

impl Site {
    /// The enabled storage `{storage}` on `{node}` of the request's path.
    pub fn storage_of_request(&self, req: &Request) -> Result<&Storage, PveError> {
        let node = req.node()?;
        let sid = req.p.req_str("storage")?;
        let n = self
            .node(&node)
            .ok_or_else(|| PveError::die(format!("no such node '{node}'")))?;
        let s = n
            .storages
            .get(&sid)
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))?;
        if !s.enabled {
            return Err(PveError::die(format!("storage '{sid}' is disabled")));
        }
        Ok(s)
    }

    /// The storage `{storage}` of `{node}` as configured, enabled or not.
    pub(crate) fn configured_storage(&self, req: &Request) -> Result<&Storage, PveError> {
        let node = req.node()?;
        let sid = req.p.req_str("storage")?;
        self.node(&node)
            .and_then(|n| n.storages.get(&sid))
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))
    }

    /// The storage of the request, which the caller may see (`Datastore.Audit` or
    /// `Datastore.AllocateSpace`).
    pub fn audited_storage(&self, req: &Request) -> Result<&Storage, PveError> {
        let s = self.storage_of_request(req)?;
        self.require_any(&req.who, &format!("/storage/{}", s.name), AUDIT)?;
        Ok(s)
    }

    /// Whether `who` sees storage `sid` in lists.
    pub fn can_see_storage(&self, who: &Identity, sid: &str) -> bool {
        let path = format!("/storage/{sid}");
        AUDIT.iter().any(|p| self.access.has(who, &path, p))
    }

    /// `POST /nodes/{node}/storage/{storage}/content`: allocate an image; its volid.
    pub fn alloc_volume(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let s = self.storage_of_request(req)?;
        self.require(
            &req.who,
            &format!("/storage/{}", s.name),
            "Datastore.AllocateSpace",
        )?;
        let p = &req.p;
        let vmid = p.vmid()?;
        let filename = p.req_str("filename")?;
        let size_s = p.req_str("size")?;
        let size = parse_kib(&size_s)
            .ok_or_else(|| PveError::param("size", format!("unable to parse size '{size_s}'")))?;
        s.check_images()?;
        let fmt = s.resolve_format(p.str("format").as_deref());
        let base = filename
            .rsplit_once('.')
            .map_or(filename.as_str(), |(b, _)| b)
            .to_string();
        let owner = ALLOC_NAME
            .as_ref()
            .and_then(|r| r.captures(&base))
            .and_then(|cp| cp.get(2))
            .and_then(|m| m.as_str().parse::<u32>().ok());
        if owner != Some(vmid) {
            return Err(PveError::param(
                "filename",
                "illegal name - should be 'vm-VMID-*' or 'base-VMID-*'",
            ));
        }
        let volname = s.image_volname(vmid, &base, &fmt);
        if s.volumes.contains_key(&volname) {
            return Err(PveError::die(format!(
                "volume '{}' already exists",
                s.volid(&volname)
            )));
        }
        let sid = s.name.clone();
        let v = self
            .alloc_volume_data(&node, &sid, vmid, volname, &fmt, size, req.now)
            .map_err(PveError::die)?;
        Ok(format!("{sid}:{v}"))
    }

    /// `DELETE …/content/{volume}`: the `imgdel` task, unless a VM still uses the volume.
    pub fn delete_volume(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let s = self.storage_of_request(req)?;
        let volname = volume_name(req, s)?;
        let volid = s.volid(&volname);
        let v = s
            .volumes
            .get(&volname)
            .ok_or_else(|| PveError::die(format!("volume '{volid}' does not exist")))?;
        let on_storage = format!("/storage/{}", s.name);
        match v.vmid {
            // Content.pm `delete`: a guest's backup needs space and its VM.Backup.
            Some(id) if v.vtype == Content::Backup => {
                self.require(&req.who, &on_storage, "Datastore.AllocateSpace")?;
                self.require(&req.who, &format!("/vms/{id}"), "VM.Backup")?;
            }
            Some(id) => self
                .require(&req.who, &format!("/vms/{id}"), "VM.Config.Disk")
                .or_else(|_| self.require(&req.who, &on_storage, "Datastore.Allocate"))?,
            None => self.require(&req.who, &on_storage, "Datastore.Allocate")?,
        }
        if let Some(id) = v.vmid
            && let Some(vm) = self.vms.get(&id)
            && vm.referenced_volumes().contains(&volid)
        {
            return Err(PveError::die(format!(
                "unable to delete volume '{volid}' - volume is still in use by VM {id}"
            )));
        }
        let mut plan = TaskPlan::new(
            "imgdel",
            volid.clone(),
            &node,
            &req.task_user(),
            Work::DeleteVolume {
                storage: s.name.clone(),
                volname: volname.clone(),
            },
        );
        // Content.pm `delete`: the task's id is `<owner vmid>@<storage>`, or the storage.
        plan.id = match v.vmid {
            Some(id) => format!("{id}@{}", s.name),
            None => s.name.clone(),
        };
        plan.duration = 0.3;
        if v.protected {
            plan.planned_error = Some(protected_text(&volname, &s.name));
        } else if s.kind.is_file_based() {
            plan.line(0.1, format!("Removed volume '{volid}'"));
        } else {
            plan.line(
                0.1,
                format!("  Logical volume \"{volname}\" successfully removed."),
            );
        }
        Ok(self.start_task(plan, req.now))
    }

    /// The end of an `imgdel` task: the volume goes, unless it was protected meanwhile.
    pub(crate) fn finish_delete_volume(
        &mut self,
        node: &str,
        sid: &str,
        volname: &str,
    ) -> Result<Vec<String>, String> {
        let protected = self
            .node(node)
            .and_then(|n| n.storages.get(sid))
            .and_then(|s| s.volumes.get(volname))
            .is_some_and(|v| v.protected);
        if protected {
            return Err(protected_text(volname, sid));
        }
        self.remove_volume(node, sid, volname);
        Ok(Vec::new())
    }
}

/// `free_image`'s refusal of a protected volume.
fn protected_text(volname: &str, sid: &str) -> String {
    format!("cannot remove protected volume '{volname}' on '{sid}'")
}

/// `size` of content POST: `\d+[MG]?`, KiB by default.
fn parse_kib(s: &str) -> Option<u64> {
    let (n, mult) = match s.chars().last()? {
        'M' => (&s[..s.len() - 1], 1u64 << 20),
        'G' => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1u64 << 10),
    };
    n.parse::<u64>().ok()?.checked_mul(mult)
}

/// The volume name of the path's `{volume}`: a volid on this storage or a bare name
/// (Content.pm's `$real_volume_id`), which the storage's plugin can parse.
pub fn volume_name(req: &Request, s: &Storage) -> Result<String, PveError> {
    let vol = req.p.req_str("volume")?;
    let volname = real_volname(&vol, &s.name)?;
    if parse_volname(s.kind, &volname).is_none() {
        return Err(PveError::die(unparsable(s.kind, &volname)));
    }
    Ok(volname)
}

/// `$real_volume_id`: a volume id must name storage `sid`; a bare name is on it.
pub fn real_volname(vol: &str, sid: &str) -> Result<String, PveError> {
    if !vol.contains(':') {
        return Ok(vol.to_string());
    }
    match parse_volid(vol) {
        Some((s, name)) if s == sid => Ok(name.to_string()),
        Some((s, _)) => Err(PveError::param(
            "volume",
            format!("storage ID mismatch ({s} != {sid})\n"),
        )),
        None => Err(PveError::param(
            "volume",
            format!("unable to parse volume ID '{vol}'\n"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_kib_unless_suffixed() {
        assert_eq!(parse_kib("4"), Some(4 << 10));
        assert_eq!(parse_kib("4M"), Some(4 << 20));
        assert_eq!(parse_kib("4G"), Some(4 << 30));
        assert_eq!(parse_kib("x"), None);
        assert_eq!(parse_kib(""), None);
    }
}
