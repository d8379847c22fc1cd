//! Real containers on a guest host: the template (built from Debian packages, or cached) is
//! unpacked into a rootfs, PVE's files are written into it, and the container is started on a
//! bridge. They get an address (DHCP from the bridge's pool, or static), answer SSH with the
//! key in `authorized_keys`, see their bind mounts, run commands through `exec`, stop on
//! SIGPWR, report malformed network files, and leave nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use vm_lab::Error;
use vm_lab::containers::{BindMount, Container, ContainerNic, ContainerSpec};
use vm_lab::guests::{BridgeSpec, DhcpPool, GuestHost, HostOptions};
use vm_lab::image::template::{self, Template, TemplateRequest};
use vm_lab::namespace::alive;
use vm_lab::spec::AccelChoice;

const READY: Duration = Duration::from_secs(30);
const CMD: Duration = Duration::from_secs(20);

fn log_init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_test_writer()
        .try_init();
}

/// The template with etcd in it, built once per test binary (cached across runs).
fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let req = TemplateRequest {
            packages: vec!["etcd-server".into()],
        };
        template::build(&vm_lab::image::default_cache_dir(), &req).unwrap()
    })
}

/// A fresh SSH key pair in `dir` (the system `ssh-keygen`): the private key's path.
fn ssh_key(dir: &Path) -> PathBuf {
    let key = dir.join("id_ed25519");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "ct-test", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    key
}

fn host() -> GuestHost {
    log_init();
    GuestHost::new(HostOptions {
        accel: AccelChoice::Tcg,
        ..Default::default()
    })
    .unwrap()
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn bridge(name: &str, net: &str, pool: bool) -> BridgeSpec {
    BridgeSpec {
        name: name.into(),
        addresses: vec![(ip(&format!("{net}.1")), 24)],
        dhcp: pool.then(|| DhcpPool {
            start: ip(&format!("{net}.100")),
            end: ip(&format!("{net}.120")),
            router: Some(ip(&format!("{net}.1"))),
        }),
    }
}

/// The template unpacked into `dir/rootfs`, with the files PVE writes: hostname, network
/// config, and (when given) the root's authorized key.
fn rootfs(dir: &Path, hostname: &str, interfaces: &str, pubkey: Option<&Path>) -> PathBuf {
    let root = dir.join("rootfs");
    template::unpack(&template().path, &root).unwrap();
    std::fs::write(root.join("etc/hostname"), format!("{hostname}\n")).unwrap();
    std::fs::write(root.join("etc/network/interfaces"), interfaces).unwrap();
    if let Some(k) = pubkey {
        std::fs::copy(k, root.join("root/.ssh/authorized_keys")).unwrap();
    }
    root
}

fn nic(bridge: &str, mac: &str) -> ContainerNic {
    let mut n = ContainerNic::new("eth0", bridge);
    n.mac = Some(mac.into());
    n
}

fn eth0_v4(c: &Container) -> Vec<(Ipv4Addr, u8)> {
    c.interfaces()
        .unwrap()
        .into_iter()
        .filter(|i| i.name == "eth0")
        .flat_map(|i| i.addrs)
        .filter_map(|(a, p)| match a {
            IpAddr::V4(v4) => Some((v4, p)),
            IpAddr::V6(_) => None,
        })
        .collect()
}

/// `ip -o link` in the host's namespace: the names of its interfaces.
fn lab_links(h: &GuestHost) -> String {
    let out = Command::new("nsenter")
        .args(vm_lab::namespace::nsenter_argv(
            h.ns_init_pid(),
            false,
            "ip",
        ))
        .args(["-o", "link"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every live process whose PID namespace is `ns` (a `/proc/PID/ns/pid` link).
fn processes_in(ns: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|l| l == ns) && alive(*pid)
        })
        .collect()
}

const DHCP: &str = "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n";

#[test]
fn a_dhcp_container_answers_ssh_with_its_hostname_and_runs_the_packages() {
    let h = host();
    h.ensure_bridge(&bridge("vmbr0", "10.31.0", true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = ssh_key(dir.path());
    let root = rootfs(dir.path(), "web1", DHCP, Some(&key.with_extension("pub")));
    let mut spec = ContainerSpec::new("pve1-ct105", &root);
    spec.hostname = "ct105".into();
    spec.nics = vec![nic("vmbr0", "BC:24:11:00:01:05")];
    let c = h.start_container(spec).unwrap();
    assert!(c.is_running());
    assert!(
        c.wait_console("CT-READY", READY),
        "no CT-READY:\n{}",
        c.console_text()
    );

    // /etc/hostname (what PVE writes) wins over the name the container was started with.
    assert!(
        c.console_text()
            .contains("CT-READY hostname=web1 addrs=10.31.0.1"),
        "{}",
        c.console_text()
    );
    let ifaces = c.interfaces().unwrap();
    let eth0 = ifaces.iter().find(|i| i.name == "eth0").unwrap();
    assert_eq!(eth0.mac.as_deref(), Some("bc:24:11:00:01:05"));
    let (addr, prefix) = eth0_v4(&c)[0];
    assert!(
        (100..=120).contains(&addr.octets()[3]) && prefix == 24,
        "{addr}/{prefix} is not from the pool"
    );

    let out = h
        .ssh(&key, "root", addr, "hostname; command -v etcd", CMD)
        .unwrap();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "web1\n/usr/bin/etcd\n", "{out:?}");
    let out = c.exec(&["etcd", "--version"], CMD).unwrap();
    assert!(out.stdout.contains("etcd Version"), "{out:?}");
    assert!(c.memory_used_bytes().unwrap() > 0);
    assert_eq!(h.container_names(), ["pve1-ct105"]);
}

#[test]
fn a_static_address_bind_mounts_and_exec() {
    let h = host();
    h.ensure_bridge(&bridge("vmbr1", "10.32.0", false)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = ssh_key(dir.path());
    let interfaces = "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet static\n\
                      \taddress 10.32.0.5/24\n\tgateway 10.32.0.1\n";
    let root = rootfs(
        dir.path(),
        "db1",
        interfaces,
        Some(&key.with_extension("pub")),
    );
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("hello"), "from the host\n").unwrap();
    let frozen = dir.path().join("frozen");
    std::fs::create_dir(&frozen).unwrap();
    let mut spec = ContainerSpec::new("ct-static", &root);
    spec.nics = vec![nic("vmbr1", "BC:24:11:00:02:01")];
    spec.mounts = vec![
        BindMount {
            source: shared.clone(),
            target: "/srv/shared".into(),
            read_only: false,
        },
        BindMount {
            source: frozen.clone(),
            target: "/mnt/frozen".into(),
            read_only: true,
        },
    ];
    let c = h.start_container(spec).unwrap();
    assert!(c.wait_console("CT-READY", READY), "{}", c.console_text());
    assert_eq!(eth0_v4(&c), [(ip("10.32.0.5"), 24)]);

    let out = c.exec(&["cat", "/srv/shared/hello"], CMD).unwrap();
    assert_eq!((out.code, out.stdout.as_str()), (0, "from the host\n"));
    let out = c
        .exec(&["sh", "-c", "echo made inside > /srv/shared/new"], CMD)
        .unwrap();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(shared.join("new")).unwrap(),
        "made inside\n"
    );
    let out = c.exec(&["touch", "/mnt/frozen/x"], CMD).unwrap();
    assert_ne!(out.code, 0, "a read-only mount took a write: {out:?}");
    assert!(!frozen.join("x").exists());
    let out = c.exec(&["ip", "route"], CMD).unwrap();
    assert!(
        out.stdout.contains("default via 10.32.0.1 dev eth0"),
        "{out:?}"
    );
    let out = c.exec(&["sh", "-c", "exit 3"], CMD).unwrap();
    assert_eq!(out.code, 3);
    let err = c
        .exec(&["sleep", "30"], Duration::from_millis(500))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");

    let out = h
        .ssh(&key, "root", ip("10.32.0.5"), "hostname", CMD)
        .unwrap();
    assert_eq!(out.stdout.trim(), "db1", "{out:?}");
    // The container's mounts are its own: the host sees none of them.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&root.display().to_string()));
}

#[test]
fn shutdown_ends_it_and_nothing_is_left_after_remove_or_drop() {
    let h = host();
    h.ensure_bridge(&bridge("vmbr2", "10.33.0", false)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let interfaces = "auto eth0\niface eth0 inet static\n\taddress 10.33.0.7/24\n";
    let root = rootfs(dir.path(), "stopper", interfaces, None);
    let mut spec = ContainerSpec::new("ct-stop", &root);
    spec.nics = vec![nic("vmbr2", "BC:24:11:00:03:01")];
    let c = h.start_container(spec.clone()).unwrap();
    assert!(c.wait_console("CT-READY", READY), "{}", c.console_text());
    let init = c.pid();
    let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    assert!(processes_in(&ns).len() >= 2, "init and dropbear");
    assert!(lab_links(&h).contains(&c.host_veths()[0]));

    assert!(c.shutdown(Duration::from_secs(10)).unwrap());
    assert!(!c.is_running() && !alive(init));
    assert!(c.console_text().contains("CT-STOPPING signal=PWR"));
    assert!(c.console_text().contains("CT-STOPPED"));
    assert!(processes_in(&ns).is_empty());

    // It starts again (PVE's reboot is a stop and a start) and is then removed.
    let c = h.start_container(spec.clone()).unwrap();
    assert!(c.wait_console("CT-READY", READY), "{}", c.console_text());
    let (init, veth, run_dir) = (c.pid(), c.host_veths()[0].clone(), c.dir().to_path_buf());
    let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    drop(c);
    h.remove_container("ct-stop").unwrap();
    assert!(!alive(init));
    assert!(processes_in(&ns).is_empty());
    assert!(!lab_links(&h).contains(&veth), "{}", lab_links(&h));
    assert!(!run_dir.exists());
    assert!(h.container("ct-stop").is_none());
    assert!(
        root.join("sbin/init").exists(),
        "the rootfs is the caller's"
    );

    // Dropping the host takes a running container with it.
    let c = h.start_container(spec).unwrap();
    let init = c.pid();
    let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    let run_dir = h.run_dir().to_path_buf();
    drop(c);
    drop(h);
    assert!(!alive(init));
    assert!(processes_in(&ns).is_empty());
    assert!(!run_dir.exists());
}

#[test]
fn a_malformed_network_file_is_reported_on_the_console() {
    let h = host();
    h.ensure_bridge(&bridge("vmbr3", "10.34.0", false)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let interfaces = "auto eth0\n\taddress 10.34.0.9/24\niface eth0 inet static\n\
                      \taddress 10.34.0.300/24\n";
    let root = rootfs(dir.path(), "broken", interfaces, None);
    let mut spec = ContainerSpec::new("ct-broken", &root);
    spec.nics = vec![nic("vmbr3", "BC:24:11:00:04:01")];
    let c = h.start_container(spec).unwrap();
    assert!(c.wait_console("CT-ERROR", READY), "{}", c.console_text());
    // Init goes on (the container can be looked into) but never says it is ready.
    assert!(c.exec(&["true"], CMD).unwrap().success());
    let text = c.console_text();
    assert!(
        text.contains(
            "CT-ERROR: /etc/network/interfaces line 2: \"address\" outside of an iface stanza"
        ),
        "{text}"
    );
    assert!(
        text.contains("CT-ERROR: /etc/network/interfaces: iface eth0: address 10.34.0.300/24 is not an IPv4 address"),
        "{text}"
    );
    assert!(!text.contains("CT-READY"), "{text}");
    assert!(eth0_v4(&c).is_empty());
}

#[test]
fn an_executable_rc_local_runs_at_every_boot_before_ready_and_its_failure_is_reported() {
    use std::os::unix::fs::PermissionsExt;
    let h = host();
    h.ensure_bridge(&bridge("vmbr4", "10.35.0", false)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let interfaces = "auto eth0\niface eth0 inet static\n\taddress 10.35.0.9/24\n";
    let root = rootfs(dir.path(), "hooked", interfaces, None);
    let hook = root.join("etc/rc.local");
    // The network is up when the hook runs, and what it prints reaches the console.
    std::fs::write(
        &hook,
        "#!/bin/sh\necho \"hook: $1 addr=$(ip -o -4 addr show eth0 | awk '{print $4}')\"\n\
         date +%s%N >> /var/tmp/boots\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spec = || {
        let mut s = ContainerSpec::new("ct-hooked", &root);
        s.nics = vec![nic("vmbr4", "BC:24:11:00:05:01")];
        s
    };
    let c = h.start_container(spec()).unwrap();
    assert!(c.wait_console("CT-READY", READY), "{}", c.console_text());
    let text = c.console_text();
    let hooked = text.find("hook: start addr=10.35.0.9/24");
    assert!(
        hooked.is_some_and(|at| at < text.find("CT-READY").unwrap_or(0)),
        "the hook ran before the ready line, with the address up:\n{text}"
    );
    assert!(c.shutdown(Duration::from_secs(10)).unwrap());

    // The second boot runs it again; a hook that fails is a boot error, not a ready container.
    std::fs::write(&hook, "#!/bin/sh\ndate +%s%N >> /var/tmp/boots\nexit 3\n").unwrap();
    let c = h.start_container(spec()).unwrap();
    assert!(c.wait_console("CT-ERROR", READY), "{}", c.console_text());
    let text = c.console_text();
    assert!(
        text.contains("CT-ERROR: /etc/rc.local exited with 3"),
        "{text}"
    );
    assert!(!text.contains("CT-READY"), "{text}");
    let boots = std::fs::read_to_string(root.join("var/tmp/boots")).unwrap();
    assert_eq!(boots.lines().count(), 2, "{boots}");
}

#[test]
fn what_cannot_start_is_refused() {
    log_init();
    let h = GuestHost::new(HostOptions {
        accel: AccelChoice::Tcg,
        memory_budget_mib: Some(768),
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = rootfs(dir.path(), "r", DHCP, None);

    let missing = ContainerSpec::new("ct-none", dir.path().join("nowhere"));
    assert!(matches!(
        h.start_container(missing).unwrap_err(),
        Error::Spec(m) if m.contains("not a directory")
    ));
    let mut no_source = ContainerSpec::new("ct-mp", &root);
    no_source.mounts.push(BindMount {
        source: dir.path().join("absent"),
        target: "/mnt/x".into(),
        read_only: false,
    });
    assert!(matches!(
        h.start_container(no_source).unwrap_err(),
        Error::Spec(m) if m.contains("does not exist")
    ));

    let one = ContainerSpec::new("ct-a", &root);
    let c = h.start_container(one.clone()).unwrap();
    let again = h.start_container(one).unwrap_err();
    assert!(again.to_string().contains("already running"), "{again}");
    let second = ContainerSpec::new("ct-b", &root);
    let over = h.start_container(second).unwrap_err();
    assert!(over.to_string().contains("memory budget"), "{over}");
    // The first one's memory is free again once it is gone.
    c.kill();
    assert!(c.wait_exit(Duration::from_secs(5)));
    let c2 = h
        .start_container(ContainerSpec::new("ct-b", &root))
        .unwrap();
    assert!(c2.is_running());
    // Whether the limit is enforced depends on the machine; the answer must match the cgroup.
    if c2.memory_limit_enforced() {
        assert!(c2.memory_used_bytes().unwrap() > 0);
    }
}

const CHILD_ENV: &str = "VM_LAB_TEST_CONTAINERS_CHILD";

#[test]
fn a_sigkilled_driver_leaves_no_container_process() {
    if let Ok(out) = std::env::var(CHILD_ENV) {
        // The child: own a host with a running container until killed.
        let out = PathBuf::from(out);
        let h = GuestHost::new(HostOptions {
            accel: AccelChoice::Tcg,
            run_root: Some(out.join("run")),
            ..Default::default()
        })
        .unwrap();
        h.ensure_bridge(&bridge("vmbr4", "10.35.0", true)).unwrap();
        let root = rootfs(&out, "orphan", DHCP, None);
        let mut spec = ContainerSpec::new("ct-orphan", &root);
        spec.nics = vec![nic("vmbr4", "BC:24:11:00:05:01")];
        let c = h.start_container(spec).unwrap();
        assert!(c.wait_console("CT-READY", READY), "{}", c.console_text());
        std::fs::write(out.join("pid.tmp"), c.pid().to_string()).unwrap();
        std::fs::rename(out.join("pid.tmp"), out.join("pid")).unwrap();
        std::thread::sleep(Duration::from_secs(600));
        panic!("the child was not killed");
    }
    log_init();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_sigkilled_driver_leaves_no_container_process",
            "--nocapture",
        ])
        .env(CHILD_ENV, tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = tmp.path().join("pid");
    let start = std::time::Instant::now();
    while !pid_file.exists() {
        assert!(start.elapsed() < Duration::from_secs(120), "no container");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let init: u32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    // init, dropbear and udhcpc at least.
    assert!(processes_in(&ns).len() >= 3, "{:?}", processes_in(&ns));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    let start = std::time::Instant::now();
    while !processes_in(&ns).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        processes_in(&ns).is_empty(),
        "outlived the driver: {:?}",
        processes_in(&ns)
    );
    assert!(!alive(init));
}
