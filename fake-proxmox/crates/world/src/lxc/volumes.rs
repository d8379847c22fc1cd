//! What the container verbs that copy or move volumes share (clone, migrate, move_volume):
//! pve-storage's `storage_check_enabled`, pve-container's `copy_volume` (a new volume of
//! the mount point's size, its data copied), a linked clone of a template's base volume
//! (`vdisk_clone`), and the time a copy takes.

use super::model::MountPoint;
use super::work::NewVolume;
use crate::exec::Vol;
use crate::storage::model::{Storage, StorageType};
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;

/// The fastest a copy between nodes goes: a gigabit link, in MiB/s.
const LINK_MIB_S: f64 = 117.0;

impl Site {
    /// `PVE::Storage::storage_check_enabled($cfg, $storeid, $node)`: the storage is
    /// configured, enabled, and available on `node`.
    pub(crate) fn storage_check_enabled(
        &self,
        node: &str,
        sid: &str,
    ) -> Result<&Storage, PveError> {
        let anywhere = self
            .nodes
            .values()
            .find_map(|n| n.storages.get(sid))
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist\n")))?;
        if !anywhere.enabled {
            return Err(PveError::die(format!("storage '{sid}' is disabled\n")));
        }
        self.node(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| {
                PveError::die(format!(
                    "storage '{sid}' is not available on node '{node}'\n"
                ))
            })
    }

    /// The bytes a volume holds (0 when it is not found).
    pub(crate) fn volume_used(&self, node: &str, volid: &str) -> u64 {
        parse_volid(volid)
            .and_then(|(sid, volname)| {
                self.node(node)?
                    .storages
                    .get(sid)?
                    .volumes
                    .get(volname)
                    .map(|v| v.used)
            })
            .unwrap_or(0)
    }

    /// Seconds a copy of `bytes` from `from` (on `node`) to `to` (on `to_node`) takes: the
    /// slower storage, at most the link between nodes when they differ.
    pub(crate) fn copy_secs(
        &self,
        (node, from): (&str, &str),
        (to_node, to): (&str, &str),
        bytes: u64,
    ) -> f64 {
        let speed = |n: &str, sid: &str| {
            self.node(n)
                .and_then(|n| n.storages.get(sid))
                .map_or(LINK_MIB_S, |s| s.speed_mib_s)
        };
        let mut mib_s = speed(node, from).min(speed(to_node, to));
        if node != to_node {
            mib_s = mib_s.min(LINK_MIB_S);
        }
        (bytes.max(1 << 20) as f64 / (mib_s * 1024.0 * 1024.0)).max(0.2)
    }

    /// `PVE::LXC::copy_volume`: a volume of the mount point's size for `vmid` on `storage`
    /// (a subvolume on ZFS), the source's data copied in (`rsync`). The new volume's id
    /// and the mount point's new value.
    pub(crate) fn copy_ct_volume(
        &mut self,
        node: &str,
        key: &str,
        m: &MountPoint,
        vmid: u32,
        storage: &str,
        now: f64,
    ) -> Result<(String, String), String> {
        let used = self.volume_used(node, &m.volume);
        let size = m.size.unwrap_or(used);
        let (volid, value) = self.alloc_ct_volume(
            node,
            vmid,
            &NewVolume {
                key: key.to_string(),
                storage: storage.to_string(),
                size,
                mount: m.clone(),
            },
            now,
        )?;
        let written = parse_volid(&volid)
            .ok_or_else(|| format!("bad volume id '{volid}'"))
            .and_then(|(sid, volname)| {
                self.nodes
                    .get_mut(node)
                    .and_then(|n| n.storages.get_mut(sid))
                    .ok_or_else(|| format!("storage '{sid}' does not exist"))?
                    .write_data(volname, used)
            });
        let copied = written.and_then(|()| self.copy_ct_files(node, &m.volume, &volid));
        if let Err(e) = copied {
            if let Some((sid, volname)) = parse_volid(&volid) {
                self.remove_volume(node, sid, volname);
            }
            return Err(e);
        }
        Ok((volid, value))
    }

    /// The files of volume `from` into the new volume `to` (see `Disks::copy_rootdir`).
    fn copy_ct_files(&self, node: &str, from: &str, to: &str) -> Result<(), String> {
        let (Some((fs, fv)), Some((ts, tv))) = (parse_volid(from), parse_volid(to)) else {
            return Ok(());
        };
        self.disks_on(node)
            .copy_rootdir(Vol::new(node, fs, fv), Vol::new(node, ts, tv))
    }

    /// `vdisk_clone` of a template's base volume: a thin volume of the same size for
    /// `newid` on the same storage, sharing the base's data.
    pub(crate) fn link_ct_volume(
        &mut self,
        node: &str,
        key: &str,
        m: &MountPoint,
        newid: u32,
        now: f64,
    ) -> Result<(String, String), String> {
        let (sid, _) =
            parse_volid(&m.volume).ok_or_else(|| format!("bad volume id '{}'", m.volume))?;
        let size = m.size.unwrap_or(0);
        let (volid, value) = self.alloc_ct_volume(
            node,
            newid,
            &NewVolume {
                key: key.to_string(),
                storage: sid.to_string(),
                size,
                mount: m.clone(),
            },
            now,
        )?;
        // Sharing blocks is the storage's trick; where data is kept, the files are copied.
        if let Err(e) = self.copy_ct_files(node, &m.volume, &volid) {
            if let Some((sid, volname)) = parse_volid(&volid) {
                self.remove_volume(node, sid, volname);
            }
            return Err(e);
        }
        Ok((volid, value))
    }
}

/// Whether a container volume on `kind` can be a linked clone of its base: the storage
/// clones base volumes (`volume_has_feature('clone', …)`) into a raw image or subvolume
/// (`valid_target_formats`); the directory plugins' `clone_image` makes a qcow2 overlay,
/// so they answer no.
pub(crate) fn links_ct_volumes(kind: StorageType) -> bool {
    !matches!(
        kind,
        StorageType::Dir | StorageType::Nfs | StorageType::Cifs
    )
}

/// PVE's `HH:MM:SS` duration.
pub(crate) fn duration_text(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
