//! The guest image builder: a netboot kernel and initramfs made only from Debian packages.
//!
//! Packages come through `apt-get download` into the cache and are unpacked with `dpkg-deb -x`;
//! nothing is installed on the host. The initramfs (cpio newc, gzip) holds busybox, the guest
//! agent, dropbear, e2fsprogs, any extra packages' programs, their shared-library closure (read
//! from ELF headers), the virtio modules (ordered by their `.modinfo` dependencies), the lab's
//! SSH public key, user files, and a small `/init`. The output directory is named by a hash of
//! every input (package versions, init script, key, extra files), so a changed input rebuilds
//! and an unchanged one is reused.

pub mod cloud;
pub mod cpio;
pub mod debs;
pub mod elf;
pub mod template;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::spec::ImageSpec;
use cpio::Tree;

/// Bump when the builder's output changes for the same inputs.
const BUILDER_VERSION: &str = "vm-lab-image-5";
/// The Debian meta-package whose kernel the netboot image boots (resolved to a concrete
/// `linux-image-*` package through `apt-cache depends`).
pub const KERNEL_META_PACKAGE: &str = "linux-image-cloud-amd64";
/// Packages every image carries; their programs are copied in.
/// iproute2 brings `tc` for the per-link network faults (busybox's has no netem).
pub const BASE_PACKAGES: [&str; 5] = [
    "busybox-static",
    "qemu-guest-agent",
    "dropbear-bin",
    "e2fsprogs",
    "iproute2",
];
/// Kernel modules loaded at boot (their dependencies are added automatically).
/// `sch_prio`, `cls_u32` and `sch_netem` shape the lab traffic per peer (see `netfault`).
pub const MODULES: [&str; 8] = [
    "virtio_pci",
    "virtio_net",
    "virtio_blk",
    "virtio_console",
    "virtio_rng",
    "sch_prio",
    "cls_u32",
    "sch_netem",
];
const INIT_SCRIPT: &str = include_str!("init.sh");
const LIB_DIR: &str = "/lib/x86_64-linux-gnu";
pub(crate) const PROGRAM_DIRS: [&str; 4] = ["bin", "sbin", "usr/bin", "usr/sbin"];
const LIB_SEARCH: [&str; 5] = [
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib64",
    "lib",
    "usr/lib",
];

/// A root shell on the serial console, for `vm-lab shell NODE` (respawned when it exits).
pub(crate) const INITTAB: &str =
    "ttyS0::respawn:-/bin/sh\n::ctrlaltdel:/sbin/reboot -f\n::shutdown:/bin/sync\n";
pub(crate) const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
pub(crate) const GROUP: &str = "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n";
pub(crate) const SHELLS: &str = "/bin/sh\n/bin/ash\n";
/// qemu-ga's guest-shutdown runs `/sbin/shutdown -P|-r|-H +0 …`; busybox has no `shutdown`.
pub(crate) const SHUTDOWN: &str = "#!/bin/sh\nsync\ncase \"$1\" in\n  -r) exec reboot -f ;;\n  -H) exec halt -f ;;\n  *) exec poweroff -f ;;\nesac\n";

/// The built artifacts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Image {
    /// The image's directory in the cache, named by the hash of its inputs.
    pub dir: PathBuf,
    /// The kernel (`vmlinuz`), extracted from the Debian kernel package.
    pub kernel: PathBuf,
    /// The gzip-compressed `newc` cpio initramfs holding the whole root file system.
    pub initrd: PathBuf,
    /// The kernel's release string (`uname -r` in the guest), e.g. `6.1.0-27-cloud-amd64`.
    pub kernel_release: String,
    /// Package name → version of everything the image was made from.
    pub packages: BTreeMap<String, String>,
    /// Size of the initramfs file in bytes.
    pub initrd_bytes: u64,
}

/// What goes into an image besides the base.
#[derive(Debug, Clone)]
pub struct ImageRequest {
    /// Extra packages and files from the lab spec.
    pub spec: ImageSpec,
    /// Directory that relative `spec.files[].src` resolve against.
    pub base_dir: PathBuf,
    /// OpenSSH public key line baked into /root/.ssh/authorized_keys.
    pub ssh_pubkey: String,
}

/// The cache directory: `$VM_LAB_CACHE`, else `$XDG_CACHE_HOME/vm-lab`, else `~/.cache/vm-lab`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("VM_LAB_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("vm-lab");
    }
    if let Some(p) = std::env::var_os("HOME") {
        return PathBuf::from(p).join(".cache").join("vm-lab");
    }
    std::env::temp_dir().join(format!("vm-lab-cache-{}", nix::unistd::getuid()))
}

/// Build the image (or reuse the cached one). Blocking: call from `spawn_blocking`.
pub fn build(cache: &Path, req: &ImageRequest) -> Result<Image> {
    std::fs::create_dir_all(cache).map_err(|e| Error::io(cache, e))?;
    let _lock = lock(&cache.join("image.lock"))?;

    let mut roots: Vec<String> = BASE_PACKAGES.iter().map(|s| s.to_string()).collect();
    for p in &req.spec.packages {
        if !roots.contains(p) {
            roots.push(p.clone());
        }
    }
    let resolved = resolve(cache, &roots, Some(KERNEL_META_PACKAGE))?;
    let versions = resolved.versions.clone();

    let extra_files = read_extra_files(req)?;
    let hash = input_hash(&versions, &req.ssh_pubkey, &extra_files);
    let out_dir = cache.join("images").join(&hash[..16]);
    let manifest_path = out_dir.join("manifest.json");
    if let Ok(text) = std::fs::read_to_string(&manifest_path)
        && let Ok(img) = serde_json::from_str::<Image>(&text)
        && img.kernel.is_file()
        && img.initrd.is_file()
    {
        return Ok(img);
    }
    tracing::info!("building guest image {}", &hash[..16]);

    let mut tree = Tree::new();
    base_tree(&mut tree, &req.ssh_pubkey);
    let (kernel_file, release) = assemble(cache, &resolved, &roots, &MODULES, false, &mut tree)?;
    for (dst, mode, data) in extra_files {
        tree.file(&dst, mode, data);
    }

    let tmp = cache
        .join("images")
        .join(format!(".tmp-{}-{}", &hash[..16], std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    std::fs::copy(&kernel_file, tmp.join("vmlinuz")).map_err(|e| Error::io(&kernel_file, e))?;
    let initrd_tmp = tmp.join("initrd.img");
    write_initrd(&tree, &initrd_tmp)?;
    let initrd_bytes = std::fs::metadata(&initrd_tmp)
        .map_err(|e| Error::io(&initrd_tmp, e))?
        .len();
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::rename(&tmp, &out_dir).map_err(|e| Error::io(&out_dir, e))?;
    let img = Image {
        kernel: out_dir.join("vmlinuz"),
        initrd: out_dir.join("initrd.img"),
        dir: out_dir,
        kernel_release: release,
        packages: versions,
        initrd_bytes,
    };
    let text = serde_json::to_string_pretty(&img).map_err(|e| Error::Image(e.to_string()))?;
    std::fs::write(&manifest_path, text).map_err(|e| Error::io(&manifest_path, e))?;
    Ok(img)
}

/// Package names and versions an image is made from, as apt resolved them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Resolved {
    apt_stamp: String,
    /// The versioned kernel package (empty when no kernel was asked for).
    pub kernel_pkg: String,
    pub versions: BTreeMap<String, String>,
}

/// Resolve the kernel package (the one `kernel_meta` points at) and every package's candidate
/// version. apt's answers only change when its lists or configuration change, so they are
/// cached under a stamp of those files' modification times (this saves several `apt-cache`
/// runs per lab start).
pub(crate) fn resolve(
    cache: &Path,
    roots: &[String],
    kernel_meta: Option<&str>,
) -> Result<Resolved> {
    let stamp = apt_stamp();
    let key = hex::encode(Sha256::digest(
        format!(
            "{BUILDER_VERSION}\0{}\0{}",
            roots.join(","),
            kernel_meta.unwrap_or("")
        )
        .as_bytes(),
    ));
    let file = cache.join(format!("resolved-{}.json", &key[..16]));
    if let Ok(text) = std::fs::read_to_string(&file)
        && let Ok(r) = serde_json::from_str::<Resolved>(&text)
        && r.apt_stamp == stamp
    {
        return Ok(r);
    }
    let kernel_pkg = match kernel_meta {
        Some(meta) => debs::kernel_package(meta)?,
        None => String::new(),
    };
    let mut all = debs::closure(roots)?;
    if !kernel_pkg.is_empty() {
        all.insert(kernel_pkg.clone());
    }
    let versions = debs::candidate_versions(&all)?;
    let r = Resolved {
        apt_stamp: stamp,
        kernel_pkg,
        versions,
    };
    if let Ok(text) = serde_json::to_string_pretty(&r) {
        let _ = std::fs::write(&file, text);
    }
    Ok(r)
}

/// Fetch and unpack every resolved package, then fill `tree` with the roots' programs, their
/// shared-library closure and the kernel's `modules` (with their dependencies, load order in
/// `/etc/vmlab/modules`; with `skip_missing`, a module this kernel does not have is left out
/// instead of failing the build). Returns the kernel image file and its release.
pub(crate) fn assemble(
    cache: &Path,
    resolved: &Resolved,
    roots: &[String],
    modules: &[&str],
    skip_missing: bool,
    tree: &mut Tree,
) -> Result<(PathBuf, String)> {
    let roots_dir = assemble_programs(cache, resolved, roots, tree)?;
    let kernel_pkg = &resolved.kernel_pkg;
    let kernel_root = roots_dir
        .get(kernel_pkg)
        .ok_or_else(|| Error::Image(format!("{kernel_pkg} was not unpacked")))?;
    let (kernel_file, release) = find_kernel(kernel_root)?;
    add_modules(tree, kernel_root, &release, modules, skip_missing)?;
    Ok((kernel_file, release))
}

/// Fetch and unpack every resolved package, then fill `tree` with the roots' programs and
/// their shared-library closure (no kernel). Returns each package's unpacked directory.
pub(crate) fn assemble_programs(
    cache: &Path,
    resolved: &Resolved,
    roots: &[String],
    tree: &mut Tree,
) -> Result<BTreeMap<String, PathBuf>> {
    let debs = debs::fetch(&resolved.versions, &cache.join("debs"))?;
    let mut roots_dir: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (name, deb) in &debs {
        roots_dir.insert(name.clone(), debs::unpack(deb, &cache.join("unpacked"))?);
    }
    let mut elves = Vec::new();
    for root in roots {
        let dir = roots_dir
            .get(root)
            .ok_or_else(|| Error::Image(format!("{root} was not unpacked")))?;
        copy_programs(dir, tree, &mut elves)?;
    }
    let lib_index = library_index(roots_dir.values())?;
    copy_library_closure(tree, elves, &lib_index)?;
    Ok(roots_dir)
}

/// Modification times of what decides apt's candidates (lists, sources, preferences).
fn apt_stamp() -> String {
    [
        "/var/lib/apt/lists",
        "/etc/apt/sources.list",
        "/etc/apt/sources.list.d",
        "/etc/apt/preferences.d",
    ]
    .iter()
    .map(|p| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos().to_string())
            .unwrap_or_else(|| "-".into())
    })
    .collect::<Vec<_>>()
    .join(",")
}

/// An exclusive lock on a file in the cache, held while building (parallel tests share the cache).
pub(crate) fn lock(path: &Path) -> Result<nix::fcntl::Flock<File>> {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io(path, std::io::Error::from(e)))
}

fn input_hash(
    versions: &BTreeMap<String, String>,
    pubkey: &str,
    files: &[(String, u32, Vec<u8>)],
) -> String {
    let mut h = Sha256::new();
    h.update(BUILDER_VERSION);
    h.update(INIT_SCRIPT);
    for s in [INITTAB, PASSWD, GROUP, SHELLS, SHUTDOWN] {
        h.update(s);
    }
    h.update(MODULES.join(","));
    for (n, v) in versions {
        h.update(format!("{n}={v}\n"));
    }
    h.update(pubkey.trim());
    for (dst, mode, data) in files {
        h.update(format!("{dst}:{mode:o}:{}\n", data.len()));
        h.update(data);
    }
    hex::encode(h.finalize())
}

fn read_extra_files(req: &ImageRequest) -> Result<Vec<(String, u32, Vec<u8>)>> {
    let mut out = Vec::new();
    for f in &req.spec.files {
        let src = if f.src.is_absolute() {
            f.src.clone()
        } else {
            req.base_dir.join(&f.src)
        };
        let data = std::fs::read(&src).map_err(|e| Error::io(&src, e))?;
        let mode = match f.mode {
            Some(m) => m,
            None => {
                std::fs::metadata(&src)
                    .map_err(|e| Error::io(&src, e))?
                    .permissions()
                    .mode()
                    & 0o7777
            }
        };
        out.push((f.dst.clone(), mode, data));
    }
    Ok(out)
}

fn base_tree(tree: &mut Tree, pubkey: &str) {
    for d in [
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/var",
        "/mnt",
        "/data",
        "/etc/dropbear",
    ] {
        tree.dir(d, 0o755);
    }
    tree.dir("/tmp", 0o1777);
    tree.dir("/root", 0o700);
    tree.dir("/root/.ssh", 0o700);
    tree.file(
        "/root/.ssh/authorized_keys",
        0o600,
        format!("{}\n", pubkey.trim()).into_bytes(),
    );
    tree.file("/init", 0o755, INIT_SCRIPT.as_bytes().to_vec());
    tree.file("/etc/inittab", 0o644, INITTAB.as_bytes().to_vec());
    tree.file("/etc/passwd", 0o644, PASSWD.as_bytes().to_vec());
    tree.file("/etc/group", 0o644, GROUP.as_bytes().to_vec());
    tree.file("/etc/shells", 0o644, SHELLS.as_bytes().to_vec());
    tree.file("/sbin/shutdown", 0o755, SHUTDOWN.as_bytes().to_vec());
}

fn find_kernel(root: &Path) -> Result<(PathBuf, String)> {
    let boot = root.join("boot");
    let entries = std::fs::read_dir(&boot).map_err(|e| Error::io(&boot, e))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(release) = name.strip_prefix("vmlinuz-") {
            return Ok((e.path(), release.to_string()));
        }
    }
    Err(Error::Image(format!("no vmlinuz-* in {}", boot.display())))
}

/// Copy every program (file or symlink) of a package's bin/sbin dirs to the same guest path.
fn copy_programs(root: &Path, tree: &mut Tree, elves: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    for sub in PROGRAM_DIRS {
        let dir = root.join(sub);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let guest = format!("/{sub}/{name}");
            let meta = std::fs::symlink_metadata(&path).map_err(|err| Error::io(&path, err))?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(|err| Error::io(&path, err))?;
                tree.symlink(&guest, &target.to_string_lossy());
            } else if meta.is_file() {
                let data = std::fs::read(&path).map_err(|err| Error::io(&path, err))?;
                if elf::is_elf64(&data) {
                    elves.push((guest.clone(), data.clone()));
                }
                tree.file(&guest, meta.permissions().mode() & 0o7777, data);
            }
        }
    }
    Ok(())
}

/// Resolve a path inside an unpacked package, following symlinks within that package.
fn resolve_in(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..16 {
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if !meta.file_type().is_symlink() {
            return meta.is_file().then_some(p);
        }
        let target = std::fs::read_link(&p).ok()?;
        p = if target.is_absolute() {
            root.join(target.strip_prefix("/").ok()?)
        } else {
            p.parent()?.join(target)
        };
    }
    None
}

/// soname → real file, over every unpacked package's library directories.
fn library_index<'a>(roots: impl Iterator<Item = &'a PathBuf>) -> Result<HashMap<String, PathBuf>> {
    let mut index = HashMap::new();
    for root in roots {
        for sub in LIB_SEARCH {
            let dir = root.join(sub);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.contains(".so") {
                    continue;
                }
                if let Some(real) = resolve_in(root, &e.path()) {
                    index.entry(name).or_insert(real);
                }
            }
        }
    }
    Ok(index)
}

fn copy_library_closure(
    tree: &mut Tree,
    elves: Vec<(String, Vec<u8>)>,
    index: &HashMap<String, PathBuf>,
) -> Result<()> {
    let mut queue: VecDeque<(String, Vec<u8>)> = elves.into();
    let mut done: BTreeSet<String> = BTreeSet::new();
    while let Some((who, data)) = queue.pop_front() {
        let Some(info) = elf::dynamic_info(&data) else {
            continue;
        };
        if let Some(interp) = info.interpreter
            && !tree.contains(&interp)
        {
            let base = interp.rsplit('/').next().unwrap_or(&interp).to_string();
            let src = index.get(&base).ok_or_else(|| {
                Error::Image(format!(
                    "{who} needs the loader {interp}, which no package provides"
                ))
            })?;
            let bytes = std::fs::read(src).map_err(|e| Error::io(src, e))?;
            tree.file(&interp, 0o755, bytes.clone());
            tree.file(&format!("{LIB_DIR}/{base}"), 0o755, bytes);
            done.insert(base);
        }
        for soname in info.needed {
            if done.contains(&soname) {
                continue;
            }
            let src = index.get(&soname).ok_or_else(|| {
                Error::Image(format!(
                    "{who} needs {soname}, which no downloaded package provides"
                ))
            })?;
            let bytes = std::fs::read(src).map_err(|e| Error::io(src, e))?;
            tree.file(&format!("{LIB_DIR}/{soname}"), 0o755, bytes.clone());
            done.insert(soname.clone());
            queue.push_back((soname, bytes));
        }
    }
    Ok(())
}

/// Copy the wanted modules and their dependencies; write the load order to /etc/vmlab/modules.
fn add_modules(
    tree: &mut Tree,
    kernel_root: &Path,
    release: &str,
    modules: &[&str],
    skip_missing: bool,
) -> Result<()> {
    let mod_root = kernel_root.join("lib/modules").join(release);
    let builtin = std::fs::read_to_string(mod_root.join("modules.builtin")).unwrap_or_default();
    let builtin: BTreeSet<String> = builtin
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .map(|f| f.trim_end_matches(".ko").replace('-', "_"))
        .collect();
    let mut files: HashMap<String, PathBuf> = HashMap::new();
    walk_ko(&mod_root.join("kernel"), &mut files);

    let mut order: Vec<String> = Vec::new();
    let mut data: HashMap<String, Vec<u8>> = HashMap::new();
    fn visit(
        name: &str,
        files: &HashMap<String, PathBuf>,
        builtin: &BTreeSet<String>,
        order: &mut Vec<String>,
        data: &mut HashMap<String, Vec<u8>>,
        depth: usize,
    ) -> Result<()> {
        if order.iter().any(|n| n == name) || builtin.contains(name) {
            return Ok(());
        }
        if depth > 32 {
            return Err(Error::Image(format!("module dependency loop at {name}")));
        }
        let path = files.get(name).ok_or_else(|| {
            Error::Image(format!(
                "kernel module {name} is neither built in nor shipped"
            ))
        })?;
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let deps: Vec<String> = elf::modinfo(&bytes)
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k == "depends")
            .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
            .filter(|d| !d.is_empty())
            .collect();
        for d in deps {
            visit(&d.replace('-', "_"), files, builtin, order, data, depth + 1)?;
        }
        if !order.iter().any(|n| n == name) {
            order.push(name.to_string());
            data.insert(name.to_string(), bytes);
        }
        Ok(())
    }
    for m in modules {
        if skip_missing && !files.contains_key(*m) && !builtin.contains(*m) {
            tracing::debug!("kernel {release} has no module {m}: left out");
            continue;
        }
        visit(m, &files, &builtin, &mut order, &mut data, 0)?;
    }
    // For the cloud image's coldplug: each module's device aliases (`alias=` in `.modinfo`,
    // kernel globs) and the modules it needs, in load order.
    let mut aliases = String::new();
    let mut direct: HashMap<String, Vec<String>> = HashMap::new();
    for name in &order {
        if let Some(bytes) = data.remove(name) {
            for (k, v) in elf::modinfo(&bytes).unwrap_or_default() {
                match k.as_str() {
                    "alias" => aliases.push_str(&format!("{v} {name}\n")),
                    "depends" => direct.entry(name.clone()).or_default().extend(
                        v.split(',')
                            .filter(|d| !d.is_empty())
                            .map(|d| d.replace('-', "_")),
                    ),
                    _ => {}
                }
            }
            tree.file(&format!("/lib/modules/{name}.ko"), 0o644, bytes);
        }
    }
    let deps: String = order
        .iter()
        .map(|m| format!("{m}: {}\n", needs(m, &order, &direct).join(" ")))
        .collect();
    tree.file(
        "/etc/vmlab/modules",
        0o644,
        format!("{}\n", order.join("\n")).into_bytes(),
    );
    tree.file("/etc/vmlab/modules.alias", 0o644, aliases.into_bytes());
    tree.file("/etc/vmlab/modules.dep", 0o644, deps.into_bytes());
    Ok(())
}

/// Every module `name` needs (directly or not), in load `order`, itself excluded.
fn needs(name: &str, order: &[String], direct: &HashMap<String, Vec<String>>) -> Vec<String> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&str> = vec![name];
    while let Some(m) = stack.pop() {
        for d in direct.get(m).into_iter().flatten() {
            if seen.insert(d.as_str()) {
                stack.push(d.as_str());
            }
        }
    }
    order
        .iter()
        .filter(|m| m.as_str() != name && seen.contains(m.as_str()))
        .cloned()
        .collect()
}

fn walk_ko(dir: &Path, out: &mut HashMap<String, PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk_ko(&p, out);
        } else if let Some(stem) = p
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_suffix(".ko"))
        {
            out.insert(stem.replace('-', "_"), p);
        }
    }
}

pub(crate) fn write_initrd(tree: &Tree, path: &Path) -> Result<()> {
    let f = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut gz =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(f), flate2::Compression::fast());
    tree.write_newc(&mut gz).map_err(|e| Error::io(path, e))?;
    let mut w = gz.finish().map_err(|e| Error::io(path, e))?;
    w.flush().map_err(|e| Error::io(path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_changes_with_every_input() {
        let mut v = BTreeMap::new();
        v.insert("busybox-static".to_string(), "1".to_string());
        let a = input_hash(&v, "ssh-ed25519 AAAA k", &[]);
        assert_eq!(a, input_hash(&v, "ssh-ed25519 AAAA k", &[]));
        assert_ne!(a, input_hash(&v, "ssh-ed25519 BBBB k", &[]));
        let files = vec![("/etc/x".to_string(), 0o644, b"x".to_vec())];
        assert_ne!(a, input_hash(&v, "ssh-ed25519 AAAA k", &files));
        v.insert("busybox-static".to_string(), "2".to_string());
        assert_ne!(a, input_hash(&v, "ssh-ed25519 AAAA k", &[]));
    }

    #[test]
    fn base_tree_has_init_key_and_shutdown() {
        let mut t = Tree::new();
        base_tree(&mut t, "ssh-ed25519 AAAA lab");
        assert!(matches!(
            t.get("/init"),
            Some(cpio::Entry::File { mode: 0o755, .. })
        ));
        match t.get("/root/.ssh/authorized_keys") {
            Some(cpio::Entry::File { mode, data }) => {
                assert_eq!(*mode, 0o600);
                assert_eq!(data, b"ssh-ed25519 AAAA lab\n");
            }
            other => panic!("{other:?}"),
        }
        assert!(t.contains("/sbin/shutdown"));
    }

    #[test]
    fn init_script_prints_the_ready_marker() {
        assert!(INIT_SCRIPT.contains(crate::qemu_args::READY_MARKER));
        assert!(INIT_SCRIPT.contains("org.qemu.guest_agent.0"));
    }
}
