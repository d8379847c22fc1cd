//! Faults on a real guest through the control API (`POST /_fake/…/qemu/{vmid}/fault`), each
//! seen the way PVE shows it: one boot of the project's cloud image serves every case (a NIC's
//! link down and up, the node's link on its bridge down and up, a disk whose writes fail (and
//! one with `werror=stop`, which stops the VM with `io-error`), a pause from outside PVE, QEMU killed; then a
//! second start whose disk takes writes again). The simulated backend refuses them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;
mod lab_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Api, Fake, create_vm, wait_task};
use fake_proxmox::control::ControlError;
use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::exec::{GuestAccess, GuestFault, NodeFault};
use fake_proxmox::scenario::Backend;
use fake_proxmox::{ClockMode, FakeProxmox};
use lab_support::image_and_key;
use serde_json::Value;
use vm_lab::namespace::alive;

const NODE: &str = "ml110-01";
const ADDRESS: &str = "192.168.11.50";
const GATEWAY: &str = "192.168.11.1";

async fn task(f: &Fake, api: &Api, r: common::Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(f, api, NODE, r.data().as_str().unwrap()).await
}

/// The guest's access once SSH works: the agent answers before cloud-init has applied the
/// address and started the SSH server (as on a real cloud image), so both are waited for.
async fn wait_ssh(ctl: &fake_proxmox::ControlClient, key: &Path, within: Duration) -> GuestAccess {
    let start = Instant::now();
    loop {
        let last = match ctl.guest_access(NODE, 100, "root", key).await {
            Ok(access) => {
                let (code, out) = ssh(&access, "echo up").await;
                if code == 0 && out == "up" {
                    return access;
                }
                format!("ssh exited {code}: {out}")
            }
            Err(e) => e.to_string(),
        };
        assert!(
            start.elapsed() < within,
            "no SSH into the guest within {within:?}: {last}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Polls `agent/ping` until it answers (real time: the guest boots under TCG).
async fn wait_agent(api: &Api, within: Duration) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < within {
        let r = api
            .post(&format!("/nodes/{NODE}/qemu/100/agent/ping"), &[])
            .await;
        if r.status == 200 {
            return;
        }
        last = r.body;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!("the agent never answered within {within:?}; last answer: {last}");
}

/// Runs `script` in the guest as root over SSH: (exit code, stdout).
async fn ssh(access: &GuestAccess, script: &str) -> (i32, String) {
    let mut cmd = Command::new(&access.ssh[0]);
    cmd.args(&access.ssh[1..]).arg(script);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run ssh"))
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

async fn current(api: &Api) -> Value {
    api.get(&format!("/nodes/{NODE}/qemu/100/status/current"))
        .await
        .data()
        .clone()
}

/// Where a link fault is made: on the VM's NIC, or on the node's link on the NIC's bridge.
#[derive(Clone, Copy, Debug)]
enum LinkFault {
    Nic,
    NodeBridge,
}

async fn set_link(ctl: &fake_proxmox::ControlClient, how: LinkFault, down: bool) {
    match how {
        LinkFault::Nic => ctl.guest_fault(NODE, 100, &link(down)).await.unwrap(),
        LinkFault::NodeBridge => {
            let bridge = "vmbr0".to_string();
            let fault = if down {
                NodeFault::LinkDown { bridge }
            } else {
                NodeFault::LinkUp { bridge }
            };
            let reached = ctl.node_fault(NODE, &fault).await.unwrap();
            assert_eq!(reached, vec![(100, "net0".to_string())], "{how:?}");
        }
    }
}

fn link(down: bool) -> GuestFault {
    let net = "net0".to_string();
    if down {
        GuestFault::LinkDown { net }
    } else {
        GuestFault::LinkUp { net }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_on_a_real_guest_show_as_pve_shows_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (image, key) = image_and_key(tmp.path()).await;
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .backend(Backend::Lab)
        .lab_options(LabOptions {
            state_dir: Some(tmp.path().join("state")),
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
            ("cores", "1"),
            ("memory", "512"),
            ("scsihw", "virtio-scsi-pci"),
            ("scsi0", &import),
            ("scsi1", "local-lvm:1,werror=stop"),
            ("ide2", "local-lvm:cloudinit"),
            ("boot", "order=scsi0"),
            ("net0", "virtio,bridge=vmbr0"),
            ("agent", "1"),
            ("ciuser", "harness"),
            ("sshkeys", &sshkeys),
            ("ipconfig0", &format!("ip={ADDRESS}/24,gw={GATEWAY}")),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK", "{st}");

    // A fault needs a running guest.
    let refused = ctl.guest_fault(NODE, 100, &GuestFault::Pause).await;
    assert!(
        matches!(&refused, Err(ControlError::Refused { status: 409, message }) if message.contains("not running")),
        "{refused:?}"
    );

    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/start"), &[])
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    wait_agent(&api, Duration::from_secs(300)).await;
    // root takes the `sshkeys` too (the image has no sudo): ping and raw disk writes need it.
    let access = wait_ssh(&ctl, &key, Duration::from_secs(120)).await;
    assert_eq!(access.address, ADDRESS);

    link_down_and_up(&api, &ctl, &access, LinkFault::Nic).await;
    link_down_and_up(&api, &ctl, &access, LinkFault::NodeBridge).await;
    let unknown = ctl
        .node_fault(
            NODE,
            &NodeFault::LinkDown {
                bridge: "vmbr9".into(),
            },
        )
        .await;
    assert!(
        matches!(&unknown, Err(ControlError::Refused { status: 409, message }) if message.contains("no bridge 'vmbr9'")),
        "{unknown:?}"
    );
    disk_writes_fail(&ctl, &access).await;
    pause_from_outside(&f, &api, &ctl).await;
    io_error_stops_the_vm(&f, &api, &ctl, &access).await;
    kill(&api, &ctl).await;

    // Started again, the disk takes writes (the fault went with QEMU) and can fail again.
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/start"), &[])
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    wait_agent(&api, Duration::from_secs(300)).await;
    let access = wait_ssh(&ctl, &key, Duration::from_secs(120)).await;
    disk_writes_fail(&ctl, &access).await;

    f.fake.shutdown().await;
}

/// The guest loses its link (its ping to the gateway fails), the agent still answers over
/// virtio-serial and the config is unchanged; link up: the ping works again.
async fn link_down_and_up(
    api: &Api,
    ctl: &fake_proxmox::ControlClient,
    access: &GuestAccess,
    how: LinkFault,
) {
    let ping = format!("ping -c 1 -W 5 {GATEWAY} >/dev/null 2>&1; echo $?");
    assert_eq!(ssh(access, &ping).await, (0, "0".into()), "ping before");
    let config_before = api.get(&format!("/nodes/{NODE}/qemu/100/config")).await;

    // A ping that starts once the link is down; its exit code is read after it comes back.
    let later = format!(
        "rm -f /tmp/down.rc; (sleep 6; ping -c 3 -W 2 {GATEWAY} >/dev/null 2>&1; \
         echo $? > /tmp/down.rc) </dev/null >/dev/null 2>&1 &"
    );
    assert_eq!(ssh(access, &later).await.0, 0);
    set_link(ctl, how, true).await;

    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/agent/ping"), &[])
        .await;
    assert_eq!(
        r.status, 200,
        "the agent answers with the link down: {}",
        r.body
    );
    let config = api.get(&format!("/nodes/{NODE}/qemu/100/config")).await;
    assert_eq!(
        config.data(),
        config_before.data(),
        "a fault is no config change"
    );
    assert!(!config.body.contains("link_down"), "{}", config.body);

    tokio::time::sleep(Duration::from_secs(16)).await;
    set_link(ctl, how, false).await;
    let start = Instant::now();
    let mut rc = ssh(access, "cat /tmp/down.rc").await;
    while rc.0 != 0 && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        rc = ssh(access, "cat /tmp/down.rc").await;
    }
    assert_eq!(
        rc,
        (0, "1".into()),
        "{how:?}: the ping with the link down failed"
    );
    assert_eq!(
        ssh(access, &ping).await,
        (0, "0".into()),
        "ping after link up"
    );
}

/// Writes to the disk fail with an I/O error in the guest; reads still work.
async fn disk_writes_fail(ctl: &fake_proxmox::ControlClient, access: &GuestAccess) {
    // Sector 100 lies in the gap before the first partition (at 1 MiB).
    let write = "dd if=/dev/zero of=/dev/sda bs=512 count=1 seek=100 conv=notrunc,fsync \
                 2>/dev/null; echo $?";
    let read = "dd if=/dev/sda of=/dev/null bs=512 count=1 skip=2048 iflag=direct \
                2>/dev/null; echo $?";
    assert_eq!(ssh(access, write).await, (0, "0".into()), "a write before");
    let fault = GuestFault::DiskWriteError {
        disk: "scsi0".into(),
    };
    ctl.guest_fault(NODE, 100, &fault).await.unwrap();
    ctl.guest_fault(NODE, 100, &fault)
        .await
        .expect("a disk already failing stays so");
    let (code, out) = ssh(access, write).await;
    assert_eq!(code, 0, "ssh");
    assert_ne!(out, "0", "the write after the fault fails in the guest");
    assert_eq!(ssh(access, read).await, (0, "0".into()), "reads still work");

    let cd = GuestFault::DiskWriteError {
        disk: "ide2".into(),
    };
    let refused = ctl.guest_fault(NODE, 100, &cd).await;
    assert!(
        matches!(&refused, Err(ControlError::Refused { status: 409, message }) if message.contains("CD-ROM")),
        "{refused:?}"
    );
}

/// Paused from outside PVE: `paused` (qmpstatus too), the agent is PVE's "not running";
/// `status/resume` through the API continues it.
async fn pause_from_outside(f: &Fake, api: &Api, ctl: &fake_proxmox::ControlClient) {
    ctl.guest_fault(NODE, 100, &GuestFault::Pause)
        .await
        .unwrap();
    let cur = current(api).await;
    assert_eq!(
        (cur["status"].as_str(), cur["qmpstatus"].as_str()),
        (Some("running"), Some("paused")),
        "{cur}"
    );
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/agent/ping"), &[])
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains("QEMU guest agent is not running"),
        "{}",
        r.body
    );

    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/resume"), &[])
        .await;
    let st = task(f, api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(current(api).await["qmpstatus"], "running");
    wait_agent(api, Duration::from_secs(60)).await;
}

/// Waits (real time) until `qmpstatus` is `want`; the last `status/current`.
async fn wait_qmpstatus(api: &Api, want: &str, within: Duration) -> Value {
    let start = Instant::now();
    loop {
        let cur = current(api).await;
        if cur["qmpstatus"] == want || start.elapsed() > within {
            return cur;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A failing write to a disk with `werror=stop` stops the VM as QEMU does: `status` stays
/// `running`, `qmpstatus` is `io-error`; `status/resume` retries the write, which fails and
/// stops it again.
async fn io_error_stops_the_vm(
    f: &Fake,
    api: &Api,
    ctl: &fake_proxmox::ControlClient,
    access: &GuestAccess,
) {
    let fault = GuestFault::DiskWriteError {
        disk: "scsi1".into(),
    };
    ctl.guest_fault(NODE, 100, &fault).await.unwrap();
    // The write stops the vCPUs: it starts after the SSH session has returned.
    let later = "(sleep 2; dd if=/dev/zero of=/dev/sdb bs=512 count=1 conv=notrunc,fsync) \
                 </dev/null >/dev/null 2>&1 &";
    assert_eq!(ssh(access, later).await.0, 0);
    let cur = wait_qmpstatus(api, "io-error", Duration::from_secs(60)).await;
    assert_eq!(
        (cur["status"].as_str(), cur["qmpstatus"].as_str()),
        (Some("running"), Some("io-error")),
        "{cur}"
    );
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/resume"), &[])
        .await;
    let st = task(f, api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let cur = wait_qmpstatus(api, "io-error", Duration::from_secs(30)).await;
    assert_eq!(
        cur["qmpstatus"], "io-error",
        "the retried write fails again: {cur}"
    );
}

/// QEMU dies: `status/current` shows `stopped` with no pid, as PVE shows a crashed VM.
async fn kill(api: &Api, ctl: &fake_proxmox::ControlClient) {
    let pid = u32::try_from(current(api).await["pid"].as_u64().unwrap()).unwrap();
    ctl.guest_fault(NODE, 100, &GuestFault::Kill).await.unwrap();
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid), "QEMU {pid} still runs after kill");
    let cur = current(api).await;
    assert_eq!(cur["status"], "stopped", "{cur}");
    assert!(cur.get("pid").is_none_or(Value::is_null), "{cur}");
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/agent/ping"), &[])
        .await;
    assert!(r.body.contains("VM 100 is not running"), "{}", r.body);
}

#[tokio::test]
async fn the_simulated_backend_has_no_guest_to_fault_and_bad_targets_are_refused() {
    let f = common::start().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    let st = create_vm(
        &f,
        &api,
        NODE,
        &[("vmid", "100"), ("net0", "virtio,bridge=vmbr0")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/100/status/start"), &[])
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");

    let refused = ctl.guest_fault(NODE, 100, &GuestFault::Kill).await;
    assert!(
        matches!(&refused, Err(ControlError::Refused { status: 409, message })
            if message.contains("the simulated backend runs no guest")),
        "{refused:?}"
    );
    assert_eq!(current(&api).await["status"], "running");

    let bad = GuestFault::LinkDown { net: "eth0".into() };
    let refused = ctl.guest_fault(NODE, 100, &bad).await;
    assert!(
        matches!(&refused, Err(ControlError::Refused { status: 400, message })
            if message.contains("not a NIC")),
        "{refused:?}"
    );
    let missing = ctl.guest_fault(NODE, 101, &GuestFault::Pause).await;
    assert!(
        matches!(&missing, Err(ControlError::Refused { status: 404, .. })),
        "{missing:?}"
    );
}
