//! The cloud image's disk: an MBR with syslinux's boot code, a bootable FAT partition holding
//! syslinux, its config, the kernel and the initramfs, and an ext4 partition filling the rest
//! of the disk (the guest grows it to the disk's end and mounts it at `/data`).
//!
//! Everything is written into a plain file, without root or loop devices: the partition table
//! by this module, the FAT file system by `mformat`, the files by `mcopy` (both from mtools,
//! at the partition's byte offset, `-i IMAGE@@OFFSET`), the boot loader by syslinux's
//! mtools-based installer (`syslinux --offset`), which needs the same mtools, and the ext4
//! file system by the host's `mkfs.ext4 -E offset=…`.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// Bytes in a disk sector, the unit partition tables count in.
pub const SECTOR: u64 = 512;
/// Bytes in a mebibyte.
pub const MIB: u64 = 1024 * 1024;
/// Partitions start on 1 MiB boundaries, as every partitioning tool does today.
pub const ALIGN_SECTORS: u64 = MIB / SECTOR;
/// The FAT volume label the guest's init finds its own disk by.
pub const BOOT_LABEL: &str = "CLOUDIMG";
/// The data partition's ext4 label.
pub const DATA_LABEL: &str = "cloudimg-data";
/// syslinux's MBR boot code is at most this long (the rest of the sector is the table).
pub const MBR_CODE_MAX: usize = 440;
/// Partition types: FAT16 (LBA) for the boot partition, Linux for the data partition.
const TYPE_FAT16_LBA: u8 = 0x0e;
const TYPE_LINUX: u8 = 0x83;

/// Where the two partitions lie, in 512-byte sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Size of the whole disk in sectors.
    pub disk_sectors: u64,
    /// First sector of the boot (FAT) partition: 1 MiB in.
    pub boot_start: u64,
    /// Length of the boot partition in sectors.
    pub boot_sectors: u64,
    /// First sector of the data (ext4) partition, right after the boot partition.
    pub data_start: u64,
    /// Length of the data partition in sectors: the rest of the disk.
    pub data_sectors: u64,
}

impl Layout {
    /// A disk of `disk_mib` whose boot partition holds `payload_bytes` of files (kernel,
    /// initramfs, syslinux) with room to spare; the data partition takes the rest, at least
    /// 16 MiB.
    pub fn new(disk_mib: u64, payload_bytes: u64) -> Result<Layout> {
        // FAT overhead, syslinux's files and a margin for a rebuilt initramfs: 25 % + 8 MiB.
        let boot_mib = (payload_bytes + payload_bytes / 4).div_ceil(MIB) + 8;
        let boot_mib = boot_mib.max(32);
        let need = 1 + boot_mib + 16;
        if disk_mib < need {
            return Err(Error::Image(format!(
                "a {disk_mib} MiB cloud image cannot hold a {boot_mib} MiB boot partition and a data partition; ask for at least {need} MiB"
            )));
        }
        if disk_mib * MIB / SECTOR > u64::from(u32::MAX) {
            return Err(Error::Image(format!(
                "{disk_mib} MiB is past what an MBR partition table can describe (2 TiB)"
            )));
        }
        let boot_start = ALIGN_SECTORS;
        let boot_sectors = boot_mib * ALIGN_SECTORS;
        let data_start = boot_start + boot_sectors;
        let disk_sectors = disk_mib * ALIGN_SECTORS;
        Ok(Layout {
            disk_sectors,
            boot_start,
            boot_sectors,
            data_start,
            data_sectors: disk_sectors - data_start,
        })
    }

    /// Byte offset of the boot partition in the image file (what mtools' `@@OFFSET` takes).
    pub fn boot_offset_bytes(&self) -> u64 {
        self.boot_start * SECTOR
    }

    /// Byte offset of the data partition in the image file (what `mkfs.ext4 -E offset=` takes).
    pub fn data_offset_bytes(&self) -> u64 {
        self.data_start * SECTOR
    }
}

/// A cylinder/head/sector triple for a sector number, as BIOSes expect in the table (255 heads,
/// 63 sectors per track; past cylinder 1023 the conventional "too far" value).
pub fn chs(lba: u64) -> [u8; 3] {
    const HEADS: u64 = 255;
    const SPT: u64 = 63;
    let cyl = lba / (HEADS * SPT);
    if cyl > 1023 {
        return [0xfe, 0xff, 0xff];
    }
    let head = (lba / SPT) % HEADS;
    let sector = lba % SPT + 1;
    [
        head as u8,
        (sector as u8) | (((cyl >> 8) as u8 & 0x03) << 6),
        (cyl & 0xff) as u8,
    ]
}

fn entry(bootable: bool, kind: u8, start: u64, sectors: u64) -> [u8; 16] {
    let mut e = [0u8; 16];
    e[0] = if bootable { 0x80 } else { 0 };
    e[1..4].copy_from_slice(&chs(start));
    e[4] = kind;
    e[5..8].copy_from_slice(&chs(start + sectors - 1));
    // Layout::new keeps every figure below 2^32 sectors.
    e[8..12].copy_from_slice(&(start as u32).to_le_bytes());
    e[12..16].copy_from_slice(&(sectors as u32).to_le_bytes());
    e
}

/// The first sector: boot code, disk signature, two partition entries, the 0x55AA mark.
pub fn mbr(boot_code: &[u8], signature: u32, layout: &Layout) -> Result<[u8; 512]> {
    if boot_code.len() > MBR_CODE_MAX {
        return Err(Error::Image(format!(
            "MBR boot code is {} bytes, over {MBR_CODE_MAX}",
            boot_code.len()
        )));
    }
    let mut s = [0u8; 512];
    s[..boot_code.len()].copy_from_slice(boot_code);
    s[440..444].copy_from_slice(&signature.to_le_bytes());
    s[446..462].copy_from_slice(&entry(
        true,
        TYPE_FAT16_LBA,
        layout.boot_start,
        layout.boot_sectors,
    ));
    s[462..478].copy_from_slice(&entry(
        false,
        TYPE_LINUX,
        layout.data_start,
        layout.data_sectors,
    ));
    s[510] = 0x55;
    s[511] = 0xaa;
    Ok(s)
}

/// The boot loader's configuration: straight to the kernel, console on the first serial port
/// (and on the screen), no prompt.
pub fn syslinux_cfg(kernel: &str, initrd: &str, cmdline: &str) -> String {
    format!(
        "SERIAL 0 115200\nDEFAULT cloud\nPROMPT 0\nTIMEOUT 0\n\nLABEL cloud\n  LINUX /{kernel}\n  INITRD /{initrd}\n  APPEND {cmdline}\n"
    )
}

/// The files the boot partition receives: (name on the FAT, source path).
pub struct BootFiles<'a> {
    /// (name on the FAT, host path) of each file to copy, e.g. the kernel and the initramfs.
    pub files: Vec<(&'a str, &'a Path)>,
    /// The contents of `syslinux.cfg`, from [`syslinux_cfg`].
    pub syslinux_cfg: &'a str,
}

/// Host programs the writer runs; the syslinux installer comes from the unpacked package.
pub struct Tools<'a> {
    /// The mtools-based `syslinux` installer from the unpacked syslinux package.
    pub syslinux: &'a Path,
    /// The host's `mkfs.ext4`, for the data partition.
    pub mkfs_ext4: &'a Path,
}

/// Write the whole image to `out` (a new sparse file of the layout's size).
pub fn write_image(
    out: &Path,
    layout: &Layout,
    mbr_code: &[u8],
    signature: u32,
    boot: &BootFiles<'_>,
    data: Option<&Path>,
    tools: &Tools<'_>,
) -> Result<()> {
    let sector0 = mbr(mbr_code, signature, layout)?;
    {
        let mut f = std::fs::File::create(out).map_err(|e| Error::io(out, e))?;
        f.set_len(layout.disk_sectors * SECTOR)
            .map_err(|e| Error::io(out, e))?;
        f.seek(SeekFrom::Start(0)).map_err(|e| Error::io(out, e))?;
        f.write_all(&sector0).map_err(|e| Error::io(out, e))?;
        f.sync_all().map_err(|e| Error::io(out, e))?;
    }
    let target = format!("{}@@{}", out.display(), layout.boot_offset_bytes());
    run(
        Command::new("mformat")
            .arg("-i")
            .arg(&target)
            .args(["-T", &layout.boot_sectors.to_string()])
            .args(["-h", "255", "-s", "63"])
            .args(["-H", &layout.boot_start.to_string()])
            .args(["-v", BOOT_LABEL, "::"]),
        "mformat (mtools)",
    )?;
    run(
        Command::new(tools.syslinux)
            .args(["--offset", &layout.boot_offset_bytes().to_string()])
            .arg("--install")
            .arg(out),
        "syslinux --install",
    )?;
    let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let cfg = dir.path().join("syslinux.cfg");
    std::fs::write(&cfg, boot.syslinux_cfg).map_err(|e| Error::io(&cfg, e))?;
    let mut files: Vec<(&str, &Path)> = boot.files.clone();
    files.push(("syslinux.cfg", cfg.as_path()));
    for (name, src) in files {
        run(
            Command::new("mcopy")
                .arg("-i")
                .arg(&target)
                .arg("-o")
                .arg(src)
                .arg(format!("::{name}")),
            "mcopy (mtools)",
        )?;
    }
    // The data partition ships as ext4, as a cloud image ships its root file system: the guest
    // only grows it. Inode tables stay holes (lazy init; the guest mounts with
    // `noinit_itable`), so the image stays sparse.
    // `-d`: populated from a directory (what the image keeps on its disk), as made.
    let mut mkfs = Command::new(tools.mkfs_ext4);
    mkfs.args(["-q", "-F", "-L", DATA_LABEL, "-E"]).arg(format!(
        "offset={},lazy_itable_init=1,lazy_journal_init=1",
        layout.data_offset_bytes()
    ));
    if let Some(dir) = data.filter(|d| d.is_dir()) {
        mkfs.arg("-d").arg(dir);
    }
    mkfs.arg(out)
        .arg(format!("{}k", layout.data_sectors * SECTOR / 1024));
    run(&mut mkfs, "mkfs.ext4 (e2fsprogs)")?;
    Ok(())
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    // mtools refuses images whose geometry it did not make unless told not to check.
    cmd.env("MTOOLS_SKIP_CHECK", "1");
    let out = cmd
        .output()
        .map_err(|e| Error::tool(what, format!("cannot run it (is it installed?): {e}")))?;
    if !out.status.success() {
        return Err(Error::tool(
            what,
            format!(
                "{}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn layout_is_aligned_and_fills_the_disk() {
        let l = Layout::new(1024, 40 * MIB).unwrap();
        assert_eq!(l.boot_start, 2048);
        assert_eq!(l.boot_start % ALIGN_SECTORS, 0);
        assert_eq!(l.data_start % ALIGN_SECTORS, 0);
        assert_eq!(l.data_start, l.boot_start + l.boot_sectors);
        assert_eq!(l.data_start + l.data_sectors, l.disk_sectors);
        assert_eq!(l.disk_sectors, 1024 * 2048);
        // 40 MiB of files need room: 25 % margin + 8 MiB, whole MiB.
        assert_eq!(l.boot_sectors, (50 + 8) * 2048);
        assert_eq!(l.boot_offset_bytes(), MIB);
    }

    #[test]
    fn small_payload_still_gets_a_usable_boot_partition() {
        let l = Layout::new(128, 1000).unwrap();
        assert_eq!(l.boot_sectors, 32 * 2048);
    }

    #[test]
    fn a_disk_too_small_or_too_large_is_refused_with_the_minimum() {
        let e = Layout::new(40, 40 * MIB).unwrap_err().to_string();
        assert!(e.contains("at least 75 MiB"), "{e}");
        assert!(Layout::new(3 * 1024 * 1024, MIB).is_err());
    }

    #[test]
    fn chs_matches_the_classic_geometry() {
        assert_eq!(chs(0), [0, 1, 0]);
        assert_eq!(chs(2048), [32, 33, 0]);
        // Cylinder 1: 255 * 63 sectors in.
        assert_eq!(chs(255 * 63), [0, 1, 1]);
        assert_eq!(chs(u64::from(u32::MAX)), [0xfe, 0xff, 0xff]);
    }

    #[test]
    fn mbr_has_code_signature_table_and_mark() {
        let l = Layout::new(256, 20 * MIB).unwrap();
        let s = mbr(&[0xfa, 0x31, 0xc0], 0xdead_beef, &l).unwrap();
        assert_eq!(&s[..3], &[0xfa, 0x31, 0xc0]);
        assert_eq!(&s[440..444], &0xdead_beefu32.to_le_bytes());
        let p1 = &s[446..462];
        assert_eq!(p1[0], 0x80, "boot partition is active");
        assert_eq!(p1[4], 0x0e);
        assert_eq!(u32::from_le_bytes(p1[8..12].try_into().unwrap()), 2048);
        assert_eq!(
            u64::from(u32::from_le_bytes(p1[12..16].try_into().unwrap())),
            l.boot_sectors
        );
        let p2 = &s[462..478];
        assert_eq!(p2[0], 0);
        assert_eq!(p2[4], 0x83);
        assert_eq!(
            u64::from(u32::from_le_bytes(p2[8..12].try_into().unwrap())),
            l.data_start
        );
        assert_eq!(
            u64::from(u32::from_le_bytes(p2[12..16].try_into().unwrap())),
            l.data_sectors
        );
        assert_eq!(&s[478..510], &[0u8; 32], "no third or fourth partition");
        assert_eq!(&s[510..], &[0x55, 0xaa]);
        assert!(mbr(&[0u8; 441], 0, &l).is_err());
    }

    #[test]
    fn syslinux_cfg_boots_the_kernel_without_a_prompt() {
        let c = syslinux_cfg("vmlinuz", "initrd.img", "console=ttyS0,115200 quiet");
        assert!(c.contains("DEFAULT cloud\n"));
        assert!(c.contains("PROMPT 0\n"));
        assert!(c.contains("TIMEOUT 0\n"));
        assert!(c.contains("SERIAL 0 115200\n"));
        assert!(c.contains("  LINUX /vmlinuz\n"));
        assert!(c.contains("  INITRD /initrd.img\n"));
        assert!(c.contains("  APPEND console=ttyS0,115200 quiet\n"));
    }
}
