//! The disks seam: every effect on the *data* of volumes, apart from the storage rules that
//! decide whether it happens.
//!
//! The storage and qemu models decide (formats a storage takes, capacity from the
//! scenario's numbers, PVE's errors, the task's plan) and then hand each effect on a
//! volume's data to a [`Disks`]: a volume allocated, freed, grown, copied into a new one
//! (`import-from`, clone, `move_disk`), a RAM state written, a file placed as a volume
//! (`download-url`, the scenario, the control API), a cloud-init drive written. Volumes
//! are addressed by node, storage and volume name ([`Vol`]), as local storages are per
//! node.
//!
//! [`SimulatedDisks`] (the default) keeps no data: every effect succeeds at once and the
//! models' records are all there is. [`super::FileDisks`] keeps each volume as a real
//! file (see its docs for the layout) and runs `qemu-img` and `genisoimage` on them, so a
//! guest executor can boot from [`Disks::path`].

use std::fmt;
use std::path::{Path, PathBuf};

use crate::qemu::model::Vm;
use crate::storage::model::StorageType;

/// A volume: the node it is on, its storage's id, its volume name (`100/vm-100-disk-0.qcow2`,
/// `vm-100-disk-0`, `iso/x.iso`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vol<'a> {
    /// The node holding the volume.
    pub node: &'a str,
    /// Storage id.
    pub storage: &'a str,
    /// Volume name within the storage (without the `storage:` prefix).
    pub volname: &'a str,
}

impl<'a> Vol<'a> {
    /// The volume `storage:volname` on `node`.
    pub fn new(node: &'a str, storage: &'a str, volname: &'a str) -> Vol<'a> {
        Vol {
            node,
            storage,
            volname,
        }
    }
}

impl fmt::Display for Vol<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} on {}", self.storage, self.volname, self.node)
    }
}

/// A storage as the world is built with it (site, node, id, plugin type), and the real
/// directory the scenario gives it, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageInfo {
    /// The site the storage belongs to.
    pub site: String,
    /// The node it is configured on.
    pub node: String,
    /// Storage id.
    pub name: String,
    /// Storage plugin type (`dir`, `lvmthin`, `zfspool`, ...).
    pub kind: StorageType,
    /// A host directory holding the storage's files, when the scenario gives one.
    pub backing_dir: Option<PathBuf>,
}

/// One copy of a volume's data into a freshly allocated one.
#[derive(Clone, Copy, Debug)]
pub struct CopyJob<'a> {
    /// The source volume.
    pub from: Vol<'a>,
    /// The source's format (`qcow2`, `raw`, `vmdk`).
    pub from_format: &'a str,
    /// The freshly allocated target volume.
    pub to: Vol<'a>,
    /// The target's format (`qcow2`, `raw`, `vmdk`).
    pub to_format: &'a str,
    /// The source's virtual size: what the progress lines count.
    pub size: u64,
    /// The bytes the source holds (what the storage accounting charges the target).
    pub used: u64,
}

/// What a copy did: the bytes written and the task log lines the copy printed (qemu-img's
/// progress as PVE logs it, its error lines); no lines when nothing really ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Bytes written to the target.
    pub bytes: u64,
    /// Task log lines the copy printed.
    pub log: Vec<String>,
}

/// A failed copy: the task error and the log lines printed before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyFailed {
    /// The task's error text.
    pub error: String,
    /// Task log lines printed before the failure.
    pub log: Vec<String>,
}

/// What a placed file turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Its virtual size (an image's disk size; a plain file's length).
    pub virtual_size: u64,
    /// Its length on disk (apparent size).
    pub file_size: u64,
}

/// The cloud-init image of a VM: the ISO's volume label and its files (path inside the
/// image, content), as `generate_nocloud` / `generate_configdrive2` lay them out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudInitImage {
    /// ISO volume label: `cidata` for NoCloud, `config-2` for ConfigDrive.
    pub label: &'static str,
    /// Files in the image: path inside it, content.
    pub files: Vec<(String, String)>,
}

/// Carries out effects on volume data. Every method is called after the models decided
/// that the effect happens and updated their records; an `Err` is the task's error (or,
/// for [`Disks::free`], a warning), as the tool would report it.
pub trait Disks: Send + Sync + fmt::Debug {
    /// The world is (re)built: forget every storage, drop the data of the previous world's
    /// volumes.
    fn reset(&self);
    /// A storage of the world being built.
    fn add_storage(&self, storage: &StorageInfo) -> Result<(), String>;
    /// A new, empty volume of `size` bytes in `format` (`alloc_image`).
    fn allocate(&self, vol: Vol<'_>, format: &str, size: u64) -> Result<(), String>;
    /// A volume is gone (`free_image`).
    fn free(&self, vol: Vol<'_>) -> Result<(), String>;
    /// A volume grows to `size` bytes (`qemu-img resize` on a stopped VM).
    fn resize(&self, vol: Vol<'_>, format: &str, size: u64) -> Result<(), String>;
    /// Copy a volume's data into a freshly allocated one (`import-from`, clone,
    /// `move_disk`: `qemu-img convert`).
    fn copy(&self, job: &CopyJob<'_>) -> Result<Copied, CopyFailed>;
    /// Write a running VM's RAM state of `size` bytes into the allocated volume `to` (a
    /// snapshot with `vmstate`): the bytes written.
    fn save_state(&self, vm: &Vm, to: Vol<'_>, size: u64) -> Result<u64, String>;
    /// A volume's data arrives: from the local file `source`, or (none) an empty image of
    /// `size` bytes in `format`. `None` when no data is kept (the records' numbers stand).
    fn place(
        &self,
        vol: Vol<'_>,
        format: &str,
        source: Option<&Path>,
        size: u64,
    ) -> Result<Option<Placed>, String>;
    /// A snippet's text (a `cicustom` part), at most `limit` bytes; `None` when no data is
    /// kept.
    fn read_snippet(&self, vol: Vol<'_>, limit: u64) -> Result<Option<String>, String>;
    /// Write the cloud-init image into its allocated volume of `size` bytes in `format`;
    /// the task log lines this printed.
    fn write_cloudinit(
        &self,
        vol: Vol<'_>,
        format: &str,
        size: u64,
        image: &CloudInitImage,
    ) -> Result<Vec<String>, String>;
    /// The real file that holds a volume, for a guest executor; `None` when no data is kept.
    fn path(&self, node: &str, storage: &str, volname: &str) -> Option<PathBuf>;
    /// A new, empty container volume (`rootfs`, `mpN`) of `size` bytes in `format`: what a
    /// container sees of it is a file system, so a disks seam that keeps data may keep a
    /// directory ([`Disks::path`] names it) rather than an image.
    fn allocate_rootdir(&self, vol: Vol<'_>, format: &str, size: u64) -> Result<(), String> {
        self.allocate(vol, format, size)
    }
    /// A container volume's files copied into a freshly allocated one (clone, move to
    /// another storage: PVE's `rsync` of the mounted volumes).
    fn copy_rootdir(&self, from: Vol<'_>, to: Vol<'_>) -> Result<(), String> {
        let _ = (from, to);
        Ok(())
    }
}

/// No data: every effect succeeds at once; the models' records are all there is.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimulatedDisks;

impl Disks for SimulatedDisks {
    fn reset(&self) {}

    fn add_storage(&self, _storage: &StorageInfo) -> Result<(), String> {
        Ok(())
    }

    fn allocate(&self, _vol: Vol<'_>, _format: &str, _size: u64) -> Result<(), String> {
        Ok(())
    }

    fn free(&self, _vol: Vol<'_>) -> Result<(), String> {
        Ok(())
    }

    fn resize(&self, _vol: Vol<'_>, _format: &str, _size: u64) -> Result<(), String> {
        Ok(())
    }

    /// Writes exactly the bytes the source holds.
    fn copy(&self, job: &CopyJob<'_>) -> Result<Copied, CopyFailed> {
        Ok(Copied {
            bytes: job.used,
            log: Vec::new(),
        })
    }

    fn save_state(&self, _vm: &Vm, _to: Vol<'_>, size: u64) -> Result<u64, String> {
        Ok(size)
    }

    fn place(
        &self,
        _vol: Vol<'_>,
        _format: &str,
        _source: Option<&Path>,
        _size: u64,
    ) -> Result<Option<Placed>, String> {
        Ok(None)
    }

    fn read_snippet(&self, _vol: Vol<'_>, _limit: u64) -> Result<Option<String>, String> {
        Ok(None)
    }

    fn write_cloudinit(
        &self,
        _vol: Vol<'_>,
        _format: &str,
        _size: u64,
        _image: &CloudInitImage,
    ) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    fn path(&self, _node: &str, _storage: &str, _volname: &str) -> Option<PathBuf> {
        None
    }
}

pub use crate::tasks::model::CopyLog;
