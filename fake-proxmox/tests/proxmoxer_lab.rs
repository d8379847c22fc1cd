//! A third-party client drives the lab backend unchanged: proxmoxer (Python), with its
//! documented calls only (`tests/proxmoxer/lab_vm.py`), makes a VM from the imported cloud
//! image with a cloud-init drive, starts it, reads the address from the guest agent, stops and
//! deletes it. What it reports must be what the fake's state says.
//!
//! proxmoxer is installed into a venv under the target dir (`python3 -m venv`, `pip install
//! proxmoxer requests`); if that cannot be done the test fails, it does not skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;
mod lab_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Fake, TOKEN};
use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::scenario::Backend;
use fake_proxmox::{ClockMode, FakeProxmox};
use lab_support::image_and_key;
use serde_json::Value;
use vm_lab::namespace::{alive, pids_mentioning};

const NODE: &str = "ml110-01";
const VMID: u32 = 120;
const ADDRESS: &str = "192.168.11.60";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxmoxer/lab_vm.py");

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} exited {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A venv with proxmoxer under the target dir; its python. Fails the test, with the reason,
/// when Python, venv or PyPI is not there.
fn proxmoxer_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("proxmoxer-venv");
    let python = venv.join("bin/python");
    let ready = || run(Command::new(&python).args(["-c", "import proxmoxer, requests"])).is_ok();
    if !ready() {
        let setup = run(Command::new("python3").arg("-m").arg("venv").arg(&venv)).and_then(|_| {
            run(Command::new(venv.join("bin/pip")).args([
                "install",
                "--quiet",
                "proxmoxer",
                "requests",
            ]))
        });
        if let Err(e) = setup {
            panic!(
                "proxmoxer could not be set up (python3 with the venv module and PyPI access \
                 are needed; .ci/run installs python3-venv): {e}"
            );
        }
        assert!(ready(), "proxmoxer is still not importable from {venv:?}");
    }
    python
}

/// Runs the script's `phase` against `fake`'s site-1 and parses the JSON it prints.
async fn script(python: &Path, fake: &FakeProxmox, phase: &str, extra: &[&str]) -> Value {
    let addr = fake.site("site-1").unwrap().addr();
    let token_value = TOKEN.split_once('=').unwrap().1;
    let child = tokio::process::Command::new(python)
        .arg(SCRIPT)
        .arg(phase)
        .args(["--host", &addr.ip().to_string()])
        .args(["--port", &addr.port().to_string()])
        .args(["--token-value", token_value, "--node", NODE])
        .args(["--vmid", &VMID.to_string(), "--timeout", "540"])
        .args(extra)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), child)
        .await
        .unwrap_or_else(|_| panic!("proxmoxer's {phase} did not finish in 600 s"))
        .expect("the script runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "proxmoxer's {phase} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the script's output is not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxmoxer_makes_starts_reads_the_agent_address_stops_and_deletes_a_lab_vm() {
    let python = tokio::task::spawn_blocking(proxmoxer_python).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (image, key) = image_and_key(tmp.path()).await;
    let state = tmp.path().join("state");
    // The real clock: proxmoxer cannot step it, tasks finish on their own.
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Real)
        .backend(Backend::Lab)
        .lab_options(LabOptions {
            state_dir: Some(state.clone()),
            memory_cap_mib: 384,
            shutdown_timeout: Duration::from_secs(60),
        })
        .start()
        .await
        .expect("the fake starts with the lab backend (TLS on)");
    let f = Fake { fake };
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    let volid = ctl
        .place_file(NODE, "local", "import/harness-cloud.qcow2", &image)
        .await
        .unwrap();

    let pubkey = key.with_extension("pub");
    let ipconfig0 = format!("ip={ADDRESS}/24,gw=192.168.11.1");
    let up = script(
        &python,
        &f.fake,
        "up",
        &[
            "--image",
            &volid,
            "--sshkey-file",
            pubkey.to_str().unwrap(),
            "--ipconfig0",
            &ipconfig0,
        ],
    )
    .await;

    // What proxmoxer saw is the fake's state: the agent's address is the one the fake's
    // control API reads from the same guest, on net0's MAC, and the VM runs as a real QEMU.
    let access = ctl.guest_access(NODE, VMID, "harness", &key).await.unwrap();
    assert_eq!(up["address"], access.address, "{up}");
    assert_eq!(up["address"], ADDRESS, "cloud-init applied ipconfig0: {up}");
    let conf = api.get(&format!("/nodes/{NODE}/qemu/{VMID}/config")).await;
    assert_eq!(up["net0"], conf.data()["net0"], "{up}");
    let mac = conf.data()["net0"].as_str().unwrap().to_ascii_lowercase();
    assert!(mac.contains(up["mac"].as_str().unwrap()), "{up} vs {mac}");
    let cur = api
        .get(&format!("/nodes/{NODE}/qemu/{VMID}/status/current"))
        .await;
    assert_eq!(cur.data()["status"], "running");
    assert_eq!(up["status"], "running");
    assert_eq!(up["pid"], cur.data()["pid"], "{up}");
    let pid = u32::try_from(cur.data()["pid"].as_u64().unwrap()).unwrap();
    assert!(alive(pid), "the pid proxmoxer read is a live QEMU");
    let guest_dir = PathBuf::from(access.serial_log.unwrap())
        .parent()
        .unwrap()
        .to_path_buf();

    let down = script(&python, &f.fake, "down", &[]).await;
    assert_eq!(down["status"], "stopped", "{down}");
    assert_eq!(down["listed_after_delete"], serde_json::json!([]), "{down}");
    let gone = api.get(&format!("/nodes/{NODE}/qemu/{VMID}/config")).await;
    assert_eq!(
        gone.status, 500,
        "the fake no longer has the VM: {}",
        gone.body
    );
    let end = Instant::now();
    while alive(pid) && end.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid), "QEMU {pid} outlived proxmoxer's stop + delete");
    assert!(!guest_dir.exists(), "the guest's run dir went with the VM");
    assert!(pids_mentioning(&guest_dir).is_empty());
    f.fake.shutdown().await;
}
