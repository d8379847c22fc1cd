//! Cloud-init: `GET …/cloudinit` over the `[special:cloudinit]` section, `PUT …/cloudinit`
//! regenerating the image, `GET …/cloudinit/dump`.

use serde_json::{Value, json};

use crate::common::*;

const NODE: &str = "ml110-01";
const VM: &str = "/nodes/ml110-01/qemu/180";

async fn cloudinit(api: &Api) -> Vec<Value> {
    let r = api.get(&format!("{VM}/cloudinit")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().as_array().unwrap().clone()
}

async fn dump(api: &Api, ty: &str) -> String {
    let r = api
        .send("GET", &format!("{VM}/cloudinit/dump"), &[("type", ty)])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.data().as_str().unwrap().to_string()
}

async fn set(f: &Fake, api: &Api, form: &[(&str, &str)]) {
    let r = api.post(&format!("{VM}/config"), form).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = wait_task(f, api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
}

async fn cloud_vm(f: &Fake, api: &Api, start: bool) {
    let st = create_vm(
        f,
        api,
        NODE,
        &[
            ("vmid", "180"),
            ("name", "web-1"),
            ("net0", "virtio=BC:24:11:12:34:56,bridge=vmbr0"),
            ("scsi0", "local-lvm:1"),
            ("ide2", "local-lvm:cloudinit"),
            ("ciuser", "ubuntu"),
            ("ipconfig0", "ip=10.10.0.20/24,gw=10.10.0.1"),
            ("nameserver", "10.10.0.1"),
        ],
    )
    .await;
    assert_eq!(st["exitstatus"], "OK");
    if start {
        let r = api.post(&format!("{VM}/status/start"), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let st = wait_task(f, api, NODE, r.data().as_str().unwrap()).await;
        assert_eq!(st["exitstatus"], "OK");
    }
}

#[tokio::test]
async fn live_changes_show_against_the_image_until_regenerated() {
    let f = start().await;
    let api = f.api("site-1");
    cloud_vm(&f, &api, true).await;
    assert!(
        cloudinit(&api)
            .await
            .contains(&json!({"key": "ciuser", "value": "ubuntu"})),
        "freshly started: the image matches the config"
    );

    set(
        &f,
        &api,
        &[
            ("ciuser", "admin"),
            ("sshkeys", "ssh-ed25519%20AAAAC3Nz%20me%40host"),
        ],
    )
    .await;
    let items = cloudinit(&api).await;
    assert!(
        items.contains(&json!({"key": "ciuser", "value": "ubuntu", "pending": "admin"})),
        "{items:?}"
    );
    assert!(
        items.contains(&json!({"key": "sshkeys", "pending": "ssh-ed25519%20AAAAC3Nz%20me%40host"})),
        "a key the image lacks is listed as added: {items:?}"
    );
    let digest_before = api.get(&format!("{VM}/config")).await.data()["digest"].clone();

    let r = api.send("PUT", &format!("{VM}/cloudinit"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json, json!({"data": null}));
    let items = cloudinit(&api).await;
    assert!(
        items.iter().all(|i| i.get("pending").is_none()),
        "regenerated: nothing differs any more: {items:?}"
    );
    assert_ne!(
        api.get(&format!("{VM}/config")).await.data()["digest"],
        digest_before,
        "the special section is part of the config file"
    );
}

#[tokio::test]
async fn a_stopped_vm_records_nothing_and_dump_renders_the_config() {
    let f = start().await;
    let api = f.api("site-1");
    cloud_vm(&f, &api, false).await;
    set(&f, &api, &[("ciuser", "admin")]).await;
    assert!(
        cloudinit(&api)
            .await
            .contains(&json!({"key": "ciuser", "value": "admin"}))
    );

    let user = dump(&api, "user").await;
    assert!(
        user.starts_with("#cloud-config\nhostname: web-1\n"),
        "{user}"
    );
    assert!(user.contains("\nuser: admin\n"), "{user}");
    let net = dump(&api, "network").await;
    assert!(net.contains("mac_address: 'bc:24:11:12:34:56'"), "{net}");
    assert!(
        net.contains("address: '10.10.0.20'\n        netmask: '255.255.255.0'"),
        "{net}"
    );
    assert!(
        net.contains("      address:\n      - '10.10.0.1'\n"),
        "{net}"
    );
    let meta = dump(&api, "meta").await;
    assert!(meta.starts_with("instance-id: "), "{meta}");

    let r = api
        .send(
            "GET",
            &format!("{VM}/cloudinit/dump"),
            &[("type", "vendor")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.json["errors"]["type"]
            .as_str()
            .unwrap()
            .contains("enumeration")
    );
}

#[tokio::test]
async fn unknown_and_locked_vms_get_pves_errors() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api.get("/nodes/ml110-01/qemu/999/cloudinit").await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.body.contains("does not exist"), "{}", r.body);

    // Until its create task has run, the VM is locked (`lock: create`); the clock is stepped.
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "180"), ("ide2", "local-lvm:cloudinit")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api.send("PUT", &format!("{VM}/cloudinit"), &[]).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.body.contains("VM is locked (create)"), "{}", r.body);
}
