//! `POST /nodes/{node}/status`: a rebooting node shuts its VMs down (`stopall`), is gone for
//! its boot time (595), then starts its `onboot` VMs (`startall`); a shut-down node stays off
//! until it is switched on.

use crate::common::*;

async fn running(f: &Fake, api: &Api, vmid: &str, onboot: bool) {
    let mut form = vec![("vmid", vmid)];
    if onboot {
        form.push(("onboot", "1"));
    }
    create_vm(f, api, "ml110-01", &form).await;
    let r = api
        .post(&format!("/nodes/ml110-01/qemu/{vmid}/status/start"), &[])
        .await;
    wait_task(f, api, "ml110-01", r.data().as_str().unwrap()).await;
}

fn status(r: &Resp) -> String {
    r.data()["status"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_rebooting_node_stops_its_vms_and_starts_the_onboot_ones() {
    let f = start().await;
    let api = f.api("site-1");
    running(&f, &api, "190", true).await;
    running(&f, &api, "191", false).await;
    let r = api
        .post("/nodes/ml110-01/status", &[("command", "reboot")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.data().is_null());
    let r = api
        .post("/nodes/ml110-01/status", &[("command", "dance")])
        .await;
    assert_eq!(r.status, 400);

    // Still up for the API's two seconds and the guests' shutdowns.
    assert_eq!(api.get("/nodes/ml110-01/status").await.status, 200);
    f.advance(5.0).await;
    assert_eq!(api.get("/nodes/ml110-01/status").await.status, 595);
    let nodes = api.get("/nodes").await;
    assert_eq!(nodes.data()[0]["status"], "offline", "{}", nodes.body);

    f.advance(90.0).await;
    let st = api.get("/nodes/ml110-01/status").await;
    assert_eq!(st.status, 200, "{}", st.body);
    assert!(st.data()["uptime"].as_u64().unwrap() < 10);
    f.advance(5.0).await;
    let onboot = api.get("/nodes/ml110-01/qemu/190/status/current").await;
    assert_eq!(status(&onboot), "running");
    let other = api.get("/nodes/ml110-01/qemu/191/status/current").await;
    assert_eq!(status(&other), "stopped");

    // pve-guests' tasks are in the node's log.
    let tasks = api.get("/nodes/ml110-01/tasks").await;
    let types: Vec<&str> = tasks
        .data()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["type"].as_str())
        .collect();
    assert!(
        types.contains(&"stopall") && types.contains(&"startall"),
        "{types:?}"
    );
}

#[tokio::test]
async fn a_shut_down_node_stays_off_until_switched_on() {
    let f = start().await;
    let api = f.api("site-1");
    running(&f, &api, "192", true).await;
    api.post("/nodes/ml110-01/status", &[("command", "shutdown")])
        .await;
    f.advance(300.0).await;
    assert_eq!(api.get("/nodes/ml110-01/status").await.status, 595);
    f.ctl("site-1")
        .set_node_online("ml110-01", true)
        .await
        .unwrap();
    f.advance(5.0).await;
    let vm = api.get("/nodes/ml110-01/qemu/192/status/current").await;
    assert_eq!(status(&vm), "running", "{}", vm.body);
}

#[tokio::test]
async fn powering_a_node_needs_sys_powermgmt() {
    let yaml = fake_proxmox::Scenario::default_yaml().replacen(
        "    tokens:\n",
        "      - userid: ops@pve\n        password: pw\n    acls:\n      - {path: /, ugid: ops@pve, role: PVEVMAdmin}\n    tokens:\n",
        1,
    );
    let f = start_with(
        fake_proxmox::Scenario::from_yaml_str(&yaml).unwrap(),
        fake_proxmox::ClockMode::Stepped,
    )
    .await;
    let ops = f.api("site-1").login("ops@pve", "pw").await;
    let r = ops
        .post("/nodes/ml110-01/status", &[("command", "reboot")])
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/nodes/ml110-01, Sys.PowerMgmt)\n"
    );
}
