//! [`FileDisks`]: every volume is a real file, made and changed with `qemu-img`; cloud-init
//! drives are real ISO images made with `genisoimage`.
//!
//! # Layout
//! Each storage has a directory: the scenario's `backing_dir`, else
//! `<root>/<site>/<node>/<storage>/`. Directory-like storages (dir, nfs, cifs, btrfs,
//! cephfs) use PVE's layout in it: `images/<vmid>/vm-<vmid>-disk-N.<fmt>`,
//! `template/iso/`, `template/cache/` (container templates), `import/`, `snippets/`,
//! `dump/` (backups). Block storages (lvm, lvm-thin, rbd, zfs) are emulated: each volume is
//! a raw file named after the volume (`<dir>/vm-100-disk-0`). Files are sparse: capacity
//! still follows the scenario's numbers, not the host's disk. A container's volume (`rootfs`,
//! `mpN`) is a directory at the volume's path instead: the files its root sees, as a
//! directory storage's `subvol-` holds them (no image, no size limit; `resize` leaves it).
//!
//! Deviations: the copy runs when its task ends, under the world's lock (the task log
//! shows simulated progress while it runs and qemu-img's real lines once it is done; other
//! requests wait for a long copy); a running VM's disk is grown with `qemu-img resize`
//! too (PVE asks QEMU, `block_resize`); a RAM state is a sparse file
//! of its size (writing one needs the guest's QEMU); `/_fake/restore` of a world snapshot
//! does not bring back files.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::disks::{CloudInitImage, Copied, CopyFailed, CopyJob, Disks, Placed, StorageInfo, Vol};
use crate::qemu::model::Vm;
use crate::storage::model::{Content, StorageType};
use crate::storage::volid::{parse_volname, volume_path};
use crate::tasks::model::render_bytes;

/// Formats `qemu-img` makes and reads as disk images.
const IMAGE_FORMATS: &[&str] = &["raw", "qcow2", "vmdk"];

/// Real files under a root directory.
#[derive(Debug)]
pub struct FileDisks {
    root: PathBuf,
    /// A directory this value made (`FileDisks::temp`): removed when it is dropped.
    owns_root: bool,
    state: Mutex<Files>,
}

#[derive(Debug, Default)]
struct Files {
    /// Each storage's directory and type, by (node, storage).
    storages: BTreeMap<(String, String), (PathBuf, StorageType)>,
    /// The files this world's volumes made, removed on reset.
    made: BTreeSet<PathBuf>,
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl FileDisks {
    /// Volumes under `root` (`<root>/<site>/<node>/<storage>/` unless the scenario names a
    /// storage's directory); the files stay when the value is dropped.
    pub fn new(root: impl Into<PathBuf>) -> FileDisks {
        FileDisks {
            root: root.into(),
            owns_root: false,
            state: Mutex::new(Files::default()),
        }
    }

    /// Volumes under a new directory in the system's temp dir, removed with this value.
    pub fn temp() -> std::io::Result<FileDisks> {
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("fake-proxmox-disks-{}-{seq}", std::process::id()));
        std::fs::create_dir_all(&root)?;
        Ok(FileDisks {
            root,
            owns_root: true,
            state: Mutex::new(Files::default()),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The volume's file, or why there is none.
    fn file(&self, vol: Vol<'_>) -> Result<(PathBuf, StorageType), String> {
        let st = self.state.lock();
        let (dir, kind) = st
            .storages
            .get(&(vol.node.to_string(), vol.storage.to_string()))
            .ok_or_else(|| format!("storage '{}' does not exist", vol.storage))?;
        let path = volume_path(dir, *kind, vol.volname)
            .ok_or_else(|| format!("unable to parse volume name '{}'", vol.volname))?;
        Ok((path, *kind))
    }

    /// The volume's file, its directory made, remembered as this world's.
    fn new_file(&self, vol: Vol<'_>) -> Result<PathBuf, String> {
        let (path, _) = self.file(vol)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("unable to create directory '{}' - {e}", parent.display()))?;
        }
        self.state.lock().made.insert(path.clone());
        Ok(path)
    }
}

impl Drop for FileDisks {
    fn drop(&mut self) {
        if self.owns_root
            && let Err(e) = std::fs::remove_dir_all(&self.root)
        {
            tracing::warn!("removing {}: {e}", self.root.display());
        }
    }
}

/// The `qemu-img` binary: PVE's path where it is, else from `PATH`.
fn qemu_img() -> &'static str {
    if Path::new("/usr/bin/qemu-img").exists() {
        "/usr/bin/qemu-img"
    } else {
        "qemu-img"
    }
}

/// A command as PVE's `run_command` names it in errors.
fn shown(program: &str, args: &[String]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// What a finished command left: its output, and `Err` with PVE's text when it failed.
struct Ran {
    stdout: String,
    stderr: String,
    failed: Option<String>,
}

fn run(program: &str, args: &[String]) -> Ran {
    let cmd = shown(program, args);
    match Command::new(program).args(args).output() {
        Err(e) => Ran {
            stdout: String::new(),
            stderr: String::new(),
            failed: Some(format!("command '{cmd}' failed: {e}")),
        },
        Ok(out) => Ran {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            failed: (!out.status.success()).then(|| match out.status.code() {
                Some(c) => format!("command '{cmd}' failed: exit code {c}"),
                None => format!("command '{cmd}' failed: got signal"),
            }),
        },
    }
}

/// Run a command whose only output that matters is failure: its error with stderr first.
fn run_quiet(program: &str, args: &[String]) -> Result<(), String> {
    let r = run(program, args);
    match r.failed {
        None => Ok(()),
        Some(e) => {
            let err = r.stderr.trim_end();
            Err(if err.is_empty() {
                e
            } else {
                format!("{err}\n{e}")
            })
        }
    }
}

fn arg(s: impl AsRef<std::ffi::OsStr>) -> String {
    s.as_ref().to_string_lossy().into_owned()
}

/// `qemu-img create -f FMT PATH SIZE`.
pub fn create_args(path: &Path, format: &str, size: u64) -> Vec<String> {
    ["create", "-q", "-f", format]
        .map(String::from)
        .into_iter()
        .chain([arg(path), size.to_string()])
        .collect()
}

/// `qemu-img resize -f FMT PATH SIZE`.
pub fn resize_args(path: &Path, format: &str, size: u64) -> Vec<String> {
    ["resize", "-q", "-f", format]
        .map(String::from)
        .into_iter()
        .chain([arg(path), size.to_string()])
        .collect()
}

/// `qemu-img convert -p -n -f SRC -O DST FROM TO`, as `PVE::QemuServer::QemuImage::convert`
/// builds it (`-t none` onto ZFS).
pub fn convert_args(
    from: &Path,
    from_format: &str,
    to: &Path,
    to_format: &str,
    to_kind: StorageType,
) -> Vec<String> {
    let mut a: Vec<String> = ["convert", "-p", "-n"].map(String::from).into();
    if to_kind == StorageType::ZfsPool {
        a.extend(["-t".into(), "none".into()]);
    }
    a.extend([
        "-f".into(),
        from_format.into(),
        "-O".into(),
        to_format.into(),
    ]);
    a.extend([arg(from), arg(to)]);
    a
}

/// `genisoimage -quiet -iso-level 3 -J -R -V LABEL -o ISO DIR` (PVE's flags; it pipes the
/// image to `qemu-img dd` instead of writing a file).
pub fn genisoimage_args(label: &str, iso: &Path, dir: &Path) -> Vec<String> {
    ["-quiet", "-iso-level", "3", "-J", "-R", "-V", label, "-o"]
        .map(String::from)
        .into_iter()
        .chain([arg(iso), arg(dir)])
        .collect()
}

/// qemu-img's `-p` output (`    (12.50/100%)\r`) as PVE logs it: `transferred X of Y (P%)`,
/// `size` being the source's virtual size.
pub fn progress_lines(stdout: &str, size: u64) -> Vec<String> {
    stdout
        .split(['\r', '\n', '\u{8}'])
        .filter_map(|l| {
            let start = l.find('(')?;
            let rest = &l[start + 1..];
            let pct = rest.strip_suffix("/100%)")?.trim();
            let p: f64 = pct.parse().ok()?;
            let done = (size as f64 * p / 100.0) as u64;
            Some(format!(
                "transferred {} of {} ({pct}%)",
                render_bytes(done),
                render_bytes(size)
            ))
        })
        .collect()
}

/// `qemu-img info --output=json`: the virtual size of an image.
fn image_info(path: &Path, format: &str) -> Result<u64, String> {
    let args = ["info", "--output=json", "-f", format]
        .map(String::from)
        .into_iter()
        .chain([arg(path)])
        .collect::<Vec<_>>();
    let r = run(qemu_img(), &args);
    if let Some(e) = r.failed {
        return Err(format!("{}\n{e}", r.stderr.trim_end()));
    }
    let v: serde_json::Value = serde_json::from_str(&r.stdout)
        .map_err(|e| format!("unable to parse qemu-img info output - {e}"))?;
    v["virtual-size"]
        .as_u64()
        .ok_or_else(|| "qemu-img info gave no virtual-size".to_string())
}

/// Whether a volume of this name and format is a disk image `qemu-img` handles (images,
/// import sources), rather than a plain file (ISO, template, snippet, backup).
fn is_image(kind: StorageType, volname: &str, format: &str) -> bool {
    let content = parse_volname(kind, volname).map(|(c, _, _)| c);
    matches!(content, None | Some(Content::Images | Content::Import))
        && IMAGE_FORMATS.contains(&format)
}

impl Disks for FileDisks {
    fn reset(&self) {
        let mut st = self.state.lock();
        for f in std::mem::take(&mut st.made) {
            if let Err(e) = remove_volume_path(&f) {
                tracing::warn!("{e}");
            }
        }
        st.storages.clear();
    }

    fn add_storage(&self, s: &StorageInfo) -> Result<(), String> {
        let dir = s
            .backing_dir
            .clone()
            .unwrap_or_else(|| self.root.join(&s.site).join(&s.node).join(&s.name));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("unable to create directory '{}' - {e}", dir.display()))?;
        self.state
            .lock()
            .storages
            .insert((s.node.clone(), s.name.clone()), (dir, s.kind));
        Ok(())
    }

    fn allocate(&self, vol: Vol<'_>, format: &str, size: u64) -> Result<(), String> {
        let path = self.new_file(vol)?;
        run_quiet(qemu_img(), &create_args(&path, format, size))
    }

    fn free(&self, vol: Vol<'_>) -> Result<(), String> {
        let (path, _) = self.file(vol)?;
        self.state.lock().made.remove(&path);
        remove_volume_path(&path)
    }

    fn resize(&self, vol: Vol<'_>, format: &str, size: u64) -> Result<(), String> {
        let (path, _) = self.file(vol)?;
        if path.is_dir() {
            // A container volume's directory has no size of its own to grow.
            return Ok(());
        }
        run_quiet(qemu_img(), &resize_args(&path, format, size))
    }

    fn copy(&self, job: &CopyJob<'_>) -> Result<Copied, CopyFailed> {
        let failed = |error: String| CopyFailed {
            error,
            log: Vec::new(),
        };
        let (from, _) = self.file(job.from).map_err(failed)?;
        let (to, kind) = self.file(job.to).map_err(failed)?;
        if from.is_dir() {
            return copy_tree(&from, &to).map_err(failed).map(|()| Copied {
                bytes: job.used,
                log: Vec::new(),
            });
        }
        let args = convert_args(&from, job.from_format, &to, job.to_format, kind);
        let r = run(qemu_img(), &args);
        let mut log = progress_lines(&r.stdout, job.size);
        log.extend(r.stderr.lines().map(str::to_string));
        match r.failed {
            None => Ok(Copied {
                bytes: job.used,
                log,
            }),
            Some(e) => Err(CopyFailed {
                error: format!("copy failed: {e}"),
                log,
            }),
        }
    }

    fn save_state(&self, _vm: &Vm, _to: Vol<'_>, size: u64) -> Result<u64, String> {
        // The allocated sparse file stands for the state; the guest's QEMU writes a real one.
        Ok(size)
    }

    fn place(
        &self,
        vol: Vol<'_>,
        format: &str,
        source: Option<&Path>,
        size: u64,
    ) -> Result<Option<Placed>, String> {
        let (_, kind) = self.file(vol)?;
        let path = self.new_file(vol)?;
        let image = is_image(kind, vol.volname, format);
        match source {
            Some(src) => {
                std::fs::copy(src, &path).map_err(|e| {
                    format!(
                        "unable to copy '{}' to '{}' - {e}",
                        src.display(),
                        path.display()
                    )
                })?;
            }
            None if image => run_quiet(qemu_img(), &create_args(&path, format, size))?,
            None => {
                let f = std::fs::File::create(&path)
                    .map_err(|e| format!("unable to create '{}' - {e}", path.display()))?;
                // A snippet is text: an empty one rather than zeros.
                if !vol.volname.starts_with("snippets/") {
                    f.set_len(size)
                        .map_err(|e| format!("unable to size '{}' - {e}", path.display()))?;
                }
            }
        }
        let file_size = std::fs::metadata(&path)
            .map_err(|e| format!("unable to stat '{}' - {e}", path.display()))?
            .len();
        // Placing never checks an image (PVE's download does not): one qemu-img cannot
        // read counts as its file's length, and fails when a VM uses it.
        let virtual_size = match image.then(|| image_info(&path, format)) {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                tracing::warn!("{}: {e}", path.display());
                file_size
            }
            None => file_size,
        };
        Ok(Some(Placed {
            virtual_size,
            file_size,
        }))
    }

    fn read_snippet(&self, vol: Vol<'_>, limit: u64) -> Result<Option<String>, String> {
        let (path, _) = self.file(vol)?;
        let f = std::fs::File::open(&path)
            .map_err(|e| format!("can't open '{}' - {e}", path.display()))?;
        let mut buf = Vec::new();
        f.take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| format!("can't read '{}' - {e}", path.display()))?;
        if buf.len() as u64 > limit {
            return Err(format!("content '{}' too large", path.display()));
        }
        Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
    }

    fn write_cloudinit(
        &self,
        vol: Vol<'_>,
        format: &str,
        size: u64,
        image: &CloudInitImage,
    ) -> Result<Vec<String>, String> {
        let path = self.new_file(vol)?;
        let work = self.root.join(".cloudinit").join(format!(
            "{}-{}-{}",
            vol.node,
            vol.storage,
            vol.volname.replace('/', "_")
        ));
        let result = write_iso(&work, &path, format, size, image);
        if let Err(e) = std::fs::remove_dir_all(&work) {
            tracing::warn!("removing {}: {e}", work.display());
        }
        result.map(|()| vec!["generating cloud-init ISO".to_string()])
    }

    fn path(&self, node: &str, storage: &str, volname: &str) -> Option<PathBuf> {
        self.file(Vol::new(node, storage, volname))
            .ok()
            .map(|(p, _)| p)
    }

    /// A directory where the volume's file would be: what the container's root sees, as a
    /// directory storage's `subvol-` holds it and a mounted image would show it.
    fn allocate_rootdir(&self, vol: Vol<'_>, _format: &str, _size: u64) -> Result<(), String> {
        let path = self.new_file(vol)?;
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("unable to create directory '{}' - {e}", path.display()))
    }

    fn copy_rootdir(&self, from: Vol<'_>, to: Vol<'_>) -> Result<(), String> {
        let (from, _) = self.file(from)?;
        let (to, _) = self.file(to)?;
        if !from.is_dir() {
            // A volume of a world that kept no directory for it: nothing to copy.
            return Ok(());
        }
        copy_tree(&from, &to)
    }
}

/// Remove a volume's file or directory (a container's, whose tree may hold read-only
/// directories); one that is gone already is no error.
fn remove_volume_path(path: &Path) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("unable to remove '{}' - {e}", path.display())),
    };
    let removed = if meta.is_dir() {
        std::fs::remove_dir_all(path).or_else(|_| {
            make_writable(path);
            std::fs::remove_dir_all(path)
        })
    } else {
        std::fs::remove_file(path)
    };
    removed.map_err(|e| format!("unable to remove '{}' - {e}", path.display()))
}

/// Every directory below `dir` made writable by its owner, so its entries can go.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(meta) = std::fs::symlink_metadata(&d)
            && meta.is_dir()
        {
            let mode = meta.permissions().mode() | 0o700;
            let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode));
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
}

/// `from`'s files into the directory `to`, owners, modes and links kept (`cp -a`).
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to)
        .map_err(|e| format!("unable to create directory '{}' - {e}", to.display()))?;
    let mut src = from.as_os_str().to_owned();
    src.push("/.");
    run_quiet("cp", &["-a".to_string(), arg(&src), arg(to)])
        .map_err(|e| format!("copying '{}' failed: {e}", from.display()))
}

/// The image's files into `work/root`, the ISO made of them, written into a fresh volume
/// file of `size` bytes in `format`.
fn write_iso(
    work: &Path,
    volume: &Path,
    format: &str,
    size: u64,
    image: &CloudInitImage,
) -> Result<(), String> {
    let root = work.join("root");
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} '{}' - {e}", p.display());
    for (name, content) in &image.files {
        let p = root.join(name.trim_start_matches('/'));
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("unable to create directory", dir, e))?;
        }
        std::fs::write(&p, content).map_err(|e| io("unable to write", &p, e))?;
    }
    let iso = work.join("cloudinit.iso");
    run_quiet("genisoimage", &genisoimage_args(image.label, &iso, &root))?;
    let iso_len = std::fs::metadata(&iso)
        .map_err(|e| io("unable to stat", &iso, e))?
        .len();
    if iso_len > size {
        return Err(format!(
            "cloud-init ISO of {iso_len} bytes does not fit the volume of {size} bytes"
        ));
    }
    run_quiet(qemu_img(), &create_args(volume, format, size))?;
    let args: Vec<String> = ["convert", "-n", "-f", "raw", "-O", format]
        .map(String::from)
        .into_iter()
        .chain([arg(&iso), arg(volume)])
        .collect();
    run_quiet(qemu_img(), &args)
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
