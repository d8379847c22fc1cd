#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

const CONFIG: &str = "/nodes/{node}/qemu/{vmid}/config";
const CREATE: &str = "/nodes/{node}/qemu";

fn text(pairs: &[(&str, &str)]) -> BTreeMap<String, RawValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), RawValue::Text(v.to_string())))
        .collect()
}

fn errors(v: PveVersion, method: &str, template: &str, pairs: &[(&str, &str)]) -> ParamErrors {
    ApiSchema::get(v)
        .validate(method, template, &text(pairs))
        .unwrap_err()
}

#[test]
fn every_version_loads_and_every_pattern_compiles() {
    for v in PveVersion::ALL {
        let s = ApiSchema::get(v);
        assert!(s.templates().count() > 100, "{v}");
        for t in s.templates() {
            for m in s.methods(t) {
                let info = s.method(m, t).unwrap();
                for (name, p) in &info.parameters {
                    assert_compiles(p, &format!("{v} {m} {t} {name}"));
                }
            }
        }
    }
}

fn assert_compiles(p: &Prop, at: &str) {
    if p.pattern.is_some() {
        assert!(p.regex().is_some(), "pattern does not compile at {at}");
    }
    if let Some(PropFormat::Hash(h)) = &p.format {
        for (k, sub) in h {
            assert_compiles(sub, &format!("{at}.{k}"));
        }
    }
}

#[test]
fn routes_literal_before_param() {
    let s = ApiSchema::get(PveVersion::V9_1);
    match s.route("GET", "/nodes/pve/qemu/100/status/current") {
        RouteMatch::Found {
            template,
            path_params,
        } => {
            assert_eq!(template, "/nodes/{node}/qemu/{vmid}/status/current");
            assert_eq!(path_params["node"], "pve");
            assert_eq!(path_params["vmid"], "100");
        }
        other => panic!("{other:?}"),
    }
    // Trailing and doubled slashes are skipped like PVE's find_handler does.
    assert!(matches!(
        s.route("GET", "//nodes/pve/qemu/"),
        RouteMatch::Found {
            template: "/nodes/{node}/qemu",
            ..
        }
    ));
    // importdisk exists in no PVE version.
    assert_eq!(
        s.route("POST", "/nodes/pve/qemu/100/importdisk"),
        RouteMatch::NotImplemented
    );
    // A known path with a method it does not have.
    assert_eq!(s.route("DELETE", "/version"), RouteMatch::NotImplemented);
}

#[test]
fn find_template_ignores_the_method() {
    let s = ApiSchema::get(PveVersion::V9_1);
    let (t, p) = s.find_template("/nodes/n1/qemu/100/config/").unwrap();
    assert_eq!(t, "/nodes/{node}/qemu/{vmid}/config");
    assert_eq!(p["node"], "n1");
    assert!(s.find_template("/nodes/n1/qemu/100/importdisk").is_none());
    assert!(s.find_template("/nodes/n1/nonsense").is_none());
    // The root is not a template.
    assert!(s.find_template("/").is_none());
}

#[test]
fn volume_path_param_takes_the_rest_of_the_path() {
    let s = ApiSchema::get(PveVersion::V9_1);
    match s.route(
        "GET",
        "/nodes/pve/storage/local/content/local:iso/ubuntu.img",
    ) {
        RouteMatch::Found {
            template,
            path_params,
        } => {
            assert_eq!(template, "/nodes/{node}/storage/{storage}/content/{volume}");
            assert_eq!(path_params["volume"], "local:iso/ubuntu.img");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn typed_values_come_back_as_json_types() {
    let s = ApiSchema::get(PveVersion::V9_1);
    let ok = s
        .validate(
            "POST",
            CREATE,
            &text(&[
                ("node", "pve"),
                ("vmid", "100"),
                ("cores", "+2"),
                ("onboot", "1"),
                ("cpulimit", "1.5"),
                ("name", "web-1"),
                ("net0", "virtio,bridge=vmbr0,firewall=1"),
                ("scsi0", "local-lvm:32,import-from=local:import/noble.qcow2"),
                ("memory", "2048"),
            ]),
        )
        .unwrap();
    assert_eq!(ok["vmid"], json!(100));
    assert_eq!(ok["cores"], json!(2));
    assert_eq!(ok["onboot"], json!(1));
    assert_eq!(ok["cpulimit"], json!(1.5));
    assert_eq!(ok["node"], json!("pve"));
    assert_eq!(ok["memory"], json!("2048"));
    assert_eq!(ok["net0"], json!("virtio,bridge=vmbr0,firewall=1"));
}

#[test]
fn form_booleans_are_only_0_or_1_but_json_accepts_true() {
    let e = errors(
        PveVersion::V9_1,
        "POST",
        CREATE,
        &[("node", "pve"), ("vmid", "100"), ("onboot", "true")],
    );
    assert_eq!(e["onboot"], "type check ('boolean') failed - got 'true'");

    let mut p = text(&[("node", "pve"), ("vmid", "100")]);
    p.insert("onboot".into(), RawValue::Json(Value::Bool(true)));
    p.insert("cores".into(), RawValue::Json(json!(4)));
    let ok = ApiSchema::get(PveVersion::V9_1)
        .validate("POST", CREATE, &p)
        .unwrap();
    assert_eq!(ok["onboot"], json!(1));
    assert_eq!(ok["cores"], json!(4));
}

#[test]
fn json_values_of_the_wrong_shape_are_refused() {
    let mut p = text(&[("node", "pve"), ("vmid", "100")]);
    p.insert("cores".into(), RawValue::Json(json!([1])));
    p.insert("name".into(), RawValue::Json(json!({"a": 1})));
    p.insert("sockets".into(), RawValue::Json(json!(1.5)));
    let e = ApiSchema::get(PveVersion::V9_1)
        .validate("POST", CREATE, &p)
        .unwrap_err();
    assert_eq!(e["cores"], "type check ('integer') failed - got ARRAY");
    assert_eq!(e["name"], "type check ('string') failed - got HASH");
    assert_eq!(e["sockets"], "type check ('integer') failed - got '1.5'");
}

#[test]
fn pve_messages_for_common_mistakes() {
    let e = errors(
        PveVersion::V9_1,
        "POST",
        CREATE,
        &[
            ("node", "pve"),
            ("vmid", "99"),
            ("cores", "two"),
            ("memory", "8"),
            ("sockets", "0"),
            ("ostype", "linux"),
            ("bogus", "1"),
        ],
    );
    // The format check runs before the range check (JSONSchema.pm check_prop).
    assert_eq!(
        e["vmid"],
        "invalid format - value does not look like a valid VM ID\n"
    );
    assert_eq!(e["cores"], "type check ('integer') failed - got 'two'");
    assert_eq!(e["sockets"], "value must have a minimum value of 1");
    assert_eq!(
        e["memory"],
        "invalid format - format error\nmemory.current: value must have a minimum value of 16\n"
    );
    assert_eq!(
        e["ostype"],
        "value 'linux' does not have a value in the enumeration \
         'other, wxp, w2k, w2k3, w2k8, wvista, win7, win8, win10, win11, l24, l26, solaris'"
    );
    assert_eq!(
        e["bogus"],
        "property is not defined in schema and the schema does not allow additional properties"
    );

    let e = errors(PveVersion::V9_1, "POST", CREATE, &[("node", "pve")]);
    assert_eq!(e["vmid"], "property is missing and it is not optional");
}

#[test]
fn indexed_options_respect_their_ranges() {
    let base = [("node", "pve"), ("vmid", "100")];
    let ok = |k: &str, v: &str| {
        let mut p = base.to_vec();
        p.push((k, v));
        ApiSchema::get(PveVersion::V9_1)
            .validate("POST", CREATE, &text(&p))
            .is_ok()
    };
    assert!(ok("net31", "virtio,bridge=vmbr0"));
    assert!(!ok("net32", "virtio,bridge=vmbr0"));
    assert!(ok("scsi30", "local-lvm:1"));
    assert!(!ok("scsi31", "local-lvm:1"));
    assert!(ok("virtio15", "local-lvm:1"));
    assert!(!ok("virtio16", "local-lvm:1"));
    assert!(ok("ide3", "none,media=cdrom"));
    assert!(!ok("ide4", "none,media=cdrom"));
    assert!(ok("sata5", "local-lvm:1"));
    assert!(!ok("sata6", "local-lvm:1"));
    assert!(ok("ipconfig31", "ip=dhcp"));
    assert!(!ok("ipconfig32", "ip=dhcp"));
    assert!(ok("serial3", "socket"));
    assert!(!ok("serial4", "socket"));
    assert!(!ok("net01", "virtio,bridge=vmbr0"));
}

#[test]
fn property_string_errors_name_the_sub_property() {
    let e = errors(
        PveVersion::V9_1,
        "POST",
        CREATE,
        &[
            ("node", "pve"),
            ("vmid", "100"),
            ("net0", "virtio,bridge=vmbr0,tag=5000"),
            ("net1", "bridge=vmbr0"),
            ("net2", "virtio,colour=blue"),
            ("ipconfig0", "ip=10.0.0.5,gw=10.0.0.1"),
            ("scsi0", "local-lvm:32,format=qcow3"),
        ],
    );
    assert_eq!(
        e["net0"],
        "invalid format - format error\nnet0.tag: value must have a maximum value of 4094\n"
    );
    assert_eq!(
        e["net1"],
        "invalid format - format error\nnet1.model: property is missing and it is not optional\n"
    );
    assert_eq!(
        e["net2"],
        "invalid format - invalid key in comma-separated list property: colour\n"
    );
    assert_eq!(
        e["ipconfig0"],
        "invalid format - format error\nipconfig0.ip: invalid format - value does not look like \
         a valid ipv4 network configuration\n\n"
    );
    assert!(e["scsi0"].starts_with("invalid format - format error\nscsi0.format: value 'qcow3'"));
}

#[test]
fn import_from_is_unknown_before_7_2() {
    let p = [
        ("node", "pve"),
        ("vmid", "100"),
        ("scsi0", "local-lvm:0,import-from=local:import/noble.qcow2"),
    ];
    assert!(
        ApiSchema::get(PveVersion::V8_4)
            .validate("POST", CREATE, &text(&p))
            .is_ok()
    );
    let e = errors(PveVersion::V7_1, "POST", CREATE, &p);
    assert_eq!(
        e["scsi0"],
        "invalid format - invalid key in comma-separated list property: import-from\n"
    );
}

#[test]
fn memory_is_an_integer_before_8_1() {
    let p = [("node", "pve"), ("vmid", "100"), ("memory", "2048")];
    let ok = ApiSchema::get(PveVersion::V7_1)
        .validate("POST", CREATE, &text(&p))
        .unwrap();
    assert_eq!(ok["memory"], json!(2048));
    let ok = ApiSchema::get(PveVersion::V9_1)
        .validate("POST", CREATE, &text(&p))
        .unwrap();
    assert_eq!(ok["memory"], json!("2048"));

    let p = [("node", "pve"), ("vmid", "100"), ("memory", "current=2048")];
    let e = errors(PveVersion::V7_1, "POST", CREATE, &p);
    assert_eq!(
        e["memory"],
        "type check ('integer') failed - got 'current=2048'"
    );
    let e = errors(
        PveVersion::V7_1,
        "POST",
        CREATE,
        &[("node", "pve"), ("vmid", "100"), ("memory", "8")],
    );
    assert_eq!(e["memory"], "value must have a minimum value of 16");
}

#[test]
fn version_differences_show() {
    let p = [("node", "pve"), ("vmid", "100"), ("allow-ksm", "1")];
    assert!(
        ApiSchema::get(PveVersion::V9_1)
            .validate("POST", CREATE, &text(&p))
            .is_ok()
    );
    let e = errors(PveVersion::V8_4, "POST", CREATE, &p);
    assert!(e["allow-ksm"].starts_with("property is not defined"));
}

#[test]
fn config_delete_list_and_digest() {
    let s = ApiSchema::get(PveVersion::V9_1);
    assert!(
        s.validate(
            "PUT",
            CONFIG,
            &text(&[("node", "pve"), ("vmid", "100"), ("delete", "net1,scsi2")]),
        )
        .is_ok()
    );
    let e = errors(
        PveVersion::V9_1,
        "PUT",
        CONFIG,
        &[("node", "pve"), ("vmid", "100"), ("delete", "net1,-x")],
    );
    assert_eq!(
        e["delete"],
        "invalid format - invalid configuration ID '-x'\n"
    );
}

#[test]
fn parse_property_string_resolves_aliases_and_booleans() {
    let net =
        parse_property_string("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=on").unwrap();
    assert_eq!(net["model"], "virtio");
    assert_eq!(net["macaddr"], "BC:24:11:00:00:01");
    assert_eq!(net["bridge"], "vmbr0");
    assert_eq!(net["firewall"], "1");

    let disk = parse_property_string("scsi0", "local-lvm:vm-100-disk-0,size=32G,ssd=yes").unwrap();
    assert_eq!(disk["file"], "local-lvm:vm-100-disk-0");
    assert_eq!(disk["size"], "32G");
    assert_eq!(disk["ssd"], "1");

    let ip = parse_property_string("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1").unwrap();
    assert_eq!(ip["ip"], "10.0.0.5/24");
    assert_eq!(ip["gw"], "10.0.0.1");

    // qemu-server: `gw` requires `ip`, `gw6` requires `ip6`.
    let e = parse_property_string("ipconfig0", "gw=10.0.0.1").unwrap_err();
    assert_eq!(
        e["ipconfig0.ip"],
        "missing property - 'ipconfig0.gw' requires this property"
    );

    let ip = parse_property_string("pve-qm-ipconfig", "ip=dhcp").unwrap();
    assert_eq!(ip["ip"], "dhcp");

    let e = parse_property_string("net0", "virtio,virtio").unwrap_err();
    assert_eq!(
        e["net0"],
        "duplicate key in comma-separated list property: model\n"
    );
    let e = parse_property_string("net0", "e1000=zz,bridge=vmbr0").unwrap_err();
    assert_eq!(
        e["net0.macaddr"],
        "invalid format - value does not look like a valid unicast MAC address\n"
    );
    assert!(parse_property_string("nope", "x").is_err());
}

#[test]
fn versions_parse_and_serialize_by_release() {
    for v in PveVersion::ALL {
        assert_eq!(v.as_str().parse::<PveVersion>().unwrap(), v);
        assert_eq!(serde_json::to_value(v).unwrap(), json!(v.as_str()));
    }
    assert!("6.4".parse::<PveVersion>().is_err());
}

#[test]
fn realistic_provider_requests_pass() {
    // The shapes Terraform providers and cloud-init flows send (bpg, Telmate, the seed).
    let create = [
        ("node", "pve"),
        ("vmid", "9001"),
        ("name", "k8s-worker-01.example.org"),
        ("description", "managed by terraform\nsecond line"),
        ("tags", "k8s;worker;prod"),
        ("ostype", "l26"),
        ("machine", "q35"),
        ("bios", "ovmf"),
        ("efidisk0", "local-lvm:1,efitype=4m,pre-enrolled-keys=1"),
        ("tpmstate0", "local-lvm:1,version=v2.0"),
        ("cpu", "x86-64-v2-AES,flags=+aes"),
        ("cores", "4"),
        ("sockets", "1"),
        ("numa", "0"),
        ("memory", "8192"),
        ("balloon", "2048"),
        ("agent", "enabled=1,fstrim_cloned_disks=1"),
        ("scsihw", "virtio-scsi-single"),
        (
            "scsi0",
            "local-lvm:0,import-from=local:import/noble.qcow2,iothread=1,discard=on,ssd=1",
        ),
        ("scsi1", "local-lvm:100,cache=writeback,backup=0"),
        ("virtio0", "local-lvm:32,aio=io_uring"),
        ("ide2", "local-lvm:cloudinit"),
        (
            "net0",
            "virtio=BC:24:11:2A:3B:4C,bridge=vmbr0,firewall=0,tag=20,mtu=1",
        ),
        (
            "net1",
            "model=e1000,bridge=vmbr1,link_down=1,rate=12.5,queues=4",
        ),
        ("ipconfig0", "ip=10.0.20.11/24,gw=10.0.20.1,ip6=auto"),
        ("ipconfig1", "ip=dhcp"),
        ("ciuser", "ubuntu"),
        ("cipassword", "s3cret"),
        ("citype", "nocloud"),
        ("sshkeys", "ssh-ed25519%20AAAAC3Nza%2B%2F%3D%20me%40host%0A"),
        ("nameserver", "1.1.1.1 9.9.9.9"),
        ("searchdomain", "example.org"),
        ("boot", "order=scsi0;ide2;net0"),
        ("serial0", "socket"),
        ("vga", "serial0"),
        ("onboot", "1"),
        ("startup", "order=2,up=30"),
        ("hotplug", "network,disk,usb"),
        ("protection", "0"),
        ("start", "0"),
        ("pool", "k8s"),
        ("smbios1", "uuid=5b0f7b5e-0a5b-4f1c-9d7e-0c4f3a2b1c0d"),
        ("rng0", "source=/dev/urandom,max_bytes=1024,period=1000"),
        ("watchdog", "model=i6300esb,action=reset"),
        ("kvm", "1"),
    ];
    let r = ApiSchema::get(PveVersion::V9_1).validate("POST", CREATE, &text(&create));
    assert!(r.is_ok(), "{r:?}");

    let update = [
        ("node", "pve"),
        ("vmid", "9001"),
        ("delete", "net1,ipconfig1,unused0"),
        ("digest", "0123456789abcdef0123456789abcdef01234567"),
        ("cdrom", "none"),
        (
            "cicustom",
            "user=local:snippets/user.yaml,network=local:snippets/net.yaml",
        ),
    ];
    let r = ApiSchema::get(PveVersion::V9_1).validate("PUT", CONFIG, &text(&update));
    assert!(r.is_ok(), "{r:?}");

    let resize = [
        ("node", "pve"),
        ("vmid", "9001"),
        ("disk", "scsi0"),
        ("size", "+20G"),
    ];
    let r = ApiSchema::get(PveVersion::V9_1).validate(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/resize",
        &text(&resize),
    );
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn an_array_parameter_from_a_form_is_one_item_per_repeated_key() {
    let s = ApiSchema::get(PveVersion::V9_1);
    let exec = "/nodes/{node}/qemu/{vmid}/agent/exec";
    let base = [("node", "pve"), ("vmid", "100")];
    let mut one = base.to_vec();
    one.push(("command", "uptime"));
    let ok = s.validate("POST", exec, &text(&one)).unwrap();
    assert_eq!(ok["command"], serde_json::json!(["uptime"]));
    let mut many = base.to_vec();
    many.push(("command", "sh\0-c\0echo hi"));
    let ok = s.validate("POST", exec, &text(&many)).unwrap();
    assert_eq!(ok["command"], serde_json::json!(["sh", "-c", "echo hi"]));
}
