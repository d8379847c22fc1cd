//! The lab backend end to end, through the PVE API only: the project's cloud image imported
//! with `import-from`, a cloud-init drive, a real guest that boots from the imported disk,
//! applies the drive (user, SSH key, hostname, static address) and runs its agent; power
//! verbs through the API; `DELETE` leaves no process and no file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;
mod lab_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Api, Fake, create_vm, wait_task};
use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::scenario::Backend;
use fake_proxmox::{ClockMode, FakeProxmox};
use lab_support::image_and_key;
use serde_json::Value;
use vm_lab::namespace::{alive, pids_mentioning};

const NODE: &str = "ml110-01";
const ADDRESS: &str = "192.168.11.50";
const NEW_ADDRESS: &str = "192.168.11.51";

async fn task(f: &Fake, api: &Api, r: common::Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(f, api, NODE, r.data().as_str().unwrap()).await
}

/// Polls `agent/network-get-interfaces` until the guest reports `addr` (real time: the
/// guest boots under TCG).
async fn wait_agent_address(api: &Api, vmid: u32, addr: &str, within: Duration) -> Value {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < within {
        let r = api
            .get(&format!(
                "/nodes/{NODE}/qemu/{vmid}/agent/network-get-interfaces"
            ))
            .await;
        if r.status == 200 && r.body.contains(&format!("\"{addr}\"")) {
            return r.data().clone();
        }
        last = r.body;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!("the agent never reported {addr} within {within:?}; last answer: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_made_through_the_api_boots_the_imported_cloud_image_and_applies_cloud_init() {
    let tmp = tempfile::tempdir().unwrap();
    let (image, key) = image_and_key(tmp.path()).await;
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let state = tmp.path().join("state");
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .backend(Backend::Lab)
        .lab_options(LabOptions {
            state_dir: Some(state.clone()),
            memory_cap_mib: 384,
            shutdown_timeout: Duration::from_secs(60),
        })
        .start()
        .await
        .expect("the fake starts with the lab backend");
    let f = Fake { fake };
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    let volid = ctl
        .place_file(NODE, "local", "import/harness-cloud.qcow2", &image)
        .await
        .unwrap();
    assert_eq!(volid, "local:import/harness-cloud.qcow2");

    let import = format!("local-lvm:0,import-from={volid}");
    let sshkeys =
        percent_encoding::utf8_percent_encode(pubkey.trim(), percent_encoding::NON_ALPHANUMERIC)
            .to_string();
    let st = create_vm(
        &f,
        &api,
        NODE,
        &[
            ("vmid", "100"),
            ("name", "web-01"),
            ("cores", "1"),
            ("memory", "2048"),
            ("scsihw", "virtio-scsi-pci"),
            ("scsi0", &import),
            ("ide2", "local-lvm:cloudinit"),
            ("boot", "order=scsi0"),
            ("net0", "virtio,bridge=vmbr0"),
            ("agent", "1"),
            ("ciuser", "harness"),
            ("sshkeys", &sshkeys),
            ("ipconfig0", &format!("ip={ADDRESS}/24,gw=192.168.11.1")),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK", "{st}");

    // Before it runs, the agent is PVE's "not running".
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/start"), &[])
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let cur = api
        .get(&format!("/nodes/{NODE}/qemu/100/status/current"))
        .await;
    assert_eq!(cur.data()["status"], "running");
    let pid = u32::try_from(cur.data()["pid"].as_u64().unwrap()).unwrap();
    assert!(alive(pid), "status/current shows the real QEMU's pid");

    let ifaces = wait_agent_address(&api, 100, ADDRESS, Duration::from_secs(300)).await;
    let conf = api.get(&format!("/nodes/{NODE}/qemu/100/config")).await;
    let mac = conf.data()["net0"].as_str().unwrap().to_ascii_lowercase();
    assert!(
        ifaces
            .to_string()
            .to_ascii_lowercase()
            .contains(mac.split(['=', ',']).nth(1).expect("net0 has a MAC")),
        "the address is on the NIC with net0's MAC: {ifaces}"
    );

    // In over SSH with the key given in `sshkeys`, as `ciuser`: cloud-init's hostname.
    let access = ctl.guest_access(NODE, 100, "harness", &key).await.unwrap();
    assert_eq!(access.address, ADDRESS);
    let out = ssh_retrying(&access.ssh, "hostname; id -un").await;
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["web-01", "harness"]
    );
    let serial_log = PathBuf::from(access.serial_log.unwrap());
    let serial = std::fs::read_to_string(&serial_log).unwrap();
    assert!(serial.contains("CLOUDIMG-READY"), "{serial}");
    let guest_dir = serial_log.parent().unwrap().to_path_buf();

    // The disk grown while the VM runs: as on PVE, its QEMU grows the open image
    // (`block_resize`), and the guest's kernel sees the new size.
    let disk_file = files_named(&state.join("disks"), "vm-100-disk-0")
        .pop()
        .expect("the imported disk is a file");
    let before = std::fs::metadata(&disk_file).unwrap().len();
    let r = api
        .send(
            "PUT",
            &format!("/nodes/{NODE}/qemu/100/resize"),
            &[("disk", "scsi0"), ("size", "+1G")],
        )
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(
        std::fs::metadata(&disk_file).unwrap().len(),
        before + (1 << 30),
        "QEMU grew the image"
    );
    let sectors = ssh_retrying(&access.ssh, "cat /sys/block/sda/size").await;
    assert_eq!(
        sectors.trim().parse::<u64>().ok(),
        Some((before + (1 << 30)) / 512),
        "the guest sees the grown disk"
    );

    // A new address while it runs, then a reboot through the API: as on PVE, the reboot is a
    // new QEMU from the config with pending changes applied and a regenerated cloud-init
    // drive, so the guest comes back with the new address.
    let r = api
        .send(
            "PUT",
            &format!("/nodes/{NODE}/qemu/100/config"),
            &[("ipconfig0", &format!("ip={NEW_ADDRESS}/24,gw=192.168.11.1"))],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/reboot"), &[])
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let cur = api
        .get(&format!("/nodes/{NODE}/qemu/100/status/current"))
        .await;
    let new_pid = u32::try_from(cur.data()["pid"].as_u64().unwrap()).unwrap();
    assert_ne!(new_pid, pid, "a reboot runs a new QEMU");
    assert!(!alive(pid), "the QEMU before the reboot is gone");
    wait_agent_address(&api, 100, NEW_ADDRESS, Duration::from_secs(300)).await;

    // Stop: QEMU is gone and the API says so.
    let cur = api
        .get(&format!("/nodes/{NODE}/qemu/100/status/current"))
        .await;
    let pid = u32::try_from(cur.data()["pid"].as_u64().unwrap()).unwrap();
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/stop"), &[])
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let cur = api
        .get(&format!("/nodes/{NODE}/qemu/100/status/current"))
        .await;
    assert_eq!(cur.data()["status"], "stopped");
    let gone = Instant::now();
    while alive(pid) && gone.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid), "QEMU {pid} still runs after stop");

    // Delete with purge: no guest process, no volume file left.
    let disks_dir = state.join("disks");
    let files_before = files_named(&disks_dir, "vm-100-");
    assert!(
        files_before.len() >= 2,
        "the imported disk and the cloud-init drive are real files: {files_before:?}"
    );
    let r = api
        .send(
            "DELETE",
            &format!("/nodes/{NODE}/qemu/100"),
            &[("purge", "1")],
        )
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(files_named(&disks_dir, "vm-100-"), Vec::<PathBuf>::new());
    assert!(!guest_dir.exists(), "the guest's run dir is gone");
    assert!(pids_mentioning(&guest_dir).is_empty());

    // Nothing outlives the server: its namespace, DHCP server and run dirs go with it.
    f.fake.shutdown().await;
    let end = Instant::now();
    while !pids_mentioning(&state).is_empty() && end.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pids_mentioning(&state), Vec::<u32>::new());
}

/// `script` over SSH, retried while the SSH server is not up yet (the agent reports the
/// address as soon as cloud-init applied it; the server starts a moment later, as on a real
/// cloud image); its stdout.
async fn ssh_retrying(argv: &[String], script: &str) -> String {
    let start = Instant::now();
    loop {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).arg(script);
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("run ssh"))
            .await
            .unwrap();
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "ssh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Files below `dir` whose name starts with `prefix`.
fn files_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One node of a simulated cluster on the lab backend (`backend: lab` on the node): its VMs
/// run as real QEMU processes with real volume files, its neighbour's stay rows in a table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_can_run_on_the_lab_backend_while_its_site_stays_simulated() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let mut scenario = fake_proxmox::scenario::Scenario::embedded_default();
    let site = &mut scenario.sites[0];
    let mut lab_node = site.nodes[0].clone();
    lab_node.name = "ml110-02".into();
    lab_node.backend = Some(Backend::Lab);
    site.nodes.push(lab_node);
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .scenario(scenario)
        .lab_options(LabOptions {
            state_dir: Some(state.clone()),
            memory_cap_mib: 128,
            shutdown_timeout: Duration::from_secs(5),
        })
        .start()
        .await
        .expect("the fake starts with one lab node");
    let f = Fake { fake };
    let api = f.api("site-1");
    let mut pids = Vec::new();
    for (node, vmid) in [(NODE, "100"), ("ml110-02", "101")] {
        let st = create_vm(
            &f,
            &api,
            node,
            &[
                ("vmid", vmid),
                ("memory", "512"),
                ("scsihw", "virtio-scsi-pci"),
                ("scsi0", "local-lvm:1"),
                ("net0", "virtio,bridge=vmbr0"),
            ],
        )
        .await;
        assert_eq!(st["exitstatus"], "OK", "{node}: {st}");
        let r = api
            .post(&format!("/nodes/{node}/qemu/{vmid}/status/start"), &[])
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let st = wait_task(&f, &api, node, r.data().as_str().unwrap()).await;
        assert_eq!(st["exitstatus"], "OK", "{node}: {st}");
        let cur = api
            .get(&format!("/nodes/{node}/qemu/{vmid}/status/current"))
            .await;
        assert_eq!(cur.data()["status"], "running", "{node}: {}", cur.body);
        pids.push(u32::try_from(cur.data()["pid"].as_u64().unwrap()).unwrap());
    }
    let lab_pids = pids_mentioning(&state);
    assert!(
        lab_pids.contains(&pids[1]) && alive(pids[1]),
        "VM 101 on the lab node is a real QEMU (pid {}; lab processes {lab_pids:?})",
        pids[1]
    );
    assert!(
        !lab_pids.contains(&pids[0]),
        "VM 100 on the simulated node runs no process of the lab"
    );
    let disks = state.join("disks");
    assert!(
        !files_named(&disks, "vm-101-").is_empty(),
        "real volume file"
    );
    assert_eq!(files_named(&disks, "vm-100-"), Vec::<PathBuf>::new());
    f.fake.shutdown().await;
}
