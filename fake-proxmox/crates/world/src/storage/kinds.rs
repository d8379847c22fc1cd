//! What a storage is and what it holds: its plugin type and content types, with the rules
//! that depend only on those (formats, allocation, sharing).

use serde::{Deserialize, Serialize};

/// A storage plugin type (`type` in `storage.cfg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    /// A local directory.
    Dir,
    /// An NFS export, mounted.
    Nfs,
    /// An SMB/CIFS share, mounted.
    Cifs,
    /// A Btrfs file system (subvolumes for containers).
    Btrfs,
    /// A CephFS file system, mounted.
    #[serde(rename = "cephfs")]
    CephFs,
    /// LVM: thick logical volumes in a volume group.
    Lvm,
    /// LVM-thin: thin volumes in a thin pool.
    #[serde(rename = "lvmthin")]
    LvmThin,
    /// Ceph RBD block devices.
    Rbd,
    /// A ZFS pool: zvols and datasets.
    #[serde(rename = "zfspool")]
    ZfsPool,
}

/// A content type a storage may hold (`content` in `storage.cfg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// VM disk images.
    Images,
    /// Container root and mount point volumes.
    Rootdir,
    /// Container templates (`template/cache/`).
    Vztmpl,
    /// ISO images (`template/iso/`).
    Iso,
    /// vzdump backups (`dump/`).
    Backup,
    /// Snippets: hook scripts, cloud-init user-data (`snippets/`).
    Snippets,
    /// Disk images to import (`import/`).
    Import,
}

impl Content {
    /// The content type's PVE name (`images`, `rootdir`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Content::Images => "images",
            Content::Rootdir => "rootdir",
            Content::Vztmpl => "vztmpl",
            Content::Iso => "iso",
            Content::Backup => "backup",
            Content::Snippets => "snippets",
            Content::Import => "import",
        }
    }
    /// The content type a PVE name stands for; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<Content> {
        Some(match s {
            "images" => Content::Images,
            "rootdir" => Content::Rootdir,
            "vztmpl" => Content::Vztmpl,
            "iso" => Content::Iso,
            "backup" => Content::Backup,
            "snippets" => Content::Snippets,
            "import" => Content::Import,
            _ => return None,
        })
    }
}

impl StorageType {
    /// The plugin type's PVE name (`dir`, `lvmthin`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageType::Dir => "dir",
            StorageType::Nfs => "nfs",
            StorageType::Cifs => "cifs",
            StorageType::Btrfs => "btrfs",
            StorageType::CephFs => "cephfs",
            StorageType::Lvm => "lvm",
            StorageType::LvmThin => "lvmthin",
            StorageType::Rbd => "rbd",
            StorageType::ZfsPool => "zfspool",
        }
    }

    /// The plugin's `plugindata` content list (what may ever be enabled).
    pub fn allowed_content(self) -> &'static [Content] {
        use Content::*;
        match self {
            StorageType::Dir | StorageType::Nfs | StorageType::Cifs | StorageType::Btrfs => {
                &[Images, Rootdir, Vztmpl, Iso, Backup, Snippets, Import]
            }
            StorageType::CephFs => &[Vztmpl, Iso, Backup, Snippets, Import],
            StorageType::Lvm | StorageType::LvmThin | StorageType::Rbd | StorageType::ZfsPool => {
                &[Images, Rootdir]
            }
        }
    }

    /// Supported image formats and the default one.
    pub fn formats(self) -> (&'static [&'static str], Option<&'static str>) {
        match self {
            StorageType::Dir | StorageType::Nfs | StorageType::Cifs => {
                (&["raw", "qcow2", "vmdk"], Some("raw"))
            }
            StorageType::Btrfs | StorageType::ZfsPool => (&["raw", "subvol"], Some("raw")),
            StorageType::Lvm | StorageType::LvmThin | StorageType::Rbd => (&["raw"], Some("raw")),
            StorageType::CephFs => (&[], None),
        }
    }

    /// Has a filesystem path (can hold iso/vztmpl/import files, upload/download target).
    pub fn is_file_based(self) -> bool {
        matches!(
            self,
            StorageType::Dir
                | StorageType::Nfs
                | StorageType::Cifs
                | StorageType::Btrfs
                | StorageType::CephFs
        )
    }

    /// Thick LVM reserves the full size at allocation; everything else is sparse.
    pub fn is_thick(self) -> bool {
        self == StorageType::Lvm
    }
}
