//! `POST /nodes/{node}/storage/{storage}/content/{volume}`: Content.pm's `copy`, which PVE
//! marks "experimental code - do not use": root@pam only (the method declares no
//! permissions), source and `target` both on `{storage}`, an `imgcopy` task that runs
//! `storage_migrate` to `target_node` (default: this node). Nothing is checked before the
//! task; its refusals are the task's errors.

use crate::exec::{CopyJob, Vol};
use crate::request::Request;
use crate::storage::content::real_volname;
use crate::storage::download::Arrival;
use crate::storage::model::{Content, Storage, StorageType};
use crate::storage::volid::{parse_volname, unparsable};
use crate::tasks::model::Chunk;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// The transfer formats `volume_export_formats`/`volume_import_formats` offer for a
/// volume (no snapshots): what `storage_migrate` can send between two storages.
fn transfer_formats(kind: StorageType, vtype: Content, format: &str) -> &'static [&'static str] {
    match kind {
        StorageType::ZfsPool => &["zfs"],
        StorageType::Lvm | StorageType::LvmThin | StorageType::Rbd => &["raw+size"],
        _ if format == "subvol" => &["tar+size"],
        _ => match vtype {
            Content::Images
            | Content::Iso
            | Content::Snippets
            | Content::Vztmpl
            | Content::Import => &["raw+size"],
            _ => &[],
        },
    }
}

impl Site {
    /// Start the copy; its UPID.
    pub fn copy_volume(&mut self, req: &Request) -> Result<String, PveError> {
        // A method without `permissions` is root@pam's alone (an API token is not root@pam).
        if req.who.userid != "root@pam" || req.who.tokenid.is_some() {
            return Err(PveError::perm(Some("user != root@pam".into())));
        }
        let node = req.node()?;
        let sid = req.p.req_str("storage")?;
        let volname = real_volname(&req.p.req_str("volume")?, &sid)?;
        let target = real_volname(&req.p.req_str("target")?, &sid)?;
        let target_node = req.p.str("target_node").unwrap_or_else(|| node.clone());
        let work = Work::CopyVolume {
            storage: sid.clone(),
            volname: volname.clone(),
            target_node,
            target: target.clone(),
        };
        let mut plan = TaskPlan::new("imgcopy", "", &node, &req.task_user(), work);
        plan.duration = 0.5;
        let upid = self.start_task(plan, req.now);
        // The worker prints its UPID first and last (Content.pm's DEBUG lines).
        if let Some(seq) = self.tasks.seq_of(&upid) {
            let start = req.now;
            let u = upid.clone();
            self.tasks.update(seq, |t| {
                t.timeline
                    .push((start, Chunk::Line(format!("DEBUG: starting worker {u}"))));
                t.timeline
                    .push((start + 0.5, Chunk::Line(format!("DEBUG: end worker {u}"))));
            });
        }
        Ok(upid)
    }

    /// The copy itself, when the task ends: `storage_migrate` from this node's storage to
    /// the target node's storage of the same name.
    pub(crate) fn finish_copy(
        &mut self,
        node: &str,
        sid: &str,
        volname: &str,
        target_node: &str,
        target: &str,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let src_sto = self
            .node(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
        let (vtype, _, format) = parse_volname(src_sto.kind, volname)
            .ok_or_else(|| unparsable(src_sto.kind, volname))?;
        // "no need to migrate shared content": the same shared storage is left as it is.
        if src_sto.shared {
            return Ok(Vec::new());
        }
        let src = src_sto
            .volumes
            .get(volname)
            .cloned()
            .ok_or_else(|| format!("volume '{sid}:{volname}' does not exist"))?;
        let kind = src_sto.kind;
        if transfer_formats(kind, vtype, &format).is_empty() {
            let t = kind.as_str();
            return Err(format!("cannot migrate from storage type '{t}' to '{t}'"));
        }
        let dst_sto = self
            .node(target_node)
            .ok_or_else(|| format!("unable to get IP for node '{target_node}' - node offline?"))?
            .storages
            .get(sid)
            .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
        let (t_vtype, t_owner, t_format) =
            parse_volname(kind, target).ok_or_else(|| unparsable(kind, target))?;
        if t_vtype == Content::Images && kind.is_file_based() && t_format != "raw" {
            return Err(format!(
                "cannot import format raw+size into a file of format {t_format}"
            ));
        }
        if dst_sto.volumes.contains_key(target) {
            return Err(exists_text(dst_sto, target));
        }
        match (t_vtype, t_owner) {
            (Content::Images, Some(vmid)) => {
                let to = self.alloc_volume_data(
                    target_node,
                    sid,
                    vmid,
                    target.to_string(),
                    &t_format,
                    src.size,
                    now,
                )?;
                let job = CopyJob {
                    from: Vol::new(node, sid, volname),
                    from_format: &src.format,
                    to: Vol::new(target_node, sid, &to),
                    to_format: &t_format,
                    size: src.size,
                    used: src.used,
                };
                let copied = match self.disks_on(target_node).copy(&job) {
                    Ok(c) => c,
                    Err(f) => {
                        self.remove_volume(target_node, sid, &to);
                        return Err(f.error);
                    }
                };
                self.nodes
                    .get_mut(target_node)
                    .and_then(|n| n.storages.get_mut(sid))
                    .ok_or_else(|| format!("storage '{sid}' does not exist"))?
                    .write_data(&to, copied.bytes)?;
                self.carry_volume_facts((node, sid, volname), (target_node, sid, &to));
            }
            _ => {
                let file = self.disks_on(node).path(node, sid, volname);
                let size = src.size;
                match self.add_arrived_file(
                    target_node,
                    sid,
                    target,
                    (src.used, file.as_deref()),
                    |_| size,
                    now,
                ) {
                    Ok(()) => {}
                    Err(Arrival::NoSpace) => {
                        return Err("dd: error writing: No space left on device".into());
                    }
                    Err(Arrival::Refused(e) | Arrival::Data(e)) => return Err(e),
                }
                self.carry_volume_facts((node, sid, volname), (target_node, sid, target));
            }
        }
        Ok(Vec::new())
    }
}

/// `pvesm import`'s refusal of an existing target.
fn exists_text(s: &Storage, volname: &str) -> String {
    if s.kind.is_file_based() {
        format!("file '{}' already exists", s.file_path(volname))
    } else {
        format!("volume '{}' already exists", s.volid(volname))
    }
}

impl crate::world::Site {
    /// A copy of volume `from` was written to `to` (an import, a clone, a move, a storage
    /// copy): it holds the same image, and a snippet the same text.
    pub(crate) fn carry_volume_facts(&mut self, from: (&str, &str, &str), to: (&str, &str, &str)) {
        let Some(src) = self
            .nodes
            .get(from.0)
            .and_then(|n| n.storages.get(from.1))
            .and_then(|s| s.volumes.get(from.2))
        else {
            return;
        };
        let (image, text) = (src.image.clone(), src.text.clone());
        if image.is_none() && text.is_none() {
            return;
        }
        let Some(storage) = self.storage_mut(to.0, to.1) else {
            return;
        };
        let shared = storage.shared;
        storage.volumes.update(to.2, |v| {
            v.image = image;
            v.text = text;
        });
        if shared {
            self.share_storages();
        }
    }
}
