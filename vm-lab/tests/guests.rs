//! Real guests on a guest host under TCG (or KVM where the probe proves it works). The guests
//! boot vm-lab's netboot image by direct kernel boot (a test-only path): two guests on one
//! bridge with a DHCP pool reach each other, their agents report the MACs' addresses, DHCP
//! hands out a lease from the pool, SSH from the namespace reaches a guest's address, QMP
//! verbs change the run state, and nothing outlives the host — even when its driver is
//! SIGKILLed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use vm_lab::guests::{
    BridgeSpec, DhcpPool, DirectBoot, DiskBus, DiskFormat, Guest, GuestDisk, GuestHost, GuestNic,
    GuestSpec, HostOptions, Media, NicModel, SegmentKind,
};
use vm_lab::image::{self, Image, ImageRequest};
use vm_lab::namespace::{alive, pids_mentioning};

fn log_init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_test_writer()
        .try_init();
}

/// The netboot image (built or cached) and the lab SSH key baked into it.
fn netboot() -> (Image, PathBuf) {
    let cache = image::default_cache_dir();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = rt.block_on(vm_lab::lab::ensure_ssh_key(&cache)).unwrap();
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let req = ImageRequest {
        spec: Default::default(),
        base_dir: PathBuf::from("."),
        ssh_pubkey: pubkey,
    };
    (image::build(&cache, &req).unwrap(), key)
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn lan() -> BridgeSpec {
    BridgeSpec {
        name: "vmbr0".into(),
        addresses: vec![(ip("10.10.0.1"), 24)],
        dhcp: Some(DhcpPool {
            start: ip("10.10.0.100"),
            end: ip("10.10.0.120"),
            router: Some(ip("10.10.0.1")),
        }),
    }
}

/// A guest booting the netboot kernel with a static address on vmbr0 and the agent channel.
fn netboot_guest(img: &Image, name: &str, mac: &str, addr: &str) -> GuestSpec {
    let mut g = GuestSpec::new(name);
    g.memory_mib = 4096;
    g.agent = true;
    g.nics = vec![GuestNic {
        index: 0,
        mac: mac.parse().unwrap(),
        model: NicModel::Virtio,
        bridge: Some("vmbr0".into()),
        link_up: true,
        bootindex: None,
    }];
    g.direct_boot = Some(DirectBoot {
        kernel: img.kernel.clone(),
        initrd: img.initrd.clone(),
        cmdline: format!(
            "console=ttyS0,115200 panic=-1 no_timer_check mitigations=off quiet \
             vmlab.hostname={name} vmlab.lan={mac},{addr}/24"
        ),
    });
    g
}

/// Bound for a boot (TCG is several times slower than KVM).
fn boot_patience(host: &GuestHost) -> Duration {
    Duration::from_secs(60) * host.accel().timeout_scale()
}

fn wait_agent(g: &Guest, within: Duration) -> Duration {
    let start = Instant::now();
    while !g.agent_ping(Duration::from_secs(2)) {
        assert!(
            start.elapsed() < within,
            "{}: no agent within {within:?}; serial:\n{}",
            g.name(),
            g.serial_tail(30)
        );
        assert!(g.is_running(), "{}: QEMU ended: {}", g.name(), g.exited());
        std::thread::sleep(Duration::from_millis(300));
    }
    start.elapsed()
}

fn wait_status(g: &Guest, want: &str) {
    let start = Instant::now();
    loop {
        let s = g.status().unwrap();
        if s == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}: status {s}, want {want}",
            g.name()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ipv4_of(ifaces: &Value, mac: &str) -> Vec<String> {
    ifaces
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["hardware-address"].as_str() == Some(mac))
        .flat_map(|i| i["ip-addresses"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["ip-address-type"] == "ipv4")
        .map(|a| format!("{}/{}", a["ip-address"].as_str().unwrap(), a["prefix"]))
        .collect()
}

#[test]
fn two_guests_on_a_bridge_with_dhcp_agent_ssh_power_verbs_and_clean_teardown() {
    log_init();
    let (img, key) = netboot();
    let run_root = tempfile::tempdir().unwrap();
    let host = GuestHost::new(HostOptions {
        run_root: Some(run_root.path().to_path_buf()),
        memory_cap_mib: 384,
        ..HostOptions::default()
    })
    .unwrap();
    host.ensure_bridge(&lan()).unwrap();

    // Starts that cannot happen fail with a message saying why, and launch nothing.
    let mut bad = netboot_guest(&img, "bad", "52:54:00:aa:00:09", "10.10.0.19");
    bad.disks.push(GuestDisk {
        path: Some("/nonexistent/vm-9-disk-0.raw".into()),
        format: DiskFormat::Raw,
        bus: DiskBus::VirtioBlk,
        index: 0,
        media: Media::Disk,
        bootindex: Some(100),
        on_write_error: None,
        on_read_error: None,
    });
    let e = host.launch(bad).unwrap_err().to_string();
    assert!(
        e.contains("virtio0") && e.contains("/nonexistent/vm-9-disk-0.raw"),
        "{e}"
    );
    assert!(host.guest("bad").is_none());

    let t0 = Instant::now();
    let g1 = host
        .launch(netboot_guest(&img, "g1", "52:54:00:aa:00:01", "10.10.0.11"))
        .unwrap();
    let g2 = host
        .launch(netboot_guest(&img, "g2", "52:54:00:aa:00:02", "10.10.0.12"))
        .unwrap();
    // The spec asked for 4 GiB; QEMU got the cap.
    assert_eq!(g1.memory_mib(), 384);
    assert!(g1.argv().windows(2).any(|w| w[0] == "-m" && w[1] == "384"));
    assert!(alive(g1.pid()) && alive(g2.pid()));
    assert_eq!(g1.status().unwrap(), "running");

    let patience = boot_patience(&host);
    wait_agent(&g1, patience);
    wait_agent(&g2, patience);
    eprintln!(
        "two guests: launch to both agents answering {:.1?} ({})",
        t0.elapsed(),
        host.accel().name()
    );

    // One L2: the guests reach each other and the namespace's address on the bridge.
    let cmd = Duration::from_secs(30);
    let ping = g1.exec("ping -c2 -W2 10.10.0.12", cmd).unwrap();
    assert_eq!(ping.code, 0, "{ping:?}");
    let ping = g2.exec("ping -c1 -W2 10.10.0.1", cmd).unwrap();
    assert_eq!(ping.code, 0, "{ping:?}");

    // The agent reports the address on the NIC with the spec's MAC.
    let ifaces = g1
        .agent("guest-network-get-interfaces", None, Duration::from_secs(5))
        .unwrap();
    assert_eq!(ipv4_of(&ifaces, "52:54:00:aa:00:01"), ["10.10.0.11/24"]);
    let hn = g2
        .agent("guest-get-host-name", None, Duration::from_secs(5))
        .unwrap();
    assert_eq!(hn["host-name"], "g2");

    // A real DHCP server answers on the bridge, from its pool.
    let dhcp = g2
        .exec("udhcpc -i eth0 -n -q -f -t 5 -T 2 -s /bin/true 2>&1", cmd)
        .unwrap();
    assert_eq!(dhcp.code, 0, "{dhcp:?}");
    let lease: Ipv4Addr = dhcp
        .stdout
        .split("lease of ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no lease in {:?}", dhcp.stdout));
    assert!(
        (ip("10.10.0.100")..=ip("10.10.0.120")).contains(&lease),
        "{lease}"
    );

    // SSH from inside the namespace to a guest's address on the bridge.
    let out = host
        .ssh(
            &key,
            "root",
            ip("10.10.0.11"),
            "hostname",
            Duration::from_secs(60),
        )
        .unwrap();
    assert_eq!((out.code, out.stdout.trim()), (0, "g1"), "{out:?}");

    // QMP: pause and continue; a paused guest's agent does not answer.
    g2.pause().unwrap();
    wait_status(&g2, "paused");
    assert!(!g2.agent_ping(Duration::from_millis(500)));
    g2.resume().unwrap();
    wait_status(&g2, "running");
    wait_agent(&g2, patience);

    // Link down: the peer is unreachable until it is back up.
    g2.set_link(0, false).unwrap();
    assert_ne!(g1.exec("ping -c1 -W1 10.10.0.12", cmd).unwrap().code, 0);
    g2.set_link(0, true).unwrap();
    assert_eq!(g1.exec("ping -c2 -W2 10.10.0.12", cmd).unwrap().code, 0);

    // Reset: the guest boots again inside the same QEMU process.
    let pid = g2.pid();
    let inits = g2.serial_text().matches("VMLAB-INIT").count();
    g2.reset().unwrap();
    assert_eq!(g2.status().unwrap(), "running");
    let start = Instant::now();
    while g2.serial_text().matches("VMLAB-INIT").count() == inits {
        assert!(start.elapsed() < patience, "{}", g2.serial_tail(20));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(g2.pid(), pid);

    // The power button reaches the guest (this image has no ACPI handler, so it runs on).
    g1.powerdown().unwrap();
    // A guest that powers itself off ends its QEMU: the host sees it stopped.
    let _ = g1.agent("guest-shutdown", None, Duration::from_secs(2));
    assert!(
        g1.wait_exit(Duration::from_secs(30)),
        "{}",
        g1.serial_tail(10)
    );
    assert!(g1.exit_status().is_some());
    assert!(g1.status().is_err());

    // Teardown: no QEMU, no DHCP server, no namespace, no run directory.
    let pids = [g2.pid(), host.ns_init_pid(), host.holder_pid()];
    let run_dir = host.run_dir().to_path_buf();
    assert!(!pids_mentioning(&run_dir).is_empty());
    drop(host);
    let start = Instant::now();
    while pids.iter().any(|p| alive(*p)) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(pids.iter().all(|p| !alive(*p)), "{pids:?}");
    assert!(
        pids_mentioning(&run_dir).is_empty(),
        "{:?}",
        pids_mentioning(&run_dir)
    );
    assert!(!run_dir.exists());
}

/// The guest's serial stamps (in its run dir) record its power-on and, later, its ready line.
fn assert_ready_stamped(g: &Guest, within: Duration) {
    let file = g.dir().join(vm_lab::qemu_args::SERIAL_TIMES);
    let start = Instant::now();
    loop {
        let stamps = vm_lab::serial_stamps::read(&file);
        let ready = stamps.iter().find(|s| {
            s.line
                .as_deref()
                .is_some_and(|l| l.contains(vm_lab::qemu_args::READY_MARKER))
        });
        if let (Some(first), Some(ready)) = (stamps.first(), ready) {
            assert!(first.is_power_on(), "{stamps:?}");
            assert!(ready.at_us > first.at_us, "{stamps:?}");
            return;
        }
        assert!(
            start.elapsed() < within,
            "{}: no stamped ready line in {stamps:?}",
            g.name()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_multicast_fallback_still_joins_guests_on_one_segment() {
    log_init();
    let (img, _) = netboot();
    let run_root = tempfile::tempdir().unwrap();
    let host = GuestHost::new(HostOptions {
        run_root: Some(run_root.path().to_path_buf()),
        memory_cap_mib: 384,
        force_multicast: true,
        ..HostOptions::default()
    })
    .unwrap();
    assert_eq!(host.segment_kind(), SegmentKind::Multicast);
    host.ensure_bridge(&BridgeSpec::new("vmbr0")).unwrap();
    let a = host
        .launch(netboot_guest(&img, "m1", "52:54:00:bb:00:01", "10.10.0.31"))
        .unwrap();
    let b = host
        .launch(netboot_guest(&img, "m2", "52:54:00:bb:00:02", "10.10.0.32"))
        .unwrap();
    let (group, port) = vm_lab::guests::mcast_address(0);
    let netdev = format!("socket,id=net0,mcast={group}:{port},localaddr=127.0.0.1");
    assert!(a.argv().contains(&netdev), "{:?}", a.argv());
    assert!(a.taps().iter().all(String::is_empty));
    let patience = boot_patience(&host);
    wait_agent(&a, patience);
    wait_agent(&b, patience);
    assert_ready_stamped(&a, patience);
    let ping = a
        .exec("ping -c2 -W2 10.10.0.32", Duration::from_secs(30))
        .unwrap();
    assert_eq!(ping.code, 0, "{ping:?}");
}

#[test]
fn a_start_beyond_the_memory_budget_is_refused() {
    let run_root = tempfile::tempdir().unwrap();
    let host = GuestHost::new(HostOptions {
        run_root: Some(run_root.path().to_path_buf()),
        memory_budget_mib: Some(256),
        accel: vm_lab::AccelChoice::Tcg,
        ..HostOptions::default()
    })
    .unwrap();
    let mut g = GuestSpec::new("big");
    g.memory_mib = 512;
    let e = host.launch(g).unwrap_err().to_string();
    assert!(
        e.contains("big") && e.contains("512 MiB") && e.contains("256 MiB"),
        "{e}"
    );
    assert!(pids_mentioning(host.run_dir()).is_empty());
}

/// Set in the child process of the SIGKILL test: where it writes its run dir.
const CHILD_ENV: &str = "VM_LAB_TEST_GUESTS_CHILD";

#[test]
fn a_sigkilled_driver_leaves_no_guest_or_dhcp_server() {
    if let Ok(out) = std::env::var(CHILD_ENV) {
        // The child: own a host with a guest and a DHCP server until killed.
        let (img, _) = netboot();
        let host = GuestHost::new(HostOptions {
            run_root: Some(PathBuf::from(&out).join("run")),
            ..HostOptions::default()
        })
        .unwrap();
        host.ensure_bridge(&lan()).unwrap();
        let g = host
            .launch(netboot_guest(
                &img,
                "orphan",
                "52:54:00:aa:00:05",
                "10.10.0.15",
            ))
            .unwrap();
        let line = format!(
            "{} {} {} {}\n",
            host.run_dir().display(),
            g.pid(),
            host.ns_init_pid(),
            host.holder_pid()
        );
        std::fs::write(Path::new(&out).join("pids.tmp"), line).unwrap();
        std::fs::rename(
            Path::new(&out).join("pids.tmp"),
            Path::new(&out).join("pids"),
        )
        .unwrap();
        std::thread::sleep(Duration::from_secs(600));
        panic!("the child was not killed");
    }
    log_init();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_sigkilled_driver_leaves_no_guest_or_dhcp_server",
            "--nocapture",
        ])
        .env(CHILD_ENV, tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pids_file = tmp.path().join("pids");
    let start = Instant::now();
    while !pids_file.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the child host did not start"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&pids_file).unwrap();
    let mut parts = text.split_whitespace();
    let run_dir = PathBuf::from(parts.next().unwrap());
    let pids: Vec<u32> = parts.map(|p| p.parse().unwrap()).collect();
    assert!(pids.iter().all(|p| alive(*p)), "{pids:?}");
    // QEMU and udhcpd both name files in the run dir.
    let procs = pids_mentioning(&run_dir);
    assert!(procs.len() >= 2, "{procs:?}");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    let start = Instant::now();
    while (pids.iter().any(|p| alive(*p)) || !pids_mentioning(&run_dir).is_empty())
        && start.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "outlived the driver: {left:?}");
    assert!(
        pids_mentioning(&run_dir).is_empty(),
        "{:?}",
        pids_mentioning(&run_dir)
    );
}
