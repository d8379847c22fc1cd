//! Guest agent: PVE's three errors, then interfaces with an address from the DHCP pool.

use crate::common::*;

#[tokio::test]
async fn agent_errors_then_dhcp_address_after_boot() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "150"), ("net0", "virtio,bridge=vmbr0")],
    )
    .await;
    let path = "/nodes/ml110-01/qemu/150/agent/network-get-interfaces";
    let r = api.get(path).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "No QEMU guest agent configured\n");
    api.send("PUT", "/nodes/ml110-01/qemu/150/config", &[("agent", "1")])
        .await;
    let r = api.get(path).await;
    assert_eq!(r.message(), "VM 150 is not running\n");
    let r = api.post("/nodes/ml110-01/qemu/150/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api.get(path).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "QEMU guest agent is not running\n");
    // The default scenario boots guests in 25 simulated seconds.
    f.advance(30.0).await;
    let r = api.get(path).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ifaces = r.data()["result"].as_array().unwrap();
    assert_eq!(ifaces[0]["name"], "lo");
    let eth = &ifaces[1];
    let mac = api.get("/nodes/ml110-01/qemu/150/config").await.data()["net0"]
        .as_str()
        .unwrap()[7..24]
        .to_ascii_lowercase();
    assert_eq!(eth["hardware-address"], mac);
    assert_eq!(eth["ip-addresses"][0]["ip-address"], "192.168.11.100");
    assert_eq!(eth["ip-addresses"][0]["prefix"], 24);
    let cur = api.get("/nodes/ml110-01/qemu/150/status/current").await;
    assert_eq!(cur.data()["agent"], 1);
}
