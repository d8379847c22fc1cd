//! Volume ids (`storage:volname`) and the volume-name grammar of the storage plugins.

use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use super::kinds::{Content, StorageType};

macro_rules! re {
    ($name:ident, $pat:expr) => {
        static $name: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new($pat).ok());
    };
}

re!(STORAGE_ID, r"^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]$");
re!(
    FILE_IMAGE,
    r"^(\d+)/((?:base|vm)-(\d+)-(?:disk-\d+|cloudinit)(?:\.(raw|qcow2|vmdk|subvol)))$"
);
re!(BLOCK_IMAGE, r"^(?:base|vm)-(\d+)-(?:disk-\d+|cloudinit)$");
re!(ISO, r"(?i)^iso/[^/]+\.(iso|img)$");
// `$VZTMPL_EXT_RE_1`: a plain `.tar` (an OCI image pulled from a registry) or a compressed one.
re!(VZTMPL, r"(?i)^vztmpl/[^/]+\.(?:tar|tar\.(gz|xz|zst|bz2))$");
re!(IMPORT, r"^import/([^/]+)\.(ova|ovf|qcow2|raw|vmdk)$");
re!(SNIPPET, r"^snippets/[^/]+$");
// `$BACKUP_EXT_RE_2`: `.tgz`, `.tar` or `.vma`, optionally compressed.
re!(
    BACKUP,
    r"^backup/[^/]+\.(tgz|(?:tar|vma)(?:\.(?:gz|lzo|zst|bz2))?)$"
);
re!(BACKUP_OWNER, r"^backup/vzdump-(?:openvz|lxc|qemu)-(\d+)-.+");

fn m(re: &LazyLock<Option<Regex>>, s: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(s))
}

/// Split `storage:volname`. `None` when it is not a volume id (e.g. an absolute path).
pub fn parse_volid(volid: &str) -> Option<(&str, &str)> {
    let (sid, name) = volid.split_once(':')?;
    let single_letter = sid.len() == 1 && sid.chars().all(|c| c.is_ascii_alphabetic());
    if !(m(&STORAGE_ID, sid) || single_letter) {
        return None;
    }
    if name.is_empty() {
        return None;
    }
    Some((sid, name))
}

/// `(vtype, owner vmid, format)` of a volume name on a storage of the given type.
pub fn parse_volname(kind: StorageType, volname: &str) -> Option<(Content, Option<u32>, String)> {
    if kind.is_file_based() {
        if let Some(c) = FILE_IMAGE.as_ref().and_then(|r| r.captures(volname)) {
            let vmid = c.get(1)?.as_str().parse().ok()?;
            let fmt = c.get(4).map_or("raw", |f| f.as_str()).to_string();
            return Some((Content::Images, Some(vmid), fmt));
        }
        if m(&ISO, volname) {
            return Some((Content::Iso, None, "raw".into()));
        }
        if let Some(c) = VZTMPL.as_ref().and_then(|r| r.captures(volname)) {
            // The listing's format: `tar`, or `t` and the compression (`tgz`, `tzst`).
            let format = c
                .get(1)
                .map_or("tar".into(), |z| format!("t{}", z.as_str()));
            return Some((Content::Vztmpl, None, format));
        }
        if let Some(c) = IMPORT.as_ref().and_then(|r| r.captures(volname)) {
            return Some((Content::Import, None, c.get(2)?.as_str().to_string()));
        }
        if m(&SNIPPET, volname) {
            return Some((Content::Snippets, None, "snippet".into()));
        }
        if let Some(c) = BACKUP.as_ref().and_then(|r| r.captures(volname)) {
            // Plugin.pm `parse_volname`: a `vzdump-<type>-<vmid>-…` archive belongs to that VM.
            let owner = BACKUP_OWNER
                .as_ref()
                .and_then(|r| r.captures(volname))
                .and_then(|o| o.get(1)?.as_str().parse().ok());
            return Some((Content::Backup, owner, c.get(1)?.as_str().to_string()));
        }
        None
    } else {
        let c = BLOCK_IMAGE.as_ref()?.captures(volname)?;
        let vmid = c.get(1)?.as_str().parse().ok()?;
        Some((Content::Images, Some(vmid), "raw".into()))
    }
}

/// The plugin's `die` when `parse_volname` cannot read a volume name.
pub fn unparsable(kind: StorageType, volname: &str) -> String {
    let plugin = match kind {
        StorageType::Lvm | StorageType::LvmThin => "lvm",
        StorageType::Rbd => "rbd",
        StorageType::ZfsPool => "zfs",
        _ => "directory",
    };
    format!("unable to parse {plugin} volume name '{volname}'\n")
}

/// Where a volume's file is in its storage's directory `dir`; `None` for a name that
/// would leave it.
pub fn volume_path(dir: &Path, kind: StorageType, volname: &str) -> Option<PathBuf> {
    let rel = Path::new(volname);
    let plain = !volname.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return None;
    }
    if !kind.is_file_based() {
        return (!volname.contains('/')).then(|| dir.join(volname));
    }
    let (top, rest) = volname.split_once('/')?;
    let sub = match top {
        "iso" => "template/iso",
        "vztmpl" => "template/cache",
        "import" => "import",
        "snippets" => "snippets",
        "backup" => "dump",
        _ => return Some(dir.join("images").join(volname)),
    };
    Some(dir.join(sub).join(rest))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn volnames() {
        use StorageType::*;
        assert_eq!(
            parse_volname(Dir, "iso/ubuntu-22.04-cloud.img").unwrap().0,
            Content::Iso
        );
        assert_eq!(
            parse_volname(Dir, "import/noble.qcow2").unwrap(),
            (Content::Import, None, "qcow2".into())
        );
        assert_eq!(
            parse_volname(Dir, "100/vm-100-disk-0.qcow2").unwrap(),
            (Content::Images, Some(100), "qcow2".into())
        );
        assert_eq!(
            parse_volname(LvmThin, "vm-9000-disk-1").unwrap(),
            (Content::Images, Some(9000), "raw".into())
        );
        assert!(parse_volname(LvmThin, "iso/x.iso").is_none());
        assert_eq!(
            parse_volname(Dir, "backup/vzdump-qemu-100-2025_01_02-03_04_05.vma.zst").unwrap(),
            (Content::Backup, Some(100), "vma.zst".into())
        );
        assert_eq!(
            parse_volname(Dir, "backup/my-copy.tgz").unwrap(),
            (Content::Backup, None, "tgz".into())
        );
        assert!(parse_volname(Dir, "backup/notes.txt").is_none());
        assert_eq!(
            parse_volname(Dir, "vztmpl/alpine_latest.tar").unwrap().2,
            "tar"
        );
        assert_eq!(
            parse_volname(Dir, "vztmpl/debian-12.tar.zst").unwrap().2,
            "tzst"
        );
        assert!(parse_volname(Dir, "import/x.img").is_none());
    }

    #[test]
    fn volids() {
        assert_eq!(parse_volid("local:iso/x.iso"), Some(("local", "iso/x.iso")));
        assert_eq!(parse_volid("/var/lib/x.img"), None);
        assert_eq!(parse_volid("local:"), None);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}") {
            let _ = parse_volid(&s);
            for k in [StorageType::Dir, StorageType::LvmThin, StorageType::CephFs] {
                let _ = parse_volname(k, &s);
            }
        }
        #[test]
        fn block_disk_names_round_trip(vmid in 100u32..999_999_999, n in 0u32..64) {
            let name = format!("vm-{vmid}-disk-{n}");
            prop_assert_eq!(parse_volname(StorageType::LvmThin, &name), Some((Content::Images, Some(vmid), "raw".to_string())));
        }
    }
}
