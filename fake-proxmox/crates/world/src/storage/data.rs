//! Volume records and their data kept together: every verb that makes, drops or fills a
//! volume record goes through these, which hand the data's part to the site's disks seam
//! (`exec::Disks`) after the storage rules have decided.

use std::path::Path;

use crate::exec::{Placed, Vol};
use crate::storage::model::{Content, Storage, Volume};
use crate::world::Site;

impl Site {
    pub(crate) fn storage_mut(&mut self, node: &str, sid: &str) -> Option<&mut Storage> {
        self.nodes.get_mut(node)?.storages.get_mut(sid)
    }

    /// `alloc_image` on the storage, then the volume's data; a volume whose data cannot be
    /// made is dropped again. The volume name.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alloc_volume_data(
        &mut self,
        node: &str,
        sid: &str,
        vmid: u32,
        volname: String,
        fmt: &str,
        size: u64,
        now: f64,
    ) -> Result<String, String> {
        self.alloc_data_with(node, sid, vmid, volname, fmt, size, now, false)
    }

    /// `alloc_volume_data` for a container's volume (`rootfs`, `mpN`): its data is what
    /// the container's root sees (see `Disks::allocate_rootdir`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alloc_rootdir_data(
        &mut self,
        node: &str,
        sid: &str,
        vmid: u32,
        volname: String,
        fmt: &str,
        size: u64,
        now: f64,
    ) -> Result<String, String> {
        self.alloc_data_with(node, sid, vmid, volname, fmt, size, now, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn alloc_data_with(
        &mut self,
        node: &str,
        sid: &str,
        vmid: u32,
        volname: String,
        fmt: &str,
        size: u64,
        now: f64,
        rootdir: bool,
    ) -> Result<String, String> {
        let sto = self
            .storage_mut(node, sid)
            .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
        let volname = sto.alloc_image(vmid, volname, fmt, size, now as u64)?;
        let vol = Vol::new(node, sid, &volname);
        let disks = self.disks_on(node);
        let made = if rootdir {
            disks.allocate_rootdir(vol, fmt, size)
        } else {
            disks.allocate(vol, fmt, size)
        };
        if let Err(e) = made {
            if let Some(s) = self.storage_mut(node, sid) {
                s.volumes.remove(&volname);
            }
            return Err(e);
        }
        Ok(volname)
    }

    /// Drop a volume's record and its data; the record, if there was one.
    pub fn remove_volume(&mut self, node: &str, sid: &str, volname: &str) -> Option<Volume> {
        let sto = self.storage_mut(node, sid)?;
        sto.archive_configs.remove(volname);
        let old = sto.volumes.remove(volname)?;
        if let Err(e) = self.disks_on(node).free(Vol::new(node, sid, volname)) {
            tracing::warn!("freeing {sid}:{volname} on {node}: {e}");
        }
        Some(old)
    }

    /// Drop every volume VM `vmid` owns on the node (`destroy-unreferenced-disks`).
    pub(crate) fn remove_volumes_of(&mut self, node: &str, vmid: u32) {
        let owned: Vec<(String, String)> = self
            .nodes
            .get(node)
            .into_iter()
            .flat_map(|n| n.storages.values())
            .flat_map(|s| {
                s.volumes
                    .values()
                    // Its disks only: backups of the VM stay (`vdisk_list` lists images).
                    .filter(|v| v.vmid == Some(vmid) && v.vtype == Content::Images)
                    .map(|v| (s.name.clone(), v.volname.clone()))
            })
            .collect();
        for (sid, volname) in owned {
            self.remove_volume(node, &sid, &volname);
        }
    }

    /// The data of an existing volume record arrives: a copy of the local file `file`, or
    /// an empty image of `size` bytes. With a file and real data, the record takes the
    /// file's virtual size (a disk made from it must hold it); what it uses on the storage
    /// stays the caller's number.
    pub fn place_data(
        &mut self,
        node: &str,
        sid: &str,
        volname: &str,
        file: Option<&Path>,
        size: u64,
    ) -> Result<Option<Placed>, String> {
        let format = self
            .nodes
            .get(node)
            .and_then(|n| n.storages.get(sid))
            .and_then(|s| s.volumes.get(volname))
            .map(|v| v.format.clone())
            .ok_or_else(|| format!("volume '{sid}:{volname}' does not exist"))?;
        let placed =
            self.disks_on(node)
                .place(Vol::new(node, sid, volname), &format, file, size)?;
        if let (Some(p), Some(_)) = (placed, file)
            && let Some(s) = self.storage_mut(node, sid)
        {
            s.volumes.update(volname, |v| v.size = p.virtual_size);
        }
        Ok(placed)
    }
}
