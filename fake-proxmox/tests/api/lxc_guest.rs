//! A container's firewall, statistics and consoles: pve-firewall's CT API (the VM module
//! with rule environment `ct`: the same file per VMID), `rrd`/`rrddata` from the
//! container's figures, pve-container's consoles (`vncproxy`, `termproxy`, `vncwebsocket`,
//! `spiceproxy`), and migration to another cluster through the container's own checks.

use serde_json::json;

use crate::common::*;
use crate::lxc::{NODE, create_ct, ct, task};

async fn running_ct(f: &Fake, api: &Api, vmid: &str) {
    let done = create_ct(
        f,
        api,
        &[
            ("vmid", vmid),
            ("storage", "local-lvm"),
            ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
            ("memory", "1024"),
            ("start", "1"),
        ],
    )
    .await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
}

#[tokio::test]
async fn a_containers_firewall_is_served_by_the_guest_firewall() {
    let f = start().await;
    let api = f.api("site-1");
    create_ct(&f, &api, &[("vmid", "230"), ("storage", "local-lvm")]).await;
    let fw = ct("/230/firewall");
    let r = api.get(&fw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.data(),
        &json!([{"name": "rules"}, {"name": "aliases"}, {"name": "ipset"},
                {"name": "refs"}, {"name": "options"}])
    );
    let r = api
        .send(
            "PUT",
            &format!("{fw}/options"),
            &[("enable", "1"), ("policy_in", "DROP")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let opts = api.get(&format!("{fw}/options")).await;
    assert_eq!(opts.data()["enable"], 1);
    assert_eq!(opts.data()["policy_in"], "DROP");

    let r = api
        .post(
            &format!("{fw}/aliases"),
            &[("name", "admin"), ("cidr", "10.0.0.5")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(
            &format!("{fw}/rules"),
            &[
                ("type", "in"),
                ("action", "ACCEPT"),
                ("proto", "tcp"),
                ("dport", "22"),
                ("source", "admin"),
                ("iface", "net0"),
                ("enable", "1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rules = api.get(&format!("{fw}/rules")).await;
    let rule = &rules.data()[0];
    assert_eq!(rule["pos"], 0);
    assert_eq!(rule["dport"], "22");
    assert_eq!(rule["source"], "admin");
    assert_eq!(
        api.get(&format!("{fw}/rules/0")).await.data()["iface"],
        "net0"
    );
    // pve-firewall checks a guest rule's interface the same for both kinds.
    let bad = api
        .post(
            &format!("{fw}/rules"),
            &[("type", "in"), ("action", "ACCEPT"), ("iface", "eth0")],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    let r = api
        .post(&format!("{fw}/ipset"), &[("name", "Admins")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(&format!("{fw}/ipset/admins"), &[("cidr", "10.0.0.0/24")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let entry = api.get(&format!("{fw}/ipset/admins/10.0.0.0/24")).await;
    assert_eq!(entry.data()["cidr"], "10.0.0.0/24");
    let refs = api.get(&format!("{fw}/refs")).await;
    let names: Vec<&str> = refs
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"admin") && names.contains(&"admins"),
        "{names:?}"
    );
    let log = api.get(&format!("{fw}/log")).await;
    assert_eq!(log.data(), &json!([{"n": 1, "t": "no content"}]));

    // The file is the VMID's: a VM's firewall is not this one, and a VMID without a guest
    // answers as for the container family's missing config.
    create_vm(&f, &api, NODE, &[("vmid", "231")]).await;
    let vm_rules = api
        .get(&format!("/nodes/{NODE}/qemu/231/firewall/rules"))
        .await;
    assert_eq!(vm_rules.data(), &json!([]));
    let missing = api.get(&ct("/239/firewall/rules")).await;
    assert_eq!(missing.status, 500);
    assert_eq!(
        missing.message(),
        "Configuration file 'nodes/ml110-01/lxc/239.conf' does not exist\n"
    );
    // Destroying the container takes its firewall file with it.
    let done = task(&f, &api, "DELETE", &ct("/230"), &[]).await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    create_ct(&f, &api, &[("vmid", "230"), ("storage", "local-lvm")]).await;
    assert_eq!(api.get(&format!("{fw}/rules")).await.data(), &json!([]));
}

#[tokio::test]
async fn a_containers_series_comes_from_its_figures() {
    let f = start().await;
    let api = f.api("site-1");
    f.advance(600.0).await;
    running_ct(&f, &api, "232").await;
    f.advance(900.0).await;
    let r = api
        .send("GET", &ct("/232/rrddata"), &[("timeframe", "hour")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rows = r.data().as_array().unwrap();
    assert!((59..=60).contains(&rows.len()), "{}", rows.len());
    // Rows before the container was made hold only `time`.
    assert!(rows.iter().any(|r| r.as_object().unwrap().len() == 1));
    let last = rows.last().unwrap();
    assert_eq!(last["maxmem"], json!(1024.0 * 1024.0 * 1024.0));
    assert_eq!(last["maxdisk"], json!(4.0 * 1024.0 * 1024.0 * 1024.0));
    assert_eq!(last["maxcpu"], json!(5.0));
    assert!(last["cpu"].as_f64().unwrap() > 0.0, "{last}");
    assert!(last["netin"].as_f64().unwrap() > 0.0, "{last}");
    assert!(last["disk"].as_f64().unwrap() > 0.0, "{last}");
    assert_eq!(last["memhost"], last["mem"]);

    let png = api
        .send(
            "GET",
            &ct("/232/rrd"),
            &[("timeframe", "day"), ("ds", "cpu,mem")],
        )
        .await;
    assert_eq!(png.status, 200, "{}", png.body);
    assert_eq!(
        png.data()["filename"],
        "/var/lib/rrdcached/db/pve-vm-9.0/232_cpu_mem.png"
    );
    let bad = api
        .send(
            "GET",
            &ct("/232/rrd"),
            &[("timeframe", "day"), ("ds", "nope")],
        )
        .await;
    assert_eq!(
        bad.message(),
        "RRD error: No DS called 'nope' in '/var/lib/rrdcached/db/pve-vm-9.0/232'\n"
    );
    let missing = api
        .send("GET", &ct("/238/rrddata"), &[("timeframe", "hour")])
        .await;
    assert_eq!(
        missing.message(),
        "Configuration file 'nodes/ml110-01/lxc/238.conf' does not exist\n"
    );
}

#[tokio::test]
async fn container_consoles_are_pve_containers() {
    let f = start().await;
    let api = f.api("site-1");
    create_ct(&f, &api, &[("vmid", "233"), ("storage", "local-lvm")]).await;
    // `vncterm` authenticates by the ticket: a password only for a websocket.
    let plain = api.post(&ct("/233/vncproxy"), &[]).await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert!(plain.data().get("password").is_none(), "{}", plain.body);
    assert!(
        plain.data()["cert"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN")
    );
    let ws = api.post(&ct("/233/vncproxy"), &[("websocket", "1")]).await;
    let d = ws.data().clone();
    assert_eq!(d["port"], 5901);
    let password = d["password"].as_str().unwrap();
    let ticket = d["ticket"].as_str().unwrap();
    assert!(
        ticket.starts_with(&format!("{password}:PVEVNC:")),
        "{ticket}"
    );
    let upid = d["upid"].as_str().unwrap().to_string();
    assert!(upid.contains(":vncproxy:233:"), "{upid}");
    let ok = api
        .send(
            "GET",
            &ct("/233/vncwebsocket"),
            &[("port", "5901"), ("vncticket", ticket)],
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.data()["port"], "5901");
    assert_eq!(wait_task(&f, &api, NODE, &upid).await["exitstatus"], "OK");
    let bad = api
        .send(
            "GET",
            &ct("/233/vncwebsocket"),
            &[("port", "5900"), ("vncticket", ticket)],
        )
        .await;
    assert_eq!(bad.message(), "permission denied - invalid PVEVNC ticket\n");

    let term = api.post(&ct("/233/termproxy"), &[]).await;
    assert_eq!(term.status, 200, "{}", term.body);
    assert!(term.data().get("password").is_none());
    assert!(
        term.data()["upid"]
            .as_str()
            .unwrap()
            .contains(":vncproxy:233:")
    );
    let missing = api.post(&ct("/237/termproxy"), &[]).await;
    assert_eq!(
        missing.message(),
        "Configuration file 'nodes/ml110-01/lxc/237.conf' does not exist\n"
    );

    // SPICE: a `spiceterm` for a running container, titled `CT <vmid>`.
    let r = api.post(&ct("/233/spiceproxy"), &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "CT 233 not running\n");
    let done = task(&f, &api, "POST", &ct("/233/status/start"), &[]).await;
    assert_eq!(done["exitstatus"], "OK");
    let r = api
        .post(&ct("/233/spiceproxy"), &[("proxy", "pve.example")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.data();
    assert_eq!(d["type"], "spice");
    assert_eq!(d["title"], "CT 233");
    assert_eq!(d["proxy"], "http://pve.example:3128");
    assert_eq!(d["tls-port"], 61000);
    assert!(d["host"].as_str().unwrap().starts_with("pvespiceproxy:"));
    let tasks = api
        .send(
            "GET",
            &format!("/nodes/{NODE}/tasks"),
            &[("typefilter", "spiceproxy"), ("source", "all")],
        )
        .await;
    assert_eq!(tasks.data().as_array().unwrap().len(), 1, "{}", tasks.body);
}

const FP: &str = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89";

fn endpoint(extra: &str) -> String {
    format!("host=10.9.9.9,apitoken=PVEAPIToken=root@pam!mig=0123-4567{extra}")
}

#[tokio::test]
async fn remote_migration_of_a_container_checks_then_fails_to_connect() {
    let f = start().await;
    let api = f.api("site-1");
    running_ct(&f, &api, "234").await;
    let call = |form: Vec<(&'static str, String)>| {
        let api = api.clone();
        async move {
            let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            api.post(&ct("/234/remote_migrate"), &form).await
        }
    };
    let base = |ep: String| {
        vec![
            ("target-endpoint", ep),
            ("target-storage", "local-lvm:other".to_string()),
            ("target-bridge", "vmbr0".to_string()),
        ]
    };
    // Running: refused before the endpoint is asked anything.
    let r = call(base(endpoint(""))).await;
    assert_eq!(
        r.message(),
        "can't migrate running container without --online or --restart\n"
    );
    let mut restart = base(endpoint(""));
    restart.push(("restart", "1".into()));
    let r = call(restart).await;
    assert_eq!(
        r.message(),
        "500 Can't connect to 10.9.9.9:8006 (No route to host)\n"
    );
    let mut identity = base(endpoint(&format!(",fingerprint={FP}")));
    identity[1].1 = "1".into();
    identity.push(("restart", "1".into()));
    let r = call(identity).await;
    assert_eq!(
        r.message(),
        "remote migration requires explicit storage mapping!\n"
    );
}

#[tokio::test]
async fn a_container_tunnel_takes_the_vmid_and_times_out() {
    let f = start().await;
    let api = f.api("site-1");
    create_ct(&f, &api, &[("vmid", "235"), ("storage", "local-lvm")]).await;
    let r = api
        .post(
            "/nodes/localhost/lxc/235/mtunnel",
            &[("storages", "local-lvm")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["vmid"],
        "unable to create empty CT config - CT 235 already exists on node 'ml110-01'\n"
    );
    // A storage without container directories is refused with pve-container's text.
    let r = api
        .post("/nodes/localhost/lxc/236/mtunnel", &[("storages", "local")])
        .await;
    assert_eq!(
        r.message(),
        "storage 'local' does not support CT rootdirs\n"
    );
    let r = api
        .post(
            "/nodes/localhost/lxc/236/mtunnel",
            &[("storages", "local-lvm"), ("bridges", "vmbr0")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.data().clone();
    assert_eq!(d["socket"], "/run/pve/ct-236.mtunnel");
    let upid = d["upid"].as_str().unwrap().to_string();
    assert!(upid.contains(":vzmtunnel:236:"), "{upid}");
    // The placeholder is a container: its family's config answers.
    let cfg = api.get(&ct("/236/config")).await;
    assert_eq!(cfg.status, 200, "{}", cfg.body);
    assert_eq!(cfg.data()["lock"], "create");
    let ws = api
        .send(
            "GET",
            &format!("/nodes/{NODE}/lxc/236/mtunnelwebsocket"),
            &[
                ("socket", "/run/pve/ct-236.mtunnel"),
                ("ticket", d["ticket"].as_str().unwrap()),
            ],
        )
        .await;
    assert_eq!(ws.status, 200, "{}", ws.body);
    assert_eq!(ws.data(), &json!({"socket": "/run/pve/ct-236.mtunnel"}));
    f.advance(301.0).await;
    let done = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(done["exitstatus"], "Exiting mtunnel");
    assert_eq!(api.get(&ct("/236/config")).await.status, 500);
}
