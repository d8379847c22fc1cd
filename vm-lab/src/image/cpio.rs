//! A writer for the `newc` cpio format the kernel unpacks as an initramfs.

use std::collections::BTreeMap;
use std::io::{self, Write};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// One entry of the image tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir {
        /// Permission bits, e.g. `0o755`.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits, e.g. `0o644`.
        mode: u32,
        /// Its contents.
        data: Vec<u8>,
    },
    /// A symbolic link.
    Symlink {
        /// Where it points, as stored in the archive.
        target: String,
    },
}

/// The image's file tree, keyed by absolute guest path. Parent directories are created on
/// insertion, so the archive always lists a directory before its contents.
#[derive(Debug, Default)]
pub struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Tree {
        Tree::default()
    }

    /// Add a directory with permission bits `mode` (e.g. `0o755`), and any missing parents.
    pub fn dir(&mut self, path: &str, mode: u32) {
        self.parents(path);
        self.entries.insert(normalize(path), Entry::Dir { mode });
    }

    /// Add a regular file with permission bits `mode` and contents `data`, replacing whatever was at
    /// `path`, and any missing parents.
    pub fn file(&mut self, path: &str, mode: u32, data: Vec<u8>) {
        self.parents(path);
        self.entries
            .insert(normalize(path), Entry::File { mode, data });
    }

    /// Add a symbolic link at `path` pointing to `target` (taken as is: relative or absolute).
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.parents(path);
        self.entries.insert(
            normalize(path),
            Entry::Symlink {
                target: target.to_string(),
            },
        );
    }

    /// Whether anything (file, directory or link) is at `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.entries.contains_key(&normalize(path))
    }

    /// The entry at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(&normalize(path))
    }

    /// Takes a regular file out of the tree (its mode and contents); `None` for anything else,
    /// which stays.
    pub fn take_file(&mut self, path: &str) -> Option<(u32, Vec<u8>)> {
        let key = normalize(path);
        match self.entries.get(&key) {
            Some(Entry::File { .. }) => match self.entries.remove(&key) {
                Some(Entry::File { mode, data }) => Some((mode, data)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Every entry with its absolute path, sorted by path (parents before their contents).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_str(), e))
    }

    /// Number of entries, directories included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the tree has no entries at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn parents(&mut self, path: &str) {
        let norm = normalize(path);
        let mut acc = String::new();
        let comps: Vec<&str> = norm.split('/').filter(|c| !c.is_empty()).collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            acc.push('/');
            acc.push_str(c);
            self.entries
                .entry(acc.clone())
                .or_insert(Entry::Dir { mode: 0o755 });
        }
    }

    /// Write the tree as a newc archive. Paths are sorted, so parents precede children.
    pub fn write_newc<W: Write>(&self, out: &mut W) -> io::Result<()> {
        for (ino, (path, entry)) in (1u32..).zip(self.entries.iter()) {
            let name = path.trim_start_matches('/');
            let (mode, data): (u32, &[u8]) = match entry {
                Entry::Dir { mode } => (S_IFDIR | mode, &[]),
                Entry::File { mode, data } => (S_IFREG | mode, data),
                Entry::Symlink { target } => (S_IFLNK | 0o777, target.as_bytes()),
            };
            let nlink = if matches!(entry, Entry::Dir { .. }) {
                2
            } else {
                1
            };
            write_header(out, ino, mode, nlink, data.len(), name)?;
            out.write_all(data)?;
            pad4(out, data.len())?;
        }
        write_header(out, 0, 0, 1, 0, "TRAILER!!!")?;
        Ok(())
    }
}

fn normalize(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    }
}

fn write_header<W: Write>(
    out: &mut W,
    ino: u32,
    mode: u32,
    nlink: u32,
    size: usize,
    name: &str,
) -> io::Result<()> {
    let namesize = name.len() + 1;
    let header = format!(
        "070701{ino:08x}{mode:08x}{uid:08x}{gid:08x}{nlink:08x}{mtime:08x}{size:08x}{dmaj:08x}{dmin:08x}{rmaj:08x}{rmin:08x}{namesize:08x}{check:08x}",
        uid = 0,
        gid = 0,
        mtime = 0,
        dmaj = 0,
        dmin = 0,
        rmaj = 0,
        rmin = 0,
        check = 0,
    );
    out.write_all(header.as_bytes())?;
    out.write_all(name.as_bytes())?;
    out.write_all(&[0])?;
    pad4(out, 110 + namesize)
}

fn pad4<W: Write>(out: &mut W, len: usize) -> io::Result<()> {
    let pad = (4 - len % 4) % 4;
    out.write_all(&[0u8; 3][..pad])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn take_file_moves_a_file_out_and_leaves_links_and_dirs() {
        let mut t = Tree::new();
        t.file("/usr/bin/etcd", 0o755, b"ELF".to_vec());
        t.symlink("/usr/bin/etcd2", "etcd");
        assert_eq!(t.take_file("/usr/bin/etcd"), Some((0o755, b"ELF".to_vec())));
        assert!(!t.contains("/usr/bin/etcd"));
        assert_eq!(t.take_file("/usr/bin/etcd"), None);
        assert_eq!(t.take_file("/usr/bin/etcd2"), None);
        assert!(t.contains("/usr/bin/etcd2"));
        assert_eq!(t.take_file("/usr/bin"), None);
        assert!(t.contains("/usr/bin"));
    }

    #[test]
    fn parents_are_created_and_sorted_first() {
        let mut t = Tree::new();
        t.file("/usr/sbin/qemu-ga", 0o755, b"x".to_vec());
        assert!(matches!(t.get("/usr"), Some(Entry::Dir { .. })));
        assert!(matches!(t.get("/usr/sbin"), Some(Entry::Dir { .. })));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn newc_layout_is_aligned_and_terminated() {
        let mut t = Tree::new();
        t.file("/init", 0o755, b"#!/bin/sh\n".to_vec());
        t.symlink("/sbin/init", "/bin/busybox");
        let mut buf = Vec::new();
        t.write_newc(&mut buf).unwrap();
        assert!(buf.starts_with(b"070701"));
        assert_eq!(buf.len() % 4, 0);
        let text = String::from_utf8_lossy(&buf);
        assert!(text.contains("init\0"));
        assert!(text.contains("/bin/busybox"));
        assert!(text.contains("TRAILER!!!"));
        // First header: mode of /init is a regular file 0755.
        assert_eq!(&buf[14..22], b"000081ed");
    }
}
