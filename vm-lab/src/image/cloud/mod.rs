//! The project's own cloud image: a small bootable disk that stands in for
//! `ubuntu-22.04-cloud.img`, made only from Debian packages.
//!
//! It boots through the firmware from its own disk (SeaBIOS → syslinux's MBR → syslinux on a
//! FAT partition → the kernel and an initramfs; no `-kernel`), so a VM that PVE's
//! `import-from` made from it boots the way a real cloud image does. The initramfs is the root
//! file system (tmpfs); its `/init` is a small NoCloud / config-drive reader (`init.sh`,
//! `reader.sh`, `yaml.awk`, `json.awk`), not the real cloud-init: it applies the hostname, the
//! users with their SSH keys and password hash, and the network configuration, starts the
//! guest agent and an SSH server, and prints [`READY_MARKER`] — or [`ERROR_MARKER`] lines when
//! the drive is missing or malformed. The disk's second partition is ext4 from the build on
//! (as a cloud image ships its root file system), grows with the disk on boot, and is mounted
//! at `/data`: the only place that survives a reboot.
//!
//! The kernel is Debian's cloud flavour by default (fast to boot; virtio, IDE, PVSCSI, NVMe,
//! vmxnet3) or, with [`CloudKernel::Generic`], the generic one, which also drives PVE's default
//! hardware — `e1000` NICs, the LSI SCSI controller (`sym53c8xx`), SATA (`ahci`) — but boots
//! about twice as slowly under TCG (an XZ-compressed kernel).
//!
//! Packages come through `apt-get download` into the cache like the netboot image's (syslinux's
//! boot code and installer included), so the only host tools it needs are mtools and
//! `mkfs.ext4` (e2fsprogs). The output is cached under a hash of every input.

pub mod disk;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::cpio::Tree;
use super::{GROUP, PROGRAM_DIRS, SHELLS, SHUTDOWN, assemble, debs, lock, resolve, write_initrd};
use crate::error::{Error, Result};
use disk::{BootFiles, Layout, Tools};

/// Bump when the builder's output changes for the same inputs.
const BUILDER_VERSION: &str = "cloud-image-3";
/// The file name of the image in its cache directory.
pub const IMAGE_FILE: &str = "provision-harness-cloud.img";
/// The serial line the guest prints once the agent and SSH server run (with what it applied).
pub const READY_MARKER: &str = "CLOUDIMG-READY";
/// The serial line prefix of every cloud-init failure (missing drive, malformed data).
pub const ERROR_MARKER: &str = "CLOUDINIT-ERROR:";
/// Which Debian kernel the image boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloudKernel {
    /// `linux-image-cloud-amd64` (LZ4, few built-in drivers: about twice as fast to boot under
    /// TCG as the generic one). Disks on virtio-blk, virtio-scsi, IDE, PVSCSI, NVMe; NICs
    /// virtio and vmxnet3. No driver for SATA (`ahci`), the LSI controllers (`sym53c8xx`, PVE's
    /// default `scsihw`), MegaRAID, e1000/e1000e or rtl8139: the guest names such devices on
    /// its console (`CLOUDIMG-UNSUPPORTED:`).
    #[default]
    Cloud,
    /// `linux-image-amd64` (XZ, slower to boot): every disk bus and NIC model PVE offers.
    Generic,
}

impl CloudKernel {
    /// The Debian meta-package this kernel comes from.
    pub fn meta_package(self) -> &'static str {
        match self {
            CloudKernel::Cloud => "linux-image-cloud-amd64",
            CloudKernel::Generic => "linux-image-amd64",
        }
    }
}
/// Programs in the initramfs.
pub const PACKAGES: [&str; 4] = [
    "busybox-static",
    "qemu-guest-agent",
    "dropbear-bin",
    "e2fsprogs",
];
/// The boot loader's packages: boot code and modules (`-common`), the mtools-based installer.
pub const SYSLINUX_PACKAGES: [&str; 2] = ["syslinux", "syslinux-common"];
/// Kernel modules the image ships (their dependencies added automatically): every disk bus
/// and NIC model PVE offers, the cloud-init drive's file systems, ext4 for `/data`, and ACPI's
/// power button for `shutdown`. Those the chosen kernel neither ships nor has built in are
/// left out (see [`CloudKernel`]). The init loads only those whose device aliases match the
/// VM's devices (coldplug, from `/etc/vmlab/modules.alias`), plus the disk, CD-ROM, file
/// system and power-button ones every boot uses.
pub const MODULES: [&str; 34] = [
    // buses and disks: virtio-blk, virtio-scsi, IDE, SATA, LSI, MegaRAID, PVSCSI, NVMe
    "virtio_pci",
    "virtio_blk",
    "virtio_scsi",
    "sd_mod",
    "sr_mod",
    "ata_piix",
    "ata_generic",
    "ahci",
    "sym53c8xx",
    "megaraid_sas",
    "vmw_pvscsi",
    "nvme",
    // NICs: virtio, e1000, e1000e, rtl8139, vmxnet3
    "virtio_net",
    "e1000",
    "e1000e",
    "8139cp",
    "8139too",
    "vmxnet3",
    // file systems
    "crc32c_generic",
    "crc32c_intel",
    "ext4",
    "isofs",
    "vfat",
    "nls_cp437",
    "nls_ascii",
    "nls_utf8",
    "nls_iso8859_1",
    // agent channel, entropy, power button, traffic shaping for network faults
    "virtio_console",
    "virtio_rng",
    "button",
    "evdev",
    "sch_prio",
    "cls_u32",
    "sch_netem",
];

const INIT_SCRIPT: &str = include_str!("init.sh");
const READER_SCRIPT: &str = include_str!("reader.sh");
const YAML_AWK: &str = include_str!("yaml.awk");
const JSON_AWK: &str = include_str!("json.awk");
const UDHCPC_SCRIPT: &str = include_str!("udhcpc.sh");
/// A root shell on the serial console, as in the netboot image.
const INITTAB: &str = "ttyS0::respawn:-/bin/sh\n::ctrlaltdel:/sbin/reboot -f\n::shutdown:/bin/sync\n::shutdown:/bin/umount -a -r\n";
const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const SHADOW: &str = "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n";
/// busybox acpid runs `/etc/acpi/PWRF/00000080` on the power button (ACPI shutdown, QMP
/// `system_powerdown`): power off.
const ACPI_POWER: &str = "#!/bin/sh\nexec /sbin/poweroff\n";
/// `cloud-init status [--wait] [--long]`, the one command provisioners run against cloud-init.
const CLOUD_INIT_STATUS: &str = include_str!("cloud-init-status.sh");
/// The kernel command line; `cloudimg.*` options are read by the init.
const CMDLINE: &str = "console=tty0 console=ttyS0,115200 panic=30 no_timer_check quiet";

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudImageRequest {
    /// The disk's virtual size; the data partition takes what the boot partition leaves.
    pub disk_mib: u64,
    /// Which Debian kernel the image boots; see [`CloudKernel`] for what each drives.
    pub kernel: CloudKernel,
    /// Debian packages baked in besides the image's own (with their dependencies), as a team
    /// bakes its software into a golden image: `etcd-server` for the cluster, say.
    pub packages: Vec<String>,
}

impl Default for CloudImageRequest {
    fn default() -> Self {
        CloudImageRequest {
            disk_mib: 1024,
            kernel: CloudKernel::default(),
            packages: Vec::new(),
        }
    }
}

/// The built image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CloudImage {
    /// The image's directory in the cache, named by the hash of its inputs.
    pub dir: PathBuf,
    /// The raw disk image (sparse): give it to `import-from`, or attach it to a VM.
    pub path: PathBuf,
    /// The disk's virtual size in bytes.
    pub disk_bytes: u64,
    /// Bytes the file really occupies (it is sparse).
    pub allocated_bytes: u64,
    /// The kernel's release string (`uname -r` in the guest).
    pub kernel_release: String,
    /// Size of the initramfs on the boot partition, in bytes.
    pub initrd_bytes: u64,
    /// Package name → version of everything the image was made from.
    pub packages: BTreeMap<String, String>,
    /// The modules the initramfs carries, in load order (dependencies included).
    pub modules: Vec<String>,
    /// The programs of the baked-in packages, which live on the data partition (as a real
    /// image's live on its root disk) and are linked into the running system from there.
    #[serde(default)]
    pub on_disk: Vec<String>,
}

/// Where the baked-in packages' programs live on the data partition (mounted at `/data`).
pub const ON_DISK_ROOT: &str = "/data/.cloudimg/image";

/// Build the cloud image (or reuse the cached one) under `cache/cloud/<hash>/`. Blocking:
/// call from `spawn_blocking`.
pub fn build(cache: &Path, req: &CloudImageRequest) -> Result<CloudImage> {
    std::fs::create_dir_all(cache).map_err(|e| Error::io(cache, e))?;
    let _lock = lock(&cache.join("cloud-image.lock"))?;
    let mut roots: Vec<String> = PACKAGES.iter().map(|s| s.to_string()).collect();
    for p in &req.packages {
        if !roots.contains(p) {
            roots.push(p.clone());
        }
    }
    let resolved = resolve(cache, &roots, Some(req.kernel.meta_package()))?;
    let boot_roots: Vec<String> = SYSLINUX_PACKAGES.iter().map(|s| s.to_string()).collect();
    let boot_pkgs = debs::candidate_versions(&boot_roots.iter().cloned().collect())?;

    let hash = input_hash(&resolved.versions, &boot_pkgs, req);
    let out_dir = cache.join("cloud").join(&hash[..16]);
    let manifest_path = out_dir.join("manifest.json");
    if let Ok(text) = std::fs::read_to_string(&manifest_path)
        && let Ok(img) = serde_json::from_str::<CloudImage>(&text)
        && img.path.is_file()
    {
        return Ok(img);
    }
    tracing::info!("building the cloud image {}", &hash[..16]);

    let mut tree = Tree::new();
    base_tree(&mut tree);
    let (kernel_file, release) = assemble(cache, &resolved, &roots, &MODULES, true, &mut tree)?;
    let modules = match tree.get("/etc/vmlab/modules") {
        Some(super::cpio::Entry::File { data, .. }) => String::from_utf8_lossy(data)
            .lines()
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };

    let debs = debs::fetch(&boot_pkgs, &cache.join("debs"))?;
    let mut unpacked = BTreeMap::new();
    for (name, deb) in &debs {
        unpacked.insert(name.clone(), debs::unpack(deb, &cache.join("unpacked"))?);
    }
    let syslinux = unpacked
        .get("syslinux")
        .map(|d| d.join("usr/bin/syslinux"))
        .ok_or_else(|| Error::Image("syslinux was not unpacked".into()))?;
    let mbr_bin = unpacked
        .get("syslinux-common")
        .map(|d| d.join("usr/lib/syslinux/mbr/mbr.bin"))
        .ok_or_else(|| Error::Image("syslinux-common was not unpacked".into()))?;
    let mbr_code = std::fs::read(&mbr_bin).map_err(|e| Error::io(&mbr_bin, e))?;

    let tmp = cache
        .join("cloud")
        .join(format!(".tmp-{}-{}", &hash[..16], std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let data_root = tmp.join("data-root");
    let on_disk = move_to_data_partition(cache, &resolved, &req.packages, &mut tree, &data_root)?;
    let initrd = tmp.join("initrd.img");
    write_initrd(&tree, &initrd)?;
    let initrd_bytes = file_len(&initrd)?;
    let kernel_bytes = file_len(&kernel_file)?;
    let layout = Layout::new(req.disk_mib, kernel_bytes + initrd_bytes)?;
    let cfg = disk::syslinux_cfg("vmlinuz", "initrd.img", CMDLINE);
    let image = tmp.join(IMAGE_FILE);
    disk::write_image(
        &image,
        &layout,
        &mbr_code,
        signature(&hash),
        &BootFiles {
            files: vec![
                ("vmlinuz", kernel_file.as_path()),
                ("initrd.img", initrd.as_path()),
            ],
            syslinux_cfg: &cfg,
        },
        Some(&data_root),
        &Tools {
            syslinux: &syslinux,
            mkfs_ext4: &host_tool("mkfs.ext4", "e2fsprogs")?,
        },
    )?;
    std::fs::remove_file(&initrd).map_err(|e| Error::io(&initrd, e))?;
    // Made only when a baked-in package had programs to move.
    if data_root.exists() {
        std::fs::remove_dir_all(&data_root).map_err(|e| Error::io(&data_root, e))?;
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::rename(&tmp, &out_dir).map_err(|e| Error::io(&out_dir, e))?;

    let path = out_dir.join(IMAGE_FILE);
    let mut packages = resolved.versions.clone();
    packages.extend(boot_pkgs);
    let img = CloudImage {
        allocated_bytes: allocated(&path)?,
        disk_bytes: file_len(&path)?,
        path,
        dir: out_dir,
        kernel_release: release,
        initrd_bytes,
        packages,
        modules,
        on_disk,
    };
    let text = serde_json::to_string_pretty(&img).map_err(|e| Error::Image(e.to_string()))?;
    std::fs::write(&manifest_path, text).map_err(|e| Error::io(&manifest_path, e))?;
    Ok(img)
}

/// A host program on `PATH` (or in `/sbin`, `/usr/sbin`, which a user's `PATH` may lack).
fn host_tool(name: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Image(format!("{name} not found: install {package}")))
}

fn file_len(p: &Path) -> Result<u64> {
    Ok(std::fs::metadata(p).map_err(|e| Error::io(p, e))?.len())
}

fn allocated(p: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(p).map_err(|e| Error::io(p, e))?.blocks() * 512)
}

/// Moves the programs of the baked-in `packages` (not their libraries, which stay beside the
/// base system's) out of the initramfs onto the data partition's tree under `data_root`, each
/// replaced by a link to where the guest sees it once `/data` is mounted. A team's software is
/// most of a golden image's bytes (etcd's two programs are 70% of this one's): in the initramfs
/// the firmware would read and the kernel inflate them on every boot, which under TCG is
/// seconds; on the disk only what runs is read. Returns the guest paths moved.
fn move_to_data_partition(
    cache: &Path,
    resolved: &super::Resolved,
    packages: &[String],
    tree: &mut Tree,
    data_root: &Path,
) -> Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt;
    let wanted: BTreeMap<String, String> = resolved
        .versions
        .iter()
        .filter(|(n, _)| packages.contains(n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let debs = debs::fetch(&wanted, &cache.join("debs"))?;
    let mut moved = Vec::new();
    for deb in debs.values() {
        let root = debs::unpack(deb, &cache.join("unpacked"))?;
        for sub in PROGRAM_DIRS {
            let Ok(entries) = std::fs::read_dir(root.join(sub)) else {
                continue;
            };
            for e in entries.flatten() {
                let guest = format!("/{sub}/{}", e.file_name().to_string_lossy());
                let Some((mode, data)) = tree.take_file(&guest) else {
                    continue;
                };
                let host = data_root
                    .join(ON_DISK_ROOT.trim_start_matches("/data/"))
                    .join(guest.trim_start_matches('/'));
                if let Some(dir) = host.parent() {
                    std::fs::create_dir_all(dir).map_err(|err| Error::io(dir, err))?;
                }
                std::fs::write(&host, data).map_err(|err| Error::io(&host, err))?;
                std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode))
                    .map_err(|err| Error::io(&host, err))?;
                tree.symlink(&guest, &format!("{ON_DISK_ROOT}{guest}"));
                moved.push(guest);
            }
        }
    }
    moved.sort();
    Ok(moved)
}

/// The MBR disk signature: from the input hash, so two builds of one input are identical.
fn signature(hash: &str) -> u32 {
    u32::from_str_radix(&hash[..8], 16).unwrap_or(0x636c_6f75)
}

fn input_hash(
    versions: &BTreeMap<String, String>,
    boot: &BTreeMap<String, String>,
    req: &CloudImageRequest,
) -> String {
    let mut h = Sha256::new();
    h.update(BUILDER_VERSION);
    for s in [
        INIT_SCRIPT,
        READER_SCRIPT,
        YAML_AWK,
        JSON_AWK,
        UDHCPC_SCRIPT,
        INITTAB,
        PASSWD,
        SHADOW,
        GROUP,
        SHELLS,
        SHUTDOWN,
        ACPI_POWER,
        CLOUD_INIT_STATUS,
        CMDLINE,
    ] {
        h.update(s);
        h.update([0]);
    }
    h.update(MODULES.join(","));
    for (n, v) in versions.iter().chain(boot) {
        h.update(format!("{n}={v}\n"));
    }
    h.update(req.disk_mib.to_le_bytes());
    h.update(req.kernel.meta_package());
    h.update(req.packages.join(","));
    hex::encode(h.finalize())
}

/// Everything in the initramfs besides the packages' programs, libraries and modules.
fn base_tree(tree: &mut Tree) {
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
        "/home",
    ] {
        tree.dir(d, 0o755);
    }
    tree.dir("/etc/dropbear", 0o700);
    tree.dir("/tmp", 0o1777);
    tree.dir("/root", 0o700);
    tree.file("/init", 0o755, INIT_SCRIPT.as_bytes().to_vec());
    tree.file(
        "/lib/cloudimg/reader.sh",
        0o644,
        READER_SCRIPT.as_bytes().to_vec(),
    );
    tree.file(
        "/lib/cloudimg/yaml.awk",
        0o644,
        YAML_AWK.as_bytes().to_vec(),
    );
    tree.file(
        "/lib/cloudimg/json.awk",
        0o644,
        JSON_AWK.as_bytes().to_vec(),
    );
    tree.file(
        "/usr/share/udhcpc/default.script",
        0o755,
        UDHCPC_SCRIPT.as_bytes().to_vec(),
    );
    tree.file(
        "/usr/bin/cloud-init",
        0o755,
        CLOUD_INIT_STATUS.as_bytes().to_vec(),
    );
    tree.file("/etc/inittab", 0o644, INITTAB.as_bytes().to_vec());
    tree.file("/etc/passwd", 0o644, PASSWD.as_bytes().to_vec());
    tree.file("/etc/shadow", 0o600, SHADOW.as_bytes().to_vec());
    tree.file("/etc/group", 0o644, GROUP.as_bytes().to_vec());
    tree.file("/etc/shells", 0o644, SHELLS.as_bytes().to_vec());
    tree.file(
        "/etc/acpi/PWRF/00000080",
        0o755,
        ACPI_POWER.as_bytes().to_vec(),
    );
    tree.file("/sbin/shutdown", 0o755, SHUTDOWN.as_bytes().to_vec());
}

/// The readers' files as the guest has them, for tests that run them on the host with
/// busybox: (path relative to `/lib/cloudimg`, content).
pub fn reader_files() -> [(&'static str, &'static str); 3] {
    [
        ("reader.sh", READER_SCRIPT),
        ("yaml.awk", YAML_AWK),
        ("json.awk", JSON_AWK),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_follows_inputs() {
        let mut v = BTreeMap::new();
        v.insert("busybox-static".to_string(), "1".to_string());
        let boot = BTreeMap::new();
        let r = CloudImageRequest::default();
        let a = input_hash(&v, &boot, &r);
        assert_eq!(a, input_hash(&v, &boot, &r));
        let bigger = CloudImageRequest {
            disk_mib: 2048,
            ..r.clone()
        };
        assert_ne!(a, input_hash(&v, &boot, &bigger));
        let generic = CloudImageRequest {
            kernel: CloudKernel::Generic,
            ..r.clone()
        };
        assert_ne!(a, input_hash(&v, &boot, &generic));
        let golden = CloudImageRequest {
            packages: vec!["etcd-server".to_string()],
            ..r.clone()
        };
        assert_ne!(a, input_hash(&v, &boot, &golden));
        v.insert("busybox-static".to_string(), "2".to_string());
        assert_ne!(a, input_hash(&v, &boot, &r));
    }

    #[test]
    fn init_prints_both_markers_and_opens_the_agent_port() {
        assert!(INIT_SCRIPT.contains(READY_MARKER));
        assert!(READER_SCRIPT.contains(ERROR_MARKER) || INIT_SCRIPT.contains(ERROR_MARKER));
        assert!(INIT_SCRIPT.contains("org.qemu.guest_agent.0"));
        assert!(INIT_SCRIPT.contains(disk::BOOT_LABEL));
    }

    #[test]
    fn base_tree_has_init_reader_and_no_baked_in_key() {
        let mut t = Tree::new();
        base_tree(&mut t);
        assert!(t.contains("/init"));
        assert!(t.contains("/lib/cloudimg/reader.sh"));
        assert!(t.contains("/usr/share/udhcpc/default.script"));
        assert!(!t.contains("/root/.ssh/authorized_keys"));
    }

    #[test]
    fn signature_is_stable() {
        assert_eq!(signature("deadbeef00"), 0xdead_beef);
    }
}
