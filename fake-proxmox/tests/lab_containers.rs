//! Containers on the lab backend end to end, through the PVE API: the project's container
//! template uploaded as a `vztmpl`, containers made from it (DHCP from the bridge's pool, a
//! static address, a wrong one), started as real Linux containers that take PVE's network
//! files, answer SSH with the key given at create, see their `mp0` volume, stop, shut down,
//! reboot, stop by themselves, and leave nothing when destroyed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Api, Fake, Resp, wait_task};
use fake_proxmox::exec::GuestAccess;
use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::scenario::Backend;
use fake_proxmox::{ClockMode, FakeProxmox};
use serde_json::Value;
use vm_lab::image::template::{TemplateRequest, build};
use vm_lab::namespace::{alive, pids_mentioning};

const NODE: &str = "ml110-01";
const TEMPLATE: &str = "local:vztmpl/harness-ct_1.0_amd64.tar.gz";
const STATIC_ADDR: &str = "192.168.11.61";
/// An address outside vmbr0's 192.168.11.0/24: the container has it, nobody can reach it.
const WRONG_ADDR: &str = "192.168.12.62";

/// A multipart/form-data body: the text fields, then the file as part `filename`.
fn multipart(fields: &[(&str, &str)], file_name: &str, data: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----harness-ct-template-boundary";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// The template uploaded to `local` through PVE's upload route; the `imgcopy` task's status.
async fn upload_template(f: &Fake, api: &Api, archive: &Path) -> Value {
    let data = std::fs::read(archive).unwrap();
    let name = TEMPLATE.rsplit('/').next().unwrap();
    let (ct, body) = multipart(&[("content", "vztmpl")], name, &data);
    let mut rb = api
        .http
        .post(format!("{}/nodes/{NODE}/storage/local/upload", api.base))
        .header("content-type", ct)
        .body(body);
    for (k, v) in &api.headers {
        rb = rb.header(k, v);
    }
    let r = rb.send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    wait_task(f, api, NODE, v["data"].as_str().unwrap()).await
}

async fn task(f: &Fake, api: &Api, r: Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(f, api, NODE, r.data().as_str().unwrap()).await
}

async fn power(f: &Fake, api: &Api, vmid: u32, verb: &str, form: &[(&str, &str)]) -> Value {
    let r = api
        .post(&format!("/nodes/{NODE}/lxc/{vmid}/status/{verb}"), form)
        .await;
    task(f, api, r).await
}

async fn current(api: &Api, vmid: u32) -> Value {
    api.get(&format!("/nodes/{NODE}/lxc/{vmid}/status/current"))
        .await
        .data()
        .clone()
}

fn pid_of(status: &Value) -> u32 {
    u32::try_from(status["pid"].as_u64().expect("a running CT has a pid")).unwrap()
}

/// Polls `interfaces` until `eth0` has an IPv4 address starting with `prefix`.
async fn wait_address(api: &Api, vmid: u32, prefix: &str) -> String {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(60) {
        let r = api
            .get(&format!("/nodes/{NODE}/lxc/{vmid}/interfaces"))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let found = r.data().as_array().and_then(|ifaces| {
            ifaces
                .iter()
                .filter(|i| i["name"] == "eth0")
                .flat_map(|i| i["ip-addresses"].as_array().cloned().unwrap_or_default())
                .filter(|a| a["ip-address-type"] == "inet")
                .filter_map(|a| a["ip-address"].as_str().map(str::to_string))
                .find(|a| a.starts_with(prefix))
        });
        if let Some(a) = found {
            return a;
        }
        last = r.body;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("CT {vmid} never had an address in {prefix}*; last: {last}");
}

/// `script` over SSH; (success, stdout, stderr).
async fn ssh(access: &GuestAccess, script: &str) -> (bool, String, String) {
    let mut cmd = Command::new(&access.ssh[0]);
    cmd.args(&access.ssh[1..]).arg(script);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run ssh"))
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `script` over SSH, retried while dropbear is not up yet; its stdout.
async fn ssh_ok(access: &GuestAccess, script: &str) -> String {
    let start = Instant::now();
    loop {
        let (ok, out, err) = ssh(access, script).await;
        if ok {
            return out;
        }
        assert!(start.elapsed() < Duration::from_secs(40), "ssh: {err}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Directories and files below `dir` whose name starts with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(p);
            } else if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_made_through_the_api_run_for_real_from_an_uploaded_template() {
    let tmp = tempfile::tempdir().unwrap();
    let template = tokio::task::spawn_blocking(|| {
        build(
            &vm_lab::image::default_cache_dir(),
            &TemplateRequest::default(),
        )
    })
    .await
    .unwrap()
    .expect("the container template builds");
    let key = tmp.path().join("id_ed25519");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let state = tmp.path().join("state");
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .backend(Backend::Lab)
        .lab_options(LabOptions {
            state_dir: Some(state.clone()),
            memory_cap_mib: 256,
            shutdown_timeout: Duration::from_secs(10),
        })
        .start()
        .await
        .expect("the fake starts with the lab backend");
    let f = Fake { fake };
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    let disks = state.join("disks");

    let st = upload_template(&f, &api, &template.path).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");

    // The scenario's own template is a record with a size, not an archive: refused clearly.
    let r = api
        .post(
            &format!("/nodes/{NODE}/lxc"),
            &[
                ("vmid", "210"),
                (
                    "ostemplate",
                    "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                ),
                ("rootfs", "local-lvm:1"),
            ],
        )
        .await;
    let st = task(&f, &api, r).await;
    let exit = st["exitstatus"].as_str().unwrap();
    assert!(
        exit.starts_with("unable to create CT 210 - ") && exit.contains("holds no data"),
        "{exit}"
    );
    assert_eq!(named(&disks, "vm-210-"), Vec::<PathBuf>::new());

    for (vmid, hostname, net0) in [
        (200, "ct-dhcp", "name=eth0,bridge=vmbr0,ip=dhcp".to_string()),
        (
            201,
            "ct-static",
            format!("name=eth0,bridge=vmbr0,ip={STATIC_ADDR}/24,gw=192.168.11.1"),
        ),
        (
            202,
            "ct-wrong",
            format!("name=eth0,bridge=vmbr0,ip={WRONG_ADDR}/24,gw=192.168.12.1"),
        ),
    ] {
        let vmid_s = vmid.to_string();
        let r = api
            .post(
                &format!("/nodes/{NODE}/lxc"),
                &[
                    ("vmid", vmid_s.as_str()),
                    ("ostemplate", TEMPLATE),
                    ("hostname", hostname),
                    ("memory", "128"),
                    ("rootfs", "local-lvm:1"),
                    ("mp0", "local-lvm:1,mp=/data"),
                    ("net0", &net0),
                    ("ssh-public-keys", pubkey.trim()),
                ],
            )
            .await;
        let st = task(&f, &api, r).await;
        assert_eq!(st["exitstatus"], "OK", "CT {vmid}: {st}");
        let conf = api.get(&format!("/nodes/{NODE}/lxc/{vmid}/config")).await;
        assert_eq!(
            conf.data()["ostype"],
            "debian",
            "the OS detected in the unpacked template"
        );
        let rootfs = named(&disks, &format!("vm-{vmid}-disk-0")).pop().unwrap();
        let keys = std::fs::read_to_string(rootfs.join("root/.ssh/authorized_keys")).unwrap();
        assert!(keys.contains(pubkey.trim()), "{keys}");
        assert!(
            rootfs.join("sbin/init").exists(),
            "the template is unpacked"
        );

        let st = power(&f, &api, vmid, "start", &[]).await;
        assert_eq!(st["exitstatus"], "OK", "CT {vmid}: {st}");
        let cur = current(&api, vmid).await;
        assert_eq!(cur["status"], "running");
        assert!(
            alive(pid_of(&cur)),
            "status/current shows the real init's pid"
        );
        assert!(cur["mem"].as_u64().unwrap() > 0);
        let interfaces = std::fs::read_to_string(rootfs.join("etc/network/interfaces")).unwrap();
        assert!(interfaces.contains("auto eth0\n"), "{interfaces}");
    }

    // DHCP from vmbr0's pool; in over SSH with the key from `ssh-public-keys`.
    let dhcp = wait_address(&api, 200, "192.168.11.1").await;
    let access = ctl.ct_access(NODE, 200, "root", &key).await.unwrap();
    assert_eq!(access.address, dhcp);
    let out = ssh_ok(
        &access,
        "hostname; echo from-ct > /data/marker; grep ' /data ' /proc/mounts",
    )
    .await;
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("ct-dhcp"));
    assert!(lines.next().is_some(), "/data is a mount point: {out}");
    let mp0 = named(&disks, "vm-200-disk-1").pop().unwrap();
    assert_eq!(
        std::fs::read_to_string(mp0.join("marker")).unwrap(),
        "from-ct\n",
        "mp0 is the volume's directory"
    );
    let console = std::fs::read_to_string(access.serial_log.as_ref().unwrap()).unwrap();
    assert!(console.contains("CT-READY hostname=ct-dhcp"), "{console}");

    // The static address as configured, the host name PVE wrote.
    assert_eq!(wait_address(&api, 201, STATIC_ADDR).await, STATIC_ADDR);
    let access = ctl.ct_access(NODE, 201, "root", &key).await.unwrap();
    assert_eq!(access.address, STATIC_ADDR);
    assert_eq!(ssh_ok(&access, "hostname").await.trim(), "ct-static");

    // A wrong `ip=`: the container has the address, but it is no use on vmbr0.
    assert_eq!(wait_address(&api, 202, WRONG_ADDR).await, WRONG_ADDR);
    let access = ctl.ct_access(NODE, 202, "root", &key).await.unwrap();
    let (ok, _, _) = ssh(&access, "true").await;
    assert!(!ok, "{WRONG_ADDR} is not reachable from vmbr0");

    // Shutdown: init stops on SIGPWR, the task ends OK, the process is gone.
    let pid = pid_of(&current(&api, 201).await);
    let st = power(&f, &api, 201, "shutdown", &[("timeout", "20")]).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(current(&api, 201).await["status"], "stopped");
    assert!(!alive(pid));

    // A full clone of the stopped container copies its files.
    let r = api
        .post(
            &format!("/nodes/{NODE}/lxc/201/clone"),
            &[("newid", "203"), ("full", "1"), ("hostname", "ct-clone")],
        )
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let clone_root = named(&disks, "vm-203-disk-0").pop().unwrap();
    assert!(clone_root.join("sbin/init").exists());
    assert!(
        std::fs::read_to_string(clone_root.join("etc/network/interfaces"))
            .unwrap()
            .contains(STATIC_ADDR),
        "the source's files, as its last start left them"
    );

    // Stop kills it.
    let pid = pid_of(&current(&api, 202).await);
    let st = power(&f, &api, 202, "stop", &[]).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(current(&api, 202).await["status"], "stopped");
    assert!(!alive(pid));

    // Reboot: a new init, the address again.
    let pid = pid_of(&current(&api, 200).await);
    let st = power(&f, &api, 200, "reboot", &[]).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let new_pid = pid_of(&current(&api, 200).await);
    assert_ne!(new_pid, pid);
    assert!(!alive(pid));
    wait_address(&api, 200, "192.168.11.1").await;

    // Its init exits from inside: the API notices.
    let access = ctl.ct_access(NODE, 200, "root", &key).await.unwrap();
    let _ = ssh(&access, "kill -PWR 1").await;
    let start = Instant::now();
    while current(&api, 200).await["status"] != "stopped" {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "CT 200 still shows running after its init exited"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let start = Instant::now();
    while alive(new_pid) && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(new_pid), "the init that exited is gone");

    // Destroy: no process, no volume directory, no run directory.
    let run_dir = PathBuf::from(access.serial_log.unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    for vmid in [200, 201, 202, 203] {
        let r = api
            .send(
                "DELETE",
                &format!("/nodes/{NODE}/lxc/{vmid}"),
                &[("purge", "1")],
            )
            .await;
        let st = task(&f, &api, r).await;
        assert_eq!(st["exitstatus"], "OK", "{st}");
        assert_eq!(named(&disks, &format!("vm-{vmid}-")), Vec::<PathBuf>::new());
    }
    assert!(!run_dir.exists(), "the container's run dir is gone");
    assert!(pids_mentioning(&run_dir).is_empty());

    f.fake.shutdown().await;
    let end = Instant::now();
    while !pids_mentioning(&state).is_empty() && end.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pids_mentioning(&state), Vec::<u32>::new());
}

/// A start that cannot happen fails the `vzstart` task with PVE's wording, and shutting down
/// a container whose init ignores the request fails without `forceStop` and kills it with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_failures_and_shutdown_timeouts_read_as_pve_reports_them() {
    let tmp = tempfile::tempdir().unwrap();
    let template = tokio::task::spawn_blocking(|| {
        build(
            &vm_lab::image::default_cache_dir(),
            &TemplateRequest::default(),
        )
    })
    .await
    .unwrap()
    .expect("the container template builds");
    let state = tmp.path().join("state");
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .backend(Backend::Lab)
        .lab_options(LabOptions {
            state_dir: Some(state.clone()),
            memory_cap_mib: 256,
            shutdown_timeout: Duration::from_secs(3),
        })
        .start()
        .await
        .expect("the fake starts with the lab backend");
    let f = Fake { fake };
    let api = f.api("site-1");
    let st = upload_template(&f, &api, &template.path).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");

    let r = api
        .post(
            &format!("/nodes/{NODE}/lxc"),
            &[
                ("vmid", "220"),
                ("ostemplate", TEMPLATE),
                ("memory", "64"),
                ("rootfs", "local-lvm:1"),
                ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
            ],
        )
        .await;
    let st = task(&f, &api, r).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let rootfs = named(&state.join("disks"), "vm-220-disk-0").pop().unwrap();

    // No init in the root file system: the start fails, nothing runs.
    std::fs::rename(rootfs.join("sbin/init"), rootfs.join("sbin/init.off")).unwrap();
    let st = power(&f, &api, 220, "start", &[]).await;
    let exit = st["exitstatus"].as_str().unwrap();
    assert!(
        exit.starts_with("startup for container '220' failed - ") && exit.contains("init"),
        "{exit}"
    );
    assert_eq!(current(&api, 220).await["status"], "stopped");

    // An init that ignores SIGPWR: shutdown fails after the timeout, forceStop kills it.
    std::fs::write(
        rootfs.join("sbin/init"),
        "#!/bin/sh\ntrap '' PWR TERM\nwhile :; do sleep 1; done\n",
    )
    .unwrap();
    std::fs::set_permissions(
        rootfs.join("sbin/init"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let st = power(&f, &api, 220, "start", &[]).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let pid = pid_of(&current(&api, 220).await);
    let st = power(&f, &api, 220, "shutdown", &[("timeout", "1")]).await;
    assert_eq!(st["exitstatus"], "container did not stop", "{st}");
    assert_eq!(current(&api, 220).await["status"], "running");
    assert!(alive(pid));
    let st = power(
        &f,
        &api,
        220,
        "shutdown",
        &[("timeout", "1"), ("forceStop", "1")],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(current(&api, 220).await["status"], "stopped");
    assert!(!alive(pid));
    f.fake.shutdown().await;
}
