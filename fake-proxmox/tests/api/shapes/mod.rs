//! Response shapes: every implemented GET whose PVE 9.1 schema declares specific `returns`
//! (an object with properties, or an array of such objects) is called on a populated fake,
//! and every returned key is checked against the schema: its JSON type, its enum, no `null`,
//! and every non-optional key present. Typed clients (Go, Rust) break on any of these.
//!
//! The declared shapes are `schema/returns-9.1.json` (`examples/gen-returns.rs`), the checker
//! `common::mismatches`. Where the schema and real PVE disagree, real PVE wins: such keys are
//! listed in [`REAL_PVE_DIFFERS`] with the source that shows what PVE sends.

use std::collections::BTreeSet;

use fake_proxmox::{ClockMode, PveVersion, Scenario};

use crate::common::*;

mod admin;

pub(crate) const NODE: &str = "ml110-01";

/// `(template, key path, what PVE sends)` where real PVE sends what the declared schema does
/// not allow: `null`, a `number` where a string is declared, or a value outside its `enum`. Key paths leave out list
/// indexes (`value` is the `value` of every item).
const REAL_PVE_DIFFERS: &[(&str, &str, &str)] = &[
    (
        "/nodes/{node}/qemu/{vmid}/status/current",
        "clipboard",
        // qemu-server PVE/API2/Qemu.pm `vm_status`: `$status->{clipboard} = $vga->{clipboard}`
        // copies an unset clipboard of a configured `vga`: the key is there, its value null.
        "null",
    ),
    (
        "/nodes/{node}/qemu/{vmid}/pending",
        "value",
        // Declared a string, but qemu-server PVE/QemuServer.pm `parse_vm_config` runs every
        // value through `check_type`, which returns `int($1)` for integers and 1/0 for
        // booleans; GuestHelpers `config_with_pending_array` copies those numbers.
        "number",
    ),
    ("/nodes/{node}/qemu/{vmid}/pending", "pending", "number"),
    (
        "/nodes/{node}/lxc/{vmid}/pending",
        "value",
        // pve-container src/PVE/LXC/Config.pm `parse_pct_config` types each value with its
        // `check_type` (integers and booleans as numbers), as qemu-server does.
        "number",
    ),
    ("/nodes/{node}/lxc/{vmid}/pending", "pending", "number"),
    (
        "/access/users",
        "tokens",
        // pve-access-control API2/User.pm `$extract_user_data` copies `$data->{tokens}`,
        // undefined for a user without tokens: with `full=1` the key is there, its value null.
        "null",
    ),
    // The same copy for `GET /access/users/{userid}`.
    ("/access/users/{userid}", "tokens", "null"),
    (
        "/nodes/{node}/storage/{storage}/import-metadata",
        "source",
        // Declared an enum of `esxi` only, but pve-storage DirPlugin.pm
        // `get_import_metadata` answers `source => $volname` for an OVA/OVF.
        "enum",
    ),
];

/// Implemented GETs with specific returns that the test does not call, and why.
const NOT_CALLED: &[(&str, &str)] = &[
    (
        "/nodes/{node}/storage/{storage}/file-restore/list",
        "no PBS storage is modelled: always PVE's refusal of a non-PBS storage",
    ),
    ("/access/tfa", "no TFA is modelled: always an empty list"),
    (
        "/access/tfa/{userid}",
        "no TFA is modelled: always an empty list",
    ),
];

/// A site with what each GET can show: a running VM (agent, disks, cloud-init, NIC, serial,
/// qxl display, firewall rule/alias/ipset, an agent exec and file) and a stopped one with a
/// balloon minimum and a snapshot.
async fn populated(version: PveVersion) -> (Fake, Api, Vars) {
    // The default scenario with site-1 (its first site) on `version`.
    let yaml = Scenario::default_yaml().replacen(
        "version: \"9.1\"",
        &format!("version: \"{version}\""),
        1,
    );
    let scenario = Scenario::from_yaml_str(&yaml).expect("the scenario parses");
    let f = start_with(scenario, ClockMode::Stepped).await;
    let api = f.api("site-1");
    let release = api.get("/version").await.data()["release"].clone();
    assert_eq!(release, version.as_str());
    let created = create_vm(
        &f,
        &api,
        NODE,
        &[
            ("vmid", "100"),
            ("name", "web1"),
            ("cores", "2"),
            ("memory", "2048"),
            ("agent", "1"),
            ("net0", "virtio,bridge=vmbr0,firewall=1"),
            ("scsi0", "local-lvm:4"),
            ("ide2", "local-lvm:cloudinit"),
            ("ciuser", "admin"),
            ("ipconfig0", "ip=dhcp"),
            ("serial0", "socket"),
            ("vga", "qxl"),
            ("tags", "prod"),
        ],
    )
    .await;
    let upid = created["upid"].as_str().unwrap().to_string();
    let start = api.post("/nodes/ml110-01/qemu/100/status/start", &[]).await;
    wait_task(&f, &api, NODE, start.data().as_str().unwrap()).await;
    f.advance(30.0).await;
    create_vm(
        &f,
        &api,
        NODE,
        &[
            ("vmid", "101"),
            ("name", "db1"),
            ("memory", "4096"),
            ("balloon", "1024"),
            ("scsi0", "local-lvm:2"),
        ],
    )
    .await;
    let snap = api
        .post(
            "/nodes/ml110-01/qemu/101/snapshot",
            &[("snapname", "before")],
        )
        .await;
    assert_eq!(snap.status, 200, "{}", snap.body);
    wait_task(&f, &api, NODE, snap.data().as_str().unwrap()).await;

    let fw = "/nodes/ml110-01/qemu/100/firewall";
    for (path, form) in [
        (
            format!("{fw}/rules"),
            vec![
                ("type", "in"),
                ("action", "ACCEPT"),
                ("dport", "22"),
                ("proto", "tcp"),
            ],
        ),
        (
            format!("{fw}/aliases"),
            vec![("name", "gateway"), ("cidr", "192.168.11.1")],
        ),
        (format!("{fw}/ipset"), vec![("name", "admins")]),
        (format!("{fw}/ipset/admins"), vec![("cidr", "10.0.0.0/24")]),
    ] {
        let r = api.post(&path, &form).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }

    let agent = "/nodes/ml110-01/qemu/100/agent";
    let exec = api
        .post(&format!("{agent}/exec"), &[("command", "true")])
        .await;
    assert_eq!(exec.status, 200, "{}", exec.body);
    let pid = exec.data()["pid"].to_string();
    f.advance(1.0).await;
    let write = api
        .post(
            &format!("{agent}/file-write"),
            &[("file", "/tmp/motd"), ("content", "hello\n")],
        )
        .await;
    assert_eq!(write.status, 200, "{}", write.body);

    admin::populate(&api).await;

    // A running container with a snapshot (every release's dump is its whole API).
    {
        let ct = "/nodes/ml110-01/lxc";
        for (method, path, form) in [
            (
                "POST",
                ct.to_string(),
                vec![
                    ("vmid", "200"),
                    (
                        "ostemplate",
                        "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                    ),
                    ("storage", "local-lvm"),
                    ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
                    ("tags", "web"),
                ],
            ),
            (
                "POST",
                format!("{ct}/200/snapshot"),
                vec![("snapname", "before")],
            ),
            (
                "PUT",
                format!("{ct}/200/config"),
                vec![("nameserver", "192.0.2.53")],
            ),
            ("POST", format!("{ct}/200/status/start"), vec![]),
        ] {
            let r = api.send(method, &path, &form).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            if let Some(upid) = r.data().as_str() {
                wait_task(&f, &api, NODE, upid).await;
            }
        }
        let pending = api
            .send(
                "PUT",
                &format!("{ct}/200/config"),
                &[("searchdomain", "example.org")],
            )
            .await;
        assert_eq!(pending.status, 200, "{}", pending.body);
        // Its firewall: a rule, an alias, an ipset with an entry.
        let fw = format!("{ct}/200/firewall");
        for (path, form) in [
            (
                format!("{fw}/rules"),
                vec![
                    ("type", "in"),
                    ("action", "ACCEPT"),
                    ("dport", "22"),
                    ("proto", "tcp"),
                ],
            ),
            (
                format!("{fw}/aliases"),
                vec![("name", "gateway"), ("cidr", "192.168.11.1")],
            ),
            (format!("{fw}/ipset"), vec![("name", "admins")]),
            (format!("{fw}/ipset/admins"), vec![("cidr", "10.0.0.0/24")]),
        ] {
            let r = api.post(&path, &form).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
        }
    }

    // Backups to prune and an appliance to import.
    let ctl = f.ctl("site-1");
    for volname in [
        "backup/vzdump-qemu-100-2025_01_01-02_00_00.vma.zst",
        "backup/vzdump-qemu-100-2025_01_02-02_00_00.vma.zst",
        "import/appliance.ova",
    ] {
        ctl.upload_volume(NODE, "local", volname, 1 << 30)
            .await
            .expect("the volume is placed");
    }

    // A console for `vncwebsocket`, whose ticket is bound to the port.
    let console = api
        .post(
            &format!("/nodes/{NODE}/qemu/100/vncproxy"),
            &[("websocket", "1")],
        )
        .await;
    assert_eq!(console.status, 200, "{}", console.body);
    let vnc_port = console.data()["port"].to_string();
    let vnc_ticket = console.data()["ticket"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // A migration tunnel for `mtunnelwebsocket`, whose ticket is bound to its socket.
    let tunnel = api
        .post(&format!("/nodes/{NODE}/qemu/150/mtunnel"), &[])
        .await;
    assert_eq!(tunnel.status, 200, "{}", tunnel.body);
    let text = |k: &str| tunnel.data()[k].as_str().unwrap_or_default().to_string();
    let (tunnel_socket, tunnel_ticket) = (text("socket"), text("ticket"));

    // The same for a container: its console and a container tunnel.
    let (ct_vnc, ct_tunnel) = {
        let console = api
            .post(
                &format!("/nodes/{NODE}/lxc/200/vncproxy"),
                &[("websocket", "1")],
            )
            .await;
        assert_eq!(console.status, 200, "{}", console.body);
        let ct_vnc = vec![
            ("port", console.data()["port"].to_string()),
            (
                "vncticket",
                console.data()["ticket"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ),
        ];
        let tunnel = api
            .post(&format!("/nodes/{NODE}/lxc/250/mtunnel"), &[])
            .await;
        assert_eq!(tunnel.status, 200, "{}", tunnel.body);
        let text = |k: &str| tunnel.data()[k].as_str().unwrap_or_default().to_string();
        let ct_tunnel = vec![("socket", text("socket")), ("ticket", text("ticket"))];
        (ct_vnc, ct_tunnel)
    };

    let vars = Vars {
        upid,
        pid,
        vnc_port,
        vnc_ticket,
        tunnel_socket,
        tunnel_ticket,
        ct_vnc,
        ct_tunnel,
    };
    (f, api, vars)
}

struct Vars {
    upid: String,
    pid: String,
    vnc_port: String,
    vnc_ticket: String,
    tunnel_socket: String,
    tunnel_ticket: String,
    /// `vncwebsocket`'s and `mtunnelwebsocket`'s queries for a container.
    ct_vnc: Vec<(&'static str, String)>,
    ct_tunnel: Vec<(&'static str, String)>,
}

/// One GET: the template it exercises, the concrete path, the query.
pub(crate) type Call = (&'static str, String, Vec<(&'static str, String)>);

/// One call per (template, instance).
fn calls(v: &Vars) -> Vec<Call> {
    let q = |k: &'static str, val: &str| vec![(k, val.to_string())];
    let vm = |vmid: &str| format!("/nodes/{NODE}/qemu/{vmid}");
    let ct = |path: &str| format!("/nodes/{NODE}/lxc{path}");
    let mut c = vec![
        ("/nodes/{node}/lxc", ct(""), vec![]),
        ("/nodes/{node}/lxc/{vmid}", ct("/200"), vec![]),
        ("/nodes/{node}/lxc/{vmid}/config", ct("/200/config"), vec![]),
        (
            "/nodes/{node}/lxc/{vmid}/feature",
            ct("/200/feature"),
            q("feature", "snapshot"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/interfaces",
            ct("/200/interfaces"),
            vec![],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/pending",
            ct("/200/pending"),
            vec![],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/snapshot",
            ct("/200/snapshot"),
            vec![],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
            ct("/200/snapshot/before"),
            vec![],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config",
            ct("/200/snapshot/before/config"),
            vec![],
        ),
        ("/nodes/{node}/lxc/{vmid}/status", ct("/200/status"), vec![]),
        (
            "/nodes/{node}/lxc/{vmid}/status/current",
            ct("/200/status/current"),
            vec![],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/migrate",
            ct("/200/migrate"),
            vec![],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/rrd",
            ct("/200/rrd"),
            vec![("timeframe", "day".into()), ("ds", "cpu".into())],
        ),
        (
            "/nodes/{node}/lxc/{vmid}/rrddata",
            ct("/200/rrddata"),
            q("timeframe", "hour"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/vncwebsocket",
            ct("/200/vncwebsocket"),
            v.ct_vnc.clone(),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/mtunnelwebsocket",
            ct("/250/mtunnelwebsocket"),
            v.ct_tunnel.clone(),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall",
            ct("/200/firewall"),
            vec![],
        ),
        ("/access", "/access".to_string(), vec![]),
        (
            "/access/users/{userid}/token",
            "/access/users/root@pam/token".into(),
            vec![],
        ),
        (
            "/access/users/{userid}/token/{tokenid}",
            "/access/users/root@pam/token/harness".into(),
            vec![],
        ),
        ("/cluster/resources", "/cluster/resources".into(), vec![]),
        ("/cluster/status", "/cluster/status".into(), vec![]),
        ("/cluster/tasks", "/cluster/tasks".into(), vec![]),
        ("/version", "/version".into(), vec![]),
        ("/nodes", "/nodes".into(), vec![]),
        (
            "/nodes/{node}/status",
            format!("/nodes/{NODE}/status"),
            vec![],
        ),
        (
            "/nodes/{node}/network",
            format!("/nodes/{NODE}/network"),
            vec![],
        ),
        (
            "/nodes/{node}/network/{iface}",
            format!("/nodes/{NODE}/network/vmbr0"),
            vec![],
        ),
        (
            "/nodes/{node}/storage",
            format!("/nodes/{NODE}/storage"),
            vec![],
        ),
        (
            "/nodes/{node}/tasks",
            format!("/nodes/{NODE}/tasks"),
            vec![],
        ),
        (
            "/nodes/{node}/tasks/{upid}/status",
            format!("/nodes/{NODE}/tasks/{}/status", v.upid),
            vec![],
        ),
        (
            "/nodes/{node}/tasks/{upid}/log",
            format!("/nodes/{NODE}/tasks/{}/log", v.upid),
            vec![],
        ),
        ("/nodes/{node}/qemu", format!("/nodes/{NODE}/qemu"), vec![]),
        (
            "/nodes/{node}/qemu",
            format!("/nodes/{NODE}/qemu"),
            q("full", "1"),
        ),
    ];
    c.extend(admin::calls());
    for storage in ["local", "local-lvm"] {
        let s = format!("/nodes/{NODE}/storage/{storage}");
        c.push(("/nodes/{node}/storage/{storage}", s.clone(), vec![]));
        c.push((
            "/nodes/{node}/storage/{storage}/status",
            format!("{s}/status"),
            vec![],
        ));
        c.push((
            "/nodes/{node}/storage/{storage}/content",
            format!("{s}/content"),
            vec![],
        ));
        c.push((
            "/nodes/{node}/storage/{storage}/rrd",
            format!("{s}/rrd"),
            vec![("timeframe", "hour".into()), ("ds", "total,used".into())],
        ));
    }
    c.push((
        "/nodes/{node}/storage/{storage}/prunebackups",
        format!("/nodes/{NODE}/storage/local/prunebackups"),
        q("prune-backups", "keep-last=1"),
    ));
    c.push((
        "/nodes/{node}/storage/{storage}/import-metadata",
        format!("/nodes/{NODE}/storage/local/import-metadata"),
        q("volume", "import/appliance.ova"),
    ));
    for volume in [
        "local:backup/vzdump-qemu-100-2025_01_01-02_00_00.vma.zst",
        "local:iso/ubuntu-22.04-cloud.img",
        "local-lvm:vm-100-disk-0",
    ] {
        let storage = volume.split(':').next().unwrap_or_default();
        c.push((
            "/nodes/{node}/storage/{storage}/content/{volume}",
            format!("/nodes/{NODE}/storage/{storage}/content/{volume}"),
            vec![],
        ));
    }
    for vmid in ["100", "101"] {
        let p = vm(vmid);
        c.push(("/nodes/{node}/qemu/{vmid}", p.clone(), vec![]));
        c.push((
            "/nodes/{node}/qemu/{vmid}/config",
            format!("{p}/config"),
            vec![],
        ));
        c.push((
            "/nodes/{node}/qemu/{vmid}/config",
            format!("{p}/config"),
            q("current", "1"),
        ));
        c.push((
            "/nodes/{node}/qemu/{vmid}/pending",
            format!("{p}/pending"),
            vec![],
        ));
        c.push((
            "/nodes/{node}/qemu/{vmid}/status",
            format!("{p}/status"),
            vec![],
        ));
        c.push((
            "/nodes/{node}/qemu/{vmid}/status/current",
            format!("{p}/status/current"),
            vec![],
        ));
        c.push((
            "/nodes/{node}/qemu/{vmid}/feature",
            format!("{p}/feature"),
            q("feature", "snapshot"),
        ));
        c.push((
            "/nodes/{node}/qemu/{vmid}/snapshot",
            format!("{p}/snapshot"),
            vec![],
        ));
    }
    let running = vm("100");
    c.push((
        "/nodes/{node}/qemu/{vmid}/migrate",
        format!("{running}/migrate"),
        vec![],
    ));
    c.push((
        "/nodes/{node}/qemu/{vmid}/rrd",
        format!("{running}/rrd"),
        vec![("timeframe", "day".into()), ("ds", "cpu".into())],
    ));
    c.push((
        "/nodes/{node}/qemu/{vmid}/vncwebsocket",
        format!("{running}/vncwebsocket"),
        vec![
            ("port", v.vnc_port.clone()),
            ("vncticket", v.vnc_ticket.clone()),
        ],
    ));
    c.push((
        "/nodes/{node}/qemu/{vmid}/mtunnelwebsocket",
        format!("{}/mtunnelwebsocket", vm("150")),
        vec![
            ("socket", v.tunnel_socket.clone()),
            ("ticket", v.tunnel_ticket.clone()),
        ],
    ));
    c.push((
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        format!("{running}/cloudinit"),
        vec![],
    ));
    c.push((
        "/nodes/{node}/qemu/{vmid}/agent/exec-status",
        format!("{running}/agent/exec-status"),
        q("pid", &v.pid),
    ));
    c.push((
        "/nodes/{node}/qemu/{vmid}/agent/file-read",
        format!("{running}/agent/file-read"),
        q("file", "/tmp/motd"),
    ));
    let fw = format!("{running}/firewall");
    for (template, path) in [
        (
            "/nodes/{node}/qemu/{vmid}/firewall/options",
            format!("{fw}/options"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/rules",
            format!("{fw}/rules"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
            format!("{fw}/rules/0"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/aliases",
            format!("{fw}/aliases"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/ipset",
            format!("{fw}/ipset"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}",
            format!("{fw}/ipset/admins"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/refs",
            format!("{fw}/refs"),
        ),
        (
            "/nodes/{node}/qemu/{vmid}/firewall/log",
            format!("{fw}/log"),
        ),
    ] {
        c.push((template, path, vec![]));
    }
    // The container's firewall: the same handlers, its own file.
    let fw = ct("/200/firewall");
    for (template, path) in [
        (
            "/nodes/{node}/lxc/{vmid}/firewall/options",
            format!("{fw}/options"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/rules",
            format!("{fw}/rules"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/rules/{pos}",
            format!("{fw}/rules/0"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/aliases",
            format!("{fw}/aliases"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/aliases/{name}",
            format!("{fw}/aliases/gateway"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/ipset",
            format!("{fw}/ipset"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/ipset/{name}",
            format!("{fw}/ipset/admins"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/ipset/{name}/{cidr}",
            format!("{fw}/ipset/admins/10.0.0.0/24"),
        ),
        (
            "/nodes/{node}/lxc/{vmid}/firewall/refs",
            format!("{fw}/refs"),
        ),
        ("/nodes/{node}/lxc/{vmid}/firewall/log", format!("{fw}/log")),
    ] {
        c.push((template, path, vec![]));
    }
    c
}

#[tokio::test]
async fn every_implemented_get_returns_the_declared_key_types() {
    check_every_get(PveVersion::V9_1, 30).await;
}

#[tokio::test]
async fn an_8_4_site_returns_the_key_types_8_4_declares() {
    check_every_get(PveVersion::V8_4, 30).await;
}

#[tokio::test]
async fn a_7_4_site_returns_the_key_types_7_4_declares() {
    check_every_get(PveVersion::V7_4, 30).await;
}

async fn check_every_get(version: PveVersion, at_least: usize) {
    let declared = returns(version);
    let implemented: BTreeSet<&str> = fake_proxmox::router::table()
        .iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.template)
        .filter(|t| declared.get(*t).is_some_and(is_specific))
        .collect();
    assert!(
        implemented.len() > at_least,
        "too few GETs with specific returns: {implemented:?}"
    );

    let (_f, api, vars) = populated(version).await;
    let calls = calls(&vars);
    let called: BTreeSet<&str> = calls.iter().map(|(t, _, _)| *t).collect();
    let skipped: BTreeSet<&str> = NOT_CALLED.iter().map(|(t, _)| *t).collect();
    let uncovered: Vec<&&str> = implemented
        .iter()
        .filter(|t| !called.contains(**t) && !skipped.contains(**t))
        .collect();
    assert!(
        uncovered.is_empty(),
        "implemented GETs with declared returns the test does not call: {uncovered:?}"
    );

    let mut problems = Vec::new();
    for (template, path, query) in &calls {
        let Some(schema) = declared.get(*template) else {
            continue; // not in this release's dump
        };
        let release = fake_proxmox::schema::ApiSchema::get(version);
        let knows = |k: &str| {
            release
                .method("GET", template)
                .is_some_and(|m| m.param(k).is_some())
        };
        if !query.iter().all(|(k, _)| knows(k)) {
            continue; // a parameter this release does not have (`GET /pools?poolid=` is 8.x)
        }
        let form: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = api.send("GET", path, &form).await;
        if r.status != 200 {
            problems.push(format!("GET {path}: {} {}", r.status, r.body));
            continue;
        }
        let allowed = |key: &str, what: &str| {
            REAL_PVE_DIFFERS
                .iter()
                .any(|(t, k, w)| t == template && *k == key && *w == what)
        };
        let data = &r.json["data"];
        // An empty answer would check nothing: the populated site has something everywhere.
        let empty = data.as_array().is_some_and(Vec::is_empty)
            || data.as_object().is_some_and(serde_json::Map::is_empty);
        if empty {
            problems.push(format!("GET {path}: nothing to check in {}", r.body));
        }
        for m in mismatches(data, schema, "") {
            let (at, what) = m.split_once(": ").unwrap_or((&m, ""));
            let key = strip_indexes(at);
            let number_for_string = what.starts_with("string declared, got ")
                && what["string declared, got ".len()..].parse::<f64>().is_ok();
            let outside_enum = what.contains(" not in the enum ");
            if (what == "null" && allowed(&key, "null"))
                || (number_for_string && allowed(&key, "number"))
                || (outside_enum && allowed(&key, "enum"))
            {
                continue;
            }
            problems.push(format!("GET {path} {query:?}: {m}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test]
async fn a_running_vms_status_carries_what_qemu_server_adds() {
    let (_f, api, _) = populated(PveVersion::V9_1).await;
    let cur = api.get("/nodes/ml110-01/qemu/100/status/current").await;
    let d = cur.data();
    let object = |k: &str| {
        d[k].as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
    };
    assert_eq!(object("blockstat").unwrap(), ["ide2", "scsi0"], "{d}");
    assert_eq!(object("nics").unwrap(), ["tap100i0"], "{d}");
    assert_eq!(d["proxmox-support"]["pbs-dirty-bitmap"], true, "{d}");
    assert_eq!(d["running-qemu"], "10.1.2");
    assert_eq!(d["running-machine"], "pc-i440fx-10.1+pve0");
    assert_eq!(d["ballooninfo"]["max_mem"], 2048u64 << 20);
    assert_eq!(d["balloon"], 2048u64 << 20);
    let info = &d["ballooninfo"];
    let used = info["total_mem"].as_u64().unwrap() - info["free_mem"].as_u64().unwrap();
    assert_eq!(d["mem"], used);
    assert_eq!(d["freemem"], info["free_mem"]);
    assert_eq!(d["spice"], 1, "qxl is a SPICE display");
    assert_eq!(d["serial"], 1);
    let scsi0 = &d["blockstat"]["scsi0"];
    assert_eq!(d["diskread"], scsi0["rd_bytes"], "the only disk with I/O");
    assert!(scsi0["rd_bytes"].as_u64().unwrap() > 0);

    // The stopped VM: no QMP, so none of that, and no disk counters either.
    let cur = api.get("/nodes/ml110-01/qemu/101/status/current").await;
    let d = cur.data();
    assert_eq!(d["qmpstatus"], "stopped");
    for k in [
        "blockstat",
        "nics",
        "ballooninfo",
        "proxmox-support",
        "diskread",
        "spice",
    ] {
        assert!(d.get(k).is_none(), "{k} on a stopped VM: {d}");
    }
    assert_eq!(d["balloon_min"], 1024u64 << 20);
    assert_eq!(d["shares"], 1000);

    // The VM list queries QMP only with `full`.
    let list = api.get("/nodes/ml110-01/qemu").await;
    let running = &list
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 100)
        .unwrap();
    for k in ["qmpstatus", "diskread", "blockstat", "ha"] {
        assert!(running.get(k).is_none(), "{k} without full: {running}");
    }
    assert!(running["memhost"].as_u64().unwrap() > 0);
    let full = api
        .send("GET", "/nodes/ml110-01/qemu", &[("full", "1")])
        .await;
    let vms = full.data().as_array().unwrap();
    let running = vms.iter().find(|v| v["vmid"] == 100).unwrap();
    let stopped = vms.iter().find(|v| v["vmid"] == 101).unwrap();
    assert_eq!(running["qmpstatus"], "running");
    assert!(running["blockstat"]["scsi0"].is_object(), "{running}");
    assert!(
        running.get("ha").is_none(),
        "ha is status/current's own: {running}"
    );
    assert_eq!(stopped["qmpstatus"], "stopped");

    // cluster/resources keeps its disk counters.
    let res = api.get("/cluster/resources").await;
    let vm = res
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "qemu/100")
        .unwrap();
    assert!(vm["diskread"].as_u64().unwrap() > 0, "{vm}");
}

#[test]
fn the_checker_finds_each_kind_of_mismatch() {
    let schema = serde_json::json!({
        "type": "array",
        "items": {"type": "object", "properties": {
            "vmid": {"type": "integer"},
            "name": {"type": "string", "optional": 1},
            "cpu": {"type": "number", "optional": 1},
            "template": {"type": "boolean", "optional": 1},
            "status": {"type": "string", "enum": ["running", "stopped"]},
            "net[n]": {"type": "string", "optional": 1},
        }},
    });
    let good = serde_json::json!([
        {"vmid": 100, "cpu": 0, "template": 1, "status": "running", "net0": "virtio"},
        {"vmid": 101, "name": "db", "cpu": 0.5, "template": false, "status": "stopped"},
    ]);
    assert_eq!(mismatches(&good, &schema, ""), Vec::<String>::new());
    let bad = serde_json::json!([
        {"vmid": "100", "name": null, "cpu": "0.5", "status": "paused", "net0": 1},
        {"template": "1", "status": "stopped"},
    ]);
    let found = mismatches(&bad, &schema, "");
    for expected in [
        "[0].vmid: integer declared",
        "[0].name: null",
        "[0].cpu: number declared",
        "[0].status: \"paused\" not in the enum",
        "[0].net0: string declared",
        "[1].vmid: missing",
        "[1].template: boolean declared",
    ] {
        assert!(
            found.iter().any(|m| m.starts_with(expected)),
            "{expected} not reported: {found:#?}"
        );
    }
    assert_eq!(found.len(), 7, "{found:#?}");
    assert_eq!(strip_indexes("[3].blockstat.scsi0"), "blockstat.scsi0");
}
