//! The template's archive: a gzip-compressed tar of the root file system (relative paths,
//! owned by root, as in PVE's `vztmpl` files), and the reverse (unpacking one into a root
//! file system).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::image::cpio::{Entry, Tree};

/// The entries' modification time (fixed: one input, one archive).
const MTIME: u64 = 1_700_000_000;

/// Write `tree` as a `.tar.gz` at `path`.
pub(super) fn write_tar_gz(tree: &Tree, path: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::io(path, e);
    let f = File::create(path).map_err(io)?;
    let gz = flate2::write::GzEncoder::new(BufWriter::new(f), flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    let mut root = header(tar::EntryType::Directory, 0o755, 0);
    b.append_data(&mut root, "./", std::io::empty())
        .map_err(io)?;
    for (p, entry) in tree.entries() {
        let name = format!(".{p}");
        match entry {
            Entry::Dir { mode } => {
                let mut h = header(tar::EntryType::Directory, *mode, 0);
                b.append_data(&mut h, format!("{name}/"), std::io::empty())
                    .map_err(io)?;
            }
            Entry::File { mode, data } => {
                let mut h = header(tar::EntryType::Regular, *mode, data.len() as u64);
                b.append_data(&mut h, &name, data.as_slice()).map_err(io)?;
            }
            Entry::Symlink { target } => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                b.append_link(&mut h, &name, target).map_err(io)?;
            }
        }
    }
    let gz = b.into_inner().map_err(io)?;
    let mut w = gz.finish().map_err(io)?;
    w.flush().map_err(io)
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(MTIME);
    let _ = h.set_username("root");
    let _ = h.set_groupname("root");
    h
}

/// Unpack a template (`.tar.gz`) into `dest` (made when missing), keeping modes and links, and
/// ownership when running as root. What `pct create` does with a `vztmpl`.
pub fn unpack(archive: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest).map_err(|e| Error::io(dest, e))?;
    let f = File::open(archive).map_err(|e| Error::io(archive, e))?;
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(f)));
    a.set_preserve_permissions(true);
    a.set_preserve_ownerships(nix::unistd::geteuid().is_root());
    a.set_overwrite(true);
    a.unpack(dest).map_err(|e| {
        Error::Image(format!(
            "unpacking {} into {}: {e}",
            archive.display(),
            dest.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_round_trips_through_the_archive() {
        let mut t = Tree::new();
        t.dir("/tmp", 0o1777);
        t.file("/sbin/init", 0o755, b"#!/bin/sh\n".to_vec());
        t.file("/etc/shadow", 0o640, b"root:*:1:0:99999:7:::\n".to_vec());
        t.symlink("/bin/sh", "/bin/busybox");
        let dir = tempfile::tempdir().unwrap();
        let tgz = dir.path().join("t.tar.gz");
        write_tar_gz(&t, &tgz).unwrap();
        let root = dir.path().join("root");
        unpack(&tgz, &root).unwrap();
        let mode = |p: &str| {
            std::fs::symlink_metadata(root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(
            std::fs::read(root.join("sbin/init")).unwrap(),
            b"#!/bin/sh\n"
        );
        assert_eq!(mode("sbin/init"), 0o755);
        assert_eq!(mode("etc/shadow"), 0o640);
        assert_eq!(mode("tmp"), 0o1777);
        assert_eq!(
            std::fs::read_link(root.join("bin/sh")).unwrap(),
            Path::new("/bin/busybox")
        );
        // Relative paths, owned by root: what `tar x` in the container's root expects.
        let listing = std::process::Command::new("tar")
            .arg("tzf")
            .arg(&tgz)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&listing.stdout);
        assert!(
            text.lines()
                .any(|l| l.trim_start_matches("./") == "sbin/init"),
            "{text}"
        );
        assert!(text.lines().all(|l| !l.starts_with('/')), "{text}");
    }
}
