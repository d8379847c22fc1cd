//! Wire fidelity: 501s, body limits, bad bodies, status lines, version differences.

use std::io::{Read, Write};

use fake_proxmox::{ClockMode, FakeProxmox, Scenario};

use crate::common::*;

#[tokio::test]
async fn importdisk_is_not_a_route() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api
        .post(
            "/nodes/ml110-01/qemu/100/importdisk",
            &[("storage", "local-lvm")],
        )
        .await;
    assert_eq!(r.status, 501);
    assert_eq!(
        r.message(),
        "Method 'POST /nodes/ml110-01/qemu/100/importdisk' not implemented"
    );
    // Unauthenticated, it is a 401 first (auth is checked before routing).
    let r = api
        .with_headers(&[])
        .post("/nodes/ml110-01/qemu/100/importdisk", &[])
        .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn unknown_node_and_vm() {
    let f = start().await;
    let api = f.api("site-1");
    let r = api.get("/nodes/pve/status").await;
    assert_eq!(r.status, 500);
    assert!(
        r.message().starts_with("hostname lookup 'pve' failed"),
        "{}",
        r.message()
    );
    let r = api.get("/nodes/ml110-01/qemu/999/status/current").await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Configuration file 'nodes/ml110-01/qemu-server/999.conf' does not exist\n"
    );
    let r = api.get("/nodes/ml110-01/qemu/abc/config").await;
    assert_eq!(r.status, 400);
    assert!(r.json["errors"]["vmid"].is_string());
}

#[tokio::test]
async fn bad_bodies_get_pves_answers() {
    let f = start().await;
    let api = f.api("site-1");
    let url = format!("{}/nodes/ml110-01/qemu", api.base);
    let auth = ("Authorization", format!("PVEAPIToken={TOKEN}"));
    // Over 512 KiB.
    let big = format!("vmid=100&description={}", "a".repeat(600 * 1024));
    let r = api
        .http
        .post(&url)
        .header(auth.0, &auth.1)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 501);
    // Malformed JSON: the HTTP layer answers 501.
    let r = api
        .http
        .post(&url)
        .header(auth.0, &auth.1)
        .header("content-type", "application/json")
        .body("{\"vmid\":")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 501);
    // Invalid UTF-8 in a form value is decoded leniently and then fails validation.
    let r = api
        .http
        .post(&url)
        .header(auth.0, &auth.1)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(b"vmid=100&name=%ff%fe".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["errors"]["name"].is_string(), "{v}");
    // Invalid UTF-8 in a JSON body.
    let r = api
        .http
        .post(&url)
        .header(auth.0, &auth.1)
        .header("content-type", "application/json")
        .body(b"{\"name\":\"\xff\"}".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 501);
    // JSON bodies may use true/false for booleans; form bodies may not.
    let r = api
        .http
        .post(&url)
        .header(auth.0, &auth.1)
        .json(&serde_json::json!({"vmid": 100, "onboot": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = api
        .post(
            "/nodes/ml110-01/qemu",
            &[("vmid", "101"), ("onboot", "true")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["onboot"],
        "type check ('boolean') failed - got 'true'"
    );
    // A body on GET is refused by the HTTP layer.
    let r = api
        .http
        .get(format!("{}/version", api.base))
        .header(auth.0, &auth.1)
        .body("x=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 501);
    // A URI parameter repeated in the body with another value.
    let r = api
        .post("/nodes/ml110-01/qemu/100/status/start", &[("vmid", "101")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["errors"]["vmid"],
        "duplicate parameter (already defined in URI) with conflicting values!"
    );
}

/// Raw HTTP/1.1 over plain TCP, to see the status line exactly.
fn raw(addr: std::net::SocketAddr, req: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[tokio::test]
async fn status_lines_carry_pves_text_and_7_1_has_no_message_key() {
    let mut sc = Scenario::embedded_default();
    sc.sites[1].version = fake_proxmox::PveVersion::V7_1;
    let fake = FakeProxmox::builder()
        .scenario(sc)
        .tls(false)
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .start()
        .await
        .unwrap();
    let a1 = fake.site("site-1").unwrap().addr();
    let a2 = fake.site("site-2").unwrap().addr();
    let out = tokio::task::spawn_blocking(move || {
        raw(a1, &format!("GET /api2/json/nodes/ml110-01/foo HTTP/1.1\r\nHost: x\r\nAuthorization: PVEAPIToken={TOKEN}\r\nConnection: close\r\n\r\n"))
    })
    .await
    .unwrap();
    assert!(
        out.starts_with("HTTP/1.1 501 Method 'GET /nodes/ml110-01/foo' not implemented\r\n"),
        "{out}"
    );
    assert!(
        out.to_ascii_lowercase()
            .contains("server: pve-api-daemon/3.0")
    );
    let out = tokio::task::spawn_blocking(move || {
        raw(
            a1,
            "GET /api2/json/version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    })
    .await
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 401 No ticket\r\n"), "{out}");
    // PVE 7.1: no `message` key, no import-from.
    let body = "vmid=100&scsi0=local-lvm%3A0%2Cimport-from%3Dlocal%3Aimport%2Fx.qcow2";
    let out = tokio::task::spawn_blocking(move || {
        raw(a2, &format!("POST /api2/json/nodes/r630-01/qemu HTTP/1.1\r\nHost: x\r\nAuthorization: PVEAPIToken={TOKEN}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()))
    })
    .await
    .unwrap();
    assert!(
        out.starts_with("HTTP/1.1 400 Parameter verification failed.\r\n"),
        "{out}"
    );
    let json = out.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert!(v.get("message").is_none(), "{v}");
    assert!(
        v["errors"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("import-from"),
        "{v}"
    );
    fake.shutdown().await;
}

#[tokio::test]
async fn extreme_values_never_break_the_server() {
    let f = start().await;
    let api = f.api("site-2");
    let r = api
        .post(
            "/nodes/r630-01/qemu",
            &[
                ("vmid", "999999999"),
                ("cores", "4294967295"),
                ("sockets", "4294967295"),
                ("memory", "999999999999"),
                ("scsi0", "local-lvm:99999999999999"),
            ],
        )
        .await;
    assert!(matches!(r.status, 200 | 400), "{}", r.body);
    if r.status == 200 {
        wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
        assert_eq!(
            api.get("/nodes/r630-01/qemu/999999999/status/current")
                .await
                .status,
            200
        );
        assert_eq!(api.get("/cluster/resources").await.status, 200);
        let r = api
            .post("/nodes/r630-01/qemu/999999999/status/start", &[])
            .await;
        let st = wait_task(&f, &api, "r630-01", r.data().as_str().unwrap()).await;
        assert_ne!(st["exitstatus"], "OK");
    }
}

/// A method PVE has but the fake does not model yet (adding a second factor): its
/// parameters are checked as PVE checks them, and only a valid call gets the 501.
#[tokio::test]
async fn an_unmodelled_pve_method_validates_before_its_501() {
    let f = start().await;
    // A ticket: the method is `allowtoken => 0`.
    let api = f.api("site-1").login("root@pam", "harness").await;
    let path = "/access/tfa/root@pam";
    let long = "d".repeat(256);
    let r = api
        .post(path, &[("type", "sms"), ("description", &long)])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let errors = &r.json["errors"];
    assert!(errors["type"].is_string(), "{}", r.body);
    assert!(errors["description"].is_string(), "{}", r.body);
    let r = api.post(path, &[("type", "totp")]).await;
    assert_eq!(r.status, 501, "{}", r.body);
    assert_eq!(
        r.message(),
        "Method 'POST /access/tfa/root@pam' not implemented"
    );
}

/// The whole 9.1 API is in a 9.1 site's schema, not only the VM subset: an HA resource
/// (a route far from anything the fake models) has its parameters checked first, then 501.
#[tokio::test]
async fn a_route_outside_the_vm_subset_validates_before_its_501() {
    let f = start().await;
    let api = f.api("site-1").login("root@pam", "harness").await;
    let r = api
        .post(
            "/cluster/ha/resources",
            &[
                ("sid", "vm:100"),
                ("max_restart", "-1"),
                ("failback", "maybe"),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json["errors"]["max_restart"].is_string(), "{}", r.body);
    assert!(r.json["errors"]["failback"].is_string(), "{}", r.body);
    let r = api
        .post("/cluster/ha/resources", &[("sid", "vm:100")])
        .await;
    assert_eq!(r.status, 501, "{}", r.body);
    assert_eq!(
        r.message(),
        "Method 'POST /cluster/ha/resources' not implemented"
    );
    // A path no PVE has stays unknown.
    let r = api.get("/nodes/ml110-01/lxc/200/nonsense").await;
    assert_eq!(r.status, 501, "{}", r.body);
}
