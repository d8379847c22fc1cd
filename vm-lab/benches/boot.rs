//! Boot benchmark: a 3-node lab under TCG through the driver (time until every guest agent
//! answers, and until every node pings every other), next to the same three QEMU command lines
//! started plainly in a namespace with no driver (time until every serial console prints the
//! ready marker). Prints `name: value unit` lines.
//!
//!     cargo bench -p vm-lab --bench boot            # VM_LAB_BENCH_RUNS=3 by default
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use vm_lab::namespace::{Namespace, nsenter_argv};
use vm_lab::qemu_args::{self, Boot, NodeArgs, NodePaths, READY_MARKER};
use vm_lab::{Accel, AccelChoice, Lab, LabOptions, LabSpec};

const SPEC: &str = r#"
name: bench
accel: tcg
nodes:
  - name: node01
    mac: "52:54:00:00:01:01"
    address: 192.168.100.11/24
  - name: node02
    mac: "52:54:00:00:01:02"
    address: 192.168.100.12/24
  - name: node03
    mac: "52:54:00:00:01:03"
    address: 192.168.100.13/24
"#;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn driver_run(spec: &LabSpec) -> (f64, f64, vm_lab::image::Image) {
    let opts = LabOptions {
        accel: Some(AccelChoice::Tcg),
        ..LabOptions::default()
    };
    let t = Instant::now();
    let lab = Lab::up_with(spec.clone(), opts).await.expect("lab up");
    let ready = t.elapsed().as_secs_f64();
    lab.wait_full_mesh(Duration::from_secs(120))
        .await
        .expect("mesh");
    let mesh = t.elapsed().as_secs_f64();
    let image = lab.image().clone();
    lab.down().await.expect("down");
    (ready, mesh, image)
}

/// The same QEMU command lines, started without the driver; ready = every serial log shows
/// the marker.
async fn plain_run(spec: &LabSpec, image: &vm_lab::image::Image, dir: &Path) -> f64 {
    let _ = std::fs::remove_dir_all(dir);
    let ns = Namespace::create().expect("namespace");
    let link = spec.mcast_link("plain");
    let hosts = spec.hosts();
    let t = Instant::now();
    let mut children = Vec::new();
    let mut logs = Vec::new();
    for (i, n) in spec.nodes.iter().enumerate() {
        let paths = NodePaths::new(&dir.join(&n.name));
        std::fs::create_dir_all(&paths.dir).unwrap();
        let argv = qemu_args::node_argv(&NodeArgs {
            lab: "plain",
            node: n,
            accel: Accel::Tcg,
            paths: &paths,
            link,
            ssh_port: 2201 + i as u16,
            boot: Boot::Direct {
                kernel: image.kernel.clone(),
                initrd: image.initrd.clone(),
                cmdline: qemu_args::kernel_cmdline(n, &hosts).unwrap(),
            },
            with_disk: false,
        })
        .unwrap();
        let child = tokio::process::Command::new("nsenter")
            .args(nsenter_argv(ns.init_pid(), true, "qemu-system-x86_64"))
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        children.push(child);
        logs.push(paths.serial_log);
    }
    loop {
        let all = logs.iter().all(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .contains(READY_MARKER)
        });
        if all {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "plain boot timed out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    drop(children);
    drop(ns);
    let _ = std::fs::remove_dir_all(dir);
    secs
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("VM_LAB_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let spec = LabSpec::from_yaml(SPEC).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // Warm-up: builds (or finds) the image, so no run pays for it.
    let (_, _, image) = driver_run(&spec).await;
    let (mut ready, mut mesh, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        plain.push(plain_run(&spec, &image, &scratch.path().join(format!("plain{i}"))).await);
        let (r, m, _) = driver_run(&spec).await;
        ready.push(r);
        mesh.push(m);
    }
    let (ready, mesh, plain) = (median(ready), median(mesh), median(plain));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load1: f64 = load
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1.0);
    println!("runs: {runs} count");
    println!(
        "host_cpus: {} count",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!("host_load_1m_at_end: {load1:.1} load");
    println!("lab_ready_3_nodes_tcg: {ready:.2} s");
    println!("lab_full_mesh_3_nodes_tcg: {mesh:.2} s");
    println!("plain_qemu_ready_marker_3_nodes_tcg: {plain:.2} s");
    println!(
        "driver_overhead_to_ready: {:.1} %",
        (ready / plain - 1.0) * 100.0
    );
    println!(
        "initrd_size: {:.1} MiB",
        image.initrd_bytes as f64 / 1048576.0
    );
}
