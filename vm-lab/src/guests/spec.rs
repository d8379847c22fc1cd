//! What a guest is, in the words of a hypervisor's VM config rather than a lab node's: machine
//! type, CPU topology, memory, disks on their buses, NICs on named bridges, the agent channel
//! and a serial log. Validation here names the guest and the device.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::spec::Mac;

/// The QEMU machine family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Machine {
    /// i440fx (`-machine pc`): two IDE buses with two units each.
    #[default]
    Pc,
    /// q35: its AHCI controller has six IDE-style buses with one unit each.
    Q35,
}

/// A disk image's format, as `-drive format=` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiskFormat {
    /// A raw image: the file is the disk, byte for byte.
    #[default]
    Raw,
    /// QEMU's copy-on-write format (sparse, snapshots inside the file).
    Qcow2,
    /// VMware's format, as an imported disk may come.
    Vmdk,
}

impl DiskFormat {
    /// `raw`, `qcow2` or `vmdk`, as `-drive format=` takes it.
    pub fn name(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
            DiskFormat::Vmdk => "vmdk",
        }
    }

    /// `raw`, `qcow2` or `vmdk`.
    pub fn parse(s: &str) -> Option<DiskFormat> {
        match s {
            "raw" => Some(DiskFormat::Raw),
            "qcow2" => Some(DiskFormat::Qcow2),
            "vmdk" => Some(DiskFormat::Vmdk),
            _ => None,
        }
    }
}

/// A SCSI host adapter model (QEMU device name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScsiController {
    /// `lsi` (LSI 53C895A): seven targets, one LUN each here.
    #[default]
    Lsi,
    /// `lsi53c810` (LSI 53C810).
    Lsi53c810,
    /// `virtio-scsi-pci`: every disk is a LUN of one target, up to index 30.
    VirtioScsiPci,
    /// `megasas` (LSI MegaRAID SAS).
    Megasas,
    /// `pvscsi` (VMware paravirtual SCSI).
    Pvscsi,
}

impl ScsiController {
    /// The QEMU device name, e.g. `virtio-scsi-pci`.
    pub fn device(self) -> &'static str {
        match self {
            ScsiController::Lsi => "lsi",
            ScsiController::Lsi53c810 => "lsi53c810",
            ScsiController::VirtioScsiPci => "virtio-scsi-pci",
            ScsiController::Megasas => "megasas",
            ScsiController::Pvscsi => "pvscsi",
        }
    }

    /// Whether disks are LUNs of one target (virtio-scsi) rather than targets of their own.
    pub fn uses_luns(self) -> bool {
        self == ScsiController::VirtioScsiPci
    }
}

/// The bus a disk hangs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskBus {
    /// A virtio-blk PCI device per disk (`virtio0`–`virtio15`).
    VirtioBlk,
    /// A target or LUN on the guest's one SCSI controller of this model.
    Scsi(ScsiController),
    /// The machine's IDE buses (`ide0`–`ide3`).
    Ide,
    /// An AHCI SATA port (`sata0`–`sata5`).
    Sata,
}

impl DiskBus {
    /// The prefix PVE and QEMU ids use: `virtio`, `scsi`, `ide`, `sata`.
    pub fn prefix(self) -> &'static str {
        match self {
            DiskBus::VirtioBlk => "virtio",
            DiskBus::Scsi(_) => "scsi",
            DiskBus::Ide => "ide",
            DiskBus::Sata => "sata",
        }
    }

    /// Highest index the bus takes (PVE's limits).
    pub fn max_index(self) -> u32 {
        match self {
            DiskBus::VirtioBlk => 15,
            DiskBus::Scsi(ScsiController::VirtioScsiPci) => 30,
            // One target per disk on the parallel SCSI adapters: seven per controller.
            DiskBus::Scsi(_) => 6,
            DiskBus::Ide => 3,
            DiskBus::Sata => 5,
        }
    }
}

/// What QEMU does when a guest's read or write of a drive fails (`-drive werror=`/`rerror=`,
/// PVE's drive options of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorAction {
    /// The guest sees the error.
    Report,
    /// The error is dropped: the guest believes the I/O succeeded.
    Ignore,
    /// The VM stops (`query-status`: `io-error`) until it is continued, which retries the I/O.
    Stop,
    /// Stop on "no space left", report anything else (QEMU's default for writes).
    Enospc,
}

impl ErrorAction {
    /// `report`, `ignore`, `stop` or `enospc`, as `-drive werror=`/`rerror=` take it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorAction::Report => "report",
            ErrorAction::Ignore => "ignore",
            ErrorAction::Stop => "stop",
            ErrorAction::Enospc => "enospc",
        }
    }

    /// PVE's value for `werror` (`enospc`, `ignore`, `report`, `stop`) or `rerror` (no
    /// `enospc`).
    pub fn parse(value: &str, write: bool) -> Option<ErrorAction> {
        match value {
            "report" => Some(ErrorAction::Report),
            "ignore" => Some(ErrorAction::Ignore),
            "stop" => Some(ErrorAction::Stop),
            "enospc" if write => Some(ErrorAction::Enospc),
            _ => None,
        }
    }
}

/// What a drive presents to the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Media {
    /// A hard disk.
    #[default]
    Disk,
    /// A CD-ROM drive (read-only; may be empty).
    Cdrom,
}

/// One drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestDisk {
    /// The image file; `None` is an empty CD-ROM drive.
    pub path: Option<PathBuf>,
    /// The image file's format.
    pub format: DiskFormat,
    /// The bus the drive is on.
    pub bus: DiskBus,
    /// The index on its bus (`scsi0` is 0).
    pub index: u32,
    /// Hard disk or CD-ROM.
    pub media: Media,
    /// Firmware boot priority (lower first); `None`: not bootable.
    pub bootindex: Option<u32>,
    /// `werror` / `rerror`; `None`: QEMU's defaults (writes `enospc`, reads `report`).
    pub on_write_error: Option<ErrorAction>,
    /// What a failed read does; see `on_write_error`.
    pub on_read_error: Option<ErrorAction>,
}

impl GuestDisk {
    /// `scsi0`, `ide2`… — also the QEMU device id.
    pub fn id(&self) -> String {
        format!("{}{}", self.bus.prefix(), self.index)
    }
}

/// A NIC model (QEMU device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NicModel {
    /// `virtio-net-pci`.
    #[default]
    Virtio,
    /// Intel 82540EM (`e1000`).
    E1000,
    /// Intel 82574L (`e1000e`).
    E1000e,
    /// Realtek RTL8139 (`rtl8139`).
    Rtl8139,
    /// VMware's paravirtual NIC (`vmxnet3`).
    Vmxnet3,
}

impl NicModel {
    /// The QEMU device name, e.g. `virtio-net-pci`.
    pub fn device(self) -> &'static str {
        match self {
            NicModel::Virtio => "virtio-net-pci",
            NicModel::E1000 => "e1000",
            NicModel::E1000e => "e1000e",
            NicModel::Rtl8139 => "rtl8139",
            NicModel::Vmxnet3 => "vmxnet3",
        }
    }

    /// A PVE/QEMU model name: `virtio`, `e1000`, `e1000e`, `rtl8139`, `vmxnet3`.
    pub fn parse(s: &str) -> Option<NicModel> {
        match s {
            "virtio" => Some(NicModel::Virtio),
            "e1000" => Some(NicModel::E1000),
            "e1000e" => Some(NicModel::E1000e),
            "rtl8139" => Some(NicModel::Rtl8139),
            "vmxnet3" => Some(NicModel::Vmxnet3),
            _ => None,
        }
    }
}

/// One NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestNic {
    /// The index (`net0` is 0): the QEMU ids are `net{index}`.
    pub index: u32,
    /// The NIC's MAC.
    pub mac: Mac,
    /// The emulated device.
    pub model: NicModel,
    /// The L2 segment (see [`BridgeSpec`]); `None`: QEMU's user-mode network,
    /// restricted (no way out), as PVE gives a NIC without a bridge.
    pub bridge: Option<String>,
    /// `false`: the link starts down (`set_link` right after QEMU starts, as PVE does).
    pub link_up: bool,
    /// Firmware boot priority (lower first); `None`: the NIC does not boot.
    pub bootindex: Option<u32>,
}

/// A kernel booted directly (`-kernel/-initrd/-append`). For lab tests only: a PVE VM always
/// boots through its firmware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectBoot {
    /// Host path of the kernel.
    pub kernel: PathBuf,
    /// Host path of the initramfs.
    pub initrd: PathBuf,
    /// The kernel command line.
    pub cmdline: String,
}

/// A guest to launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSpec {
    /// Unique on the host; names the run directory (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// The machine family.
    pub machine: Machine,
    /// CPU sockets, at least 1.
    pub sockets: u32,
    /// Cores per socket, at least 1.
    pub cores: u32,
    /// What the config asks for; QEMU gets at most the host's `memory_cap_mib`.
    pub memory_mib: u64,
    /// The drives; ids (`bus` + `index`) are unique and all SCSI disks share one controller model.
    pub disks: Vec<GuestDisk>,
    /// The NICs; indexes are unique.
    pub nics: Vec<GuestNic>,
    /// A virtio-serial port named `org.qemu.guest_agent.0` for qemu-ga.
    pub agent: bool,
    /// Where the first serial port is logged; default `<run dir>/<name>/serial.log`.
    pub serial_log: Option<PathBuf>,
    /// Test-only direct kernel boot; never set from a PVE config.
    pub direct_boot: Option<DirectBoot>,
}

impl GuestSpec {
    /// A guest with one socket, one core, 512 MiB and no devices.
    pub fn new(name: &str) -> GuestSpec {
        GuestSpec {
            name: name.to_string(),
            machine: Machine::Pc,
            sockets: 1,
            cores: 1,
            memory_mib: 512,
            disks: Vec::new(),
            nics: Vec::new(),
            agent: false,
            serial_log: None,
            direct_boot: None,
        }
    }

    /// Virtual CPUs in all: sockets × cores.
    pub fn vcpus(&self) -> u32 {
        self.sockets.saturating_mul(self.cores)
    }

    /// Checks that make QEMU's own refusal unnecessary; errors name the guest and device.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Spec(format!("guest {}: {what}", self.name)));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || self.name.starts_with('.')
        {
            return bad("the name must be letters, digits, '-', '_' or '.'".into());
        }
        if self.sockets == 0 || self.cores == 0 {
            return bad("sockets and cores must be at least 1".into());
        }
        if self.memory_mib < 16 {
            return bad(format!("{} MiB of memory is too little", self.memory_mib));
        }
        let mut ids = std::collections::BTreeSet::new();
        for d in &self.disks {
            if d.index > d.bus.max_index() {
                return bad(format!(
                    "{}: index beyond the bus's {}",
                    d.id(),
                    d.bus.max_index()
                ));
            }
            if !ids.insert(d.id()) {
                return bad(format!("{} is given twice", d.id()));
            }
            if d.path.is_none() && d.media == Media::Disk {
                return bad(format!("{}: a disk needs an image file", d.id()));
            }
        }
        let controllers: std::collections::BTreeSet<_> = self
            .disks
            .iter()
            .filter_map(|d| match d.bus {
                DiskBus::Scsi(c) => Some(c.device()),
                _ => None,
            })
            .collect();
        if controllers.len() > 1 {
            return bad("all SCSI disks share one controller model".into());
        }
        let mut nics = std::collections::BTreeSet::new();
        for n in &self.nics {
            if !nics.insert(n.index) {
                return bad(format!("net{} is given twice", n.index));
            }
        }
        let mut boots: Vec<u32> = self
            .disks
            .iter()
            .filter_map(|d| d.bootindex)
            .chain(self.nics.iter().filter_map(|n| n.bootindex))
            .collect();
        boots.sort_unstable();
        if boots.windows(2).any(|w| w[0] == w[1]) {
            return bad("two devices share a bootindex".into());
        }
        Ok(())
    }
}

/// A DHCP pool on a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DhcpPool {
    /// First address handed out.
    pub start: Ipv4Addr,
    /// Last address handed out.
    pub end: Ipv4Addr,
    /// The router option handed out (the bridge's gateway).
    pub router: Option<Ipv4Addr>,
}

/// A private L2 segment inside the host's namespace, named as the hypervisor names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSpec {
    /// The bridge's name as the hypervisor's config uses it, e.g. `vmbr0`.
    pub name: String,
    /// Addresses the namespace itself holds on the segment (the node's address, the
    /// gateway): SSH to guests and the DHCP server use them.
    pub addresses: Vec<(Ipv4Addr, u8)>,
    /// A DHCP server for guests on the segment; `None`: guests configure themselves.
    pub dhcp: Option<DhcpPool>,
}

impl BridgeSpec {
    /// A bridge named `name` with no addresses and no DHCP.
    pub fn new(name: &str) -> BridgeSpec {
        BridgeSpec {
            name: name.to_string(),
            addresses: Vec::new(),
            dhcp: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn disk(bus: DiskBus, index: u32) -> GuestDisk {
        GuestDisk {
            path: Some("/d.raw".into()),
            format: DiskFormat::Raw,
            bus,
            index,
            media: Media::Disk,
            bootindex: None,
            on_write_error: None,
            on_read_error: None,
        }
    }

    #[test]
    fn validation_names_the_guest_and_the_device() {
        let mut g = GuestSpec::new("vm-100");
        g.disks = vec![disk(DiskBus::Ide, 4)];
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("vm-100") && e.contains("ide4"), "{e}");
        g.disks = vec![disk(DiskBus::Sata, 1), disk(DiskBus::Sata, 1)];
        assert!(g.validate().unwrap_err().to_string().contains("sata1"));
        g.disks = vec![
            disk(DiskBus::Scsi(ScsiController::Lsi), 0),
            disk(DiskBus::Scsi(ScsiController::VirtioScsiPci), 1),
        ];
        assert!(g.validate().unwrap_err().to_string().contains("controller"));
        g.disks = vec![disk(DiskBus::Scsi(ScsiController::VirtioScsiPci), 30)];
        assert!(g.validate().is_ok());
        g.disks[0].bootindex = Some(100);
        g.nics = vec![GuestNic {
            index: 0,
            mac: "bc:24:11:00:00:01".parse().unwrap(),
            model: NicModel::Virtio,
            bridge: None,
            link_up: true,
            bootindex: Some(100),
        }];
        assert!(g.validate().unwrap_err().to_string().contains("bootindex"));
        assert!(GuestSpec::new("a/b").validate().is_err());
        assert!(GuestSpec::new("..").validate().is_err());
    }

    #[test]
    fn an_empty_cdrom_is_fine_an_empty_disk_is_not() {
        let mut g = GuestSpec::new("g");
        let mut d = disk(DiskBus::Ide, 2);
        d.path = None;
        d.media = Media::Cdrom;
        g.disks = vec![d.clone()];
        assert!(g.validate().is_ok());
        d.media = Media::Disk;
        g.disks = vec![d];
        assert!(g.validate().is_err());
    }
}
