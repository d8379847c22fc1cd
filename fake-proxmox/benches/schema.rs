//! Cost of the schema layer per request, in process: routing and parameter validation.
//!
//! `cargo bench -p fake-proxmox --bench schema` prints `name: value unit` lines.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use fake_proxmox::schema::{ApiSchema, PveVersion, RawValue, RouteMatch, parse_property_string};

fn per_op(name: &str, iters: u32, mut f: impl FnMut()) {
    // Warm up (lazy schema parsing, regex compilation, caches).
    for _ in 0..iters / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(iters);
    println!("{name}: {ns:.0} ns/op");
}

fn text(pairs: &[(&str, &str)]) -> BTreeMap<String, RawValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), RawValue::Text(v.to_string())))
        .collect()
}

fn main() {
    let s = ApiSchema::get(PveVersion::V9_1);
    per_op("schema_route_status_current", 200_000, || {
        let r = s.route("GET", black_box("/nodes/node07/qemu/1234/status/current"));
        assert!(matches!(r, RouteMatch::Found { .. }));
    });
    per_op("schema_route_unknown", 200_000, || {
        let r = s.route("POST", black_box("/nodes/node07/qemu/1234/importdisk"));
        assert!(matches!(r, RouteMatch::NotImplemented));
    });
    let status = text(&[("node", "node07"), ("vmid", "1234")]);
    per_op("schema_validate_status_current", 200_000, || {
        let r = s.validate(
            "GET",
            "/nodes/{node}/qemu/{vmid}/status/current",
            black_box(&status),
        );
        assert!(r.is_ok());
    });
    let create = text(&[
        ("node", "node07"),
        ("vmid", "1234"),
        ("name", "web-1"),
        ("memory", "2048"),
        ("cores", "2"),
        (
            "scsi0",
            "local-lvm:0,import-from=local:import/noble.qcow2,discard=on",
        ),
        ("ide2", "local-lvm:cloudinit"),
        ("net0", "virtio,bridge=vmbr0,firewall=1"),
        ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
        ("boot", "order=scsi0;ide2;net0"),
        ("onboot", "1"),
    ]);
    per_op("schema_validate_create_11_params", 50_000, || {
        let r = s.validate("POST", "/nodes/{node}/qemu", black_box(&create));
        assert!(r.is_ok());
    });
    per_op("schema_parse_property_string_net", 200_000, || {
        let r = parse_property_string(
            "net0",
            black_box("virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1,tag=20"),
        );
        assert!(r.is_ok());
    });
}
