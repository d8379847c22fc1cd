//! Consoles, monitor, sendkey and dbus-vmstate: tickets bound to user, VM and port, the
//! proxy task that times out without a client, PVE's monitor permission classes, and
//! monitor commands that really pause and resume the guest.

use crate::common::*;

async fn running(f: &Fake, api: &Api, vmid: &str, extra: &[(&str, &str)]) {
    let mut form = vec![("vmid", vmid), ("name", "web1")];
    form.extend_from_slice(extra);
    create_vm(f, api, "ml110-01", &form).await;
    let r = api
        .post(&format!("/nodes/ml110-01/qemu/{vmid}/status/start"), &[])
        .await;
    wait_task(f, api, "ml110-01", r.data().as_str().unwrap()).await;
}

#[tokio::test]
async fn vncproxy_hands_out_a_port_and_a_ticket_the_websocket_accepts() {
    let f = start().await;
    let api = f.api("site-1");
    running(&f, &api, "160", &[]).await;
    let r = api
        .post("/nodes/ml110-01/qemu/160/vncproxy", &[("websocket", "1")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.data().clone();
    assert_eq!(d["port"], 5900);
    assert_eq!(d["user"], "root@pam!harness");
    let password = d["password"].as_str().unwrap();
    assert_eq!(password.len(), 8);
    let ticket = d["ticket"].as_str().unwrap();
    assert!(
        ticket.starts_with(&format!("{password}:PVEVNC:")),
        "{ticket}"
    );
    let upid = d["upid"].as_str().unwrap().to_string();
    assert!(upid.contains(":vncproxy:160:"), "{upid}");
    // The cluster's CA: the certificate the fake's listener serves, as PEM.
    let pem = f.fake.site("site-1").unwrap().cert_pem().to_string();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\n"), "{pem}");
    assert_eq!(d["cert"], pem.as_str());
    // A second console while the first waits takes the next port.
    let second = api.post("/nodes/ml110-01/qemu/160/vncproxy", &[]).await;
    assert_eq!(second.data()["port"], 5901);

    let ws = |port: String, t: String| {
        let api = api.clone();
        async move {
            api.send(
                "GET",
                "/nodes/ml110-01/qemu/160/vncwebsocket",
                &[("port", port.as_str()), ("vncticket", t.as_str())],
            )
            .await
        }
    };
    let wrong_port = ws("5901".into(), ticket.into()).await;
    assert_eq!(wrong_port.status, 500, "{}", wrong_port.body);
    assert_eq!(
        wrong_port.message(),
        "permission denied - invalid PVEVNC ticket\n"
    );
    let ok = ws("5900".into(), ticket.into()).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.data()["port"], "5900");

    // The connected proxy ends well; the other one had no client and times out.
    let done = wait_task(&f, &api, "ml110-01", &upid).await;
    assert_eq!(done["exitstatus"], "OK");
    let other = second.data()["upid"].as_str().unwrap().to_string();
    let timed_out = wait_task(&f, &api, "ml110-01", &other).await;
    assert_eq!(timed_out["exitstatus"], "connection timed out");
    // Its port is free again.
    let again = api.post("/nodes/ml110-01/qemu/160/termproxy", &[]).await;
    assert_eq!(again.data()["port"], 5900);
    assert!(again.data().get("password").is_none());

    // A stale ticket (PVE's 40 s) is refused.
    let fresh = api
        .post("/nodes/ml110-01/qemu/160/vncproxy", &[("websocket", "1")])
        .await;
    let (port, t) = (
        fresh.data()["port"].to_string(),
        fresh.data()["ticket"].as_str().unwrap().to_string(),
    );
    f.advance(41.0).await;
    assert_eq!(ws(port, t).await.status, 500);
}

#[tokio::test]
async fn spiceproxy_needs_a_running_vm_with_a_spice_display() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(&f, &api, "ml110-01", &[("vmid", "161"), ("vga", "qxl")]).await;
    let r = api.post("/nodes/ml110-01/qemu/161/spiceproxy", &[]).await;
    assert_eq!(r.message(), "VM 161 not running\n");
    running(&f, &api, "162", &[]).await;
    let r = api.post("/nodes/ml110-01/qemu/162/spiceproxy", &[]).await;
    assert_eq!(r.message(), "no spice port\n");
    let r = api.post("/nodes/ml110-01/qemu/161/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api
        .post(
            "/nodes/ml110-01/qemu/161/spiceproxy",
            &[("proxy", "pve.example")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = r.data();
    assert_eq!(d["type"], "spice");
    assert_eq!(d["proxy"], "http://pve.example:3128");
    assert_eq!(d["tls-port"], 61000);
    assert_eq!(d["delete-this-file"], 1);
    assert!(d["host"].as_str().unwrap().starts_with("pvespiceproxy:"));
    // The CA on one line, newlines written as `\n` (two characters) for the `.vv` file.
    let pem = f.fake.site("site-1").unwrap().cert_pem().to_string();
    let ca = d["ca"].as_str().unwrap();
    assert!(!ca.contains('\n') && ca.contains("\\n"), "{ca}");
    assert_eq!(ca.replace("\\n", "\n"), pem);
}

#[tokio::test]
async fn monitor_runs_commands_by_pves_permission_classes() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(&f, &api, "ml110-01", &[("vmid", "163")]).await;
    let mon = "/nodes/ml110-01/qemu/163/monitor";
    // A stopped VM: PVE answers 200 with the monitor error as the text.
    let r = api.post(mon, &[("command", "info status")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.data(), "ERROR: VM 163 not running\n");
    let r = api.post("/nodes/ml110-01/qemu/163/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api.post(mon, &[("command", "info status")]).await;
    assert_eq!(r.data(), "VM status: running\r\n");
    // `stop` pauses the guest for real: status/current shows it.
    assert_eq!(api.post(mon, &[("command", "stop")]).await.data(), "");
    let cur = api.get("/nodes/ml110-01/qemu/163/status/current").await;
    assert_eq!(cur.data()["qmpstatus"], "paused");
    assert_eq!(
        api.post(mon, &[("command", "info status")]).await.data(),
        "VM status: paused\r\n"
    );
    api.post(mon, &[("command", "cont")]).await;
    let cur = api.get("/nodes/ml110-01/qemu/163/status/current").await;
    assert_eq!(cur.data()["qmpstatus"], "running");
    // A command PVE's table lacks is root@pam's alone: its API token is not root@pam.
    let r = api.post(mon, &[("command", "frobnicate now")]).await;
    assert_eq!(r.status, 500);
    let root = api.login("root@pam", "harness").await;
    let r = root.post(mon, &[("command", "frobnicate now")]).await;
    assert_eq!(r.data(), "unknown command: 'frobnicate'\r\n", "{}", r.body);

    // A user with Sys.Audit may look, but not change, and never run root-only commands.
    let yaml = fake_proxmox::Scenario::default_yaml().replacen(
        "    tokens:\n",
        "      - userid: ops@pve\n        password: pw\n    acls:\n      - {path: /, ugid: ops@pve, role: PVEAuditor}\n    tokens:\n",
        1,
    );
    let f2 = start_with(
        fake_proxmox::Scenario::from_yaml_str(&yaml).unwrap(),
        fake_proxmox::ClockMode::Stepped,
    )
    .await;
    let root = f2.api("site-1");
    create_vm(&f2, &root, "ml110-01", &[("vmid", "164")]).await;
    let ops = root.login("ops@pve", "pw").await;
    let mon = "/nodes/ml110-01/qemu/164/monitor";
    assert_eq!(
        ops.post(mon, &[("command", "info version")]).await.status,
        200
    );
    let r = ops.post(mon, &[("command", "system_reset")]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.message(), "Permission check failed (/, Sys.Modify)\n");
    let r = ops.post(mon, &[("command", "device_add virtio-rng")]).await;
    assert_eq!(r.message(), "root-only command 'device_add'\n");
    let r = ops.post(mon, &[("command", "frobnicate")]).await;
    assert_eq!(
        r.message(),
        "command 'frobnicate' non-existent or not assigned a required permission yet, limiting to root user\n"
    );
}

#[tokio::test]
async fn sendkey_checks_the_keys_and_the_running_vm() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(&f, &api, "ml110-01", &[("vmid", "165")]).await;
    let path = "/nodes/ml110-01/qemu/165/sendkey";
    let r = api.send("PUT", path, &[("key", "ctrl-alt-delete")]).await;
    assert_eq!(r.message(), "VM 165 not running\n");
    let r = api.post("/nodes/ml110-01/qemu/165/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api.send("PUT", path, &[("key", "ctrl-alt-delete")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.data().is_null());
    let r = api.send("PUT", path, &[("key", "ctrl-banana")]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "invalid parameter: banana\n");
}

#[tokio::test]
async fn dbus_vmstate_wants_the_vm_running_on_that_node() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(&f, &api, "ml110-01", &[("vmid", "166")]).await;
    let path = "/nodes/ml110-01/qemu/166/dbus-vmstate";
    let r = api.post(path, &[("action", "start")]).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body
            .contains("VM 166 not running locally on node 'ml110-01'"),
        "{}",
        r.body
    );
    let r = api.post("/nodes/ml110-01/qemu/166/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    assert_eq!(api.post(path, &[("action", "start")]).await.status, 200);
    let r = api.post(path, &[("action", "restart")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
}
