//! Rehearse benchmark: wall time of `rehearse` on the seed's 30 manifests, and of generated
//! rollouts of 1,000 VMs over 50 nodes and 10,000 VMs over 500 nodes, with the server's and the
//! deployer's peak RSS. Prints `name: value unit` lines, and whether issue 32's floors for the
//! default mode hold: the 10,000-VM rollout under 20 s and at most 12 times the 1,000-VM one.
//! Run: `cargo bench --bench rehearse`.
//!
//! For the generated rollouts the fake runs in a child process (this binary re-executed with
//! `--serve-fake`), so its peak RSS and the deployer's are measured apart. The fake keeps its
//! world in memory only (no `--state-dir`): the figure is the API's, not the disk's.
//!
//! Knobs: `BENCH_ROLLOUTS=1000|10000` runs one rollout only; `BENCH_LISTING_MAX_AGE_MS=N` and
//! `BENCH_NO_STATE=1` (see `generated_rollout`); `BENCH_REQUESTS=1` has the fake print what it
//! was sent, by method and path shape, on stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
use provision_harness::config::{Provider, Site};
use provision_harness::deploy::{DeployOptions, Deployer};
use provision_harness::manifest::load_texts;
use provision_harness::pve::Credentials;
use provision_harness::pve::tls::{TlsMode, parse_fingerprint};
use provision_harness::rehearse::{RehearseOptions, rehearse};

const CLOCK: f64 = 2000.0;

/// One generated rollout: `sites` clusters of `nodes_per_site` nodes, `vms` VMs spread evenly.
#[derive(Clone, Copy)]
struct Shape {
    sites: usize,
    nodes_per_site: usize,
    vms: usize,
}

/// CPU seconds (user + system) a process has used, from `/proc/PID/stat`.
fn cpu_secs(pid: &str) -> f64 {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces) start after ')'.
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
}

fn peak_rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `shape.sites` clusters × `shape.nodes_per_site` nodes, each node with lvm-thin and the cloud
/// image as an import volume.
fn big_scenario(shape: Shape) -> String {
    let mut y = String::from("seed: 7\nsites:\n");
    for s in 0..shape.sites {
        let _ = write!(
            y,
            "  - name: bench-{s}\n    version: \"9.1\"\n    boot_delay_secs: 20\n    users:\n      - userid: root@pam\n        password: harness\n    tokens:\n      - tokenid: root@pam!bench\n        secret: 11111111-2222-3333-4444-555555555555\n        privsep: false\n    nodes:\n"
        );
        for n in 0..shape.nodes_per_site {
            let _ = write!(
                y,
                "      - name: pve-{s}-{n}\n        ip: 10.{s}.0.{}\n        cpu_model: bench\n        sockets: 2\n        cores: 32\n        threads: 64\n        memory_bytes: 549755813888\n        bridges:\n          - name: vmbr0\n            cidr: 10.{s}.0.{}/16\n            gateway: 10.{s}.0.1\n            ports: eno1\n            dhcp_start: 10.{s}.{}.10\n            dhcp_end: 10.{s}.{}.250\n        storages:\n          - name: local\n            type: dir\n            path: /var/lib/vz\n            content: [iso, import, snippets]\n            total_bytes: 107374182400\n            volumes:\n              - volname: import/ubuntu-22.04-cloud.qcow2\n                size_bytes: 2361393152\n                used_bytes: 691863552\n          - name: local-lvm\n            type: lvmthin\n            content: [images, rootdir]\n            total_bytes: 4398046511104\n",
                n + 10,
                n + 10,
                n + 1,
                n + 1
            );
        }
    }
    y
}

fn big_manifests(shape: Shape) -> Vec<(String, String)> {
    (0..shape.vms)
        .map(|i| {
            let s = i % shape.sites;
            let n = (i / shape.sites) % shape.nodes_per_site;
            let name = format!("bench-vm-{i:05}");
            let text = format!(
                "apiVersion: proxmox.sankofa.nexus/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    node: pve-{s}-{n}\n    name: {name}\n    cpu: 2\n    memory: 2Gi\n    disk: 10Gi\n    storage: local-lvm\n    network: vmbr0\n    image: local:import/ubuntu-22.04-cloud.qcow2\n    site: bench-{s}\n"
            );
            (format!("{name}.yaml"), text)
        })
        .collect()
}

/// Child mode: serve the scenario until stdin closes. Writes `fingerprint` and `sites` (one
/// `name url` line each) into `dir`, then `ready`.
fn serve_fake(scenario: &str, dir: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let fake = FakeProxmox::builder()
            .scenario(Scenario::from_yaml_file(scenario).unwrap())
            .tls(true)
            .auth_failure_delay(false)
            .clock(ClockMode::Scaled { factor: CLOCK })
            .start()
            .await
            .unwrap();
        let dir = Path::new(dir);
        std::fs::create_dir_all(dir).unwrap();
        // Every site of one server serves the same certificate.
        let fingerprint = fake.sites().next().unwrap().fingerprint().to_string();
        std::fs::write(dir.join("fingerprint"), fingerprint).unwrap();
        let sites: String = fake
            .sites()
            .map(|s| format!("{} {}\n", s.name(), s.url()))
            .collect();
        std::fs::write(dir.join("sites"), sites).unwrap();
        std::fs::write(dir.join("ready"), "1").unwrap();
        // Parent closes stdin when done.
        let _ = tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        })
        .await;
        // `BENCH_REQUESTS=1`: what the deployer sent, by method and path shape (from the
        // fake's journal, which keeps each site's last 20,000 requests).
        if std::env::var("BENCH_REQUESTS").as_deref() == Ok("1") {
            let mut counts = std::collections::BTreeMap::<String, usize>::new();
            for site in fake.sites() {
                for e in site.control().journal().await.unwrap_or_default() {
                    *counts
                        .entry(format!("{} {}", e.method, path_shape(&e.path)))
                        .or_default() += 1;
                }
            }
            for (k, n) in counts {
                eprintln!("requests: {n} {k}");
            }
        }
        fake.shutdown().await;
    });
}

/// A journal path with its node, VMID, UPID and storage parts generalised.
fn path_shape(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let after = |k: &str| i > 0 && parts[i - 1] == k;
            if p.starts_with("UPID:") {
                "{upid}"
            } else if after("nodes") {
                "{node}"
            } else if after("storage") && i > 2 {
                "{storage}"
            } else if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                "{vmid}"
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Issue 32's floors for the default mode (a listing per VM once made it quadratic): the
/// 10,000-VM rollout under 20 s, and at most 12 times the 1,000-VM one.
const FLOOR_10000_SECS: f64 = 20.0;
const FLOOR_RATIO: f64 = 12.0;

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// A generated rollout against a fake in a child process; prints its figures under `label`
/// and returns its wall time.
fn generated_rollout(rt: &tokio::runtime::Runtime, shape: Shape, label: &str) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let scenario_path = dir.path().join("scenario.yaml");
    std::fs::write(&scenario_path, big_scenario(shape)).unwrap();
    let info_dir = dir.path().join("fake");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--serve-fake")
        .arg(&scenario_path)
        .arg(&info_dir)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = info_dir.join("ready");
    let started = Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "fake did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let fingerprint = std::fs::read_to_string(info_dir.join("fingerprint")).unwrap();
    let pin = parse_fingerprint(fingerprint.trim()).unwrap();
    let sites: Vec<Site> = std::fs::read_to_string(info_dir.join("sites"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, url)| Site {
            name: name.to_string(),
            endpoint: url.to_string(),
            node: None,
            tls: TlsMode::Pinned(pin),
            snippets: None,
        })
        .collect();
    let provider = Provider {
        sites,
        credentials: Credentials::Token {
            token_id: "root@pam!bench".into(),
            secret: "11111111-2222-3333-4444-555555555555".into(),
        },
    };
    let files = big_manifests(shape);
    let set = load_texts(files.iter().map(|(p, t)| (p.as_str(), t.as_str())));
    let mut deploy: DeployOptions = RehearseOptions::default().deploy.clone();
    deploy.concurrency = 64;
    // `BENCH_LISTING_MAX_AGE_MS=N`: VMs with nothing recorded adopt from a site listing up to
    // N ms old (the deployer's `--listing-max-age`); 0 (the default) lists once per VM.
    let max_age: u64 = std::env::var("BENCH_LISTING_MAX_AGE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    deploy.pipeline.listing_max_age = Duration::from_millis(max_age);
    println!("{label}_listing_max_age: {max_age} ms");
    // `BENCH_NO_STATE=1`: no state file (to see what keeping it costs).
    if std::env::var("BENCH_NO_STATE").as_deref() != Ok("1") {
        deploy.state_path = Some(dir.path().join("state.json"));
    }
    let (fake_cpu0, own_cpu0) = (cpu_secs(&child.id().to_string()), cpu_secs("self"));
    let deployer = Deployer::new(provider, deploy).unwrap();
    let t = Instant::now();
    let result = rt.block_on(deployer.deploy(&set)).unwrap();
    let wall = t.elapsed();
    println!("{label}_wall: {} ms", wall.as_millis());
    println!(
        "{label}_fake_cpu: {:.1} s",
        cpu_secs(&child.id().to_string()) - fake_cpu0
    );
    println!("{label}_deployer_cpu: {:.1} s", cpu_secs("self") - own_cpu0);
    println!("{label}_ready: {} vms", result.summary.ready);
    println!("{label}_failed: {} vms", result.summary.failed);
    println!(
        "{label}_fake_peak_rss: {} KiB",
        peak_rss_kib(&child.id().to_string())
    );
    println!(
        "{label}_deployer_peak_rss: {} KiB (this process so far)",
        peak_rss_kib("self")
    );
    drop(child.stdin.take());
    let _ = child.wait();
    wall
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve-fake") {
        serve_fake(&args[2], &args[3]);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    // 1. Generated rollouts, the fake in a child process; first, so this process's peak RSS is
    //    the deployer's alone (the second's includes the first's high-water mark).
    //    `BENCH_ROLLOUTS=1000` or `=10000` runs only that one.
    let only = std::env::var("BENCH_ROLLOUTS").ok();
    let small = (only.as_deref() != Some("10000")).then(|| {
        generated_rollout(
            &rt,
            Shape {
                sites: 5,
                nodes_per_site: 10,
                vms: 1000,
            },
            "rollout_1000_vms_50_nodes",
        )
    });
    let large = (only.as_deref() != Some("1000")).then(|| {
        generated_rollout(
            &rt,
            Shape {
                sites: 10,
                nodes_per_site: 50,
                vms: 10_000,
            },
            "rollout_10000_vms_500_nodes",
        )
    });
    // The floors are the default mode's (a listing per VM); `BENCH_LISTING_MAX_AGE_MS` runs
    // print them too, for comparison.
    if let Some(large) = large {
        let secs = large.as_secs_f64();
        println!(
            "rollout_10000_floor: {} (< {FLOOR_10000_SECS} s, took {secs:.1} s)",
            met(secs < FLOOR_10000_SECS)
        );
        if let Some(small) = small {
            let ratio = secs / small.as_secs_f64().max(1e-3);
            println!("rollout_10000_vs_1000: {ratio:.1} x");
            println!(
                "rollout_scaling_floor: {} (<= {FLOOR_RATIO} x)",
                met(ratio <= FLOOR_RATIO)
            );
        }
    }

    // 2. rehearse on the seed's 30 manifests, in-process (fake included), as the CLI runs it.
    let opts = RehearseOptions::default();
    let t = Instant::now();
    let seed = rt.block_on(rehearse(None, false, &opts)).unwrap();
    println!("rehearse_seed_30_wall: {} ms", t.elapsed().as_millis());
    let t = Instant::now();
    let full = rt.block_on(rehearse(None, true, &opts)).unwrap();
    println!(
        "rehearse_seed_and_fixed_60_wall: {} ms",
        t.elapsed().as_millis()
    );
    println!(
        "rehearse_fixed_ready: {} vms",
        full.runs[1].deploy.summary.ready
    );
    println!(
        "rehearse_seed_ready: {} vms",
        seed.runs[0].deploy.summary.ready
    );
    println!(
        "process_peak_rss_after_rehearse: {} KiB (deployer + in-process fake)",
        peak_rss_kib("self")
    );
}
