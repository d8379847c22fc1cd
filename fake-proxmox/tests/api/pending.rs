//! Config changes to a running VM: the `[PENDING]` section, `current=1`, hot-plug, and
//! pending changes applied when the QEMU process stops or (re)starts.

use serde_json::Value;

use crate::common::*;

const NODE: &str = "ml110-01";
const VM: &str = "/nodes/ml110-01/qemu/170";

/// The `GET …/pending` entry for `key`.
async fn pending_item(api: &Api, key: &str) -> Value {
    let r = api.get(&format!("{VM}/pending")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data()
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == key)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn config(api: &Api, current: bool) -> Value {
    let form: &[(&str, &str)] = if current { &[("current", "1")] } else { &[] };
    let r = api.send("GET", &format!("{VM}/config"), form).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().clone()
}

async fn power(f: &Fake, api: &Api, verb: &str) -> Value {
    let r = api.post(&format!("{VM}/status/{verb}"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_task(f, api, NODE, r.data().as_str().unwrap()).await
}

/// No entry of `GET …/pending` carries a pending value or a delete mark.
async fn nothing_pending(api: &Api) -> bool {
    let r = api.get(&format!("{VM}/pending")).await;
    r.data()
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i.get("pending").is_none() && i.get("delete").is_none())
}

async fn running_vm(f: &Fake, api: &Api) {
    let st = create_vm(
        f,
        api,
        NODE,
        &[
            ("vmid", "170"),
            ("name", "web-1"),
            ("memory", "2048"),
            ("cores", "2"),
            ("net0", "virtio,bridge=vmbr0"),
            ("scsi0", "local-lvm:1"),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(power(f, api, "start").await["exitstatus"], "OK");
}

#[tokio::test]
async fn memory_change_on_a_running_vm_waits_in_pending_and_name_applies_at_once() {
    let f = start().await;
    let api = f.api("site-1");
    running_vm(&f, &api).await;
    let before = config(&api, false).await["digest"].clone();
    let r = api
        .post(
            &format!("{VM}/config"),
            &[("memory", "4096"), ("name", "web-2")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");

    // Memory (no `memory` hot-plug by default) waits; the name is a fast-plug option.
    let mem = pending_item(&api, "memory").await;
    assert_eq!(mem["value"], "2048");
    assert_eq!(mem["pending"], "4096");
    let name = pending_item(&api, "name").await;
    assert_eq!(name["value"], "web-2");
    assert!(name.get("pending").is_none(), "{name}");

    let cur = config(&api, true).await;
    assert_eq!(cur["memory"], "2048");
    assert_eq!(cur["name"], "web-2");
    let with_pending = config(&api, false).await;
    assert_eq!(with_pending["memory"], "4096");
    assert_eq!(with_pending["name"], "web-2");
    // One digest for the file, pending section included.
    assert_eq!(cur["digest"], with_pending["digest"]);
    assert_ne!(cur["digest"], before);
    assert_eq!(pending_item(&api, "digest").await["value"], cur["digest"]);
    // The control API shows the config file's other sections too.
    let state = f.ctl("site-1").state().await.unwrap();
    let vm = state["sites"][0]["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 170)
        .unwrap()
        .clone();
    assert_eq!(vm["pending"]["memory"], "4096", "{vm}");
    assert_eq!(vm["cloudinit"]["name"], "web-1", "{vm}");
    // The running VM still has its old memory.
    let status = api.get(&format!("{VM}/status/current")).await;
    assert_eq!(status.data()["maxmem"], 2048u64 << 20);

    // Stopping applies the pending section.
    assert_eq!(power(&f, &api, "stop").await["exitstatus"], "OK");
    assert!(nothing_pending(&api).await);
    assert_eq!(config(&api, true).await["memory"], "4096");

    // A stopped VM takes changes directly.
    api.send("PUT", &format!("{VM}/config"), &[("memory", "1024")])
        .await;
    assert_eq!(config(&api, true).await["memory"], "1024");
    assert!(nothing_pending(&api).await);

    // Start: the VM runs with what the config says.
    assert_eq!(power(&f, &api, "start").await["exitstatus"], "OK");
    let status = api.get(&format!("{VM}/status/current")).await;
    assert_eq!(status.data()["maxmem"], 1024u64 << 20);
}

#[tokio::test]
async fn delete_on_a_running_vm_is_marked_until_reboot_and_revert_drops_a_change() {
    let f = start().await;
    let api = f.api("site-1");
    running_vm(&f, &api).await;
    let r = api
        .send(
            "PUT",
            &format!("{VM}/config"),
            &[("delete", "cores"), ("bios", "ovmf"), ("sockets", "2")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let cores = pending_item(&api, "cores").await;
    assert_eq!(cores["value"], 2);
    assert_eq!(cores["delete"], 1);
    assert_eq!(pending_item(&api, "bios").await["pending"], "ovmf");
    assert!(config(&api, false).await.get("cores").is_none());
    assert_eq!(config(&api, true).await["cores"], 2);

    // `revert` drops a pending value.
    let r = api
        .send("PUT", &format!("{VM}/config"), &[("revert", "sockets")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(pending_item(&api, "sockets").await, Value::Null);
    let r = api
        .send(
            "PUT",
            &format!("{VM}/config"),
            &[("revert", "bios"), ("bios", "seabios")],
        )
        .await;
    assert_eq!(r.status, 400);

    // A reboot is a shutdown and a start: the pending section is applied.
    assert_eq!(power(&f, &api, "reboot").await["exitstatus"], "OK");
    assert!(nothing_pending(&api).await);
    let cur = config(&api, true).await;
    assert!(cur.get("cores").is_none());
    assert_eq!(cur["bios"], "ovmf");
    let status = api.get(&format!("{VM}/status/current")).await;
    assert_eq!(status.data()["status"], "running");
}

#[tokio::test]
async fn new_disk_hot_plugs_into_a_running_vm() {
    let f = start().await;
    let api = f.api("site-1");
    running_vm(&f, &api).await;
    let r = api
        .post(&format!("{VM}/config"), &[("scsi1", "local-lvm:1")])
        .await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    // `disk` is in the default `hotplug` list.
    assert_eq!(
        config(&api, true).await["scsi1"],
        "local-lvm:vm-170-disk-1,size=1G"
    );
    // Without disk hot-plug a new disk waits (its volume already exists).
    api.send("PUT", &format!("{VM}/config"), &[("hotplug", "network")])
        .await;
    assert_eq!(config(&api, true).await["hotplug"], "network");
    let r = api
        .post(&format!("{VM}/config"), &[("scsi2", "local-lvm:1")])
        .await;
    wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert!(config(&api, true).await.get("scsi2").is_none());
    assert_eq!(
        pending_item(&api, "scsi2").await["pending"],
        "local-lvm:vm-170-disk-2,size=1G"
    );
    let r = api
        .send(
            "GET",
            &format!("{VM}/config"),
            &[("current", "1"), ("snapshot", "s1")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["current"],
        "cannot use 'snapshot' parameter with 'current'"
    );
}
