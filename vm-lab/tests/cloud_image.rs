//! The cloud image: built from Debian packages, booted through SeaBIOS from its own disk in a
//! lab namespace (TCG here), with PVE-shaped cloud-init drives made by genisoimage the way PVE
//! makes them. Checked through the guest agent and the serial log. The reader's parsing is also
//! run on the host with the image's own busybox (fast, no boot).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vm_lab::image::cloud::{self, CloudImage, CloudImageRequest, ERROR_MARKER, READY_MARKER};
use vm_lab::namespace::Namespace;
use vm_lab::{Accel, AccelChoice, qemu_args, qga};

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0cloudimagetestkey0000000000000000000000 tester@example";
const MAC: &str = "bc:24:11:5e:00:01";

fn cache() -> PathBuf {
    vm_lab::image::default_cache_dir()
}

fn image() -> CloudImage {
    cloud::build(&cache(), &CloudImageRequest::default()).expect("cloud image builds")
}

/// What PVE's `generate_nocloud` writes for name=web01, searchdomain=example.com, ciuser=admin,
/// sshkeys=KEY, cipassword (a hash), ipconfig0=ip=192.168.77.10/24,gw=192.168.77.1,
/// nameserver=192.168.77.1, net0=virtio=MAC.
fn pve_user_data() -> String {
    format!(
        "#cloud-config\nhostname: web01\nmanage_etc_hosts: true\nfqdn: web01.example.com\nuser: admin\npassword: $5$salt$5y9iGXdTqcjVnoSNn8HgKMz2Q1nCmVdXxmJm7sO0NX8\nssh_authorized_keys:\n  - {KEY}\nchpasswd:\n  expire: False\nusers:\n  - default\npackage_upgrade: true\n"
    )
}

fn pve_network_v1() -> String {
    format!(
        "version: 1\nconfig:\n    - type: physical\n      name: eth0\n      mac_address: '{MAC}'\n      subnets:\n      - type: static\n        address: '192.168.77.10'\n        netmask: '255.255.255.0'\n        gateway: '192.168.77.1'\n    - type: nameserver\n      address:\n      - '192.168.77.1'\n      search:\n      - 'example.com'\n"
    )
}

/// An ISO the way PVE's `commit_cloudinit_disk` makes it.
fn make_iso(dir: &Path, label: &str, files: &[(&str, &str)]) -> PathBuf {
    let src = dir.join(format!("iso-{label}"));
    for (name, text) in files {
        let p = src.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let iso = dir.join(format!("{label}.iso"));
    let out = Command::new("genisoimage")
        .args(["-quiet", "-iso-level", "3", "-R", "-V", label, "-o"])
        .arg(&iso)
        .arg(&src)
        .output()
        .expect("genisoimage runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    iso
}

/// A copy-on-write overlay of the image (what a linked clone is), optionally larger.
fn overlay(img: &CloudImage, dir: &Path, grow_mib: Option<u64>) -> PathBuf {
    let disk = dir.join("disk.qcow2");
    let mut cmd = Command::new("qemu-img");
    cmd.args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
        .arg(&img.path)
        .arg(&disk);
    if let Some(mib) = grow_mib {
        cmd.arg(format!("{mib}M"));
    }
    assert!(cmd.status().unwrap().success());
    disk
}

/// The hardware of one test VM, as PVE would make it.
struct Vm<'a> {
    dir: &'a Path,
    disk: &'a Path,
    /// `-device` for the disk's controller (none for virtio-blk/IDE) and the disk itself.
    disk_bus: DiskBus,
    cdrom: Option<(&'a Path, CdBus)>,
    nic_model: &'a str,
}

#[derive(Clone, Copy)]
enum DiskBus {
    VirtioScsi,
    VirtioBlk,
    Lsi,
}

#[derive(Clone, Copy)]
enum CdBus {
    Ide,
    Sata,
}

fn vm_argv(vm: &Vm<'_>, accel: Accel) -> Vec<String> {
    let mut v = qemu_args::base_args("cloudimg-test");
    // PVE's default machine is i440fx.
    if let Some(i) = v.iter().position(|a| a == "q35") {
        v[i] = "pc".into();
    }
    v.extend(qemu_args::accel_args(accel));
    v.extend(qemu_args::cpu_mem_args(1, 512));
    v.extend([
        "-serial".into(),
        format!("file:{}", vm.dir.join("serial.log").display()),
    ]);
    v.extend(qemu_args::qga_args(&vm.dir.join("qga.sock")));
    let disk = format!(
        "file={},if=none,id=drive-disk0,format=qcow2,cache=unsafe",
        vm.disk.display()
    );
    v.extend(["-drive".into(), disk]);
    let dev: &[&str] = match vm.disk_bus {
        DiskBus::VirtioScsi => &[
            "virtio-scsi-pci,id=scsihw0",
            "scsi-hd,bus=scsihw0.0,drive=drive-disk0,bootindex=100",
        ],
        DiskBus::VirtioBlk => &["virtio-blk-pci,drive=drive-disk0,bootindex=100"],
        DiskBus::Lsi => &[
            "lsi,id=scsihw0",
            "scsi-hd,bus=scsihw0.0,scsi-id=0,drive=drive-disk0,bootindex=100",
        ],
    };
    for d in dev {
        v.extend(["-device".into(), d.to_string()]);
    }
    if let Some((iso, bus)) = vm.cdrom {
        v.extend([
            "-drive".into(),
            format!(
                "file={},if=none,id=drive-cd,media=cdrom,readonly=on,format=raw",
                iso.display()
            ),
        ]);
        let dev = match bus {
            CdBus::Ide => "ide-cd,bus=ide.1,unit=0,drive=drive-cd".to_string(),
            CdBus::Sata => {
                v.extend(["-device".into(), "ahci,id=ahci0".into()]);
                "ide-cd,bus=ahci0.0,drive=drive-cd".to_string()
            }
        };
        v.extend(["-device".into(), dev]);
    }
    v.extend([
        "-netdev".into(),
        "user,id=net0,restrict=on".into(),
        "-device".into(),
        format!("{},netdev=net0,mac={MAC}", vm.nic_model),
    ]);
    v
}

/// A running test VM: QEMU inside a lab namespace, killed on drop.
struct Running {
    child: tokio::process::Child,
    _ns: Namespace,
    serial: PathBuf,
    qga: PathBuf,
    started: Instant,
}

impl Running {
    async fn start(vm: &Vm<'_>) -> Running {
        let ns = Namespace::create().expect("lab namespace");
        let accel = vm_lab::accel::resolve(AccelChoice::Auto, &probe_kernel(), &cache())
            .await
            .unwrap();
        let serial = vm.dir.join("serial.log");
        let _ = std::fs::remove_file(&serial);
        let mut cmd = ns.command("qemu-system-x86_64");
        cmd.args(vm_argv(vm, accel))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(vm.dir.join("qemu.stderr")).unwrap())
            .kill_on_drop(true);
        let child = cmd.spawn().expect("qemu starts");
        Running {
            child,
            _ns: ns,
            serial,
            qga: vm.dir.join("qga.sock"),
            started: Instant::now(),
        }
    }

    fn serial_text(&self) -> String {
        std::fs::read_to_string(&self.serial).unwrap_or_default()
    }

    /// The ready line, waiting for it (failing with the serial log when QEMU exits or time runs
    /// out).
    async fn ready_line(&mut self) -> String {
        let limit = Duration::from_secs(300);
        loop {
            let text = self.serial_text();
            if let Some(line) = text.lines().find(|l| l.starts_with(READY_MARKER)) {
                eprintln!(
                    "ready after {:.1?} (QEMU launch to {READY_MARKER})",
                    self.started.elapsed()
                );
                return line.to_string();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("QEMU exited ({status}) before {READY_MARKER}; serial:\n{text}");
            }
            assert!(
                self.started.elapsed() < limit,
                "no {READY_MARKER} within {limit:?}; serial:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn exec(&self, command: &str) -> (i64, String) {
        let conn = qga::connect(&self.qga, Duration::from_secs(60))
            .await
            .expect("guest agent answers");
        let (code, out, err) = qga::exec(&conn, command, Duration::from_secs(60))
            .await
            .expect("guest-exec")
            .expect("command finishes");
        (
            code,
            format!(
                "{}{}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            ),
        )
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Any bzImage for the accelerator probe: the cloud image's own kernel, from the package cache.
fn probe_kernel() -> PathBuf {
    let unpacked = cache().join("unpacked");
    std::fs::read_dir(&unpacked)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("linux-image-"))
        .find_map(|e| {
            std::fs::read_dir(e.path().join("boot"))
                .ok()?
                .flatten()
                .find(|f| f.file_name().to_string_lossy().starts_with("vmlinuz-"))
                .map(|f| f.path())
        })
        .expect("a kernel in the cache")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nocloud_drive_from_pve_is_applied() {
    let img = image();
    let tmp = tempfile::tempdir().unwrap();
    let user = pve_user_data();
    let net = pve_network_v1();
    let meta = "instance-id: 0f3c0ffee0f3c0ffee0f3c0ffee0f3c0ffee0f3c\n";
    let iso = make_iso(
        tmp.path(),
        "cidata",
        &[
            ("user-data", &user),
            ("meta-data", meta),
            ("network-config", &net),
            ("vendor-data", ""),
        ],
    );
    let disk = overlay(&img, tmp.path(), None);
    let vm = Vm {
        dir: tmp.path(),
        disk: &disk,
        disk_bus: DiskBus::VirtioScsi,
        cdrom: Some((&iso, CdBus::Ide)),
        nic_model: "virtio-net-pci",
    };
    let mut run = Running::start(&vm).await;
    let ready = run.ready_line().await;
    let serial = run.serial_text();
    assert!(!serial.contains(ERROR_MARKER), "{serial}");
    assert!(ready.contains("host=web01 "), "{ready}");
    assert!(ready.contains("cloudinit=done"), "{ready}");

    let (_, hn) = run.exec("hostname; cat /etc/hosts").await;
    assert!(hn.starts_with("web01\n"), "{hn}");
    assert!(hn.contains("web01.example.com web01"), "{hn}");
    let (_, addr) = run
        .exec("ip -o -4 addr show dev eth0; cat /sys/class/net/eth0/address; ip route")
        .await;
    assert!(addr.contains("192.168.77.10/24"), "{addr}");
    assert!(addr.contains(MAC), "{addr}");
    assert!(addr.contains("default via 192.168.77.1 dev eth0"), "{addr}");
    let (_, keys) = run
        .exec("cat /home/admin/.ssh/authorized_keys; stat -c '%U %a' /home/admin/.ssh/authorized_keys; grep ^admin: /etc/shadow; cat /etc/resolv.conf")
        .await;
    assert!(keys.starts_with(&format!("{KEY}\n")), "{keys}");
    assert!(keys.contains("admin 600"), "{keys}");
    assert!(keys.contains("admin:$5$salt$"), "{keys}");
    assert!(keys.contains("nameserver 192.168.77.1"), "{keys}");
    assert!(keys.contains("search example.com"), "{keys}");
    let (code, status) = run.exec("cloud-init status --long").await;
    assert_eq!(code, 0, "{status}");
    assert!(status.contains("status: done"), "{status}");
    let (_, data) = run.exec("grep ' /data ' /proc/mounts").await;
    assert!(data.contains("ext4"), "{data}");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_drive_fails_loudly_but_the_agent_answers() {
    let img = image();
    let tmp = tempfile::tempdir().unwrap();
    let disk = overlay(&img, tmp.path(), None);
    let vm = Vm {
        dir: tmp.path(),
        disk: &disk,
        disk_bus: DiskBus::VirtioBlk,
        cdrom: None,
        nic_model: "e1000",
    };
    let mut run = Running::start(&vm).await;
    let ready = run.ready_line().await;
    assert!(ready.contains("cloudinit=error"), "{ready}");
    let serial = run.serial_text();
    assert!(
        serial.contains(&format!("{ERROR_MARKER} no cloud-init drive")),
        "{serial}"
    );
    let (code, status) = run.exec("cloud-init status --long").await;
    assert_eq!(code, 1, "{status}");
    assert!(status.contains("no cloud-init drive"), "{status}");
    run.stop().await;
}
