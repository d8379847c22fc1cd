//! The QEMU command line, built by small pure functions, one per concern. Nothing here touches
//! the file system or spawns anything, so every piece is unit-tested.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::accel::Accel;
use crate::error::{Error, Result};
use crate::spec::{BootMode, Cidr, Mac, McastLink, NodeSpec};

/// The QEMU device id of a node's lab NIC; `set_link` takes it.
pub const LAN_NIC_ID: &str = "nic-lan";
/// The QEMU device id of a node's management NIC (user-mode network: SSH forward, PXE/TFTP).
pub const MGMT_NIC_ID: &str = "nic-mgmt";
/// Guest address of the management NIC (QEMU's user-mode network hands out .15 first).
pub const MGMT_GUEST_IP: &str = "10.0.2.15/24";
/// A node's serial stamps file, beside its `serial.log`.
pub const SERIAL_TIMES: &str = "serial.times.jsonl";

/// The serial marker the guest's init prints when the agent and SSH server are up.
pub const READY_MARKER: &str = "VMLAB-READY";
/// Longest kernel command line x86 accepts, minus a margin.
const MAX_CMDLINE: usize = 2000;
/// sun_path is 108 bytes including the NUL.
const MAX_SOCKET_PATH: usize = 107;

/// Where a node's files live; all under its directory in the lab's run dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePaths {
    /// The node's directory; every other path is a file in it.
    pub dir: PathBuf,
    /// QMP monitor held by the lab driver (event log).
    pub qmp: PathBuf,
    /// QMP monitor for one-shot commands (library verbs and the CLI).
    pub qmp_ctl: PathBuf,
    /// Guest agent socket (`qga.sock`).
    pub qga: PathBuf,
    /// Serial console socket (`serial.sock`): attach to type into the console.
    pub serial_sock: PathBuf,
    /// Everything the serial console printed (`serial.log`), appended across restarts.
    pub serial_log: PathBuf,
    /// When each serial line arrived ([`crate::serial_stamps`]).
    pub serial_times: PathBuf,
    /// QEMU's stderr (`qemu.stderr`).
    pub stderr: PathBuf,
    /// QMP events the driver saw, one JSON object a line (`qmp-events.jsonl`).
    pub events: PathBuf,
    /// QEMU's full command line as a JSON array (`argv.json`), program first; restarts reuse it.
    pub argv: PathBuf,
    /// QEMU's host PID (`pid`).
    pub pid: PathBuf,
    /// The node's data disk (`disk.qcow2`), attached only when the spec gives it a size.
    pub disk: PathBuf,
    /// Holds the node's saved memory images (lab snapshots), attached to no device.
    pub state: PathBuf,
}

impl NodePaths {
    /// The paths of a node whose directory is `dir`; nothing is created.
    pub fn new(dir: &Path) -> NodePaths {
        NodePaths {
            dir: dir.to_path_buf(),
            qmp: dir.join("qmp.sock"),
            qmp_ctl: dir.join("qmp-ctl.sock"),
            qga: dir.join("qga.sock"),
            serial_sock: dir.join("serial.sock"),
            serial_log: dir.join("serial.log"),
            serial_times: dir.join(SERIAL_TIMES),
            stderr: dir.join("qemu.stderr"),
            events: dir.join("qmp-events.jsonl"),
            argv: dir.join("argv.json"),
            pid: dir.join("pid"),
            disk: dir.join("disk.qcow2"),
            state: dir.join("state.qcow2"),
        }
    }
}

/// How a node boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// QEMU loads the kernel and initramfs itself and passes `cmdline`.
    Direct {
        /// Host path of the netboot kernel.
        kernel: PathBuf,
        /// Host path of the netboot initramfs.
        initrd: PathBuf,
        /// The kernel command line, from [`kernel_cmdline`].
        cmdline: String,
    },
    /// iPXE fetches `bootfile` (a script) from QEMU's TFTP server serving `tftp_dir`.
    Pxe {
        /// Host directory QEMU's TFTP server serves (kernel, initramfs, script).
        tftp_dir: PathBuf,
        /// The iPXE script's file name in `tftp_dir`, from [`ipxe_script`].
        bootfile: String,
    },
}

/// Everything a node's command line depends on.
#[derive(Debug, Clone)]
pub struct NodeArgs<'a> {
    /// Lab name; with the node's name it names the QEMU process (`-name lab-node`).
    pub lab: &'a str,
    /// The node's spec (CPUs, memory, MAC).
    pub node: &'a NodeSpec,
    /// The accelerator, resolved.
    pub accel: Accel,
    /// The node's files.
    pub paths: &'a NodePaths,
    /// The lab's L2 segment the lab NIC joins.
    pub link: McastLink,
    /// Port on the namespace's `127.0.0.1` forwarded to the guest's port 22.
    pub ssh_port: u16,
    /// How the node boots.
    pub boot: Boot,
    /// Attach [`NodePaths::disk`] as `/dev/vda`.
    pub with_disk: bool,
}

/// The full argv (without the program name).
pub fn node_argv(a: &NodeArgs<'_>) -> Result<Vec<String>> {
    for p in [
        &a.paths.qmp,
        &a.paths.qmp_ctl,
        &a.paths.qga,
        &a.paths.serial_sock,
    ] {
        socket_path_ok(p)?;
    }
    let mut v = base_args(&format!("{}-{}", a.lab, a.node.name));
    v.extend(accel_args(a.accel));
    v.extend(cpu_mem_args(a.node.vcpus, a.node.memory_mib));
    v.extend(qmp_args(&a.paths.qmp));
    v.extend(qmp_args(&a.paths.qmp_ctl));
    v.extend(serial_args(&a.paths.serial_sock, &a.paths.serial_log));
    v.extend(qga_args(&a.paths.qga));
    v.extend(rng_args());
    v.extend(lan_nic_args(&a.link, a.node.mac)?);
    let pxe = match &a.boot {
        Boot::Pxe { tftp_dir, bootfile } => Some((tftp_dir.as_path(), bootfile.as_str())),
        Boot::Direct { .. } => None,
    };
    v.extend(mgmt_nic_args(a.ssh_port, mgmt_mac(a.node.mac), pxe));
    if a.with_disk {
        v.extend(disk_args(&a.paths.disk));
    }
    v.extend(state_drive_args(&a.paths.state));
    if let Boot::Direct {
        kernel,
        initrd,
        cmdline,
    } = &a.boot
    {
        v.extend(direct_boot_args(kernel, initrd, cmdline));
    }
    Ok(v)
}

/// Arguments every node gets: no default devices or config, no display, q35, the process name
/// `name`, timestamped messages, and `-no-reboot` (a guest reboot or panic ends QEMU).
pub fn base_args(name: &str) -> Vec<String> {
    strings(&[
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-name",
        name,
        "-machine",
        "q35",
        // A guest reboot or panic ends QEMU, so the driver sees it instead of a silent loop.
        "-no-reboot",
        "-msg",
        "timestamp=on",
    ])
}

/// `-accel` and a matching `-cpu`: the host CPU under KVM, `max` under TCG.
pub fn accel_args(accel: Accel) -> Vec<String> {
    match accel {
        Accel::Kvm => strings(&["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => strings(&["-accel", "tcg", "-cpu", "max"]),
    }
}

/// `-smp` and `-m`: `vcpus` CPUs and `memory_mib` MiB of memory.
pub fn cpu_mem_args(vcpus: u32, memory_mib: u32) -> Vec<String> {
    vec![
        "-smp".into(),
        vcpus.to_string(),
        "-m".into(),
        format!("{memory_mib}M"),
    ]
}

/// A QMP monitor listening on the unix socket `sock`, not waiting for a client to start.
pub fn qmp_args(sock: &Path) -> Vec<String> {
    vec![
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", sock.display()),
    ]
}

/// Serial console as a unix socket (attachable) that QEMU also logs to a file.
pub fn serial_args(sock: &Path, log: &Path) -> Vec<String> {
    vec![
        "-chardev".into(),
        format!(
            "socket,id=ser0,path={},server=on,wait=off,logfile={},logappend=on",
            sock.display(),
            log.display()
        ),
        "-serial".into(),
        "chardev:ser0".into(),
    ]
}

/// The guest agent's virtio-serial port (`org.qemu.guest_agent.0`), on the unix socket `sock`.
pub fn qga_args(sock: &Path) -> Vec<String> {
    vec![
        "-chardev".into(),
        format!("socket,id=qga0,path={},server=on,wait=off", sock.display()),
        "-device".into(),
        "virtio-serial-pci,id=vser0".into(),
        "-device".into(),
        "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0".into(),
    ]
}

/// A virtio RNG, so the guest has entropy for SSH keys at once instead of waiting on the pool.
pub fn rng_args() -> Vec<String> {
    strings(&["-device", "virtio-rng-pci"])
}

/// The lab NIC on the multicast L2. Refuses a non-loopback local address: without it QEMU
/// sends the lab's frames out of whatever interface routes the group.
pub fn lan_nic_args(link: &McastLink, mac: Mac) -> Result<Vec<String>> {
    Ok(vec![
        "-netdev".into(),
        mcast_netdev("lan", link)?,
        "-device".into(),
        format!("virtio-net-pci,netdev=lan,id={LAN_NIC_ID},mac={mac},romfile="),
    ])
}

/// `-netdev socket,mcast=…,localaddr=…` for a link; errors unless the local address is loopback.
pub fn mcast_netdev(id: &str, link: &McastLink) -> Result<String> {
    if !link.localaddr.is_loopback() {
        return Err(Error::Args(format!(
            "multicast netdev {id} needs a loopback localaddr, got {}",
            link.localaddr
        )));
    }
    if !link.group.is_multicast() {
        return Err(Error::Args(format!(
            "{} is not a multicast group",
            link.group
        )));
    }
    Ok(format!(
        "socket,id={id},mcast={}:{},localaddr={}",
        link.group, link.port, link.localaddr
    ))
}

/// The management NIC: QEMU user-mode networking, restricted (no way out), forwarding the
/// lab namespace's 127.0.0.1:`ssh_port` to the guest's SSH server; with `pxe`, also the DHCP +
/// TFTP server the firmware boots from.
pub fn mgmt_nic_args(ssh_port: u16, mac: Mac, pxe: Option<(&Path, &str)>) -> Vec<String> {
    let mut netdev =
        format!("user,id=mgmt,restrict=on,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:{ssh_port}-:22");
    let mut device = format!("virtio-net-pci,netdev=mgmt,id={MGMT_NIC_ID},mac={mac}");
    match pxe {
        Some((dir, bootfile)) => {
            netdev.push_str(&format!(",tftp={},bootfile={bootfile}", dir.display()));
            device.push_str(",bootindex=1");
        }
        // No option ROM when nothing boots from the network: saves firmware time.
        None => device.push_str(",romfile="),
    }
    vec!["-netdev".into(), netdev, "-device".into(), device]
}

/// The management NIC's MAC: the lab MAC with a different OUI tail, so both are predictable.
pub fn mgmt_mac(lan: Mac) -> Mac {
    let m = lan.0;
    Mac([0x52, 0x54, 0x01, m[3], m[4], m[5]])
}

/// The node's qcow2 `disk` as a virtio-blk device (`/dev/vda`), write-back cached.
pub fn disk_args(disk: &Path) -> Vec<String> {
    vec![
        "-drive".into(),
        // writeback: a guest `sync` reaches the qcow2 file, so data survives a QEMU kill.
        format!(
            "file={},if=none,id=disk0,format=qcow2,cache=writeback,discard=unmap",
            disk.display()
        ),
        "-device".into(),
        "virtio-blk-pci,drive=disk0,id=vda".into(),
    ]
}

/// A qcow2 image on no device: `savevm` needs one writable qcow2 to keep the memory image
/// in, and a node without a disk would have none.
pub fn state_drive_args(state: &Path) -> Vec<String> {
    vec![
        "-drive".into(),
        format!(
            "file={},if=none,id=vmstate,format=qcow2,cache=writeback",
            state.display()
        ),
    ]
}

/// `-kernel`, `-initrd` and `-append`: QEMU boots the kernel directly, without firmware boot
/// devices.
pub fn direct_boot_args(kernel: &Path, initrd: &Path, cmdline: &str) -> Vec<String> {
    vec![
        "-kernel".into(),
        kernel.display().to_string(),
        "-initrd".into(),
        initrd.display().to_string(),
        "-append".into(),
        cmdline.to_string(),
    ]
}

/// The guest kernel command line: console, panic behaviour, and the `vmlab.*` parameters the
/// image's init reads (hostname, lab address by MAC, management MAC, peers for /etc/hosts).
pub fn kernel_cmdline(node: &NodeSpec, hosts: &[(String, Ipv4Addr)]) -> Result<String> {
    let mut parts = vec![
        "console=ttyS0,115200".to_string(),
        "panic=-1".into(),
        // Under TCG on a loaded host the timer-IRQ self-test can miss its window and panic
        // ("IO-APIC + timer doesn't work!"); the check proves nothing in a VM.
        "no_timer_check".into(),
        "mitigations=off".into(),
        "quiet".into(),
        format!("vmlab.hostname={}", node.name),
        format!("vmlab.lan={},{}", node.mac, node.address),
        format!("vmlab.mgmt={},{MGMT_GUEST_IP}", mgmt_mac(node.mac)),
    ];
    if !hosts.is_empty() {
        let list: Vec<String> = hosts.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
        parts.push(format!("vmlab.hosts={}", list.join(",")));
    }
    if node.clock_offset_s != 0 {
        parts.push(format!("vmlab.clock_offset={}", node.clock_offset_s));
    }
    parts.extend(node.kernel_args.iter().cloned());
    let line = parts.join(" ");
    if line.len() > MAX_CMDLINE {
        return Err(Error::Args(format!(
            "node {}: kernel command line is {} bytes, over {MAX_CMDLINE}",
            node.name,
            line.len()
        )));
    }
    Ok(line)
}

/// The iPXE script a PXE node fetches: the same kernel, initrd and command line as a direct boot.
pub fn ipxe_script(kernel: &str, initrd: &str, cmdline: &str) -> String {
    format!(
        "#!ipxe\necho vm-lab: loading {kernel}\nkernel {kernel} initrd={initrd} {cmdline}\ninitrd {initrd}\nboot\n"
    )
}

/// The spelling of a boot mode in specs and in `lab.json`: `direct` or `pxe`.
pub fn boot_mode_name(b: BootMode) -> &'static str {
    match b {
        BootMode::Direct => "direct",
        BootMode::Pxe => "pxe",
    }
}

/// The address a node has on the lab network.
pub fn lab_address(node: &NodeSpec) -> Cidr {
    node.address
}

fn socket_path_ok(p: &Path) -> Result<()> {
    let len = p.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(Error::Args(format!(
            "socket path {} is {len} bytes, over the {MAX_SOCKET_PATH}-byte unix limit; use a shorter run dir",
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
    use super::*;

    fn node() -> NodeSpec {
        NodeSpec {
            name: "node01".into(),
            vcpus: 1,
            memory_mib: 384,
            disk_gib: 1,
            mac: "52:54:00:00:01:01".parse().unwrap(),
            address: "192.168.100.11/24".parse().unwrap(),
            boot: BootMode::Direct,
            kernel_args: vec![],
            clock_offset_s: 0,
        }
    }

    fn link(local: Ipv4Addr) -> McastLink {
        McastLink {
            group: Ipv4Addr::new(239, 1, 2, 3),
            port: 41000,
            localaddr: local,
        }
    }

    #[test]
    fn mcast_netdev_always_carries_localaddr() {
        let s = mcast_netdev("lan", &link(Ipv4Addr::LOCALHOST)).unwrap();
        assert_eq!(s, "socket,id=lan,mcast=239.1.2.3:41000,localaddr=127.0.0.1");
    }

    #[test]
    fn mcast_netdev_refuses_non_loopback_localaddr() {
        let e = mcast_netdev("lan", &link(Ipv4Addr::new(0, 0, 0, 0))).unwrap_err();
        assert!(matches!(e, Error::Args(_)), "{e}");
        assert!(mcast_netdev("lan", &link(Ipv4Addr::new(192, 168, 1, 2))).is_err());
        let e = lan_nic_args(&link(Ipv4Addr::new(10, 0, 0, 1)), node().mac).unwrap_err();
        assert!(e.to_string().contains("loopback"));
    }

    #[test]
    fn mcast_netdev_refuses_unicast_group() {
        let mut l = link(Ipv4Addr::LOCALHOST);
        l.group = Ipv4Addr::new(10, 0, 0, 1);
        assert!(mcast_netdev("lan", &l).is_err());
    }

    #[test]
    fn lan_nic_has_id_mac_and_no_rom() {
        let v = lan_nic_args(&link(Ipv4Addr::LOCALHOST), node().mac).unwrap();
        assert_eq!(
            v[3],
            "virtio-net-pci,netdev=lan,id=nic-lan,mac=52:54:00:00:01:01,romfile="
        );
    }

    #[test]
    fn accel_picks_cpu_model() {
        assert_eq!(accel_args(Accel::Tcg), ["-accel", "tcg", "-cpu", "max"]);
        assert_eq!(accel_args(Accel::Kvm), ["-accel", "kvm", "-cpu", "host"]);
    }

    #[test]
    fn mgmt_nic_forwards_ssh_and_serves_tftp_only_for_pxe() {
        let v = mgmt_nic_args(2201, mgmt_mac(node().mac), None);
        assert!(v[1].contains("restrict=on") && v[1].contains("hostfwd=tcp:127.0.0.1:2201-:22"));
        assert!(!v[1].contains("tftp"));
        assert!(v[3].ends_with("romfile="));
        let v = mgmt_nic_args(
            2201,
            mgmt_mac(node().mac),
            Some((Path::new("/t"), "b.ipxe")),
        );
        assert!(v[1].ends_with(",tftp=/t,bootfile=b.ipxe"));
        assert!(v[3].ends_with("bootindex=1"));
    }

    #[test]
    fn mgmt_mac_is_derived_from_lan_mac() {
        assert_eq!(mgmt_mac(node().mac).to_string(), "52:54:01:00:01:01");
    }

    #[test]
    fn cmdline_carries_identity_and_peers() {
        let hosts = vec![
            ("node01".to_string(), Ipv4Addr::new(192, 168, 100, 11)),
            ("node02".to_string(), Ipv4Addr::new(192, 168, 100, 12)),
        ];
        let c = kernel_cmdline(&node(), &hosts).unwrap();
        assert!(c.contains("console=ttyS0"));
        assert!(c.contains("no_timer_check"));
        assert!(c.contains("vmlab.hostname=node01"));
        assert!(c.contains("vmlab.lan=52:54:00:00:01:01,192.168.100.11/24"));
        assert!(c.contains("vmlab.hosts=node01=192.168.100.11,node02=192.168.100.12"));
        assert!(!c.contains("clock_offset"));
        let mut skewed = node();
        skewed.clock_offset_s = -86400;
        assert!(
            kernel_cmdline(&skewed, &hosts)
                .unwrap()
                .contains(" vmlab.clock_offset=-86400")
        );
    }

    #[test]
    fn cmdline_too_long_is_an_error() {
        let mut n = node();
        n.kernel_args = vec!["x".repeat(2100)];
        assert!(kernel_cmdline(&n, &[]).is_err());
    }

    #[test]
    fn full_argv_direct_and_pxe() {
        let paths = NodePaths::new(Path::new("/tmp/l/node01"));
        let n = node();
        let mut a = NodeArgs {
            lab: "lab",
            node: &n,
            accel: Accel::Tcg,
            paths: &paths,
            link: link(Ipv4Addr::LOCALHOST),
            ssh_port: 2201,
            boot: Boot::Direct {
                kernel: "/c/vmlinuz".into(),
                initrd: "/c/initrd.img".into(),
                cmdline: "console=ttyS0".into(),
            },
            with_disk: true,
        };
        let v = node_argv(&a).unwrap();
        let joined = v.join(" ");
        assert!(joined.contains("-kernel /c/vmlinuz -initrd /c/initrd.img -append console=ttyS0"));
        assert!(joined.contains("file=/tmp/l/node01/disk.qcow2"));
        assert!(joined.contains("-qmp unix:/tmp/l/node01/qmp.sock,server=on,wait=off"));
        assert!(joined.contains("-qmp unix:/tmp/l/node01/qmp-ctl.sock,server=on,wait=off"));
        assert!(joined.contains("logfile=/tmp/l/node01/serial.log"));
        assert!(joined.contains("-drive file=/tmp/l/node01/state.qcow2,if=none,id=vmstate"));
        assert!(joined.contains("name=org.qemu.guest_agent.0"));
        a.boot = Boot::Pxe {
            tftp_dir: "/c".into(),
            bootfile: "node01.ipxe".into(),
        };
        a.with_disk = false;
        let joined = node_argv(&a).unwrap().join(" ");
        assert!(!joined.contains("-kernel"));
        assert!(!joined.contains("disk.qcow2"));
        assert!(joined.contains("bootfile=node01.ipxe"));
    }

    #[test]
    fn overlong_socket_path_is_refused() {
        let long = format!("/tmp/{}", "d".repeat(120));
        let paths = NodePaths::new(Path::new(&long));
        let n = node();
        let a = NodeArgs {
            lab: "lab",
            node: &n,
            accel: Accel::Tcg,
            paths: &paths,
            link: link(Ipv4Addr::LOCALHOST),
            ssh_port: 2201,
            boot: Boot::Pxe {
                tftp_dir: "/c".into(),
                bootfile: "b".into(),
            },
            with_disk: false,
        };
        assert!(
            node_argv(&a)
                .unwrap_err()
                .to_string()
                .contains("unix limit")
        );
    }

    #[test]
    fn ipxe_script_boots_kernel_with_cmdline() {
        let s = ipxe_script("vmlinuz", "initrd.img", "console=ttyS0 vmlab.hostname=n");
        assert!(s.starts_with("#!ipxe\n"));
        assert!(s.contains("kernel vmlinuz initrd=initrd.img console=ttyS0 vmlab.hostname=n\n"));
        assert!(s.contains("initrd initrd.img\nboot\n"));
    }
}
