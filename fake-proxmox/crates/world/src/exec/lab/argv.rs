//! A VM's PVE config as a lab guest ([`GuestSpec`]), the way `qemu-server`'s
//! `config_to_command` reads it: `sockets` × `cores`, `memory` (also `current=`), `machine`
//! (`q35` or i440fx `pc`), `scsihw`, drives on their buses with `media=cdrom`, the boot order
//! (`boot: order=…`, or the legacy `cdn` letters with `bootdisk`), NICs with their model, MAC,
//! bridge and `link_down`, `agent`. Pure: volumes are found through the resolver handed in.
//!
//! Drives keep their `werror`/`rerror`. Not mapped (the guest runs without them): `cpu`,
//! `numa`, `balloon`, `hotplug`, `vga`, `serialN`/`usbN`/`hostpciN` devices, per-drive
//! `cache`/`discard`/`iothread`/`ssd`/limits,
//! NIC `firewall`/`tag`/`rate`/`queues`/`mtu`, `efidisk0`/`tpmstate0` (no OVMF here). The lab
//! always gives the guest one serial port logged to a file, whether or not `serial0` is set.

use std::path::PathBuf;

use vm_lab::guests::{
    DiskBus, DiskFormat, ErrorAction, GuestDisk, GuestNic, GuestSpec, Machine, Media, NicModel,
    ScsiController,
};

use crate::qemu::model::{Nic, Vm, is_disk_key, is_net_key, prop, split_props};

/// Finds the file of a volume: (node, storage, volume name) → path.
pub type Resolve<'a> = &'a dyn Fn(&str, &str, &str) -> Option<PathBuf>;

/// The lab guest of `vm`'s config; `Err` is the text a failed start task shows.
pub fn guest_spec(vm: &Vm, resolve: Resolve<'_>) -> Result<GuestSpec, String> {
    let c = &vm.config;
    let num = |k: &str| c.get(k).and_then(|v| v.parse::<u32>().ok()).unwrap_or(1);
    let mut g = GuestSpec::new(&guest_name(&vm.node, vm.vmid));
    g.machine = machine(c.get("machine").map(String::as_str));
    g.sockets = num("sockets").max(1);
    g.cores = num("cores").max(1);
    g.memory_mib = vm.memory_mib();
    g.agent = vm.is_agent_enabled();
    let scsihw = scsi_controller(c.get("scsihw").map(String::as_str))?;
    for (k, v) in c.iter().filter(|(k, _)| is_disk_key(k)) {
        if let Some(d) = drive(&vm.node, k, v, scsihw, resolve)? {
            g.disks.push(d);
        }
    }
    for (k, v) in c.iter().filter(|(k, _)| is_net_key(k)) {
        g.nics.push(nic(k, v)?);
    }
    apply_boot_order(
        &mut g,
        c.get("boot").map(String::as_str),
        c.get("bootdisk").map(String::as_str),
    );
    Ok(g)
}

/// The guest's name on the lab host: one per node and VMID.
pub fn guest_name(node: &str, vmid: u32) -> String {
    let node: String = node
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' {
                ch
            } else {
                '_'
            }
        })
        .collect();
    format!("{node}-{vmid}")
}

/// `machine: q35`, `pc-q35-8.1`, `type=q35,viommu=…` → q35; anything else (default) → i440fx.
pub fn machine(v: Option<&str>) -> Machine {
    let ty = v.and_then(|v| prop(&split_props(v, "type"), "type").map(str::to_string));
    match ty {
        Some(t) if t.contains("q35") => Machine::Q35,
        _ => Machine::Pc,
    }
}

/// PVE's `scsihw` (default `lsi`); `virtio-scsi-single` is one virtio-scsi controller here.
pub fn scsi_controller(v: Option<&str>) -> Result<ScsiController, String> {
    Ok(match v.unwrap_or("lsi") {
        "lsi" => ScsiController::Lsi,
        "lsi53c810" => ScsiController::Lsi53c810,
        "virtio-scsi-pci" | "virtio-scsi-single" => ScsiController::VirtioScsiPci,
        "megasas" => ScsiController::Megasas,
        "pvscsi" => ScsiController::Pvscsi,
        other => return Err(format!("lab backend: scsihw '{other}' is not supported")),
    })
}

/// `scsi0` → (bus, 0); `efidisk0`/`tpmstate0` → `None`.
fn bus_of(key: &str, scsihw: ScsiController) -> Option<(DiskBus, u32)> {
    let split = key.find(|c: char| c.is_ascii_digit())?;
    let (prefix, index) = key.split_at(split);
    let bus = match prefix {
        "scsi" => DiskBus::Scsi(scsihw),
        "virtio" => DiskBus::VirtioBlk,
        "ide" => DiskBus::Ide,
        "sata" => DiskBus::Sata,
        _ => return None,
    };
    Some((bus, index.parse().ok()?))
}

/// A drive's `werror`/`rerror` (`key` names the drive in the error).
fn error_action(
    key: &str,
    props: &[(String, String)],
    name: &str,
) -> Result<Option<ErrorAction>, String> {
    match prop(props, name) {
        None => Ok(None),
        Some(v) => ErrorAction::parse(v, name == "werror")
            .map(Some)
            .ok_or_else(|| format!("{key}: unsupported {name} '{v}'")),
    }
}

/// One drive of the config; `None` for the ones the lab leaves out (EFI vars, TPM state).
fn drive(
    node: &str,
    key: &str,
    value: &str,
    scsihw: ScsiController,
    resolve: Resolve<'_>,
) -> Result<Option<GuestDisk>, String> {
    let Some((bus, index)) = bus_of(key, scsihw) else {
        tracing::debug!("lab backend: {key} is not attached");
        return Ok(None);
    };
    let p = split_props(value, "file");
    let file = prop(&p, "file").unwrap_or("none");
    let media = if prop(&p, "media") == Some("cdrom") || file == "cdrom" {
        Media::Cdrom
    } else {
        Media::Disk
    };
    let path = match file {
        // An empty drive, or the host's physical CD-ROM: an empty drive here.
        "none" | "cdrom" => None,
        f if f.starts_with('/') => Some(PathBuf::from(f)),
        f => {
            let (storage, volname) = f
                .split_once(':')
                .ok_or_else(|| format!("unable to parse volume ID '{f}'"))?;
            Some(
                resolve(node, storage, volname)
                    .ok_or_else(|| format!("volume '{f}' does not exist"))?,
            )
        }
    };
    if path.is_none() && media == Media::Disk {
        return Err(format!("{key}: no disk image"));
    }
    let format = match prop(&p, "format") {
        Some(f) => {
            DiskFormat::parse(f).ok_or_else(|| format!("{key}: unsupported format '{f}'"))?
        }
        None => format_of(file),
    };
    Ok(Some(GuestDisk {
        path,
        format,
        bus,
        index,
        media,
        bootindex: None,
        on_write_error: error_action(key, &p, "werror")?,
        on_read_error: error_action(key, &p, "rerror")?,
    }))
}

/// The format a volume name says (`….qcow2`, `….vmdk`); raw otherwise (LVM, RBD, ZFS, ISO).
pub fn format_of(volname: &str) -> DiskFormat {
    if volname.ends_with(".qcow2") {
        DiskFormat::Qcow2
    } else if volname.ends_with(".vmdk") {
        DiskFormat::Vmdk
    } else {
        DiskFormat::Raw
    }
}

/// `netN: virtio=MAC,bridge=vmbr0,link_down=1`.
fn nic(key: &str, value: &str) -> Result<GuestNic, String> {
    let n = Nic::parse(value);
    let model = NicModel::parse(&n.model).ok_or_else(|| {
        format!(
            "lab backend: {key}: NIC model '{}' is not supported",
            n.model
        )
    })?;
    let mac = n
        .mac
        .as_deref()
        .ok_or_else(|| format!("{key}: no MAC address"))?
        .parse()
        .map_err(|e| format!("{key}: {e}"))?;
    let index = key[3..].parse().map_err(|_| format!("{key}: bad index"))?;
    Ok(GuestNic {
        index,
        mac,
        model,
        bridge: n.bridge().map(str::to_string),
        link_up: !matches!(prop(&n.opts, "link_down"), Some("1")),
        bootindex: None,
    })
}

/// Give devices their `bootindex`: `order=` lists devices (1, 2, 3, …); the legacy letters
/// (`c` the boot disk, `d` every CD-ROM, `n` every NIC; default `cdn`) count 100, 200, 300 per
/// letter and one more per device. Without `bootdisk`, `c` is the first disk.
pub fn apply_boot_order(g: &mut GuestSpec, boot: Option<&str>, bootdisk: Option<&str>) {
    let order = boot.and_then(|b| {
        let p = split_props(b, "legacy");
        prop(&p, "order").map(str::to_string)
    });
    if let Some(order) = order {
        for (i, dev) in order.split(';').filter(|d| !d.is_empty()).enumerate() {
            let idx = u32::try_from(i).unwrap_or(u32::MAX - 1).saturating_add(1);
            set_bootindex(g, dev, idx);
        }
        return;
    }
    let letters = boot
        .and_then(|b| prop(&split_props(b, "legacy"), "legacy").map(str::to_string))
        .unwrap_or_else(|| "cdn".into());
    let first_disk = bootdisk.map(str::to_string).or_else(|| {
        vm_lab::guests::argv::ordered_disks(&g.disks)
            .into_iter()
            .find(|d| d.media == Media::Disk)
            .map(GuestDisk::id)
    });
    for (pos, letter) in (1u32..).zip(letters.chars()) {
        let base = pos * 100;
        match letter {
            'c' => {
                if let Some(d) = &first_disk {
                    set_bootindex(g, d, base);
                }
            }
            'd' => {
                let cds: Vec<String> = vm_lab::guests::argv::ordered_disks(&g.disks)
                    .into_iter()
                    .filter(|d| d.media == Media::Cdrom)
                    .map(GuestDisk::id)
                    .collect();
                for (i, id) in (0u32..).zip(cds) {
                    set_bootindex(g, &id, base + i);
                }
            }
            'n' => {
                let mut nets: Vec<u32> = g.nics.iter().map(|n| n.index).collect();
                nets.sort_unstable();
                for (i, n) in (0u32..).zip(nets) {
                    set_bootindex(g, &format!("net{n}"), base + i);
                }
            }
            _ => {}
        }
    }
}

fn set_bootindex(g: &mut GuestSpec, dev: &str, idx: u32) {
    if let Some(d) = g.disks.iter_mut().find(|d| d.id() == dev) {
        d.bootindex = Some(idx);
    } else if let Some(n) = g.nics.iter_mut().find(|n| format!("net{}", n.index) == dev) {
        n.bootindex = Some(idx);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    fn vm(pairs: &[(&str, &str)]) -> Vm {
        let config: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Vm::stopped(100, "pve1", config, None)
    }

    /// Volumes live under /vols/<node>/<storage>/<volname>, except `gone`.
    fn resolve(node: &str, storage: &str, volname: &str) -> Option<PathBuf> {
        (!volname.contains("gone"))
            .then(|| Path::new("/vols").join(node).join(storage).join(volname))
    }

    fn disk<'a>(g: &'a GuestSpec, id: &str) -> &'a GuestDisk {
        g.disks.iter().find(|d| d.id() == id).unwrap()
    }

    #[test]
    fn drives_keep_their_error_actions_and_bad_ones_fail_the_start() {
        let v = vm(&[
            ("scsi0", "local-lvm:vm-100-disk-0,werror=stop,rerror=report"),
            ("scsi1", "local-lvm:vm-100-disk-1"),
        ]);
        let g = guest_spec(&v, &resolve).unwrap();
        let d0 = disk(&g, "scsi0");
        assert_eq!(
            (d0.on_write_error, d0.on_read_error),
            (Some(ErrorAction::Stop), Some(ErrorAction::Report))
        );
        assert_eq!(disk(&g, "scsi1").on_write_error, None);
        let bad = vm(&[("scsi0", "local-lvm:vm-100-disk-0,rerror=enospc")]);
        let e = guest_spec(&bad, &resolve).unwrap_err();
        assert_eq!(e, "scsi0: unsupported rerror 'enospc'");
    }

    #[test]
    fn a_cloud_init_vm_as_the_deployer_makes_it() {
        let v = vm(&[
            ("name", "web-1"),
            ("sockets", "2"),
            ("cores", "2"),
            ("memory", "2048"),
            ("machine", "q35"),
            ("scsihw", "virtio-scsi-pci"),
            ("scsi0", "local-lvm:vm-100-disk-0,iothread=1,size=20G"),
            ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
            ("net0", "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1"),
            ("boot", "order=scsi0;ide2;net0"),
            ("agent", "1"),
            ("serial0", "socket"),
        ]);
        let g = guest_spec(&v, &resolve).unwrap();
        assert_eq!(g.name, "pve1-100");
        assert_eq!(
            (g.sockets, g.cores, g.vcpus(), g.memory_mib),
            (2, 2, 4, 2048)
        );
        assert_eq!(g.machine, Machine::Q35);
        assert!(g.agent);
        let root = disk(&g, "scsi0");
        assert_eq!(root.bus, DiskBus::Scsi(ScsiController::VirtioScsiPci));
        assert_eq!(
            root.path.as_deref(),
            Some(Path::new("/vols/pve1/local-lvm/vm-100-disk-0"))
        );
        assert_eq!(
            (root.format, root.media, root.bootindex),
            (DiskFormat::Raw, Media::Disk, Some(1))
        );
        let ci = disk(&g, "ide2");
        assert_eq!((ci.media, ci.bootindex), (Media::Cdrom, Some(2)));
        let n = &g.nics[0];
        assert_eq!(n.mac.to_string(), "bc:24:11:2e:c5:4a");
        assert_eq!(
            (n.model, n.bridge.as_deref(), n.link_up),
            (NicModel::Virtio, Some("vmbr0"), true)
        );
        assert_eq!(n.bootindex, Some(3));
        assert!(g.validate().is_ok());
    }

    #[test]
    fn defaults_are_pves_one_socket_one_core_512_mib_i440fx_lsi() {
        let g = guest_spec(&vm(&[("scsi0", "local:100/vm-100-disk-0.qcow2")]), &resolve).unwrap();
        assert_eq!(
            (g.sockets, g.cores, g.memory_mib, g.machine),
            (1, 1, 512, Machine::Pc)
        );
        assert!(!g.agent);
        let d = disk(&g, "scsi0");
        assert_eq!(
            (d.bus, d.format),
            (DiskBus::Scsi(ScsiController::Lsi), DiskFormat::Qcow2)
        );
        // No `boot`: legacy `cdn`, the first disk at 100.
        assert_eq!(d.bootindex, Some(100));
    }

    #[test]
    fn agent_memory_and_machine_property_strings() {
        let g = guest_spec(
            &vm(&[
                ("agent", "enabled=1,fstrim_cloned_disks=1"),
                ("memory", "current=1536"),
                ("machine", "type=pc-q35-8.1,viommu=virtio"),
            ]),
            &resolve,
        )
        .unwrap();
        assert!(g.agent);
        assert_eq!(g.memory_mib, 1536);
        assert_eq!(g.machine, Machine::Q35);
        assert!(!guest_spec(&vm(&[("agent", "0")]), &resolve).unwrap().agent);
        assert_eq!(machine(Some("pc-i440fx-9.0")), Machine::Pc);
    }

    #[test]
    fn link_down_models_and_legacy_boot_letters() {
        let v = vm(&[
            ("net0", "e1000=BC:24:11:00:00:01,bridge=vmbr0,link_down=1"),
            (
                "net1",
                "model=rtl8139,macaddr=bc:24:11:00:00:02,bridge=vmbr1",
            ),
            ("virtio0", "local-lvm:vm-100-disk-0"),
            ("sata1", "local-lvm:vm-100-disk-1"),
            ("ide0", "local:iso/debian.iso,media=cdrom"),
            ("ide2", "none,media=cdrom"),
            ("boot", "dnc"),
            ("bootdisk", "sata1"),
        ]);
        let g = guest_spec(&v, &resolve).unwrap();
        assert_eq!(
            (g.nics[0].model, g.nics[0].link_up),
            (NicModel::E1000, false)
        );
        assert_eq!(
            (g.nics[1].model, g.nics[1].bridge.as_deref()),
            (NicModel::Rtl8139, Some("vmbr1"))
        );
        assert_eq!(disk(&g, "ide0").bootindex, Some(100));
        assert_eq!(disk(&g, "ide2").bootindex, Some(101));
        assert_eq!(disk(&g, "ide2").path, None);
        assert_eq!(
            (g.nics[0].bootindex, g.nics[1].bootindex),
            (Some(200), Some(201))
        );
        assert_eq!(disk(&g, "sata1").bootindex, Some(300));
        assert_eq!(disk(&g, "virtio0").bootindex, None);
        assert!(g.validate().is_ok());
    }

    #[test]
    fn a_start_that_cannot_be_mapped_says_why() {
        let e = guest_spec(&vm(&[("scsi0", "local-lvm:vm-100-gone-0")]), &resolve).unwrap_err();
        assert_eq!(e, "volume 'local-lvm:vm-100-gone-0' does not exist");
        let e = guest_spec(
            &vm(&[("net0", "pcnet=BC:24:11:00:00:01,bridge=vmbr0")]),
            &resolve,
        )
        .unwrap_err();
        assert!(e.contains("pcnet"), "{e}");
        let e = guest_spec(&vm(&[("scsihw", "foo")]), &resolve).unwrap_err();
        assert!(e.contains("scsihw"), "{e}");
        // EFI vars and TPM state are left out, not an error.
        let g = guest_spec(&vm(&[("efidisk0", "local-lvm:vm-100-disk-9")]), &resolve).unwrap();
        assert!(g.disks.is_empty());
    }

    #[test]
    fn guest_names_are_per_node_and_vmid() {
        assert_eq!(guest_name("r630-01", 101), "r630-01-101");
        assert_eq!(guest_name("a.b", 7), "a_b-7");
    }
}
