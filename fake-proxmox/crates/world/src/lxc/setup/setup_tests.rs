use std::collections::BTreeSet;

use super::*;

/// A root file system in memory.
#[derive(Default)]
struct MemFs {
    files: BTreeMap<String, String>,
    dirs: BTreeSet<String>,
}

impl MemFs {
    fn debian() -> MemFs {
        let mut fs = MemFs::default();
        fs.files
            .insert("/etc/debian_version".into(), "12.7\n".into());
        fs.files.insert(
            "/etc/passwd".into(),
            "root:x:0:0:root:/root:/bin/sh\n".into(),
        );
        fs.dirs.extend(["/etc".into(), "/root".into()]);
        fs
    }
}

impl RootFs for MemFs {
    fn read(&self, path: &str) -> Option<String> {
        self.files.get(path).cloned()
    }
    fn is_dir(&self, path: &str) -> bool {
        self.dirs.contains(path.trim_end_matches('/'))
    }
}

fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn written(changes: &[Change], path: &str) -> Option<(String, u32)> {
    changes.iter().rev().find_map(|c| match c {
        Change::Write {
            path: p,
            content,
            mode,
        } if p == path => Some((content.clone(), *mode)),
        _ => None,
    })
}

#[test]
fn every_start_writes_the_network_the_names_and_dns() {
    let fs = MemFs::debian();
    let c = config(&[
        ("ostype", "debian"),
        ("hostname", "web-01"),
        (
            "net0",
            "name=eth0,bridge=vmbr0,ip=192.168.11.60/24,gw=192.168.11.1",
        ),
        ("nameserver", "192.168.11.1"),
        ("searchdomain", "lab.example"),
    ]);
    let changes = pre_start(&c, &fs, &HostDns::default()).expect("debian setup");
    assert_eq!(
        written(&changes, "/etc/hostname"),
        Some(("web-01\n".into(), 0o644))
    );
    assert_eq!(
        written(&changes, "/etc/hosts").map(|(t, _)| t).as_deref(),
        Some(
            "# --- BEGIN PVE ---\n127.0.0.1 localhost.localnet localhost\n::1 localhost.localnet localhost\n192.168.11.60 web-01.lab.example web-01\n# --- END PVE ---\n"
        )
    );
    let interfaces = written(&changes, "/etc/network/interfaces").map(|(t, _)| t);
    assert!(
        interfaces.as_deref().is_some_and(|t| t.contains(
            "iface eth0 inet static\n\taddress 192.168.11.60/24\n\tgateway 192.168.11.1\n"
        )),
        "{interfaces:?}"
    );
    assert_eq!(
        written(&changes, "/etc/resolv.conf")
            .map(|(t, _)| t)
            .as_deref(),
        Some(
            "# --- BEGIN PVE ---\nsearch lab.example\nnameserver 192.168.11.1\n# --- END PVE ---\n"
        )
    );
    assert!(changes.contains(&Change::MakeDir {
        path: "/etc/network".into(),
        mode: 0o755
    }));
}

#[test]
fn a_dhcp_container_names_itself_on_127_0_1_1_and_keeps_the_users_localhost() {
    let mut fs = MemFs::debian();
    fs.files.insert(
        "/etc/hosts".into(),
        "127.0.0.1 localhost\n10.0.0.9 db\n".into(),
    );
    let c = config(&[
        ("ostype", "debian"),
        ("hostname", "ct1.example.org"),
        ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
    ]);
    let changes = pre_start(&c, &fs, &HostDns::default()).expect("debian setup");
    assert_eq!(
        written(&changes, "/etc/hosts").map(|(t, _)| t).as_deref(),
        Some(
            "127.0.0.1 localhost\n10.0.0.9 db\n# --- BEGIN PVE ---\n::1 localhost.localnet localhost\n127.0.1.1 ct1.example.org ct1\n# --- END PVE ---\n"
        )
    );
    assert_eq!(
        written(&changes, "/etc/hostname")
            .map(|(t, _)| t)
            .as_deref(),
        Some("ct1\n")
    );
}

#[test]
fn create_puts_roots_keys_in_pves_section_of_authorized_keys() {
    let fs = MemFs::debian();
    let c = config(&[("ostype", "debian"), ("hostname", "ct1")]);
    let keys = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA me@host\n";
    let changes = post_create(&c, &fs, &HostDns::default(), Some(keys)).expect("debian setup");
    assert!(changes.contains(&Change::MakeDir {
        path: "/root/.ssh".into(),
        mode: 0o700
    }));
    assert_eq!(
        written(&changes, "/root/.ssh/authorized_keys"),
        Some((
            format!("# --- BEGIN PVE ---\n{keys}# --- END PVE ---\n"),
            0o700
        ))
    );
}

#[test]
fn roots_home_must_exist_for_its_keys() {
    let mut fs = MemFs::debian();
    fs.dirs.remove("/root");
    let c = config(&[("ostype", "debian")]);
    assert_eq!(
        post_create(&c, &fs, &HostDns::default(), Some("ssh-ed25519 AAAA x")),
        Err(SetupError(
            "home directory '/root' of root does not exist!".into()
        ))
    );
}

#[test]
fn a_debian_container_without_its_version_file_does_not_start() {
    let mut fs = MemFs::debian();
    fs.files.remove("/etc/debian_version");
    let c = config(&[("ostype", "debian")]);
    assert_eq!(
        pre_start(&c, &fs, &HostDns::default()),
        Err(SetupError("unable to read version info".into()))
    );
    fs.files
        .insert("/etc/debian_version".into(), "3.1\n".into());
    assert_eq!(
        pre_start(&c, &fs, &HostDns::default()),
        Err(SetupError("Container Debian version '3' is too old".into()))
    );
}

#[test]
fn unmanaged_containers_are_left_alone_and_unknown_kinds_refused() {
    let fs = MemFs::debian();
    let c = config(&[("ostype", "unmanaged"), ("hostname", "x")]);
    assert_eq!(pre_start(&c, &fs, &HostDns::default()), Ok(Vec::new()));
    let c = config(&[("ostype", "alpine")]);
    assert!(pre_start(&c, &fs, &HostDns::default()).is_err());
}

#[test]
fn an_ignore_file_keeps_pves_hands_off() {
    let mut fs = MemFs::debian();
    fs.files
        .insert("/etc/.pve-ignore.hosts".into(), String::new());
    let c = config(&[("ostype", "debian"), ("hostname", "x")]);
    let changes = pre_start(&c, &fs, &HostDns::default()).expect("debian setup");
    assert_eq!(written(&changes, "/etc/hosts"), None);
    assert!(written(&changes, "/etc/hostname").is_some());
}

#[test]
fn the_os_is_detected_from_the_root_file_system() {
    let mut fs = MemFs::default();
    assert_eq!(detect_ostype(&fs), Ok("unmanaged".into()));
    fs.files
        .insert("/etc/debian_version".into(), "12.7\n".into());
    assert_eq!(detect_ostype(&fs), Ok("debian".into()));
    fs.files.insert(
        "/etc/os-release".into(),
        "NAME=\"Alpine Linux\"\nID=alpine\n".into(),
    );
    assert_eq!(detect_ostype(&fs), Ok("alpine".into()));
    fs.files
        .insert("/etc/os-release".into(), "ID=\"rocky\"\n".into());
    assert_eq!(detect_ostype(&fs), Ok("centos".into()));
}
