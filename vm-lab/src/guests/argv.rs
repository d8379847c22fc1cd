//! A guest's QEMU command line, built by small pure functions, one per concern, in the shape
//! PVE's `config_to_command` gives it: controllers, then drives in PVE's drive order (`ide`,
//! `scsi`, `virtio`, `sata`, each by index), NICs by index, `bootindex` per device.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::spec::{DirectBoot, DiskBus, GuestDisk, GuestNic, GuestSpec, Machine, Media};
use crate::accel::Accel;
use crate::error::{Error, Result};

/// sun_path is 108 bytes including the NUL.
const MAX_SOCKET_PATH: usize = 107;
/// Linux interface names are at most 15 bytes.
pub const MAX_IFNAME: usize = 15;
/// The agent's virtio-serial port name, the one qemu-ga opens.
pub const AGENT_PORT: &str = "org.qemu.guest_agent.0";

/// Where a guest's files live (its directory in the host's run dir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestPaths {
    /// The guest's directory; the sockets and logs below are files in it.
    pub dir: PathBuf,
    /// QMP monitor socket (`qmp.sock`).
    pub qmp: PathBuf,
    /// Guest agent socket (`qga.sock`), present when the spec asks for the agent.
    pub qga: PathBuf,
    /// Serial console socket (`serial.sock`).
    pub serial_sock: PathBuf,
    /// Where the serial console is logged: the spec's `serial_log`, else `serial.log` here.
    pub serial_log: PathBuf,
    /// QEMU's stderr (`qemu.stderr`).
    pub stderr: PathBuf,
}

impl GuestPaths {
    /// The paths of a guest whose directory is `dir`, logging its console to `serial_log` when
    /// given; nothing is created.
    pub fn new(dir: &Path, serial_log: Option<&Path>) -> GuestPaths {
        GuestPaths {
            dir: dir.to_path_buf(),
            qmp: dir.join("qmp.sock"),
            qga: dir.join("qga.sock"),
            serial_sock: dir.join("serial.sock"),
            serial_log: serial_log.map_or_else(|| dir.join("serial.log"), Path::to_path_buf),
            stderr: dir.join("qemu.stderr"),
        }
    }
}

/// How a NIC reaches its segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NicBackend {
    /// A tap device (already made, enslaved to the segment's bridge) inside the namespace.
    Tap {
        /// The tap's interface name, at most [`MAX_IFNAME`] bytes.
        ifname: String,
    },
    /// A multicast socket inside the namespace (the fallback when taps cannot be made).
    Mcast {
        /// The segment's multicast group.
        group: Ipv4Addr,
        /// The group's UDP port.
        port: u16,
    },
    /// QEMU's user-mode network, restricted: the guest reaches nothing outside.
    User,
}

/// Everything the command line depends on besides the spec.
#[derive(Debug, Clone)]
pub struct LaunchArgs<'a> {
    /// The guest to launch.
    pub spec: &'a GuestSpec,
    /// The accelerator, resolved.
    pub accel: Accel,
    /// Memory QEMU gets (the spec's, capped).
    pub memory_mib: u64,
    /// The guest's files.
    pub paths: &'a GuestPaths,
    /// One backend per NIC, in the order of `spec.nics`.
    pub backends: &'a [NicBackend],
}

/// The full argv (without the program name).
pub fn guest_argv(a: &LaunchArgs<'_>) -> Result<Vec<String>> {
    let spec = a.spec;
    for p in [&a.paths.qmp, &a.paths.qga, &a.paths.serial_sock] {
        socket_path_ok(p)?;
    }
    if a.backends.len() != spec.nics.len() {
        return Err(Error::Args(format!(
            "guest {}: {} NIC backends for {} NICs",
            spec.name,
            a.backends.len(),
            spec.nics.len()
        )));
    }
    let mut v = base_args(&spec.name, spec.machine);
    v.extend(accel_args(a.accel));
    v.extend(smp_args(spec.sockets, spec.cores));
    v.extend(["-m".to_string(), a.memory_mib.to_string()]);
    v.extend(qmp_args(&a.paths.qmp));
    v.extend(serial_args(&a.paths.serial_sock, &a.paths.serial_log));
    if spec.agent {
        v.extend(agent_args(&a.paths.qga));
    }
    v.extend(controller_args(&spec.disks));
    for d in ordered_disks(&spec.disks) {
        v.extend(disk_args(d, spec.machine));
    }
    let mut nics: Vec<(&GuestNic, &NicBackend)> = spec.nics.iter().zip(a.backends).collect();
    nics.sort_by_key(|(n, _)| n.index);
    for (nic, backend) in nics {
        v.extend(nic_args(nic, backend)?);
    }
    if let Some(d) = &spec.direct_boot {
        v.extend(direct_boot_args(d));
    }
    Ok(v)
}

/// Arguments every guest gets: the process name `name`, the machine type without a display
/// (firmware output goes to the serial console), no default devices or config, UTC clock.
pub fn base_args(name: &str, machine: Machine) -> Vec<String> {
    // `graphics=off`: a lab guest has no display, so the firmware writes what it would show on
    // one (SeaBIOS's boot attempts, "No bootable device.") to the serial console, whose log is
    // how the harness sees a guest that never reaches its OS.
    let m = match machine {
        Machine::Pc => "pc,graphics=off",
        Machine::Q35 => "q35,graphics=off",
    };
    strings(&[
        "-name",
        name,
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-machine",
        m,
        // Boot only from devices with a bootindex, as PVE does.
        "-boot",
        "strict=on",
        "-rtc",
        "base=utc",
    ])
}

/// `-accel` and a matching `-cpu`: the host CPU under KVM, `max` under TCG.
pub fn accel_args(accel: Accel) -> Vec<String> {
    match accel {
        Accel::Kvm => strings(&["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => strings(&["-accel", "tcg", "-cpu", "max"]),
    }
}

/// `-smp` with `sockets` × `cores` CPUs, all present from boot.
pub fn smp_args(sockets: u32, cores: u32) -> Vec<String> {
    let n = sockets.saturating_mul(cores);
    vec![
        "-smp".into(),
        format!("{n},sockets={sockets},cores={cores},maxcpus={n}"),
    ]
}

/// A QMP monitor listening on the unix socket `sock`, not waiting for a client to start.
pub fn qmp_args(sock: &Path) -> Vec<String> {
    vec![
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", sock.display()),
    ]
}

/// The first serial port: a unix socket (attachable) that QEMU also logs to a file.
pub fn serial_args(sock: &Path, log: &Path) -> Vec<String> {
    vec![
        "-chardev".into(),
        format!(
            "socket,id=serial0,path={},server=on,wait=off,logfile={},logappend=on",
            sock.display(),
            log.display()
        ),
        "-serial".into(),
        "chardev:serial0".into(),
    ]
}

/// The guest agent's channel, as PVE adds it for `agent: 1`.
pub fn agent_args(sock: &Path) -> Vec<String> {
    vec![
        "-chardev".into(),
        format!("socket,path={},server=on,wait=off,id=qga0", sock.display()),
        "-device".into(),
        "virtio-serial,id=qga0".into(),
        "-device".into(),
        format!("virtserialport,chardev=qga0,name={AGENT_PORT}"),
    ]
}

/// The SCSI host adapter (`scsihw0`) and the AHCI controller (`ahci0`) the disks need.
pub fn controller_args(disks: &[GuestDisk]) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(c) = disks.iter().find_map(|d| match d.bus {
        DiskBus::Scsi(c) => Some(c),
        _ => None,
    }) {
        v.extend(["-device".into(), format!("{},id=scsihw0", c.device())]);
    }
    if disks.iter().any(|d| d.bus == DiskBus::Sata) {
        v.extend(strings(&["-device", "ahci,id=ahci0,multifunction=on"]));
    }
    v
}

/// PVE's drive order: `ide`, `scsi`, `virtio`, `sata`, each by index.
pub fn ordered_disks(disks: &[GuestDisk]) -> Vec<&GuestDisk> {
    let rank = |d: &GuestDisk| match d.bus {
        DiskBus::Ide => 0,
        DiskBus::Scsi(_) => 1,
        DiskBus::VirtioBlk => 2,
        DiskBus::Sata => 3,
    };
    let mut v: Vec<&GuestDisk> = disks.iter().collect();
    v.sort_by_key(|d| (rank(d), d.index));
    v
}

/// `-drive` (backend) and `-device` (frontend) of one drive.
pub fn disk_args(d: &GuestDisk, machine: Machine) -> Vec<String> {
    let id = d.id();
    let cdrom = d.media == Media::Cdrom;
    let mut drive = match &d.path {
        Some(p) => format!(
            "file={},if=none,id=drive-{id},format={}",
            qemu_escape(&p.display().to_string()),
            d.format.name()
        ),
        None => format!("if=none,id=drive-{id}"),
    };
    if cdrom {
        drive.push_str(",media=cdrom,readonly=on");
    }
    if let Some(a) = d.on_write_error {
        drive.push_str(&format!(",werror={}", a.name()));
    }
    if let Some(a) = d.on_read_error {
        drive.push_str(&format!(",rerror={}", a.name()));
    }
    let kind = if cdrom { "cd" } else { "hd" };
    let mut device = match d.bus {
        DiskBus::VirtioBlk => format!("virtio-blk-pci,drive=drive-{id},id={id}"),
        DiskBus::Scsi(c) if c.uses_luns() => format!(
            "scsi-{kind},bus=scsihw0.0,channel=0,scsi-id=0,lun={},drive=drive-{id},id={id}",
            d.index
        ),
        DiskBus::Scsi(_) => format!(
            "scsi-{kind},bus=scsihw0.0,scsi-id={},drive=drive-{id},id={id}",
            d.index
        ),
        DiskBus::Ide => {
            let (bus, unit) = ide_slot(d.index, machine);
            format!("ide-{kind},bus=ide.{bus},unit={unit},drive=drive-{id},id={id}")
        }
        DiskBus::Sata => format!("ide-{kind},bus=ahci0.{},drive=drive-{id},id={id}", d.index),
    };
    if let Some(b) = d.bootindex {
        device.push_str(&format!(",bootindex={b}"));
    }
    vec!["-drive".into(), drive, "-device".into(), device]
}

/// The IDE bus and unit of `ideN`: two units per bus on i440fx; q35's AHCI buses take one
/// unit each.
pub fn ide_slot(index: u32, machine: Machine) -> (u32, u32) {
    match machine {
        Machine::Pc => (index / 2, index % 2),
        Machine::Q35 => (index, 0),
    }
}

/// `-netdev` and `-device` of one NIC.
pub fn nic_args(nic: &GuestNic, backend: &NicBackend) -> Result<Vec<String>> {
    let id = format!("net{}", nic.index);
    let netdev = match backend {
        NicBackend::Tap { ifname } => {
            if ifname.is_empty() || ifname.len() > MAX_IFNAME {
                return Err(Error::Args(format!(
                    "{id}: tap name {ifname:?} is not a valid interface name"
                )));
            }
            format!("tap,id={id},ifname={ifname},script=no,downscript=no")
        }
        NicBackend::Mcast { group, port } => {
            if !group.is_multicast() {
                return Err(Error::Args(format!(
                    "{id}: {group} is not a multicast group"
                )));
            }
            // Always loopback: the frames never leave the namespace's `lo`.
            format!("socket,id={id},mcast={group}:{port},localaddr=127.0.0.1")
        }
        NicBackend::User => format!("user,id={id},restrict=on"),
    };
    let mut device = format!("{},mac={},netdev={id},id={id}", nic.model.device(), nic.mac);
    match nic.bootindex {
        Some(b) => device.push_str(&format!(",bootindex={b}")),
        // No option ROM on a NIC nothing boots from: saves firmware time.
        None => device.push_str(",romfile="),
    }
    Ok(vec!["-netdev".into(), netdev, "-device".into(), device])
}

/// `-kernel`, `-initrd` and `-append` for a test guest that skips the firmware.
pub fn direct_boot_args(d: &DirectBoot) -> Vec<String> {
    vec![
        "-kernel".into(),
        d.kernel.display().to_string(),
        "-initrd".into(),
        d.initrd.display().to_string(),
        "-append".into(),
        d.cmdline.clone(),
    ]
}

/// QEMU option values separate on `,`; a literal comma is written twice.
pub fn qemu_escape(s: &str) -> String {
    s.replace(',', ",,")
}

/// Refuses a unix socket path longer than the 107 bytes `sun_path` holds (a deep run directory
/// would otherwise fail inside QEMU with a vaguer message).
pub fn socket_path_ok(p: &Path) -> Result<()> {
    let n = p.as_os_str().len();
    if n > MAX_SOCKET_PATH {
        return Err(Error::Args(format!(
            "socket path {} is {n} bytes, over the {MAX_SOCKET_PATH} a unix socket allows; use a shorter run directory",
            p.display()
        )));
    }
    Ok(())
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::spec::{DiskFormat, NicModel, ScsiController};
    use super::*;

    fn disk(bus: DiskBus, index: u32, media: Media, bootindex: Option<u32>) -> GuestDisk {
        GuestDisk {
            path: Some(format!("/s/{}{index}.img", bus.prefix()).into()),
            format: DiskFormat::Qcow2,
            bus,
            index,
            media,
            bootindex,
            on_write_error: None,
            on_read_error: None,
        }
    }

    fn nic(index: u32, mac: &str, bootindex: Option<u32>) -> GuestNic {
        GuestNic {
            index,
            mac: mac.parse().unwrap(),
            model: NicModel::Virtio,
            bridge: Some("vmbr0".into()),
            link_up: true,
            bootindex,
        }
    }

    fn argv(spec: &GuestSpec, backends: &[NicBackend]) -> Vec<String> {
        let paths = GuestPaths::new(Path::new("/run/g"), None);
        guest_argv(&LaunchArgs {
            spec,
            accel: Accel::Tcg,
            memory_mib: 1024,
            paths: &paths,
            backends,
        })
        .unwrap()
    }

    /// The value after each occurrence of `flag`.
    fn values<'a>(v: &'a [String], flag: &str) -> Vec<&'a str> {
        v.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    #[test]
    fn error_actions_reach_the_drive() {
        let mut d = disk(DiskBus::VirtioBlk, 1, Media::Disk, None);
        d.on_write_error = Some(crate::guests::ErrorAction::Stop);
        d.on_read_error = Some(crate::guests::ErrorAction::Ignore);
        let a = disk_args(&d, Machine::Pc);
        assert!(a[1].ends_with(",werror=stop,rerror=ignore"), "{a:?}");
        let plain = disk_args(&disk(DiskBus::VirtioBlk, 1, Media::Disk, None), Machine::Pc);
        assert!(!plain[1].contains("error="), "{plain:?}");
    }

    #[test]
    fn drives_follow_pves_bus_order_with_their_bootindex() {
        let mut g = GuestSpec::new("vm-100");
        g.disks = vec![
            disk(DiskBus::Sata, 0, Media::Disk, None),
            disk(DiskBus::VirtioBlk, 1, Media::Disk, None),
            disk(
                DiskBus::Scsi(ScsiController::VirtioScsiPci),
                0,
                Media::Disk,
                Some(100),
            ),
            disk(DiskBus::Ide, 2, Media::Cdrom, Some(101)),
        ];
        let v = argv(&g, &[]);
        let devices = values(&v, "-device");
        let order: Vec<&str> = devices
            .iter()
            .filter_map(|d| d.split(",id=").nth(1))
            .map(|s| s.split(',').next().unwrap())
            .collect();
        assert_eq!(
            order,
            ["scsihw0", "ahci0", "ide2", "scsi0", "virtio1", "sata0"]
        );
        assert!(devices.contains(&"virtio-scsi-pci,id=scsihw0"));
        assert!(devices.contains(
            &"scsi-hd,bus=scsihw0.0,channel=0,scsi-id=0,lun=0,drive=drive-scsi0,id=scsi0,bootindex=100"
        ));
        assert!(
            devices.contains(&"ide-cd,bus=ide.1,unit=0,drive=drive-ide2,id=ide2,bootindex=101")
        );
        assert!(devices.contains(&"ide-hd,bus=ahci0.0,drive=drive-sata0,id=sata0"));
        let drives = values(&v, "-drive");
        assert!(drives.contains(
            &"file=/s/ide2.img,if=none,id=drive-ide2,format=qcow2,media=cdrom,readonly=on"
        ));
    }

    #[test]
    fn ide_units_differ_between_i440fx_and_q35() {
        assert_eq!(ide_slot(2, Machine::Pc), (1, 0));
        assert_eq!(ide_slot(3, Machine::Pc), (1, 1));
        assert_eq!(ide_slot(2, Machine::Q35), (2, 0));
        let mut g = GuestSpec::new("q");
        g.machine = Machine::Q35;
        g.disks = vec![disk(DiskBus::Ide, 2, Media::Cdrom, None)];
        let v = argv(&g, &[]);
        assert!(values(&v, "-machine").contains(&"q35,graphics=off"));
        assert!(
            values(&v, "-device").contains(&"ide-cd,bus=ide.2,unit=0,drive=drive-ide2,id=ide2")
        );
    }

    #[test]
    fn lsi_disks_are_targets_and_an_empty_cdrom_has_no_file() {
        let mut d = disk(DiskBus::Scsi(ScsiController::Lsi), 3, Media::Disk, None);
        let v = disk_args(&d, Machine::Pc);
        assert_eq!(
            v[3],
            "scsi-hd,bus=scsihw0.0,scsi-id=3,drive=drive-scsi3,id=scsi3"
        );
        d.path = None;
        d.media = Media::Cdrom;
        let v = disk_args(&d, Machine::Pc);
        assert_eq!(v[1], "if=none,id=drive-scsi3,media=cdrom,readonly=on");
        assert!(v[3].starts_with("scsi-cd,"));
    }

    #[test]
    fn nics_carry_their_macs_taps_and_only_a_boot_nic_keeps_its_rom() {
        let mut g = GuestSpec::new("vm-101");
        g.nics = vec![
            nic(1, "BC:24:11:00:00:02", None),
            nic(0, "bc:24:11:00:00:01", Some(102)),
        ];
        g.nics[1].model = NicModel::E1000;
        let v = argv(
            &g,
            &[
                NicBackend::Tap {
                    ifname: "tap7i1".into(),
                },
                NicBackend::Tap {
                    ifname: "tap7i0".into(),
                },
            ],
        );
        let nd = values(&v, "-netdev");
        assert_eq!(
            nd,
            [
                "tap,id=net0,ifname=tap7i0,script=no,downscript=no",
                "tap,id=net1,ifname=tap7i1,script=no,downscript=no"
            ]
        );
        let dev = values(&v, "-device");
        assert!(dev.contains(&"e1000,mac=bc:24:11:00:00:01,netdev=net0,id=net0,bootindex=102"));
        assert!(dev.contains(&"virtio-net-pci,mac=bc:24:11:00:00:02,netdev=net1,id=net1,romfile="));
    }

    #[test]
    fn multicast_is_always_loopback_and_user_mode_is_restricted() {
        let n = nic(0, "bc:24:11:00:00:01", None);
        let m = nic_args(
            &n,
            &NicBackend::Mcast {
                group: "239.1.2.3".parse().unwrap(),
                port: 5000,
            },
        )
        .unwrap();
        assert_eq!(
            m[1],
            "socket,id=net0,mcast=239.1.2.3:5000,localaddr=127.0.0.1"
        );
        assert!(
            nic_args(
                &n,
                &NicBackend::Mcast {
                    group: "10.0.0.1".parse().unwrap(),
                    port: 1
                }
            )
            .is_err()
        );
        assert_eq!(
            nic_args(&n, &NicBackend::User).unwrap()[1],
            "user,id=net0,restrict=on"
        );
        let long = NicBackend::Tap {
            ifname: "a-very-long-tap-name".into(),
        };
        assert!(nic_args(&n, &long).is_err());
    }

    #[test]
    fn the_agent_channel_is_there_only_when_asked() {
        let mut g = GuestSpec::new("a");
        let without = argv(&g, &[]).join(" ");
        assert!(!without.contains(AGENT_PORT) && !without.contains("qga"));
        g.agent = true;
        let v = argv(&g, &[]);
        assert!(
            values(&v, "-device")
                .contains(&"virtserialport,chardev=qga0,name=org.qemu.guest_agent.0")
        );
        assert!(
            values(&v, "-chardev")
                .contains(&"socket,path=/run/g/qga.sock,server=on,wait=off,id=qga0")
        );
    }

    #[test]
    fn cpu_memory_serial_and_qmp() {
        let mut g = GuestSpec::new("c");
        g.sockets = 2;
        g.cores = 3;
        let v = argv(&g, &[]);
        assert_eq!(values(&v, "-smp"), ["6,sockets=2,cores=3,maxcpus=6"]);
        assert_eq!(values(&v, "-m"), ["1024"]);
        assert_eq!(
            values(&v, "-qmp"),
            ["unix:/run/g/qmp.sock,server=on,wait=off"]
        );
        assert_eq!(
            values(&v, "-chardev"),
            [
                "socket,id=serial0,path=/run/g/serial.sock,server=on,wait=off,logfile=/run/g/serial.log,logappend=on"
            ]
        );
        assert_eq!(values(&v, "-accel"), ["tcg"]);
        assert!(!v.contains(&"-kernel".to_string()));
    }

    #[test]
    fn refuses_long_socket_paths_and_commas_are_escaped() {
        let long = PathBuf::from(format!("/{}", "x".repeat(120)));
        let paths = GuestPaths::new(&long, None);
        let g = GuestSpec::new("l");
        let r = guest_argv(&LaunchArgs {
            spec: &g,
            accel: Accel::Tcg,
            memory_mib: 64,
            paths: &paths,
            backends: &[],
        });
        assert!(matches!(r, Err(Error::Args(m)) if m.contains("unix socket")));
        assert_eq!(qemu_escape("/a,b"), "/a,,b");
    }
}
