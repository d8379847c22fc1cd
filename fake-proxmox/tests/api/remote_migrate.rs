//! Migration to another cluster and the receiving side's tunnel: `remote_migrate` fails
//! where PVE first has to reach the remote endpoint (the fake reaches none), after PVE's
//! checks up to that point; `mtunnel` and `mtunnelwebsocket` with their refusals, the
//! placeholder config, the ticket, and the tunnel task that times out without a client.

use serde_json::json;

use crate::common::*;

const FP: &str = "AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";

fn endpoint(host: &str, extra: &str) -> String {
    format!("host={host},apitoken=PVEAPIToken=root@pam!mig=0123-4567{extra}")
}

async fn remote_migrate(api: &Api, vmid: &str, form: &[(&str, &str)]) -> Resp {
    let path = format!("/nodes/ml110-01/qemu/{vmid}/remote_migrate");
    api.post(&path, form).await
}

#[tokio::test]
async fn remote_migrate_fails_where_pve_first_reaches_the_endpoint() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "180"), ("memory", "512"), ("scsi0", "local-lvm:1")],
    )
    .await;
    let no_fp = endpoint("10.0.0.9", "");
    let with_fp = endpoint("10.0.0.9", &format!(",fingerprint={FP}"));

    // Without a fingerprint the endpoint's certificate is asked for first: even an identity
    // storage map (refused later) does not get that far.
    let r = remote_migrate(
        &api,
        "180",
        &[
            ("target-endpoint", &no_fp),
            ("target-storage", "1"),
            ("target-bridge", "vmbr0"),
        ],
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(
        r.message(),
        "500 Can't connect to 10.0.0.9:8006 (No route to host)\n"
    );

    // With one, the maps are checked first.
    let r = remote_migrate(
        &api,
        "180",
        &[
            ("target-endpoint", &with_fp),
            ("target-storage", "1"),
            ("target-bridge", "vmbr0"),
        ],
    )
    .await;
    assert_eq!(
        r.message(),
        "remote migration requires explicit storage mapping!\n"
    );
    let r = remote_migrate(
        &api,
        "180",
        &[
            ("target-endpoint", &with_fp),
            ("target-storage", "local-lvm:a1,local-lvm:b2"),
            ("target-bridge", "vmbr0"),
        ],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"],
        json!({"target-storage": "failed to parse storage map: duplicate mapping for source 'local-lvm'\n"})
    );
    let r = remote_migrate(
        &api,
        "180",
        &[
            ("target-endpoint", &with_fp),
            ("target-storage", "remote-lvm"),
            ("target-bridge", "vmbr0,vmbr1"),
        ],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["target-bridge"],
        "failed to parse bridge map: default target ID can only be provided once\n"
    );

    // Everything in order: the endpoint's cluster status is asked for, and cannot be.
    let named = endpoint("pve.example.com", &format!(",port=9006,fingerprint={FP}"));
    let r = remote_migrate(
        &api,
        "180",
        &[
            ("target-endpoint", &named),
            ("target-storage", "local-lvm:remote-lvm"),
            ("target-bridge", "vmbr0"),
        ],
    )
    .await;
    assert_eq!(
        r.message(),
        "500 Can't connect to pve.example.com:9006 (Name or service not known)\n"
    );
    // No task was started, the VM is unlocked.
    let cfg = api.get("/nodes/ml110-01/qemu/180/config").await;
    assert!(cfg.data().get("lock").is_none(), "{}", cfg.body);
    let tasks = api.get("/nodes/ml110-01/tasks").await;
    assert!(
        !tasks.body.contains("qmigrate"),
        "no migration task: {}",
        tasks.body
    );
}

#[tokio::test]
async fn remote_migrate_checks_the_vm_in_pves_order() {
    let f = start().await;
    let api = f.api("site-1");
    let with_fp = endpoint("192.0.2.7", &format!(",fingerprint={FP}"));
    let form = |vmid: &'static str| {
        let (api, ep) = (api.clone(), with_fp.clone());
        async move {
            let f = [
                ("target-endpoint", ep.as_str()),
                ("target-storage", "remote-lvm"),
                ("target-bridge", "vmbr0"),
            ];
            remote_migrate(&api, vmid, &f).await
        }
    };
    let missing = form("999").await;
    assert_eq!(
        missing.message(),
        "Configuration file 'nodes/ml110-01/qemu-server/999.conf' does not exist\n"
    );

    // A VM still being created is locked.
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "181"), ("memory", "512"), ("scsi0", "local-lvm:1")],
        )
        .await;
    let upid = r.data().as_str().unwrap().to_string();
    assert_eq!(form("181").await.message(), "VM is locked (create)\n");
    wait_task(&f, &api, "ml110-01", &upid).await;

    // A running VM needs `online`; with it, the endpoint is the next thing asked.
    let r = api.post("/nodes/ml110-01/qemu/181/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(
        form("181").await.message(),
        "can't migrate running VM without --online\n"
    );
    let online = remote_migrate(
        &api,
        "181",
        &[
            ("target-endpoint", &with_fp),
            ("target-storage", "remote-lvm"),
            ("target-bridge", "vmbr0"),
            ("online", "1"),
        ],
    )
    .await;
    assert_eq!(
        online.message(),
        "500 Can't connect to 192.0.2.7:8006 (No route to host)\n"
    );
}

#[tokio::test]
async fn remote_migrate_needs_vm_migrate_before_the_config_is_read() {
    let f = three_nodes().await;
    let root = f.api("site-1");
    ok(root
        .post(
            "/access/users",
            &[("userid", "aud@pve"), ("password", "auditor1")],
        )
        .await);
    ok(root
        .send(
            "PUT",
            "/access/acl",
            &[("path", "/"), ("roles", "PVEAuditor"), ("users", "aud@pve")],
        )
        .await);
    let aud = root.login("aud@pve", "auditor1").await;
    let ep = endpoint("10.0.0.9", "");
    let r = aud
        .post(
            "/nodes/ml110-01/qemu/999/remote_migrate",
            &[
                ("target-endpoint", &ep),
                ("target-storage", "x1"),
                ("target-bridge", "vmbr0"),
            ],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/999, VM.Migrate)\n"
    );
}

fn ok(r: Resp) -> Resp {
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

#[tokio::test]
async fn mtunnel_refuses_what_pve_refuses() {
    let f = three_nodes().await;
    let root = f.api("site-1");
    let tunnel = |api: &Api, node: &str, vmid: &str, form: Vec<(&'static str, &'static str)>| {
        let (api, path) = (api.clone(), format!("/nodes/{node}/qemu/{vmid}/mtunnel"));
        async move { api.post(&path, &form).await }
    };

    // PVEVMAdmin on `/` holds VM.Allocate but not Sys.Incoming.
    let ops = root.login("ops@pve", "pw").await;
    let r = tunnel(&ops, "ml110-01", "300", vec![]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.message(), "Permission check failed (/, Sys.Incoming)\n");

    // Answered by the node the request reaches (the cluster's `local` one), not proxied.
    let r = tunnel(&root, "ml110-02", "300", vec![]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["node"],
        "node needs to be 'localhost' or local hostname 'ml110-01'"
    );

    let cases = [
        ("storages", "nope", "storage 'nope' does not exist\n"),
        (
            "storages",
            "local-lvm,other-lvm",
            "storage 'other-lvm' is not available on node 'ml110-01'\n",
        ),
        (
            "storages",
            "local",
            "storage 'local' does not support vm images\n",
        ),
        ("bridges", "vmbr0 vmbr7", "bridge 'vmbr7' does not exist\n"),
    ];
    for (k, v, want) in cases {
        let r = tunnel(&root, "localhost", "300", vec![(k, v)]).await;
        assert_eq!(r.status, 500, "{k}={v}: {}", r.body);
        assert_eq!(r.message(), want, "{k}={v}");
    }

    create_vm(&f, &root, "ml110-02", &[("vmid", "100"), ("memory", "512")]).await;
    let r = tunnel(&root, "ml110-01", "100", vec![]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["vmid"],
        "unable to create empty VM config - VM 100 already exists on node 'ml110-02'\n"
    );
}

#[tokio::test]
async fn mtunnel_takes_the_vmid_and_times_out_without_a_client() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    let r = api
        .post(
            "/nodes/localhost/qemu/300/mtunnel",
            &[("storages", "local-lvm"), ("bridges", "vmbr0")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.data().clone();
    assert_eq!(d["socket"], "/run/qemu-server/300.mtunnel");
    let ticket = d["ticket"].as_str().unwrap().to_string();
    assert!(ticket.starts_with("PVETUNNEL:"), "{ticket}");
    let upid = d["upid"].as_str().unwrap().to_string();
    assert!(
        upid.starts_with("UPID:ml110-01:") && upid.contains(":qmtunnel:300:root@pam!harness:"),
        "{upid}"
    );

    // The vmid is taken by an empty config locked `create`.
    let cfg = api.get("/nodes/ml110-01/qemu/300/config").await;
    assert_eq!(cfg.data()["lock"], "create", "{}", cfg.body);
    let dup = api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "300"), ("memory", "512")],
        )
        .await;
    assert_eq!(dup.status, 500, "{}", dup.body);

    // The websocket endpoint takes the caller's fresh ticket for that socket.
    let ws = |ticket: String, socket: &'static str| {
        let api = api.clone();
        async move {
            api.send(
                "GET",
                "/nodes/ml110-01/qemu/300/mtunnelwebsocket",
                &[("socket", socket), ("ticket", &ticket)],
            )
            .await
        }
    };
    let r = ws(ticket.clone(), "/run/qemu-server/300.mtunnel").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &json!({"socket": "/run/qemu-server/300.mtunnel"}));
    let other = ws(ticket.clone(), "/run/qemu-server/300.storage").await;
    assert_eq!(other.status, 401, "{}", other.body);
    assert_eq!(
        other.message(),
        "permission denied - invalid PVETUNNEL ticket\n"
    );
    let elsewhere = api
        .send(
            "GET",
            "/nodes/ml110-03/qemu/300/mtunnelwebsocket",
            &[
                ("socket", "/run/qemu-server/300.mtunnel"),
                ("ticket", &ticket),
            ],
        )
        .await;
    assert_eq!(elsewhere.status, 400, "{}", elsewhere.body);
    f.advance(41.0).await;
    let stale = ws(ticket.clone(), "/run/qemu-server/300.mtunnel").await;
    assert_eq!(
        stale.status, 401,
        "a tunnel ticket lives 40 s: {}",
        stale.body
    );

    // Nobody connects: after 300 s the tunnel gives up and the placeholder goes.
    f.advance(300.0).await;
    let st = api
        .get(&format!("/nodes/ml110-01/tasks/{upid}/status"))
        .await;
    assert_eq!(st.data()["status"], "stopped", "{}", st.body);
    assert_eq!(st.data()["exitstatus"], "Exiting mtunnel");
    let log = task_log(&api, "ml110-01", &upid).await;
    assert_eq!(
        log,
        [
            "mtunnel started",
            "Failed to accept tunnel connection - got timeout",
            "",
            "Removing tunnel socket..",
            "Removing temporary VM config..",
            "TASK ERROR: Exiting mtunnel",
        ]
    );
    let gone = api.get("/nodes/ml110-01/qemu/300/config").await;
    assert_eq!(gone.status, 500, "{}", gone.body);
    let r = ws(ticket, "/run/qemu-server/300.mtunnel").await;
    assert_eq!(
        r.message(),
        "Configuration file 'nodes/ml110-01/qemu-server/300.conf' does not exist\n"
    );
}

#[tokio::test]
async fn a_stopped_mtunnel_task_removes_its_placeholder() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api.post("/nodes/ml110-01/qemu/301/mtunnel", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data()["upid"].as_str().unwrap().to_string();
    let stop = api
        .send("DELETE", &format!("/nodes/ml110-01/tasks/{upid}"), &[])
        .await;
    assert_eq!(stop.status, 200, "{}", stop.body);
    let gone = api.get("/nodes/ml110-01/qemu/301/config").await;
    assert_eq!(gone.status, 500, "{}", gone.body);
}

#[tokio::test]
async fn mtunnel_asks_for_quorum_after_its_own_checks() {
    let f = three_nodes().await;
    let api = f.api("site-1");
    let ctl = f.ctl("site-1");
    ctl.set_node_online("ml110-02", false).await.unwrap();
    ctl.set_node_online("ml110-03", false).await.unwrap();
    let path = "/nodes/ml110-01/qemu/300/mtunnel";
    let r = api.post(path, &[("bridges", "vmbr7")]).await;
    assert_eq!(r.message(), "bridge 'vmbr7' does not exist\n");
    let r = api.post(path, &[("bridges", "vmbr0")]).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.message(), "cluster not ready - no quorum?\n");
}
