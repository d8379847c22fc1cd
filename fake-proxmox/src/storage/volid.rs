//! Volume ids (`storage:volname`) and the volume-name grammar of the storage plugins.

use std::sync::LazyLock;

use regex::Regex;

use super::model::{Content, StorageType};

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
re!(VZTMPL, r"^vztmpl/[^/]+\.tar\.(gz|xz|zst|bz2)$");
re!(IMPORT, r"^import/([^/]+)\.(ova|ovf|qcow2|raw|vmdk)$");
re!(SNIPPET, r"^snippets/[^/]+$");
re!(BACKUP, r"^backup/[^/]+$");

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
        if m(&VZTMPL, volname) {
            return Some((Content::Vztmpl, None, "tgz".into()));
        }
        if let Some(c) = IMPORT.as_ref().and_then(|r| r.captures(volname)) {
            return Some((Content::Import, None, c.get(2)?.as_str().to_string()));
        }
        if m(&SNIPPET, volname) {
            return Some((Content::Snippets, None, "snippet".into()));
        }
        if m(&BACKUP, volname) {
            return Some((Content::Backup, None, "backup".into()));
        }
        None
    } else {
        let c = BLOCK_IMAGE.as_ref()?.captures(volname)?;
        let vmid = c.get(1)?.as_str().parse().ok()?;
        Some((Content::Images, Some(vmid), "raw".into()))
    }
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
