//! Start-to-agent on the lab backend: from `POST …/status/start` to the guest agent answering
//! (`POST …/agent/ping` → 200), for one VM and for three VMs started at once, next to vm-lab's
//! netboot of guests of the same size in the same run (`Lab::up_with` → every node ready,
//! i.e. boot marker + agent). Both use the accelerator vm-lab's probe picks (`auto`). Prints
//! `name: value unit` lines and the ratios.
//!
//!     cargo bench -p fake-proxmox --bench lab_start
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::scenario::Backend;
use fake_proxmox::{ClockMode, FakeProxmox};
use serde_json::Value;
use vm_lab::image::cloud::{CloudImageRequest, build};
use vm_lab::{AccelChoice, Lab, LabSpec};

const NODE: &str = "ml110-01";
const TOKEN: &str = "root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a";
const VCPUS: u32 = 1;
const MEMORY_MIB: u32 = 512;
const AGENT_WITHIN: Duration = Duration::from_secs(600);

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(fake: &FakeProxmox) -> Api {
        let s = fake.site("site-1").unwrap();
        let cert = reqwest::Certificate::from_pem(s.cert_pem().as_bytes()).unwrap();
        let http = reqwest::Client::builder()
            .tls_certs_only([cert])
            .build()
            .unwrap();
        Api {
            base: format!("{}/api2/json", s.url()),
            http,
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        // PVE takes GET and DELETE parameters in the query string, the others as a form.
        let body = matches!(method, reqwest::Method::POST | reqwest::Method::PUT);
        let req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("Authorization", format!("PVEAPIToken={TOKEN}"));
        let req = if body {
            req.form(form)
        } else {
            req.query(form)
        };
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// Sends, then waits (real clock) for the task the answer names; panics unless it is OK.
    async fn task(&self, method: reqwest::Method, path: &str, form: &[(&str, &str)]) {
        let (status, body) = self.send(method, path, form).await;
        assert_eq!(status, 200, "{path}: {body}");
        let upid = body["data"].as_str().unwrap().to_string();
        loop {
            let (_, st) = self
                .send(
                    reqwest::Method::GET,
                    &format!("/nodes/{NODE}/tasks/{upid}/status"),
                    &[],
                )
                .await;
            if st["data"]["status"] == "stopped" {
                assert_eq!(st["data"]["exitstatus"], "OK", "{path}: {st}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn cloud_image(dir: &Path) -> PathBuf {
    let img = build(
        &vm_lab::image::default_cache_dir(),
        &CloudImageRequest::default(),
    )
    .expect("the cloud image builds");
    let qcow2 = dir.join("harness-cloud.qcow2");
    let ok = Command::new("qemu-img")
        .args(["convert", "-O", "qcow2"])
        .arg(&img.path)
        .arg(&qcow2)
        .status()
        .unwrap()
        .success();
    assert!(ok, "qemu-img convert");
    qcow2
}

async fn create(api: &Api, vmid: u32, volid: &str) {
    let import = format!("local-lvm:0,import-from={volid}");
    let ip = format!("ip=192.168.11.{}/24,gw=192.168.11.1", vmid - 200 + 70);
    let (cores, memory) = (VCPUS.to_string(), MEMORY_MIB.to_string());
    let form = [
        ("vmid", vmid.to_string()),
        ("name", format!("bench-{vmid}")),
        ("cores", cores),
        ("memory", memory),
        ("scsihw", "virtio-scsi-pci".into()),
        ("scsi0", import),
        ("ide2", "local-lvm:cloudinit".into()),
        ("boot", "order=scsi0".into()),
        ("net0", "virtio,bridge=vmbr0".into()),
        ("agent", "1".into()),
        ("ipconfig0", ip),
    ];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    api.task(reqwest::Method::POST, &format!("/nodes/{NODE}/qemu"), &form)
        .await;
}

/// `POST status/start`, then `agent/ping` until 200: seconds from the start request.
async fn start_to_agent(api: &Api, vmid: u32) -> f64 {
    let t = Instant::now();
    api.task(
        reqwest::Method::POST,
        &format!("/nodes/{NODE}/qemu/{vmid}/status/start"),
        &[],
    )
    .await;
    loop {
        let (status, _) = api
            .send(
                reqwest::Method::POST,
                &format!("/nodes/{NODE}/qemu/{vmid}/agent/ping"),
                &[],
            )
            .await;
        if status == 200 {
            return t.elapsed().as_secs_f64();
        }
        assert!(
            t.elapsed() < AGENT_WITHIN,
            "VM {vmid}'s agent never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `vmids`, starts them at once; (slowest, each) start-to-agent; then stops and
/// deletes them.
async fn fake_round(api: &Api, volid: &str, vmids: &[u32]) -> (f64, Vec<f64>) {
    for &v in vmids {
        create(api, v, volid).await;
    }
    let t = Instant::now();
    let each = futures::future::join_all(vmids.iter().map(|&v| start_to_agent(api, v))).await;
    let all = t.elapsed().as_secs_f64();
    for &v in vmids {
        api.task(
            reqwest::Method::POST,
            &format!("/nodes/{NODE}/qemu/{v}/status/stop"),
            &[],
        )
        .await;
        api.task(
            reqwest::Method::DELETE,
            &format!("/nodes/{NODE}/qemu/{v}"),
            &[("purge", "1")],
        )
        .await;
    }
    (all, each)
}

fn lab_spec(nodes: usize) -> LabSpec {
    let mut yaml = String::from("name: labstart\naccel: auto\nnodes:\n");
    for i in 1..=nodes {
        yaml.push_str(&format!(
            "  - name: node0{i}\n    vcpus: {VCPUS}\n    memory_mib: {MEMORY_MIB}\n    \
             mac: \"52:54:00:00:07:0{i}\"\n    address: 192.168.107.1{i}/24\n"
        ));
    }
    LabSpec::from_yaml(&yaml).unwrap()
}

/// vm-lab's netboot: seconds from `Lab::up_with` to every node ready (marker + agent).
async fn lab_round(nodes: usize) -> f64 {
    let opts = vm_lab::LabOptions {
        accel: Some(AccelChoice::Auto),
        ..vm_lab::LabOptions::default()
    };
    let t = Instant::now();
    let lab = Lab::up_with(lab_spec(nodes), opts)
        .await
        .expect("vm-lab up");
    let secs = t.elapsed().as_secs_f64();
    lab.down().await.expect("vm-lab down");
    secs
}

#[tokio::main]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_path_buf();
    let image = tokio::task::spawn_blocking(move || cloud_image(&dir))
        .await
        .unwrap();
    // Warm-up for vm-lab: builds (or finds) its netboot image so no timed run pays for it.
    lab_round(1).await;

    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Real)
        .backend(Backend::Lab)
        .lab_options(LabOptions {
            state_dir: Some(scratch.path().join("state")),
            memory_cap_mib: u64::from(MEMORY_MIB),
            shutdown_timeout: Duration::from_secs(30),
        })
        .start()
        .await
        .expect("the fake starts with the lab backend");
    let api = Api::new(&fake);
    let volid = fake
        .site("site-1")
        .unwrap()
        .control()
        .place_file(NODE, "local", "import/harness-cloud.qcow2", &image)
        .await
        .unwrap();

    let (fake1, _) = fake_round(&api, &volid, &[200]).await;
    let (fake3, each3) = fake_round(&api, &volid, &[201, 202, 203]).await;
    fake.shutdown().await;
    let lab1 = lab_round(1).await;
    let lab3 = lab_round(3).await;

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("guest_size: {VCPUS} vcpu {MEMORY_MIB} MiB");
    println!("host_cpus: {cpus} count");
    println!("host_loadavg_at_end: {}", load.trim());
    println!("fake_lab_start_to_agent_1_vm: {fake1:.2} s");
    println!("fake_lab_start_to_agent_3_vms_all: {fake3:.2} s");
    for (v, s) in [201, 202, 203].iter().zip(&each3) {
        println!("fake_lab_start_to_agent_3_vms_vm{v}: {s:.2} s");
    }
    println!("vm_lab_netboot_ready_1_node: {lab1:.2} s");
    println!("vm_lab_netboot_ready_3_nodes: {lab3:.2} s");
    println!("ratio_fake_over_vm_lab_1: {:.2} x", fake1 / lab1);
    println!("ratio_fake_over_vm_lab_3: {:.2} x", fake3 / lab3);
}
