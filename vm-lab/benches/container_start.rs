//! Container start benchmark: from `GuestHost::start_container` to the container having its
//! address (seen through `Container::interfaces`), for a static address and for DHCP from the
//! bridge's pool; also until `start_container` returns, until init prints `CT-READY`, and
//! how long `shutdown` (SIGPWR) takes. Prints `name: value unit` lines (medians, with min and
//! max).
//!
//!     cargo bench -p vm-lab --bench container_start     # VM_LAB_BENCH_RUNS=5 by default
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use vm_lab::AccelChoice;
use vm_lab::containers::{Container, ContainerNic, ContainerSpec};
use vm_lab::guests::{BridgeSpec, DhcpPool, GuestHost, HostOptions};
use vm_lab::image::template::{self, TemplateRequest};

#[derive(Default)]
struct Figures {
    returned: Vec<f64>,
    address: Vec<f64>,
    ready: Vec<f64>,
    shutdown: Vec<f64>,
}

fn stats(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    format!(
        "{:.3} s (min {:.3}, max {:.3}, n={})",
        s[s.len() / 2],
        s[0],
        s[s.len() - 1],
        s.len()
    )
}

fn has_v4(c: &Container) -> bool {
    c.interfaces().unwrap().iter().any(|i| {
        i.name == "eth0"
            && i.addrs
                .iter()
                .any(|(a, _)| matches!(a, IpAddr::V4(v) if !v.is_loopback()))
    })
}

fn run(h: &GuestHost, root: &Path, name: &str, bridge: &str, f: &mut Figures) {
    let mut spec = ContainerSpec::new(name, root);
    let mut nic = ContainerNic::new("eth0", bridge);
    nic.mac = Some("BC:24:11:00:09:01".into());
    spec.nics = vec![nic];
    let t = Instant::now();
    let c = h.start_container(spec).expect("start");
    f.returned.push(t.elapsed().as_secs_f64());
    while !has_v4(&c) {
        assert!(t.elapsed() < Duration::from_secs(60), "no address");
        std::thread::sleep(Duration::from_millis(5));
    }
    f.address.push(t.elapsed().as_secs_f64());
    assert!(c.wait_console("CT-READY", Duration::from_secs(60)));
    f.ready.push(t.elapsed().as_secs_f64());
    let t = Instant::now();
    assert!(c.shutdown(Duration::from_secs(20)).unwrap());
    f.shutdown.push(t.elapsed().as_secs_f64());
    drop(c);
    h.remove_container(name).unwrap();
}

fn main() {
    let runs: usize = std::env::var("VM_LAB_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let cache = vm_lab::image::default_cache_dir();
    let t = Instant::now();
    let tpl = template::build(&cache, &TemplateRequest::default()).expect("template");
    println!(
        "template: {:.3} s ({} bytes; cached after the first build)",
        t.elapsed().as_secs_f64(),
        tpl.bytes
    );
    let dir = tempfile::tempdir().unwrap();
    let h = GuestHost::new(HostOptions {
        accel: AccelChoice::Tcg,
        ..Default::default()
    })
    .expect("host");
    let ip = |s: &str| -> Ipv4Addr { s.parse().unwrap() };
    h.ensure_bridge(&BridgeSpec {
        name: "vmbr0".into(),
        addresses: vec![(ip("10.40.0.1"), 24)],
        dhcp: Some(DhcpPool {
            start: ip("10.40.0.100"),
            end: ip("10.40.0.150"),
            router: Some(ip("10.40.0.1")),
        }),
    })
    .unwrap();
    for (mode, interfaces) in [
        (
            "static",
            "auto eth0\niface eth0 inet static\n\taddress 10.40.0.5/24\n\tgateway 10.40.0.1\n",
        ),
        ("dhcp", "auto eth0\niface eth0 inet dhcp\n"),
    ] {
        let root = dir.path().join(mode);
        let t = Instant::now();
        template::unpack(&tpl.path, &root).unwrap();
        println!("unpack_template: {:.3} s", t.elapsed().as_secs_f64());
        std::fs::write(root.join("etc/network/interfaces"), interfaces).unwrap();
        std::fs::write(root.join("etc/hostname"), format!("bench-{mode}\n")).unwrap();
        let mut f = Figures::default();
        for i in 0..runs {
            run(&h, &root, &format!("bench-{mode}-{i}"), "vmbr0", &mut f);
        }
        println!("{mode}_start_returned: {}", stats(&f.returned));
        println!("{mode}_start_to_address: {}", stats(&f.address));
        println!("{mode}_start_to_ct_ready: {}", stats(&f.ready));
        println!("{mode}_shutdown: {}", stats(&f.shutdown));
    }
}
