//! The lab executor with real QEMU, driven through the `Executor` trait the PVE rules call.
//! The VMs' configs are PVE's; their disks are blank (no OS until the project's cloud image
//! exists), so the guests sit in their firmware: enough to prove the process, QMP power verbs,
//! the failure texts and the teardown, not the agent's answers (see vm-lab's tests/guests.rs
//! for a booted guest's).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_proxmox::exec::lab::{LabExecutor, VolumePath};
use fake_proxmox::exec::{AgentCall, AgentCommand, Executor, Host};
use fake_proxmox::nodes::model::Bridge;
use fake_proxmox::qemu::model::{Power, Vm};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use vm_lab::guests::{GuestHost, HostOptions};
use vm_lab::namespace::{alive, pids_mentioning};

fn vm(vmid: u32, pairs: &[(&str, &str)]) -> Vm {
    let config: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Vm::stopped(vmid, "pve1", config, None)
}

/// Volumes are files under `<dir>/<storage>/<volname>` when they exist.
fn volumes(dir: &Path) -> VolumePath {
    let dir = dir.to_path_buf();
    Arc::new(move |_node: &str, storage: &str, volname: &str| {
        let p = dir.join(storage).join(volname);
        p.exists().then_some(p)
    })
}

fn vmbr0() -> Bridge {
    Bridge {
        name: "vmbr0".into(),
        cidr: Some("192.168.11.10/24".into()),
        gateway: Some("192.168.11.1".into()),
        ports: Some("eno1".into()),
        dhcp: Some((
            "192.168.11.100".parse().unwrap(),
            "192.168.11.199".parse().unwrap(),
        )),
        link_cut: false,
    }
}

fn blank_disk(dir: &Path, storage: &str, volname: &str) -> PathBuf {
    let p = dir.join(storage).join(volname);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, vec![0u8; 1 << 20]).unwrap();
    p
}

fn wait_status(exec: &LabExecutor, v: &Vm, want: &str) {
    let g = exec.guest(v).unwrap();
    let start = Instant::now();
    loop {
        let s = g.status().unwrap();
        if s == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "status {s}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_pve_config_runs_as_real_qemu_with_pves_power_semantics() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    blank_disk(&store, "local-lvm", "vm-100-disk-0");
    let host = GuestHost::new(HostOptions {
        run_root: Some(tmp.path().join("run")),
        memory_cap_mib: 128,
        memory_budget_mib: Some(1024),
        ..HostOptions::default()
    })
    .unwrap();
    let exec =
        LabExecutor::new(host, volumes(&store)).with_shutdown_timeout(Duration::from_secs(2));
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let bridges = [vmbr0()];
    let mut h = Host {
        rng: &mut rng,
        boot_delay_secs: 25.0,
        now: 100.0,
        bridges: &bridges,
    };

    let mut v = vm(
        100,
        &[
            ("cores", "1"),
            ("memory", "4096"),
            ("scsihw", "virtio-scsi-pci"),
            ("scsi0", "local-lvm:vm-100-disk-0,size=1M"),
            ("net0", "virtio=BC:24:11:00:01:00,bridge=vmbr0"),
            ("boot", "order=scsi0;net0"),
            ("agent", "1"),
        ],
    );
    exec.start(&mut v, &mut h).unwrap();
    assert_eq!(v.power, Power::Running);
    let pid = v.pid.unwrap();
    assert!(alive(pid));
    let g = exec.guest(&v).unwrap();
    let argv = g.argv().join(" ");
    assert!(argv.contains("-m 128"), "memory is capped: {argv}");
    assert!(argv.contains(&format!(
        "file={}",
        store.join("local-lvm/vm-100-disk-0").display()
    )));
    assert!(argv.contains(
        "scsi-hd,bus=scsihw0.0,channel=0,scsi-id=0,lun=0,drive=drive-scsi0,id=scsi0,bootindex=1"
    ));
    assert!(argv.contains("virtio-net-pci,mac=bc:24:11:00:01:00,netdev=net0,id=net0,bootindex=2"));
    assert!(argv.contains("name=org.qemu.guest_agent.0"));
    // The node's bridge is a segment with its address, gateway and DHCP pool.
    let seg = exec.host().bridges();
    assert_eq!(seg.len(), 1);
    assert_eq!(seg[0].addresses.len(), 2);
    assert!(seg[0].dhcp.is_some());
    // Starting it twice is PVE's error.
    assert_eq!(
        exec.start(&mut v, &mut h).unwrap_err(),
        "VM 100 already running"
    );

    // Nothing runs the agent in a blank disk's firmware.
    exec.refresh(&mut v, 101.0);
    assert_eq!(v.power, Power::Running);
    assert!(!exec.agent_ready(&v, 101.0));
    let mut call = AgentCall {
        vm: &mut v,
        node: None,
        command: AgentCommand::Ping,
        now: 101.0,
    };
    assert_eq!(
        exec.agent(&mut call).unwrap_err(),
        "VM 100 qmp command 'guest-ping' failed - got timeout"
    );

    exec.suspend(&mut v, &mut h).unwrap();
    assert_eq!(v.power, Power::Paused);
    wait_status(&exec, &v, "paused");
    exec.resume(&mut v, &mut h).unwrap();
    assert_eq!(v.power, Power::Running);
    wait_status(&exec, &v, "running");
    exec.reset(&mut v, &mut h).unwrap();
    assert_eq!(v.pid, Some(pid));

    // The firmware ignores the power button: the shutdown task fails as PVE's does.
    assert_eq!(
        exec.shutdown(&mut v, &mut h).unwrap_err(),
        "VM quit/powerdown failed - got timeout"
    );
    assert!(alive(pid));

    // stop kills QEMU.
    exec.stop(&mut v, &mut h).unwrap();
    assert_eq!((v.power, v.pid), (Power::Stopped, None));
    assert!(!alive(pid));
    assert_eq!(
        exec.reset(&mut v, &mut h).unwrap_err(),
        "VM 100 not running"
    );

    // Started again; then QEMU ends on its own (as when the guest powers off): refresh sees it.
    exec.start(&mut v, &mut h).unwrap();
    let again = v.pid.unwrap();
    assert_ne!(again, pid);
    exec.guest(&v).unwrap().quit().unwrap();
    exec.refresh(&mut v, 200.0);
    assert_eq!((v.power, v.pid), (Power::Stopped, None));

    // Starts that cannot happen say why.
    let mut missing = vm(101, &[("scsi0", "local-lvm:vm-101-disk-0")]);
    assert_eq!(
        exec.start(&mut missing, &mut h).unwrap_err(),
        "volume 'local-lvm:vm-101-disk-0' does not exist"
    );
    assert_eq!(missing.power, Power::Stopped);
    // QEMU itself refusing (a raw file named as qcow2): PVE's start-task text, QEMU's words.
    blank_disk(&store, "local", "103/vm-103-disk-0.qcow2");
    let mut not_qcow2 = vm(103, &[("virtio0", "local:103/vm-103-disk-0.qcow2")]);
    let e = exec.start(&mut not_qcow2, &mut h).unwrap_err();
    assert!(
        e.starts_with("start failed: QEMU exited with code 1: "),
        "{e}"
    );
    assert!(e.contains("qcow2"), "{e}");
    assert_eq!((not_qcow2.power, not_qcow2.pid), (Power::Stopped, None));
    let mut bad_nic = vm(102, &[("net0", "pcnet=BC:24:11:00:01:02,bridge=vmbr0")]);
    assert!(
        exec.start(&mut bad_nic, &mut h)
            .unwrap_err()
            .contains("pcnet")
    );

    // Nothing outlives the executor.
    exec.start(&mut v, &mut h).unwrap();
    let last = v.pid.unwrap();
    let run_dir = exec.host().run_dir().to_path_buf();
    let ns = exec.host().ns_init_pid();
    drop(exec);
    let start = Instant::now();
    while (alive(last) || alive(ns)) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(last) && !alive(ns));
    assert!(pids_mentioning(&run_dir).is_empty());
    assert!(!run_dir.exists());
}

#[test]
fn memory_beyond_the_lab_budget_fails_the_start_task() {
    let tmp = tempfile::tempdir().unwrap();
    let host = GuestHost::new(HostOptions {
        run_root: Some(tmp.path().join("run")),
        memory_budget_mib: Some(200),
        accel: vm_lab::AccelChoice::Tcg,
        ..HostOptions::default()
    })
    .unwrap();
    let exec = LabExecutor::new(host, volumes(tmp.path()));
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut h = Host {
        rng: &mut rng,
        boot_delay_secs: 25.0,
        now: 0.0,
        bridges: &[],
    };
    let mut v = vm(100, &[("memory", "512")]);
    let e = exec.start(&mut v, &mut h).unwrap_err();
    assert!(
        e.starts_with("start failed: ") && e.contains("512 MiB") && e.contains("200 MiB"),
        "{e}"
    );
    assert_eq!(v.power, Power::Stopped);
}

/// Every volume the storage side names is a blank 1 MiB file under `dir` (the storage itself
/// stays simulated in this test).
fn blank_volumes(dir: &Path) -> VolumePath {
    let dir = dir.to_path_buf();
    Arc::new(move |_node: &str, storage: &str, volname: &str| {
        let p = dir.join(storage).join(volname);
        if !p.exists() {
            std::fs::create_dir_all(p.parent()?).ok()?;
            std::fs::write(&p, vec![0u8; 1 << 20]).ok()?;
        }
        Some(p)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_api_a_vm_starts_as_a_real_qemu_and_stops() {
    use common::*;
    let tmp = tempfile::tempdir().unwrap();
    let host = GuestHost::new(HostOptions {
        run_root: Some(tmp.path().join("run")),
        memory_cap_mib: 128,
        ..HostOptions::default()
    })
    .unwrap();
    let exec = LabExecutor::new(host, blank_volumes(&tmp.path().join("store")))
        .with_shutdown_timeout(Duration::from_secs(1));
    let exec = Arc::new(exec);
    let fake = fake_proxmox::FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(fake_proxmox::ClockMode::Stepped)
        .executor(exec.clone())
        .start()
        .await
        .unwrap();
    let f = Fake { fake };
    let api = f.api("site-1");
    let node = "ml110-01";
    let st = create_vm(
        &f,
        &api,
        node,
        &[
            ("vmid", "100"),
            ("memory", "512"),
            ("scsihw", "virtio-scsi-pci"),
            ("scsi0", "local-lvm:1"),
            ("net0", "virtio,bridge=vmbr0"),
            ("agent", "1"),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");

    let r = api
        .post(&format!("/nodes/{node}/qemu/100/status/start"), &[])
        .await;
    let st = wait_task(&f, &api, node, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let cur = api
        .get(&format!("/nodes/{node}/qemu/100/status/current"))
        .await;
    assert_eq!(cur.data()["status"], "running", "{}", cur.body);
    let pid = u32::try_from(cur.data()["pid"].as_u64().unwrap()).unwrap();
    assert!(alive(pid), "status/current shows the real QEMU's pid");
    let conf = api.get(&format!("/nodes/{node}/qemu/100/config")).await;
    let mac = conf.data()["net0"]
        .as_str()
        .unwrap()
        .split(['=', ','])
        .nth(1)
        .unwrap()
        .to_ascii_lowercase();
    let g = exec
        .guest(&Vm::stopped(100, node, BTreeMap::new(), None))
        .unwrap();
    assert!(
        g.argv().iter().any(|a| a.contains(&format!("mac={mac}"))),
        "{:?}",
        g.argv()
    );

    // No OS on the blank disk: the real agent never answers.
    let ping = api
        .post(&format!("/nodes/{node}/qemu/100/agent/ping"), &[])
        .await;
    assert_eq!(ping.status, 500);
    assert!(
        ping.body.contains("QEMU guest agent is not running"),
        "{}",
        ping.body
    );

    // The firmware ignores ACPI: the shutdown task fails with PVE's text, QEMU runs on.
    let r = api
        .post(&format!("/nodes/{node}/qemu/100/status/shutdown"), &[])
        .await;
    let st = wait_task(&f, &api, node, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "VM quit/powerdown failed - got timeout");
    assert!(alive(pid));

    let r = api
        .post(&format!("/nodes/{node}/qemu/100/status/stop"), &[])
        .await;
    let st = wait_task(&f, &api, node, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    assert!(!alive(pid));
    let cur = api
        .get(&format!("/nodes/{node}/qemu/100/status/current"))
        .await;
    assert_eq!(cur.data()["status"], "stopped");
}
