//! Read access to a volume (`check_volume_access`) and the volume attributes `notes` and
//! `protected`, which only backups on directory-like storages have (DirPlugin.pm, shared by
//! the NFS, CIFS, CephFS and Btrfs plugins): `PUT …/content/{volume}`.

use crate::access::model::Identity;
use crate::request::Request;
use crate::storage::content::volume_name;
use crate::storage::model::{Content, Storage, StorageType};
use crate::storage::volid::{parse_volname, unparsable};
use crate::wire::PveError;
use crate::world::Site;

/// The Perl class of a storage type's plugin, as PVE's texts name it.
fn plugin_class(kind: StorageType) -> &'static str {
    match kind {
        StorageType::Dir => "PVE::Storage::DirPlugin",
        StorageType::Nfs => "PVE::Storage::NFSPlugin",
        StorageType::Cifs => "PVE::Storage::CIFSPlugin",
        StorageType::Btrfs => "PVE::Storage::BTRFSPlugin",
        StorageType::CephFs => "PVE::Storage::CephFSPlugin",
        StorageType::Lvm => "PVE::Storage::LVMPlugin",
        StorageType::LvmThin => "PVE::Storage::LvmThinPlugin",
        StorageType::Rbd => "PVE::Storage::RBDPlugin",
        StorageType::ZfsPool => "PVE::Storage::ZFSPoolPlugin",
    }
}

/// The value of one attribute of a volume as `get_volume_attribute` reads it: backups on
/// a file-based storage have notes (empty without) and a protection flag; nothing else has.
pub enum Attribute {
    /// The backup's notes (empty without).
    Notes(String),
    /// Whether the backup is protected from pruning and removal.
    Protected(bool),
}

/// `notes` and `protected` of a volume, where its storage has them.
pub fn attributes(s: &Storage, volname: &str) -> Vec<Attribute> {
    let Some(v) = s.volumes.get(volname) else {
        return Vec::new();
    };
    if !s.kind.is_file_based() || v.vtype != Content::Backup {
        return Vec::new();
    }
    vec![
        Attribute::Notes(v.notes.clone().unwrap_or_default()),
        Attribute::Protected(v.protected),
    ]
}

impl Site {
    /// `check_volume_access` (src/PVE/Storage.pm): may `who` read volume `volname` of `s`
    /// (of content type `want`, if given)? Its content type and owner.
    pub fn check_volume_access(
        &self,
        who: &Identity,
        s: &Storage,
        volname: &str,
        want: Option<Content>,
    ) -> Result<(Content, Option<u32>), PveError> {
        let volid = s.volid(volname);
        let (vtype, owner, _) = parse_volname(s.kind, volname)
            .ok_or_else(|| PveError::die(unparsable(s.kind, volname)))?;
        if let Some(t) = want
            && t != vtype
            && !(t == Content::Rootdir && vtype == Content::Images)
        {
            return Err(PveError::die(format!(
                "unable to use volume {volid} - content type needs to be '{}'",
                t.as_str()
            )));
        }
        let on_storage = format!("/storage/{}", s.name);
        if self.access.has(who, &on_storage, "Datastore.Allocate") {
            return Ok((vtype, owner));
        }
        match (vtype, owner) {
            (Content::Iso | Content::Vztmpl | Content::Import, _) => self.require_any(
                who,
                &on_storage,
                &["Datastore.AllocateSpace", "Datastore.Audit"],
            )?,
            (Content::Backup, Some(id)) => {
                self.require(who, &on_storage, "Datastore.AllocateSpace")?;
                self.require(who, &format!("/vms/{id}"), "VM.Backup")?;
            }
            (Content::Images | Content::Rootdir, Some(id)) => {
                self.require(who, &on_storage, "Datastore.Audit")?;
                self.require(who, &format!("/vms/{id}"), "VM.Config.Disk")?;
            }
            _ => {
                return Err(PveError::die(format!(
                    "missing privileges to access {volid}"
                )));
            }
        }
        Ok((vtype, owner))
    }

    /// `PUT …/content/{volume}`: set `notes` then `protected`, each as the storage's plugin
    /// allows (`update_volume_attribute`).
    pub fn update_volume_attributes(&mut self, req: &Request) -> Result<(), PveError> {
        let node = req.node()?;
        let s = self.storage_of_request(req)?;
        let volname = volume_name(req, s)?;
        let (vtype, owner) = self.check_volume_access(&req.who, s, &volname, None)?;
        let notes = req.p.str("notes");
        let protect = req.p.bool("protected");
        let sid = s.name.clone();
        if let Some(notes) = &notes {
            if !s.kind.is_file_based() {
                // The base plugin's `update_volume_notes` dies without a newline.
                return Err(PveError::die(format!(
                    "volume notes are not supported for {} at /usr/share/perl5/PVE/Storage/Plugin.pm line 1300.",
                    plugin_class(s.kind)
                )));
            }
            if vtype != Content::Backup {
                return Err(PveError::die("only backups can have notes"));
            }
            self.set_volume(&node, &sid, &volname, |v| {
                v.notes = (!notes.is_empty()).then(|| notes.clone());
            });
        }
        if let Some(protect) = protect {
            let s = self.storage_of_request(req)?;
            if !s.kind.is_file_based() {
                return Err(PveError::die(format!(
                    "attribute 'protected' is not supported for storage type '{}'",
                    s.kind.as_str()
                )));
            }
            if vtype != Content::Backup {
                return Err(PveError::die("only backups support attribute 'protected'"));
            }
            if protect && let Some(id) = owner {
                self.check_protected_limit(req, s, &volname, id)?;
            }
            self.set_volume(&node, &sid, &volname, |v| v.protected = protect);
        }
        Ok(())
    }

    /// `max-protected-backups`: unlimited for holders of `Datastore.Allocate` on the
    /// storage, else 5 of a guest's backups of one type (src/PVE/Storage.pm).
    fn check_protected_limit(
        &self,
        req: &Request,
        s: &Storage,
        volname: &str,
        vmid: u32,
    ) -> Result<(), PveError> {
        let Some(v) = s.volumes.get(volname) else {
            return Ok(());
        };
        if v.protected
            || self.access.has(
                &req.who,
                &format!("/storage/{}", s.name),
                "Datastore.Allocate",
            )
        {
            return Ok(());
        }
        const MAX: usize = 5;
        let guest = |name: &str| {
            let file = name.rsplit('/').next().unwrap_or(name);
            super::backup::archive_info(file).map(|i| i.guest)
        };
        let this = guest(volname);
        let count = s
            .volumes
            .values()
            .filter(|o| o.vtype == Content::Backup && o.vmid == Some(vmid) && o.protected)
            .filter(|o| this.is_none() || guest(&o.volname) == this)
            .count();
        if MAX <= count {
            return Err(PveError::die(format!(
                "The number of protected backups per guest is limited to {MAX} on storage '{}'",
                s.name
            )));
        }
        Ok(())
    }

    /// Change an existing volume's record; a missing volume is left alone (PVE writes the
    /// attribute file beside an archive that is not there, which nothing lists).
    fn set_volume(
        &mut self,
        node: &str,
        sid: &str,
        volname: &str,
        f: impl FnOnce(&mut crate::storage::model::Volume),
    ) {
        if let Some(s) = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.storages.get_mut(sid))
        {
            s.volumes.update(volname, f);
        }
    }
}
