//! The cloud image: built from Debian packages, booted through SeaBIOS from its own disk in a
//! lab namespace (TCG here), with PVE-shaped cloud-init drives made by genisoimage the way PVE
//! makes them. Checked through the guest agent and the serial log. The reader's parsing is also
//! run on the host with the image's own busybox (fast, no boot).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vm_lab::image::cloud::{
    self, CloudImage, CloudImageRequest, CloudKernel, ERROR_MARKER, READY_MARKER,
};
use vm_lab::namespace::Namespace;
use vm_lab::{Accel, AccelChoice, qemu_args, qga};

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0cloudimagetestkey0000000000000000000000 tester@example";
const MAC: &str = "bc:24:11:5e:00:01";

fn cache() -> PathBuf {
    vm_lab::image::default_cache_dir()
}

/// The default image (cloud kernel).
fn image() -> CloudImage {
    cloud::build(&cache(), &CloudImageRequest::default()).expect("cloud image builds")
}

/// The image with the generic kernel (PVE's default hardware: LSI, SATA, e1000).
fn generic_image() -> CloudImage {
    let req = CloudImageRequest {
        kernel: CloudKernel::Generic,
        ..CloudImageRequest::default()
    };
    cloud::build(&cache(), &req).expect("generic cloud image builds")
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

    /// Power off hard: the namespace goes (the kernel kills its QEMU); wait until QEMU is gone
    /// so its disk is free again.
    async fn stop(mut self) {
        let _ = self.child.kill().await;
        self._ns.shutdown();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !vm_lab::namespace::pids_mentioning(&self.serial).is_empty() {
            assert!(Instant::now() < deadline, "QEMU outlived its namespace");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
async fn a_malformed_drive_fails_loudly_but_the_agent_answers() {
    let img = image();
    let tmp = tempfile::tempdir().unwrap();
    // No hostname anywhere, no instance-id, and a netmask that is not one.
    let user = format!("#cloud-config\nssh_authorized_keys:\n  - {KEY}\n");
    let net = format!(
        "version: 1\nconfig:\n    - type: physical\n      mac_address: '{MAC}'\n      subnets:\n      - type: static\n        address: '10.9.0.5'\n        netmask: '255.0.255.0'\n"
    );
    let iso = make_iso(
        tmp.path(),
        "cidata",
        &[
            ("user-data", &user),
            ("meta-data", "{}\n"),
            ("network-config", &net),
        ],
    );
    let disk = overlay(&img, tmp.path(), None);
    let vm = Vm {
        dir: tmp.path(),
        disk: &disk,
        disk_bus: DiskBus::VirtioBlk,
        cdrom: Some((&iso, CdBus::Ide)),
        nic_model: "e1000",
    };
    let mut run = Running::start(&vm).await;
    let ready = run.ready_line().await;
    assert!(ready.contains("cloudinit=error"), "{ready}");
    let serial = run.serial_text();
    // The cloud kernel has no e1000 driver, and says so.
    assert!(
        serial.contains("CLOUDIMG-UNSUPPORTED: network controller 8086:100e"),
        "{serial}"
    );
    for want in [
        "meta-data has no instance-id",
        "no hostname",
        "'255.0.255.0' is not a netmask",
    ] {
        assert!(
            serial.contains(&format!("{ERROR_MARKER} ")) && serial.contains(want),
            "{want}: {serial}"
        );
    }
    // What could be applied was: the default user and its key.
    let (code, status) = run
        .exec("cloud-init status --long; cat /home/ubuntu/.ssh/authorized_keys")
        .await;
    assert_eq!(code, 0, "{status}");
    assert!(status.contains("status: error"), "{status}");
    assert!(status.contains("no hostname"), "{status}");
    assert!(status.contains(KEY), "{status}");
    run.stop().await;
}

/// PVE's config-drive (citype=configdrive2) on PVE's default hardware (LSI SCSI disk, SATA
/// CD-ROM, e1000 NIC); then a power loss, a grown disk and a boot without the drive: /data
/// and the SSH host key survive, /data grows, and the missing drive is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_drive_on_default_hardware_and_data_survives_a_grown_reboot() {
    let img = generic_image();
    let tmp = tempfile::tempdir().unwrap();
    let user = pve_user_data().replace("user: admin\n", "user: root\ndisable_root: False\n");
    let user = user.replace("users:\n  - default\n", "");
    let eni = "auto lo\niface lo inet loopback\n\n        dns_nameservers 10.20.0.1\nauto eth0\niface eth0 inet static\n        address 10.20.0.7\n        netmask 255.255.0.0\n        gateway 10.20.0.1\n";
    let meta = "{\n     \"uuid\": \"5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a\",\n     \"network_config\": { \"content_path\": \"/content/0000\" }\n}\n";
    let iso = make_iso(
        tmp.path(),
        "config-2",
        &[
            ("openstack/latest/user_data", &user),
            ("openstack/content/0000", eni),
            ("openstack/latest/meta_data.json", meta),
            ("openstack/latest/vendor_data.json", ""),
        ],
    );
    let disk = overlay(&img, tmp.path(), None);
    let mut vm = Vm {
        dir: tmp.path(),
        disk: &disk,
        disk_bus: DiskBus::Lsi,
        cdrom: Some((&iso, CdBus::Sata)),
        nic_model: "e1000",
    };
    let mut run = Running::start(&vm).await;
    let ready = run.ready_line().await;
    assert!(ready.contains("datasource=configdrive"), "{ready}");
    assert!(ready.contains("cloudinit=done"), "{ready}");
    assert!(ready.contains("eth0=10.20.0.7/16"), "{ready}");
    let (_, out) = run
        .exec("hostname; cat /root/.ssh/authorized_keys; cat /etc/resolv.conf; df -m /data | tail -1; echo kept > /data/kept; cat /etc/dropbear/dropbear_ed25519_host_key | md5sum; sync")
        .await;
    assert!(out.starts_with("web01\n"), "{out}");
    assert!(out.contains(KEY), "{out}");
    assert!(out.contains("nameserver 10.20.0.1"), "{out}");
    let size_before = data_mib(&out);
    let hostkey = out.lines().last().unwrap().to_string();
    run.stop().await;

    // Power loss, `qm resize … +1G`, and the VM started again without its cloud-init drive.
    // A QEMU being reaped may hold its image lock a moment longer: retry briefly.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("qemu-img")
            .args(["resize", "-q"])
            .arg(&disk)
            .arg("+1G")
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("lock") && Instant::now() < deadline,
            "qemu-img resize: {err}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    vm.cdrom = None;
    let mut run = Running::start(&vm).await;
    let ready = run.ready_line().await;
    assert!(ready.contains("cloudinit=error"), "{ready}");
    assert!(
        run.serial_text()
            .contains(&format!("{ERROR_MARKER} no cloud-init drive")),
        "{}",
        run.serial_text()
    );
    let (_, out) = run
        .exec("cat /data/kept; df -m /data | tail -1; cat /etc/dropbear/dropbear_ed25519_host_key | md5sum")
        .await;
    assert!(out.starts_with("kept\n"), "{out}");
    // The file system grows online beside the boot (cloud-init's `resize_rootfs: noblock`).
    let grown_by = Instant::now() + Duration::from_secs(120);
    let mut df = out.clone();
    while data_mib(&df) <= size_before + 900 && Instant::now() < grown_by {
        tokio::time::sleep(Duration::from_secs(2)).await;
        df = run.exec("df -m /data | tail -1").await.1;
    }
    assert!(
        data_mib(&df) > size_before + 900,
        "/data should have grown by about 1 GiB: {size_before} MiB before; now {df}"
    );
    assert_eq!(out.lines().last().unwrap(), hostkey, "SSH host key changed");
    run.stop().await;
}

/// The size column of `df -m` in some line of `out`.
fn data_mib(out: &str) -> u64 {
    out.lines()
        .find(|l| l.contains("/data"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no df line in {out}"))
}

// --- the reader on the host, with the image's own busybox -------------------------------

/// `ci_plan KIND DIR` run by the busybox the image carries (its sh, awk, sed, grep).
fn plan(kind: &str, files: &[(&str, &str)]) -> Vec<String> {
    let _ = image();
    let busybox = std::fs::read_dir(cache().join("unpacked"))
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("busybox-static_")
        })
        .map(|e| e.path().join("bin/busybox"))
        .expect("busybox-static unpacked in the cache");
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for applet in [
        "sh", "awk", "sed", "grep", "sort", "tr", "head", "cat", "rm", "mkdir", "mv",
    ] {
        std::os::unix::fs::symlink(&busybox, bin.join(applet)).unwrap();
    }
    let lib = tmp.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    for (name, text) in cloud::reader_files() {
        std::fs::write(lib.join(name), text).unwrap();
    }
    let drive = tmp.path().join("drive");
    for (name, text) in files {
        let p = drive.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(&drive).unwrap();
    let out = Command::new(bin.join("sh"))
        .arg("-c")
        .arg(format!(
            ". {}/reader.sh; ci_plan {kind} {}",
            lib.display(),
            drive.display()
        ))
        .env_clear()
        .env("PATH", &bin)
        .env("CI_LIB", &lib)
        .env("CI_TMP", tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn errors(plan: &[String]) -> Vec<&str> {
    plan.iter()
        .filter_map(|l| l.strip_prefix("error "))
        .collect()
}

#[test]
fn reader_plans_what_pve_nocloud_data_says() {
    let p = plan(
        "nocloud",
        &[
            ("user-data", &pve_user_data()),
            ("meta-data", "instance-id: abc\n"),
            ("network-config", &pve_network_v1()),
        ],
    );
    let want = [
        "datasource nocloud".to_string(),
        "instance-id abc".into(),
        "hostname web01".into(),
        "fqdn web01.example.com".into(),
        "user admin".into(),
        "password admin $5$salt$5y9iGXdTqcjVnoSNn8HgKMz2Q1nCmVdXxmJm7sO0NX8".into(),
        format!("key admin {KEY}"),
        format!("key root {KEY}"),
        format!("nic n0 {MAC} eth0"),
        "addr n0 192.168.77.10/24".into(),
        "gw n0 192.168.77.1".into(),
        "dns 192.168.77.1".into(),
        "search example.com".into(),
    ];
    assert_eq!(p, want);
}

#[test]
fn reader_takes_network_config_v2_and_dhcp() {
    let v2 = "network:\n  version: 2\n  ethernets:\n    net0:\n      match:\n        macaddress: \"BC:24:11:00:00:01\"\n      set-name: eth0\n      addresses: [ \"10.1.0.5/24\", \"fd00::5/64\" ]\n      routes:\n        - to: default\n          via: 10.1.0.1\n      nameservers:\n        addresses: ['10.1.0.1']\n        search: [lab.local]\n    eth1:\n      dhcp4: true\n";
    let p = plan(
        "nocloud",
        &[
            ("user-data", "#cloud-config\nhostname: n2\n"),
            ("meta-data", "instance-id: x\n"),
            ("network-config", v2),
        ],
    );
    for want in [
        "nic n0 BC:24:11:00:00:01 eth0",
        "addr n0 10.1.0.5/24",
        "addr6 n0 fd00::5/64",
        "gw n0 10.1.0.1",
        "dns 10.1.0.1",
        "search lab.local",
        "nic n1 - eth1",
        "dhcp4 n1",
        // No `user:` and no `users:`: the default user, as on Ubuntu.
        "user ubuntu",
    ] {
        assert!(p.iter().any(|l| l == want), "{want} missing from {p:#?}");
    }
    assert!(errors(&p).is_empty(), "{p:#?}");
}

#[test]
fn reader_takes_pve_config_drive_and_openstack_network_data() {
    let eni = "auto lo\niface lo inet loopback\n\n        dns_nameservers 10.0.0.1 10.0.0.2\n        dns_search corp.example\nauto eth0\niface eth0 inet static\n        address 10.0.0.5\n        netmask 255.255.0.0\n        gateway 10.0.0.1\nauto eth1\niface eth1 inet dhcp\n";
    let meta = "{\n     \"uuid\": \"u1\",\n     \"network_config\": { \"content_path\": \"/content/0000\" }\n}\n";
    let p = plan(
        "configdrive",
        &[
            ("openstack/latest/meta_data.json", meta),
            ("openstack/latest/user_data", &pve_user_data()),
            ("openstack/content/0000", eni),
        ],
    );
    for want in [
        "datasource configdrive",
        "instance-id u1",
        "hostname web01",
        "nic n0 - eth0",
        "addr n0 10.0.0.5/16",
        "gw n0 10.0.0.1",
        "nic n1 - eth1",
        "dhcp4 n1",
        "dns 10.0.0.2",
        "search corp.example",
    ] {
        assert!(p.iter().any(|l| l == want), "{want} missing from {p:#?}");
    }
    let nd = r#"{"links": [{"id": "tap1", "type": "phy", "ethernet_mac_address": "bc:24:11:5e:00:01"}],
      "networks": [{"id": "n", "link": "tap1", "type": "ipv4", "ip_address": "172.16.0.9",
                    "netmask": "255.255.255.0",
                    "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "172.16.0.1"}]}],
      "services": [{"type": "dns", "address": "172.16.0.1"}]}"#;
    let meta =
        r#"{"uuid": "u2", "hostname": "cd.example", "public_keys": {"k": "ssh-rsa AAAA k"}}"#;
    let p = plan(
        "configdrive",
        &[
            ("openstack/latest/meta_data.json", meta),
            ("openstack/latest/network_data.json", nd),
        ],
    );
    for want in [
        "hostname cd",
        "fqdn cd.example",
        "user ubuntu",
        "key ubuntu ssh-rsa AAAA k",
        &format!("nic l0 {MAC} -"),
        "addr l0 172.16.0.9/24",
        "gw l0 172.16.0.1",
        "dns 172.16.0.1",
    ] {
        assert!(p.iter().any(|l| l == want), "{want} missing from {p:#?}");
    }
    assert!(errors(&p).is_empty(), "{p:#?}");
}

#[test]
fn reader_names_what_is_wrong_with_a_malformed_drive() {
    let p = plan(
        "nocloud",
        &[
            ("user-data", "#cloud-config\nusers:\n  - shell: /bin/sh\n"),
            ("meta-data", "local-hostname: ok\n"),
            (
                "network-config",
                "version: 1\nconfig:\n  - type: physical\n    mac_address: zz:11\n    subnets:\n      - type: static\n        address: 300.1.1.1\n        netmask: 255.255.255.0\n  - type: bogus\n",
            ),
        ],
    );
    let e = errors(&p);
    for want in [
        "meta-data has no instance-id",
        "user-data users[0] has no name",
        "network: 'zz:11' is not a MAC address",
        "network: '300.1.1.1' is not an IPv4 address",
        "network-config config[1] has type 'bogus'",
    ] {
        assert!(e.contains(&want), "{want} missing from {e:#?}");
    }
    let p = plan(
        "nocloud",
        &[
            ("meta-data", "instance-id: a\n"),
            ("network-config", "version: 3\n"),
        ],
    );
    let e = errors(&p);
    assert!(e.iter().any(|l| l.starts_with("no hostname")), "{e:#?}");
    assert!(
        e.contains(&"network-config has version '3', not 1 or 2"),
        "{e:#?}"
    );
    let p = plan(
        "nocloud",
        &[("meta-data", "instance-id: a\n  bad\n\tx: [\n")],
    );
    assert!(
        errors(&p)
            .iter()
            .any(|l| l.starts_with("meta-data is not valid YAML: line 2")),
        "{p:#?}"
    );
    let p = plan(
        "configdrive",
        &[("openstack/latest/meta_data.json", "{\"uuid\": \"x\",")],
    );
    assert!(
        errors(&p)
            .iter()
            .any(|l| l.starts_with("meta_data.json is not valid JSON")),
        "{p:#?}"
    );
    assert!(
        errors(&plan("configdrive", &[]))
            .contains(&"config-drive has no openstack/latest/meta_data.json")
    );
}
