//! `GET …/file-restore/list` and `…/file-restore/download` (FileRestore.pm): single-file
//! restore reads inside Proxmox Backup Server snapshots. The fake has no PBS storage, so
//! once the volume and the caller's access check out, every call ends in PVE's refusal of a
//! storage that is not PBS.

use crate::request::Request;
use crate::storage::model::Content;
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;

impl Site {
    /// The checks of both file-restore methods, in PVE's order; always an error here.
    pub fn file_restore(&self, req: &Request) -> Result<(), PveError> {
        let sid = req.p.req_str("storage")?;
        let volume = req.p.req_str("volume")?;
        // `$parse_volname_or_id`: a volume id on this storage, `backup/<name>`, or `<name>`.
        let volname = match parse_volid(&volume) {
            Some((s, _)) if s != sid => {
                return Err(PveError::param(
                    "volume",
                    format!("storage ID mismatch ({s} != {sid})."),
                ));
            }
            Some((_, name)) => name.to_string(),
            None if volume.starts_with("backup/") => volume.clone(),
            None => format!("backup/{volume}"),
        };
        let s = self.configured_storage(req)?;
        self.check_volume_access(&req.who, s, &volname, Some(Content::Backup))?;
        Err(PveError::param(
            "storage",
            "Only PBS storages supported for file-restore.",
        ))
    }
}
