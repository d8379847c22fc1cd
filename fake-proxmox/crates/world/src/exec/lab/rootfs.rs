//! A container's root file system as a host directory: read and written by paths inside it
//! (symlinks followed *within* it, as PVE's setup code runs chrooted), a template archive
//! unpacked into it as `PVE::LXC::Create::restore_tar_archive` does.

use std::collections::VecDeque;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lxc::setup::{Change, RootFs};

/// How many symlinks one path may go through (the kernel's limit).
const MAX_LINKS: usize = 40;

/// A root file system at `root` on the host.
#[derive(Clone, Debug)]
pub struct DirRoot {
    root: PathBuf,
}

impl DirRoot {
    /// The root file system at host directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> DirRoot {
        DirRoot { root: root.into() }
    }

    /// The host path of `path` inside the root: `..` stops at the root and every symlink is
    /// followed as the container would see it, so nothing outside the root is named. The
    /// last component need not exist.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let parts = |p: &str| -> VecDeque<String> {
            p.split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        };
        let mut todo = parts(path);
        let mut done: Vec<String> = Vec::new();
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_str() {
                "." => continue,
                ".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            let host = done
                .iter()
                .fold(self.root.clone(), |p, d| p.join(d))
                .join(&c);
            let is_link =
                std::fs::symlink_metadata(&host).is_ok_and(|m| m.file_type().is_symlink());
            if !is_link {
                done.push(c);
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(format!("too many levels of symbolic links in '{path}'"));
            }
            let target = std::fs::read_link(&host)
                .map_err(|e| format!("unable to read link '{}' - {e}", host.display()))?;
            let target = target.to_string_lossy();
            if target.starts_with('/') {
                done.clear();
            }
            let mut next = parts(&target);
            next.extend(todo.drain(..));
            todo = next;
        }
        Ok(done.iter().fold(self.root.clone(), |p, d| p.join(d)))
    }

    /// Carry out the setup code's changes.
    pub fn apply(&self, changes: &[Change]) -> Result<(), String> {
        for change in changes {
            match change {
                Change::MakeDir { path, mode } => {
                    let p = self.resolve(path)?;
                    if !p.is_dir() {
                        std::fs::create_dir_all(&p)
                            .map_err(|e| format!("unable to create directory '{path}' - {e}"))?;
                        set_mode(&p, *mode)?;
                    }
                }
                Change::Write {
                    path,
                    content,
                    mode,
                } => {
                    let p = self.resolve(path)?;
                    // PVE's `file_set_contents`: a temporary file renamed over the old one.
                    let tmp = p.with_file_name(format!(
                        ".{}.tmp.{}",
                        p.file_name()
                            .map(|n| n.to_string_lossy())
                            .unwrap_or_default(),
                        std::process::id()
                    ));
                    std::fs::write(&tmp, content)
                        .map_err(|e| format!("unable to open file '{path}' - {e}"))?;
                    set_mode(&tmp, *mode)?;
                    std::fs::rename(&tmp, &p)
                        .map_err(|e| format!("unable to rename '{path}' - {e}"))?;
                }
            }
        }
        Ok(())
    }
}

fn set_mode(p: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("unable to set the mode of '{}' - {e}", p.display()))
}

impl RootFs for DirRoot {
    fn read(&self, path: &str) -> Option<String> {
        let p = self.resolve(path).ok()?;
        p.is_file()
            .then(|| std::fs::read(&p).ok())
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn is_dir(&self, path: &str) -> bool {
        self.resolve(path).is_ok_and(|p| p.is_dir())
    }
}

/// `tar_compression_option`: the flag GNU tar needs for the archive's compression.
fn compression_flag(archive: &str) -> Result<Option<&'static str>, String> {
    let Some(pos) = archive.rfind(".tar") else {
        return Err(format!(
            "file does not look like a template archive: {archive}"
        ));
    };
    match &archive[pos + 4..] {
        "" => Ok(None),
        ".gz" => Ok(Some("-z")),
        ".bz2" => Ok(Some("-j")),
        ".xz" => Ok(Some("-J")),
        ".lzo" => Ok(Some("--lzop")),
        ".zst" => Ok(Some("--zstd")),
        other if !other.contains('/') => Err(format!("unrecognized compression format: {other}")),
        _ => Err(format!(
            "file does not look like a template archive: {archive}"
        )),
    }
}

/// The `tar` command PVE unpacks a template with (its user-namespace wrapper, ACLs and
/// extended attributes left out).
pub fn untar_args(archive: &Path, rootdir: &Path) -> Result<Vec<String>, String> {
    let name = archive.to_string_lossy().into_owned();
    let mut a = vec!["xpf".to_string(), name.clone()];
    if let Some(flag) = compression_flag(&name)? {
        a.push(flag.into());
    }
    a.extend(
        [
            "--totals",
            "--one-file-system",
            "-p",
            "--sparse",
            "--numeric-owner",
            "-C",
        ]
        .map(String::from),
    );
    a.push(rootdir.to_string_lossy().into_owned());
    a.extend(["--skip-old-files", "--anchored", "--exclude", "./dev/*"].map(String::from));
    Ok(a)
}

/// Unpack the template `archive` (volume `volid`) into `rootdir`. A template volume whose
/// file holds no data (the stand-in of its size a scenario's volume gets) is refused.
pub fn unpack(archive: &Path, volid: &str, rootdir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(archive).map_err(|e| {
        format!(
            "template '{volid}' has no file here ({}: {e})",
            archive.display()
        )
    })?;
    if meta.len() > 0 && meta.blocks() == 0 {
        return Err(format!(
            "template '{volid}' holds no data here: its file is a stand-in of its size \
             (a scenario's volume); upload the real archive to run containers from it"
        ));
    }
    let args = untar_args(archive, rootdir)?;
    let out = Command::new("tar")
        .args(&args)
        .output()
        .map_err(|e| format!("command 'tar {}' failed: {e}", args.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with("Total bytes read"))
        .unwrap_or("");
    let code = out
        .status
        .code()
        .map_or("got signal".to_string(), |c| format!("exit code {c}"));
    Err(format!(
        "command 'tar {}' failed: {code}{}",
        args.join(" "),
        if last.is_empty() {
            String::new()
        } else {
            format!(" ({last})")
        }
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/real-hosts", root.join("etc/hosts")).unwrap();
        std::os::unix::fs::symlink("../../../..", root.join("etc/up")).unwrap();
        let r = DirRoot::new(root);
        assert_eq!(
            r.resolve("/etc/hosts").unwrap(),
            root.join("etc/real-hosts")
        );
        assert_eq!(r.resolve("/etc/up/passwd").unwrap(), root.join("passwd"));
        assert_eq!(r.resolve("/../../x").unwrap(), root.join("x"));
        r.apply(&[Change::Write {
            path: "/etc/hosts".into(),
            content: "127.0.0.1 localhost\n".into(),
            mode: 0o644,
        }])
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("etc/real-hosts")).unwrap(),
            "127.0.0.1 localhost\n"
        );
        assert_eq!(
            r.read("/etc/hosts").as_deref(),
            Some("127.0.0.1 localhost\n")
        );
    }

    #[test]
    fn a_link_loop_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("b", tmp.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", tmp.path().join("b")).unwrap();
        assert!(DirRoot::new(tmp.path()).resolve("/a/x").is_err());
    }

    #[test]
    fn the_compression_follows_the_file_name() {
        assert_eq!(compression_flag("x.tar.gz"), Ok(Some("-z")));
        assert_eq!(compression_flag("x.tar.zst"), Ok(Some("--zstd")));
        assert_eq!(compression_flag("x.tar"), Ok(None));
        assert!(compression_flag("x.tar.rar").is_err());
        assert!(compression_flag("x.zip").is_err());
    }

    #[test]
    fn a_stand_in_template_is_refused_and_a_real_one_unpacked() {
        let tmp = tempfile::tempdir().unwrap();
        let standin = tmp.path().join("t.tar.gz");
        std::fs::File::create(&standin)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let e = unpack(&standin, "local:vztmpl/t.tar.gz", &root).unwrap_err();
        assert!(e.contains("holds no data"), "{e}");

        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("sbin")).unwrap();
        std::fs::create_dir_all(src.join("dev")).unwrap();
        std::fs::write(src.join("sbin/init"), "#!/bin/sh\n").unwrap();
        std::fs::write(src.join("dev/null-standin"), "").unwrap();
        let real = tmp.path().join("real.tar.gz");
        let ok = Command::new("tar")
            .arg("czf")
            .arg(&real)
            .arg("-C")
            .arg(&src)
            .arg(".")
            .status()
            .unwrap();
        assert!(ok.success());
        unpack(&real, "local:vztmpl/real.tar.gz", &root).unwrap();
        assert!(root.join("sbin/init").is_file());
        assert!(
            !root.join("dev/null-standin").exists(),
            "./dev/* is left out"
        );
    }
}
