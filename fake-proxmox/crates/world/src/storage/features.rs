//! What each storage type can do with a volume (`volume_has_feature` of the storage
//! plugins): snapshot, linked clone, full copy — by the volume's state (a template's base
//! image, the current image, or a snapshot of it) and, for file storages, its format.

use super::model::StorageType;

/// A storage operation the API can ask about (`GET …/feature`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// Take a snapshot of the volume.
    Snapshot,
    /// Make a linked clone of it.
    Clone,
    /// Make a full copy of it.
    Copy,
}

impl Feature {
    /// The feature a `feature=` parameter names; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<Feature> {
        match s {
            "snapshot" => Some(Feature::Snapshot),
            "clone" => Some(Feature::Clone),
            "copy" => Some(Feature::Copy),
            _ => None,
        }
    }
}

/// Which image of a volume the question is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeState {
    /// A template's `base-…` image.
    Base,
    /// The volume's current image.
    Current,
    /// A snapshot of the volume.
    Snap,
}

impl VolumeState {
    /// The state of `volname` (a snapshot of it when `snapshot`; a base image by its `base-` name).
    pub fn of(volname: &str, snapshot: bool) -> VolumeState {
        let short = volname.rsplit('/').next().unwrap_or(volname);
        if snapshot {
            VolumeState::Snap
        } else if short.starts_with("base-") {
            VolumeState::Base
        } else {
            VolumeState::Current
        }
    }
}

/// Whether `kind` supports `feature` on a volume in `state` of `format`.
pub fn has_feature(kind: StorageType, feature: Feature, state: VolumeState, format: &str) -> bool {
    use Feature::*;
    use VolumeState::*;
    let file_format = |formats: &[&str]| formats.contains(&format);
    match kind {
        // Plugin.pm's table, shared by the file-based plugins.
        StorageType::Dir | StorageType::Nfs | StorageType::Cifs => match (feature, state) {
            (Snapshot, Current | Snap) => file_format(&["qcow2"]),
            (Clone, Base) => file_format(&["qcow2", "raw", "vmdk"]),
            (Copy, Base | Current) => file_format(&["qcow2", "raw", "vmdk"]),
            (Copy, Snap) => file_format(&["qcow2"]),
            _ => false,
        },
        StorageType::Btrfs => match (feature, state) {
            (Snapshot, Current | Snap) => file_format(&["qcow2", "raw", "subvol"]),
            (Clone, Base) => file_format(&["qcow2", "raw", "vmdk", "subvol"]),
            (Copy, Base | Current) => file_format(&["qcow2", "raw", "vmdk", "subvol"]),
            (Copy, Snap) => file_format(&["qcow2", "raw", "subvol"]),
            _ => false,
        },
        StorageType::LvmThin => matches!(
            (feature, state),
            (Snapshot, Current) | (Clone, Base | Snap) | (Copy, _)
        ),
        StorageType::Lvm => matches!(feature, Copy),
        StorageType::Rbd => matches!(
            (feature, state),
            (Snapshot, Current | Snap) | (Clone, Base | Snap) | (Copy, _)
        ),
        StorageType::ZfsPool => matches!(
            (feature, state),
            (Snapshot, Current | Snap) | (Clone, Base) | (Copy, Base | Current)
        ),
        StorageType::CephFs => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugins_differ_as_pve_documents_them() {
        use Feature::*;
        use VolumeState::*;
        assert!(has_feature(StorageType::LvmThin, Snapshot, Current, "raw"));
        assert!(!has_feature(StorageType::Lvm, Snapshot, Current, "raw"));
        assert!(has_feature(StorageType::Lvm, Copy, Current, "raw"));
        assert!(!has_feature(StorageType::Dir, Snapshot, Current, "raw"));
        assert!(has_feature(StorageType::Dir, Snapshot, Current, "qcow2"));
        assert!(!has_feature(StorageType::LvmThin, Clone, Current, "raw"));
        assert!(has_feature(StorageType::LvmThin, Clone, Base, "raw"));
        assert!(!has_feature(StorageType::CephFs, Copy, Current, "raw"));
        assert_eq!(VolumeState::of("base-100-disk-0", false), Base);
        assert_eq!(VolumeState::of("100/base-100-disk-0.qcow2", false), Base);
        assert_eq!(VolumeState::of("vm-100-disk-0", true), Snap);
    }
}
