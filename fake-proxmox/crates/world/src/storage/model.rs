//! Storage state and rules: plugin types, content types, formats, capacity accounting.

use std::collections::BTreeSet;

use serde::Serialize;

// The kinds and the volume record live below the model (volume ids and the volume set use them).
pub use super::kinds::{Content, StorageType};
pub use super::volumes::{Volume, Volumes};

/// A storage as one node sees it: its `storage.cfg` entry, capacity and volumes.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Storage {
    /// Storage id (`local`, `local-lvm`).
    pub name: String,
    /// Plugin type.
    pub kind: StorageType,
    /// PVE's `path` of a directory-like storage, if any.
    pub path: Option<String>,
    /// Content types it holds.
    pub content: BTreeSet<Content>,
    /// Capacity in bytes.
    pub total: u64,
    /// Write speed, MiB/s.
    pub speed_mib_s: f64,
    /// Whether all nodes see the same storage.
    pub shared: bool,
    /// Whether the storage is enabled; a disabled one is not active.
    pub enabled: bool,
    /// Control-plane override: the storage reports no free space.
    pub full: bool,
    /// The storage's `prune-backups` retention (`keep-last=3,keep-daily=7`), if configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_backups: Option<String>,
    /// Its volumes by volume name.
    pub volumes: Volumes,
    /// The guest config inside each backup archive that has one, by volume name (what a
    /// restore recovers, `recover_config`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub archive_configs: std::collections::BTreeMap<String, String>,
    /// The scenario's `backing_dir`: on a node with simulated disks, the directory whose
    /// `snippets/` holds this storage's snippets as real files (a share a deployer also
    /// mounts, to place user-data PVE's API cannot upload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing_dir: Option<std::path::PathBuf>,
}

const MIB: u64 = 1024 * 1024;

impl Storage {
    /// Bytes in use (all of it when marked full), at most the capacity.
    pub fn used(&self) -> u64 {
        if self.full {
            return self.total;
        }
        self.volumes.used().min(self.total)
    }

    /// Bytes free.
    pub fn avail(&self) -> u64 {
        self.total.saturating_sub(self.used())
    }

    /// The content types as `storage.cfg` writes them (`images,iso`).
    pub fn content_string(&self) -> String {
        self.content
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether it holds content type `c`.
    pub fn supports(&self, c: Content) -> bool {
        self.content.contains(&c)
    }

    /// The volume id `storage:volname`.
    pub fn volid(&self, volname: &str) -> String {
        format!("{}:{}", self.name, volname)
    }

    /// A file-based volume's path on the node as PVE lays it out (`<path>/images/…`,
    /// `<path>/template/iso/…`, `<path>/dump/…`).
    pub fn file_path(&self, volname: &str) -> String {
        let dir = std::path::Path::new(self.path.as_deref().unwrap_or(""));
        super::volid::volume_path(dir, self.kind, volname)
            .map_or_else(|| volname.to_string(), |p| p.display().to_string())
    }

    /// Seconds it takes to write `bytes` to this storage.
    pub fn write_secs(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.speed_mib_s * MIB as f64)
    }

    /// The next free `vm-VMID-disk-N` name, in the storage's naming scheme.
    pub fn next_disk_name(&self, vmid: u32, fmt: &str) -> String {
        let mut n = 0;
        loop {
            let name = self.image_volname(vmid, &format!("vm-{vmid}-disk-{n}"), fmt);
            if !self.volumes.contains_key(&name) {
                return name;
            }
            n += 1;
        }
    }

    /// The volume name of image `base` of `vmid` in format `fmt`: `VMID/base.fmt` on a file-based
    /// storage, `base` otherwise.
    pub fn image_volname(&self, vmid: u32, base: &str, fmt: &str) -> String {
        if self.kind.is_file_based() {
            format!("{vmid}/{base}.{fmt}")
        } else {
            base.to_string()
        }
    }

    /// Resolve the format of a new image: explicit, else the storage default.
    pub fn resolve_format(&self, requested: Option<&str>) -> String {
        let (_, default) = self.kind.formats();
        requested
            .map(str::to_string)
            .unwrap_or_else(|| default.unwrap_or("raw").to_string())
    }

    /// The format a copy onto this storage gets: the requested one if the storage takes it,
    /// else the storage's default.
    pub fn supported_format(&self, requested: Option<&str>) -> String {
        let fmt = self.resolve_format(requested);
        if self.kind.formats().0.contains(&fmt.as_str()) {
            fmt
        } else {
            self.resolve_format(None)
        }
    }

    /// `alloc_image` as the storage plugin does it; errors are the plugin's `die` texts
    /// (without the task's `unable to create VM N - ` prefix).
    pub fn alloc_image(
        &mut self,
        vmid: u32,
        volname: String,
        fmt: &str,
        size: u64,
        now: u64,
    ) -> Result<String, String> {
        let (supported, _) = self.kind.formats();
        match self.kind {
            StorageType::LvmThin if fmt != "raw" => {
                return Err(format!(
                    "unsupported format '{fmt}' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102."
                ));
            }
            _ if !supported.contains(&fmt) => {
                return Err(format!("unsupported format '{fmt}'"));
            }
            _ => {}
        }
        let short = volname.rsplit('/').next().unwrap_or(&volname).to_string();
        let short = short
            .strip_suffix(&format!(".{fmt}"))
            .unwrap_or(&short)
            .to_string();
        let used = if self.kind.is_thick() {
            // LVM sizes are rounded up to 4 MiB extents.
            size.div_ceil(4 * MIB).saturating_mul(4 * MIB)
        } else if fmt == "qcow2" {
            // qcow2 with metadata preallocation: a small header grows with the size.
            (size / 8192).max(196_608)
        } else {
            0
        };
        if self.kind.is_thick() && used > self.avail() {
            let free_ext = self.avail() / (4 * MIB);
            let need_ext = used / (4 * MIB);
            return Err(format!(
                "lvcreate 'pve/{short}' error:   Volume group \"pve\" has insufficient free space ({free_ext} extents): {need_ext} required."
            ));
        }
        if self.full || used > self.avail() {
            return Err(self.no_space_text(&volname));
        }
        self.volumes.insert(
            volname.clone(),
            Volume {
                volname: volname.clone(),
                vtype: Content::Images,
                format: fmt.to_string(),
                size,
                used,
                vmid: Some(vmid),
                ctime: now,
                notes: None,
                protected: false,
                image: None,
                text: None,
            },
        );
        Ok(volname)
    }

    /// The error text PVE gives when `volname` does not fit: lvcreate's on LVM storages, qemu-img's
    /// otherwise.
    pub fn no_space_text(&self, volname: &str) -> String {
        let short = volname.rsplit('/').next().unwrap_or(volname);
        match self.kind {
            StorageType::LvmThin => format!(
                "lvcreate 'pve/{short}' error:   Cannot create new thin volume, free space in thin pool pve/data reached threshold."
            ),
            StorageType::Lvm => format!(
                "lvcreate 'pve/{short}' error:   Volume group \"pve\" has insufficient free space (0 extents): 1 required."
            ),
            _ => {
                let path = format!("{}/images/{volname}", self.path.as_deref().unwrap_or(""));
                format!(
                    "unable to create image: qemu-img: {path}: Could not create '{path}': No space left on device"
                )
            }
        }
    }

    /// Write `bytes` of data into an existing volume (an import or a download): fails when
    /// the storage cannot hold them.
    pub fn write_data(&mut self, volname: &str, bytes: u64) -> Result<(), String> {
        let avail = self.avail();
        let full = self.full;
        let kind = self.kind;
        let Some(v) = self.volumes.get(volname) else {
            return Err(format!("volume '{volname}' does not exist"));
        };
        let extra = if kind.is_thick() {
            0
        } else {
            bytes.saturating_sub(v.used)
        };
        if full || extra > avail {
            let at = avail.min(bytes);
            return Err(format!(
                "qemu-img: error while writing at byte {at}: No space left on device"
            ));
        }
        self.volumes.update(volname, |v| {
            v.used = v.used.max(if kind.is_thick() { v.used } else { bytes });
        });
        Ok(())
    }

    /// Storages that cannot hold disks of VMs answer a disk request like this (HTTP 400).
    pub fn check_images(&self) -> Result<(), crate::wire::PveError> {
        if !self.supports(Content::Images) {
            return Err(crate::wire::PveError::param(
                "storage",
                format!("storage '{}' does not support vm images", self.name),
            ));
        }
        Ok(())
    }
}

/// PVE's `format_size`-style disk size: whole GiB as `NG`, else `NM`, `NK`, or bytes.
pub fn format_size(bytes: u64) -> String {
    const K: u64 = 1024;
    if bytes == 0 {
        return "0".into();
    }
    if bytes.is_multiple_of(K * K * K * K) {
        format!("{}T", bytes / (K * K * K * K))
    } else if bytes.is_multiple_of(K * K * K) {
        format!("{}G", bytes / (K * K * K))
    } else if bytes.is_multiple_of(K * K) {
        format!("{}M", bytes / (K * K))
    } else if bytes.is_multiple_of(K) {
        format!("{}K", bytes / K)
    } else {
        bytes.to_string()
    }
}

/// Parse a drive `size=` value (`32G`, `512M`, `4096K`, bytes) into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let bytes = v * mult as f64;
    (bytes < 1.8e19).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn thin() -> Storage {
        Storage {
            name: "local-lvm".into(),
            kind: StorageType::LvmThin,
            path: None,
            content: [Content::Images].into_iter().collect(),
            total: 10 << 30,
            speed_mib_s: 100.0,
            shared: false,
            enabled: true,
            full: false,
            prune_backups: None,
            volumes: Volumes::default(),
            archive_configs: Default::default(),
            backing_dir: None,
        }
    }

    #[test]
    fn lvmthin_is_raw_only_with_pves_text() {
        let mut s = thin();
        let e = s
            .alloc_image(100, "vm-100-disk-0".into(), "qcow2", 1 << 30, 0)
            .unwrap_err();
        assert_eq!(
            e,
            "unsupported format 'qcow2' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102."
        );
        s.alloc_image(100, "vm-100-disk-0".into(), "raw", 1 << 30, 0)
            .unwrap();
        assert_eq!(s.next_disk_name(100, "raw"), "vm-100-disk-1");
    }

    #[test]
    fn thin_overprovisions_but_writes_fill_it() {
        let mut s = thin();
        s.alloc_image(100, "vm-100-disk-0".into(), "raw", 100 << 30, 0)
            .unwrap();
        assert_eq!(s.used(), 0);
        assert!(s.write_data("vm-100-disk-0", 20 << 30).is_err());
        s.write_data("vm-100-disk-0", 2 << 30).unwrap();
        assert_eq!(s.used(), 2 << 30);
    }

    #[test]
    fn thick_lvm_checks_free_space() {
        let mut s = thin();
        s.kind = StorageType::Lvm;
        let e = s
            .alloc_image(100, "vm-100-disk-0".into(), "raw", 11 << 30, 0)
            .unwrap_err();
        assert!(e.starts_with("lvcreate 'pve/vm-100-disk-0' error:   Volume group \"pve\" has insufficient free space (2560 extents): 2816 required."), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(format_size(32 << 30), "32G");
        assert_eq!(format_size(2361393152), "2252M");
        assert_eq!(format_size(4 << 20), "4M");
        assert_eq!(parse_size("32G"), Some(32 << 30));
        assert_eq!(parse_size("0.5G"), Some(512 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }

    proptest! {
        #[test]
        fn size_round_trip(n in 1u64..(1u64 << 50)) {
            prop_assert_eq!(parse_size(&format_size(n)), Some(n));
        }
        #[test]
        fn parse_size_never_panics(s in ".{0,12}") {
            let _ = parse_size(&s);
        }
    }
}
