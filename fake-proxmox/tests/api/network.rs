//! The node network API: changes pend in `interfaces.new` until applied, revert drops them,
//! PVE's checks and texts, and what applying does to the VMs on a bridge.

use serde_json::Value;

use crate::common::{Api, Fake, create_vm, start, task_log, wait_task};

const NODE: &str = "r630-01";
const NET: &str = "/nodes/r630-01/network";

async fn list(api: &Api, filter: &[(&str, &str)]) -> (Vec<Value>, Option<String>) {
    let r = api.send("GET", NET, filter).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let changes = r.json["changes"].as_str().map(str::to_string);
    (r.data().as_array().unwrap().clone(), changes)
}

fn find<'a>(ifaces: &'a [Value], name: &str) -> Option<&'a Value> {
    ifaces.iter().find(|i| i["iface"] == name)
}

async fn apply(f: &Fake, api: &Api) -> String {
    let r = api.send("PUT", NET, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(f, api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK");
    upid
}

async fn start_vm(f: &Fake, api: &Api, vmid: u32) -> (Value, Vec<String>) {
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/{vmid}/status/start"), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(f, api, NODE, &upid).await;
    (st, task_log(api, NODE, &upid).await)
}

#[tokio::test]
async fn a_new_bridge_pends_until_applied_then_a_vm_on_it_starts() {
    let f = start().await;
    let api = f.api("site-2");
    let r = api
        .post(
            NET,
            &[
                ("iface", "vmbr1"),
                ("type", "bridge"),
                ("cidr", "10.10.0.1/24"),
                ("autostart", "1"),
                ("comments", "lab segment"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json["data"], Value::Null);

    // Listed from interfaces.new: not active yet, the diff in `changes`.
    let (ifaces, changes) = list(&api, &[]).await;
    let br = find(&ifaces, "vmbr1").expect("pending bridge listed");
    assert_eq!(br["type"], "bridge");
    assert_eq!(br["method"], "static");
    assert_eq!(br["cidr"], "10.10.0.1/24");
    assert_eq!(br["address"], "10.10.0.1");
    assert_eq!(br["netmask"], "24");
    assert_eq!(br["bridge_ports"], "");
    assert_eq!(br["bridge_stp"], "off");
    assert_eq!(br["bridge_fd"], "0");
    assert_eq!(br["comments"], "lab segment\n");
    assert_eq!(br["autostart"], 1);
    assert!(br.get("active").is_none(), "{br}");
    assert_eq!(find(&ifaces, "vmbr0").unwrap()["active"], 1);
    assert!(find(&ifaces, "lo").is_none());
    let changes = changes.expect("pending changes reported");
    assert!(
        changes.starts_with("--- /etc/network/interfaces\t"),
        "{changes}"
    );
    assert!(changes.contains("\n+++ /etc/network/interfaces.new\t"));
    assert!(changes.contains("\n+auto vmbr1\n+iface vmbr1 inet static\n+\taddress 10.10.0.1/24\n+\tbridge-ports none\n"), "{changes}");
    let one = api.get(&format!("{NET}/vmbr1")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.data()["cidr"], "10.10.0.1/24");

    // A VM on the bridge cannot start while the bridge is only pending.
    create_vm(
        &f,
        &api,
        NODE,
        &[("vmid", "300"), ("net0", "virtio,bridge=vmbr1")],
    )
    .await;
    let (st, log) = start_vm(&f, &api, 300).await;
    assert_eq!(st["exitstatus"], "start failed: QEMU exited with code 1");
    assert_eq!(log[0], "bridge 'vmbr1' does not exist");

    let upid = apply(&f, &api).await;
    assert!(upid.starts_with("UPID:r630-01:"), "{upid}");
    assert!(
        upid.contains(":srvreload:networking:root@pam!harness:"),
        "{upid}"
    );
    let (ifaces, changes) = list(&api, &[]).await;
    assert_eq!(changes, None);
    assert_eq!(find(&ifaces, "vmbr1").unwrap()["active"], 1);

    let (st, _) = start_vm(&f, &api, 300).await;
    assert_eq!(st["exitstatus"], "OK");
    let s = api
        .get(&format!("/nodes/{NODE}/qemu/300/status/current"))
        .await;
    assert_eq!(s.data()["status"], "running");
}

#[tokio::test]
async fn revert_drops_the_pending_changes() {
    let f = start().await;
    let api = f.api("site-2");
    let r = api
        .post(NET, &[("iface", "vmbr2"), ("type", "bridge")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(list(&api, &[]).await.1.is_some());
    let r = api.send("DELETE", NET, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (ifaces, changes) = list(&api, &[]).await;
    assert_eq!(changes, None);
    assert!(find(&ifaces, "vmbr2").is_none());
    let r = api.get(&format!("{NET}/vmbr2")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["iface"], "interface does not exist");
    // Applying with nothing pending still reloads, and changes nothing.
    apply(&f, &api).await;
    assert!(find(&list(&api, &[]).await.0, "vmbr0").is_some());
}

#[tokio::test]
async fn checks_refuse_with_pves_texts_and_leave_nothing_pending() {
    let f = start().await;
    let api = f.api("site-2");
    let post = |form: Vec<(&'static str, &'static str)>| {
        let api = api.clone();
        async move { api.post(NET, &form).await }
    };
    let r = post(vec![("iface", "vmbr0"), ("type", "bridge")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["iface"], "interface already exists");

    let r = post(vec![
        ("iface", "vmbr3"),
        ("type", "bridge"),
        ("cidr", "10.0.0.2/24"),
        ("gateway", "10.0.0.1"),
    ])
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["gateway"],
        "Default gateway already exists on interface 'vmbr0'."
    );

    let r = post(vec![
        ("iface", "vmbr3"),
        ("type", "bridge"),
        ("bridge_ports", "eno1"),
    ])
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["bridge_ports"],
        "eno1 is already used on interface 'vmbr0'."
    );

    let r = post(vec![
        ("iface", "bond0"),
        ("type", "bond"),
        ("slaves", "eno1"),
    ])
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["slaves"],
        "eno1 is already used on interface 'vmbr0'."
    );

    let r = post(vec![
        ("iface", "vmbr3"),
        ("type", "bridge"),
        ("bridge_ports", "eno9"),
    ])
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "bridge 'vmbr3' - unable to find bridge port 'eno9'\n"
    );

    let r = post(vec![
        ("iface", "bond0"),
        ("type", "bond"),
        ("slaves", "eno7"),
    ])
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "bond 'bond0' - unable to find slave 'eno7'\n");

    let r = post(vec![
        ("iface", "vmbr3"),
        ("type", "bridge"),
        ("cidr", "10.0.0.2/24"),
        ("address", "10.0.0.3"),
        ("netmask", "255.255.255.0"),
    ])
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["address"], "address conflicts with cidr");

    let r = post(vec![
        ("iface", "vmbr3"),
        ("type", "bridge"),
        ("cidr", "10.0.0.2"),
    ])
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json["errors"]["cidr"].is_string(), "{}", r.body);

    let r = post(vec![("iface", "vmbr3"), ("type", "OVSBridge")]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Open VSwitch is not installed (need package 'openvswitch-switch')\n"
    );

    let r = api
        .send(
            "PUT",
            &format!("{NET}/vmbr7"),
            &[("type", "bridge"), ("comments", "x")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["errors"]["iface"], "interface does not exist");

    // Taking the port a bridge runs on away from it fails when the file is checked.
    let r = api.send("DELETE", &format!("{NET}/eno1"), &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "bridge 'vmbr0' - unable to find bridge port 'eno1'\n"
    );

    assert_eq!(
        list(&api, &[]).await.1,
        None,
        "a refused change wrote nothing"
    );
}

#[tokio::test]
async fn update_with_delete_shows_the_pending_values() {
    let f = start().await;
    let api = f.api("site-2");
    let r = api
        .send(
            "PUT",
            &format!("{NET}/vmbr0"),
            &[
                ("type", "bridge"),
                ("cidr", "192.168.11.11/24"),
                ("gateway", "192.168.11.1"),
                ("bridge_ports", "eno1"),
                ("bridge_vlan_aware", "1"),
                ("comments", "uplink"),
                ("mtu", "9000"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = api.get(&format!("{NET}/vmbr0")).await;
    assert_eq!(v.data()["comments"], "uplink\n");
    assert_eq!(v.data()["bridge_vlan_aware"], 1);
    assert_eq!(v.data()["bridge_vids"], "2-4094");
    assert_eq!(v.data()["mtu"], "9000");
    assert_eq!(v.data()["gateway"], "192.168.11.1");
    assert_eq!(v.data()["type"], "bridge");
    let r = api
        .send(
            "PUT",
            &format!("{NET}/vmbr0"),
            &[
                ("type", "bridge"),
                ("cidr", "192.168.11.11/24"),
                ("bridge_ports", "eno1"),
                ("delete", "comments,mtu,gateway"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = api.get(&format!("{NET}/vmbr0")).await;
    assert!(v.data().get("comments").is_none(), "{}", v.body);
    assert!(v.data().get("mtu").is_none(), "{}", v.body);
    assert!(v.data().get("gateway").is_none(), "{}", v.body);
    // The gateway left vmbr0, so another interface may have it now.
    let r = api
        .post(
            NET,
            &[
                ("iface", "vmbr4"),
                ("type", "bridge"),
                ("cidr", "10.4.0.2/24"),
                ("gateway", "10.4.0.1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let changes = list(&api, &[]).await.1.unwrap();
    assert!(changes.contains("\n-\tgateway 192.168.11.1\n"), "{changes}");
}

#[tokio::test]
async fn type_filters_list_what_pve_lists() {
    let f = start().await;
    let api = f.api("site-2");
    let (eth, _) = list(&api, &[("type", "eth")]).await;
    assert_eq!(eth.len(), 1);
    assert_eq!(eth[0]["iface"], "eno1");
    assert_eq!(eth[0]["exists"], 1);
    assert_eq!(eth[0]["active"], 1);
    let (any, _) = list(&api, &[("type", "any_bridge")]).await;
    let names: Vec<&str> = any.iter().map(|i| i["iface"].as_str().unwrap()).collect();
    assert_eq!(names, ["vmbr0"]);
    let (local, _) = list(&api, &[("type", "any_local_bridge")]).await;
    assert_eq!(local, any);
    let (bonds, _) = list(&api, &[("type", "bond")]).await;
    assert!(bonds.is_empty());
}

#[tokio::test]
async fn a_removed_bridge_leaves_its_running_vm_running_and_a_stopped_one_unable_to_start() {
    let f = start().await;
    let api = f.api("site-2");
    create_vm(
        &f,
        &api,
        NODE,
        &[("vmid", "310"), ("net0", "virtio,bridge=vmbr0")],
    )
    .await;
    create_vm(
        &f,
        &api,
        NODE,
        &[("vmid", "311"), ("net0", "virtio,bridge=vmbr0")],
    )
    .await;
    let (st, _) = start_vm(&f, &api, 310).await;
    assert_eq!(st["exitstatus"], "OK");

    // PVE does not ask whether a guest uses the bridge.
    let r = api.send("DELETE", &format!("{NET}/vmbr0"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (ifaces, changes) = list(&api, &[]).await;
    assert!(find(&ifaces, "vmbr0").is_none());
    assert!(
        changes
            .unwrap()
            .contains("\n-auto vmbr0\n-iface vmbr0 inet static\n")
    );
    // Still running on the active config: a start works until the change is applied.
    let (st, _) = start_vm(&f, &api, 311).await;
    assert_eq!(st["exitstatus"], "OK");
    let r = api
        .post(&format!("/nodes/{NODE}/qemu/311/status/stop"), &[])
        .await;
    wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;

    apply(&f, &api).await;
    assert!(list(&api, &[("type", "bridge")]).await.0.is_empty());
    let s = api
        .get(&format!("/nodes/{NODE}/qemu/310/status/current"))
        .await;
    assert_eq!(
        s.data()["status"],
        "running",
        "the guest keeps running, cut off"
    );
    let (st, log) = start_vm(&f, &api, 311).await;
    assert_eq!(st["exitstatus"], "start failed: QEMU exited with code 1");
    assert_eq!(log[0], "bridge 'vmbr0' does not exist");
}

#[tokio::test]
async fn bonds_and_vlans_read_back_as_the_parser_gives_them() {
    let f = start().await;
    let api = f.api("site-2");
    // A NIC the hardware does not have can be configured, and then enslaved.
    let r = api.post(NET, &[("iface", "eno2"), ("type", "eth")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(
            NET,
            &[
                ("iface", "bond0"),
                ("type", "bond"),
                ("slaves", "eno2"),
                ("bond_mode", "active-backup"),
                ("bond-primary", "eno3"),
            ],
        )
        .await;
    assert_eq!(r.status, 500);
    assert!(
        r.message()
            .starts_with("bond 'bond0' - bond-primary interface is not a slave"),
        "{}",
        r.body
    );
    let r = api
        .post(
            NET,
            &[("iface", "bond0"), ("type", "bond"), ("slaves", "eno2")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(NET, &[("iface", "eno1.20"), ("type", "vlan")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(NET, &[("iface", "eno5.30"), ("type", "vlan")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "vlan 'eno5.30' - unable to find parent 'eno5'\n"
    );

    let (ifaces, _) = list(&api, &[]).await;
    let bond = find(&ifaces, "bond0").unwrap();
    assert_eq!(bond["type"], "bond");
    assert_eq!(bond["slaves"], "eno2");
    assert_eq!(bond["bond_miimon"], "100");
    assert_eq!(bond["bond_mode"], "balance-rr");
    let eno2 = find(&ifaces, "eno2").unwrap();
    assert_eq!(eno2["type"], "eth");
    assert_eq!(eno2["autostart"], 1, "a bond's slaves start with it");
    assert!(eno2.get("exists").is_none(), "not a NIC of the hardware");
    let vlan = find(&ifaces, "eno1.20").unwrap();
    assert_eq!(vlan["type"], "vlan");
    assert_eq!(vlan["vlan-raw-device"], "eno1");
    assert_eq!(vlan["vlan-id"], "20");
    assert_eq!(vlan["exists"], 1);
    let (vlans, _) = list(&api, &[("type", "vlan")]).await;
    assert_eq!(vlans.len(), 1);
}

#[tokio::test]
async fn bridges_are_listed_only_to_users_with_sdn_rights_and_changes_need_sys_modify() {
    let yaml = fake_proxmox::Scenario::default_yaml().replacen(
        "    tokens:\n",
        "      - userid: ops@pve\n        password: pw\n    acls:\n      - {path: /nodes, ugid: ops@pve, role: PVEAuditor}\n    tokens:\n",
        1,
    );
    let sc = fake_proxmox::Scenario::from_yaml_str(&yaml).unwrap();
    let f = crate::common::start_with(sc, fake_proxmox::ClockMode::Stepped).await;
    let ops = f.api("site-1").login("ops@pve", "pw").await;
    let r = ops.get("/nodes/ml110-01/network").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<&str> = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["iface"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["eno1"], "no SDN.Audit/SDN.Use on vmbr0");
    assert_eq!(ops.get("/nodes/ml110-01/network/vmbr0").await.status, 200);
    let r = ops
        .post(
            "/nodes/ml110-01/network",
            &[("iface", "vmbr1"), ("type", "bridge")],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/nodes/ml110-01, Sys.Modify)\n"
    );
}
