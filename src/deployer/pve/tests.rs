//! The client against wiremock: exact headers, parameters, envelopes and error mapping.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::json;
use wiremock::matchers::{body_string, header, header_exists, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::tasks::TaskWait;
use super::*;

const TOKEN_ID: &str = "root@pam!sankofa-instance-1-api-token";
const SECRET: &str = "6f1c2b9e-4d3a-4b8f-a1e7-5c0d9e8f7a61";

fn token_client(server: &MockServer) -> PveClient {
    PveClient::new(
        &server.uri(),
        Credentials::Token {
            token_id: TOKEN_ID.into(),
            secret: SECRET.into(),
        },
        &ClientOptions {
            timeout: Duration::from_millis(800),
            ..ClientOptions::default()
        },
    )
    .unwrap()
}

fn data(v: serde_json::Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({ "data": v }))
}

/// Every call carries the token header, never a cookie or a CSRF token.
fn no_cookie(req: &Request) -> bool {
    !req.headers.contains_key("cookie") && !req.headers.contains_key("csrfpreventiontoken")
}

#[tokio::test]
async fn token_header_and_query_params() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api2/json/cluster/resources"))
        .and(query_param("type", "vm"))
        .and(header("authorization", format!("PVEAPIToken={TOKEN_ID}={SECRET}").as_str()))
        .and(no_cookie)
        .respond_with(data(json!([
            {"id": "qemu/100", "type": "qemu", "vmid": 100, "node": "ml110-01", "name": "nginx-proxy-vm", "status": "running", "template": 0, "maxcpu": 2}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let c = token_client(&server);
    let r = c.vm_resources().await.unwrap();
    assert_eq!(r[0].vmid, Some(100));
    assert_eq!(r[0].name.as_deref(), Some("nginx-proxy-vm"));
    assert!(!r[0].template);
}

#[tokio::test]
async fn create_is_a_form_post_and_returns_the_upid() {
    let server = MockServer::start().await;
    let upid = "UPID:ml110-01:00001234:00ABCDEF:66B0C1D2:qmcreate:104:root@pam!sankofa-instance-1-api-token:";
    Mock::given(method("POST"))
        .and(path("/api2/json/nodes/ml110-01/qemu"))
        .and(header("content-type", "application/x-www-form-urlencoded"))
        .and(body_string(
            "vmid=104&name=nginx-proxy-vm&scsi0=local-lvm%3A0%2Cimport-from%3Dlocal%3Aimport%2Fu.qcow2",
        ))
        .and(no_cookie)
        .respond_with(data(json!(upid)))
        .expect(1)
        .mount(&server)
        .await;
    let c = token_client(&server);
    let got = c
        .create_vm(
            "ml110-01",
            &[
                ("vmid", "104".into()),
                ("name", "nginx-proxy-vm".into()),
                (
                    "scsi0",
                    "local-lvm:0,import-from=local:import/u.qcow2".into(),
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(got, upid);
}

#[tokio::test]
async fn nextid_is_a_string_on_the_wire() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api2/json/cluster/nextid"))
        .respond_with(data(json!("107")))
        .mount(&server)
        .await;
    assert_eq!(token_client(&server).next_id().await.unwrap(), 107);
}

#[tokio::test]
async fn parameter_errors_keep_the_errors_map_and_message() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api2/json/nodes/r630-01/qemu"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "data": null,
            "errors": {"storage": "storage 'ceph-fs' does not support vm images"},
            "message": "Parameter verification failed.\n"
        })))
        .mount(&server)
        .await;
    let e = token_client(&server)
        .create_vm("r630-01", &[("vmid", "100".into())])
        .await
        .unwrap_err();
    match &e {
        PveError::Http {
            status,
            errors,
            message,
            ..
        } => {
            assert_eq!(*status, 400);
            assert_eq!(
                errors["storage"],
                "storage 'ceph-fs' does not support vm images"
            );
            assert_eq!(message.as_deref(), Some("Parameter verification failed."));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string()
            .contains("storage: storage 'ceph-fs' does not support vm images")
    );
    let class = crate::deployer::errors::classify("site-2", "r630-01", Some("ceph-fs"), &e);
    assert_eq!(class.reason(), "StorageNotForImages");
}

#[tokio::test]
async fn auth_failure_is_refused_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api2/json/version"))
        .respond_with(ResponseTemplate::new(401))
        .expect(1)
        .mount(&server)
        .await;
    let e = token_client(&server).version().await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    let class = crate::deployer::errors::classify("site-1", "n", None, &e);
    assert_eq!(class.reason(), "AuthRefused");
    assert!(!class.is_retryable());
    assert!(!e.to_string().contains(SECRET));
}

#[tokio::test]
async fn ticket_login_cookie_and_csrf_on_writes() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api2/json/access/ticket"))
        .and(body_string("username=root%40pam&password=harness"))
        .respond_with(data(json!({
            "username": "root@pam",
            "ticket": "PVE:root@pam:66B0C1D2::c2ln",
            "CSRFPreventionToken": "66B0C1D2:Y3NyZg"
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api2/json/nodes/ml110-01/network"))
        .and(header(
            "cookie",
            "PVEAuthCookie=PVE:root@pam:66B0C1D2::c2ln",
        ))
        .and(|r: &Request| {
            !r.headers.contains_key("csrfpreventiontoken")
                && !r.headers.contains_key("authorization")
        })
        .respond_with(data(
            json!([{"iface": "vmbr0", "type": "bridge", "active": 1}]),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api2/json/nodes/ml110-01/qemu/100/status/start"))
        .and(header(
            "cookie",
            "PVEAuthCookie=PVE:root@pam:66B0C1D2::c2ln",
        ))
        .and(header("csrfpreventiontoken", "66B0C1D2:Y3NyZg"))
        .respond_with(data(json!(
            "UPID:ml110-01:00000001:00000001:66B0C1D2:qmstart:100:root@pam:"
        )))
        .expect(1)
        .mount(&server)
        .await;
    let c = PveClient::new(
        &server.uri(),
        Credentials::Password {
            username: "root@pam".into(),
            password: "harness".into(),
        },
        &ClientOptions::default(),
    )
    .unwrap();
    let n = c.network("ml110-01").await.unwrap();
    assert_eq!(n[0].iface, "vmbr0");
    assert!(n[0].active);
    c.start_vm("ml110-01", 100).await.unwrap();
}

#[tokio::test]
async fn expired_ticket_logs_in_again_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api2/json/access/ticket"))
        .respond_with(data(json!({"ticket": "PVE:t", "CSRFPreventionToken": "c"})))
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api2/json/version"))
        .respond_with(ResponseTemplate::new(401))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api2/json/version"))
        .respond_with(data(
            json!({"version": "9.1.1", "release": "9.1", "repoid": "42c5e26a"}),
        ))
        .mount(&server)
        .await;
    let c = PveClient::new(
        &server.uri(),
        Credentials::Password {
            username: "root@pam".into(),
            password: "harness".into(),
        },
        &ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(c.version().await.unwrap().major_minor(), Some((9, 1)));
}

#[tokio::test]
async fn bad_login_is_an_auth_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api2/json/access/ticket"))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_json(json!({"data": null, "message": "authentication failure\n"})),
        )
        .mount(&server)
        .await;
    let c = PveClient::new(
        &server.uri(),
        Credentials::Password {
            username: "root@pam".into(),
            password: "wrong-password-123".into(),
        },
        &ClientOptions::default(),
    )
    .unwrap();
    let e = c.authenticate().await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert!(!format!("{e} {e:?}").contains("wrong-password-123"));
}

#[tokio::test]
async fn tasks_are_polled_until_stopped() {
    let server = MockServer::start().await;
    let upid = "UPID:r630-01:00000002:00000003:66B0C1D2:qmcreate:101:root@pam:";
    let status_path = format!("/api2/json/nodes/r630-01/tasks/{upid}/status");
    Mock::given(method("GET"))
        .and(path(status_path.as_str()))
        .respond_with(data(
            json!({"upid": upid, "status": "running", "node": "r630-01", "type": "qmcreate"}),
        ))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(status_path.as_str()))
        .respond_with(data(
            json!({"upid": upid, "status": "stopped", "exitstatus": "OK"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let wait = TaskWait {
        poll: Duration::from_millis(5),
        timeout: Duration::from_secs(5),
    };
    assert_eq!(
        token_client(&server).await_task(upid, wait).await.unwrap(),
        "OK"
    );
}

#[tokio::test]
async fn failed_tasks_carry_exitstatus_and_log() {
    let server = MockServer::start().await;
    let upid = "UPID:ml110-01:00000002:00000003:66B0C1D2:qmcreate:101:root@pam:";
    let exit = "unable to create VM 101 - lvcreate 'pve/vm-101-disk-0' error:   Volume group \"pve\" has insufficient free space (10 extents): 5120 required.";
    Mock::given(method("GET"))
        .and(path(
            format!("/api2/json/nodes/ml110-01/tasks/{upid}/status").as_str(),
        ))
        .respond_with(data(json!({"status": "stopped", "exitstatus": exit})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(
            format!("/api2/json/nodes/ml110-01/tasks/{upid}/log").as_str(),
        ))
        .and(query_param("limit", "0"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "data": [{"n": 1, "t": "starting"}, {"n": 2, "t": format!("TASK ERROR: {exit}")}],
            "total": 2
        })))
        .mount(&server)
        .await;
    let e = token_client(&server)
        .await_task(upid, TaskWait::default())
        .await
        .unwrap_err();
    match &e {
        PveError::Task {
            exitstatus, log, ..
        } => {
            assert_eq!(exitstatus, exit);
            assert_eq!(
                log.last().map(String::as_str),
                Some(format!("TASK ERROR: {exit}").as_str())
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let class = crate::deployer::errors::classify("site-1", "ml110-01", Some("local-lvm"), &e);
    assert_eq!(class.reason(), "StorageFull");
    assert!(class.to_string().contains("local-lvm"));
}

#[tokio::test]
async fn resize_put_and_destroy_delete_params() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(path("/api2/json/nodes/ml110-01/qemu/100/resize"))
        .and(body_string("disk=scsi0&size=20G"))
        .respond_with(data(json!(null)))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api2/json/nodes/ml110-01/qemu/100"))
        .and(query_param("purge", "1"))
        .and(query_param("destroy-unreferenced-disks", "1"))
        .respond_with(data(json!(
            "UPID:ml110-01:00000001:00000001:66B0C1D2:qmdestroy:100:root@pam:"
        )))
        .expect(1)
        .mount(&server)
        .await;
    let c = token_client(&server);
    // PVE < 8.0 answers null to resize; newer ones a UPID.
    assert_eq!(
        c.resize("ml110-01", 100, "scsi0", "20G").await.unwrap(),
        None
    );
    assert!(
        c.destroy_vm("ml110-01", 100)
            .await
            .unwrap()
            .contains("qmdestroy")
    );
}

#[tokio::test]
async fn agent_interfaces_and_not_running() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(
            "/api2/json/nodes/n/qemu/100/agent/network-get-interfaces",
        ))
        .respond_with(
            ResponseTemplate::new(500).set_body_json(
                json!({"data": null, "message": "QEMU guest agent is not running\n"}),
            ),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api2/json/nodes/n/qemu/100/agent/network-get-interfaces"))
        .respond_with(data(json!({"result": [
            {"name": "lo", "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}]},
            {"name": "eth0", "hardware-address": "bc:24:11:2e:c5:4a", "ip-addresses": [
                {"ip-address": "fe80::1", "ip-address-type": "ipv6", "prefix": 64},
                {"ip-address": "192.168.11.120", "ip-address-type": "ipv4", "prefix": 24}]}
        ]})))
        .mount(&server)
        .await;
    let c = token_client(&server);
    let e = c.agent_interfaces("n", 100).await.unwrap_err();
    assert!(e.text().contains("QEMU guest agent is not running"));
    let ifs = c.agent_interfaces("n", 100).await.unwrap();
    assert_eq!(ifs.primary_ipv4().as_deref(), Some("192.168.11.120"));
}

#[tokio::test]
async fn every_call_has_a_timeout() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api2/json/nodes/n/status"))
        .respond_with(data(json!({})).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let e = token_client(&server).node_status("n").await.unwrap_err();
    assert!(
        matches!(e, PveError::Transport { timeout: true, .. }),
        "{e:?}"
    );
    assert_eq!(
        crate::deployer::errors::classify("s", "n", None, &e).reason(),
        "NodeUnreachable"
    );
}

#[tokio::test]
async fn storage_listing_decodes_pve_types() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api2/json/nodes/r630-01/storage"))
        .and(header_exists("authorization"))
        .respond_with(data(json!([
            {"storage": "ceph-fs", "type": "cephfs", "content": "iso,vztmpl,backup,snippets", "active": 1, "enabled": 1, "shared": 1, "total": 10995116277760u64, "used": 0, "avail": 10995116277760u64},
            {"storage": "local-lvm", "type": "lvmthin", "content": "images,rootdir", "active": 1, "enabled": 1, "shared": 0, "total": 183931974451u64, "used": 0, "avail": 183931974451u64}
        ])))
        .mount(&server)
        .await;
    let s = token_client(&server).storages("r630-01").await.unwrap();
    assert!(!s[0].has_content("images") && s[0].shared);
    assert!(s[1].has_content("images") && s[1].raw_only());
}

/// PVE puts its error text in the HTTP status line; the client keeps it (HTTP/1.1 only).
#[tokio::test]
async fn reason_phrase_from_the_status_line() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = sock.read(&mut buf).await;
        let body = "{\"data\":null}";
        let resp = format!(
            "HTTP/1.1 500 unable to create VM 108 - VM 108 already exists on node 'r630-01'\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(resp.as_bytes()).await.unwrap();
    });
    let c = PveClient::new(
        &format!("http://{addr}"),
        Credentials::Token {
            token_id: TOKEN_ID.into(),
            secret: SECRET.into(),
        },
        &ClientOptions::default(),
    )
    .unwrap();
    let e = c
        .create_vm("r630-01", &[("vmid", "108".into())])
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(500));
    assert!(e.text().contains("VM 108 already exists"), "{e}");
}

/// PVE is Perl: counts arrive as numbers, floats or strings, flags as booleans, 1/0 or strings,
/// and a listing's rows may carry keys of any shape the client does not read.
#[test]
fn listings_decode_perl_shaped_values_straight_from_the_body() {
    let body = br#"{"data":[
        {"id":"qemu/100","type":"qemu","vmid":"100","maxmem":2147483648.0,"template":"1",
         "name":"a","node":"n1","tags":["x"],"extra":{"k":[1,2]},"maxcpu":null},
        {"id":"qemu/101","type":"qemu","vmid":101,"template":0,"maxdisk":-1,"lock":"create"},
        {"id":"node/n1","type":"node","template":true,"maxcpu":true}
    ]}"#;
    let rows: Vec<api::ClusterResource> = decode_data(body).expect("decodes");
    assert_eq!(rows[0].vmid, Some(100));
    assert_eq!(rows[0].maxmem, Some(2_147_483_648));
    assert!(rows[0].template);
    assert_eq!(rows[0].maxcpu, None);
    assert_eq!(rows[1].vmid, Some(101));
    assert!(!rows[1].template);
    assert_eq!(rows[1].maxdisk, None, "a negative size is no size");
    assert_eq!(rows[1].lock.as_deref(), Some("create"));
    assert!(rows[2].template);
    assert_eq!(rows[2].maxcpu, None, "a flag is no count");
    // No `data` (or `null`) is what `null` decodes to.
    let none: Option<Vec<api::ClusterResource>> = decode_data(b"{}").expect("no data");
    assert!(none.is_none());
    let unit: () = decode_data(br#"{"data":null}"#).expect("null data");
    let () = unit;
}
