//! `serve --state-dir`: the real binary, SIGKILLed in the middle of a rollout and started
//! again on the same state dir, loses nothing it acknowledged; `/_fake/state/export` and
//! `/import` move a world between servers; bad state files are refused clearly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_proxmox::ControlClient;
use serde_json::Value;

const TOKEN: &str = "root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a";
const NODE: &str = "ml110-01";

struct Server {
    child: Child,
    /// Site name → (url, fingerprint).
    sites: BTreeMap<String, (String, String)>,
}

impl Server {
    fn url(&self, site: &str) -> &str {
        &self.sites[site].0
    }
    fn ctl(&self, site: &str) -> ControlClient {
        ControlClient::new(self.url(site), None)
    }
    /// SIGKILL, by pid: no chance to flush anything.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fake-proxmox"));
    c.arg("serve").arg("--no-auth-delay").args(args);
    c
}

/// Start the binary and read its `ready` lines.
fn serve(args: &[&str]) -> Server {
    let mut child = command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut sites = BTreeMap::new();
    for line in out.lines() {
        let line = line.unwrap();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap()
                .to_string()
        };
        sites.insert(field("site="), (field("url="), field("fingerprint=")));
        if sites.len() == 2 {
            break;
        }
    }
    assert_eq!(sites.len(), 2, "the server did not come up");
    Server { child, sites }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client that trusts the state dir's certificate and nothing else (a pinned client).
fn pinned_client(dir: &Path) -> reqwest::Client {
    let pem = std::fs::read(dir.join("cert.pem")).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn call(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    form: &[(&str, String)],
) -> Result<(u16, Value), String> {
    let resp = http
        .request(method, format!("{base}/api2/json{path}"))
        .header("Authorization", format!("PVEAPIToken={TOKEN}"))
        .form(form)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    Ok((status, body))
}

/// What the client was told before the crash.
#[derive(Default)]
struct Acked {
    /// vmid → the UPID of its create.
    created: BTreeMap<u32, String>,
    /// vmid → the UPID of its start.
    started: BTreeMap<u32, String>,
    /// UPIDs the client saw stopped, with their exit status.
    finished: BTreeMap<String, String>,
}

/// Create and start VMs until a request fails (the server died); poll each task once.
async fn rollout(http: reqwest::Client, base: String, acked: Arc<Mutex<Acked>>) {
    let upid = |v: &Value| v["data"].as_str().unwrap_or_default().to_string();
    for vmid in 200u32.. {
        let create = [
            ("vmid", vmid.to_string()),
            ("name", format!("web-{vmid}")),
            ("memory", "512".into()),
            ("scsi0", "local-lvm:1".into()),
            ("net0", "virtio,bridge=vmbr0".into()),
        ];
        let path = format!("/nodes/{NODE}/qemu");
        let Ok((200, v)) = call(&http, &base, reqwest::Method::POST, &path, &create).await else {
            return;
        };
        acked.lock().unwrap().created.insert(vmid, upid(&v));
        // Start the VM before the previous one: a start may find its create still running.
        let prev = vmid - 1;
        if prev >= 200 {
            let path = format!("/nodes/{NODE}/qemu/{prev}/status/start");
            match call(&http, &base, reqwest::Method::POST, &path, &[]).await {
                Ok((200, v)) => {
                    acked.lock().unwrap().started.insert(prev, upid(&v));
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
        let polls: Vec<String> = {
            let a = acked.lock().unwrap();
            a.created
                .values()
                .chain(a.started.values())
                .filter(|u| !a.finished.contains_key(*u))
                .cloned()
                .collect()
        };
        for u in polls {
            let path = format!("/nodes/{NODE}/tasks/{u}/status");
            match call(&http, &base, reqwest::Method::GET, &path, &[]).await {
                Ok((200, v)) if v["data"]["status"] == "stopped" => {
                    let st = v["data"]["exitstatus"].as_str().unwrap().to_string();
                    acked.lock().unwrap().finished.insert(u, st);
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

async fn get(http: &reqwest::Client, base: &str, path: &str) -> (u16, Value) {
    call(http, base, reqwest::Method::GET, path, &[])
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_rollout_loses_nothing_that_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap().to_string();
    let pin = format!("site-1=127.0.0.1:{}", free_port());
    let args = [
        "--state-dir",
        &state,
        "--clock",
        "scaled:20",
        "--listen",
        &pin,
    ];
    let first = serve(&args);
    let base = first.url("site-1").to_string();
    let fingerprint = first.sites["site-1"].1.clone();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fingerprint")).unwrap(),
        format!("{fingerprint}\n")
    );
    let http = pinned_client(dir.path());
    let fault = first
        .ctl("site-1")
        .add_fault(fake_proxmox::faults::FaultRule {
            path_pattern: Some("/nodes/*/qemu/999/**".into()),
            status: Some(500),
            message: Some("kept across the restart".into()),
            ..Default::default()
        })
        .await
        .unwrap();

    let acked = Arc::new(Mutex::new(Acked::default()));
    let client = tokio::spawn(rollout(http.clone(), base.clone(), acked.clone()));
    let t0 = Instant::now();
    loop {
        {
            let a = acked.lock().unwrap();
            if a.created.len() >= 25 && a.finished.len() >= 10 {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the rollout stalls"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // In the middle of the rollout: requests are in flight.
    first.kill();
    client.await.unwrap();
    let acked = std::mem::take(&mut *acked.lock().unwrap());

    let second = serve(&args);
    assert_eq!(second.url("site-1"), base, "the pinned port is reused");
    assert_eq!(second.sites["site-1"].1, fingerprint, "same certificate");
    assert_eq!(second.sites["site-2"].1, fingerprint);
    // The client that pinned the certificate goes on working.
    let faults = second.ctl("site-1").faults().await.unwrap();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].id, Some(fault));

    let mut interrupted = 0;
    for (vmid, upid) in &acked.created {
        let (st, cfg) = get(&http, &base, &format!("/nodes/{NODE}/qemu/{vmid}/config")).await;
        assert_eq!(st, 200, "VM {vmid} was acknowledged: {cfg}");
        let (st, task) = get(&http, &base, &format!("/nodes/{NODE}/tasks/{upid}/status")).await;
        assert_eq!(st, 200, "the create task of {vmid} is kept: {task}");
        assert_eq!(task["data"]["status"], "stopped", "{task}");
        let exit = task["data"]["exitstatus"].as_str().unwrap();
        if let Some(seen) = acked.finished.get(upid) {
            assert_eq!(exit, seen, "VM {vmid}'s create as the client saw it end");
        }
        match exit {
            "OK" => assert_eq!(cfg["data"]["name"], format!("web-{vmid}"), "{cfg}"),
            // A create whose worker died with the process, as PVE shows it after a crash:
            // the config keeps `lock: create`.
            "unexpected status" => {
                interrupted += 1;
                assert!(!acked.finished.contains_key(upid));
                assert_eq!(cfg["data"]["lock"], "create", "{cfg}");
            }
            other => panic!("VM {vmid}'s create ended with {other:?}"),
        }
    }
    for (vmid, upid) in &acked.started {
        let (st, task) = get(&http, &base, &format!("/nodes/{NODE}/tasks/{upid}/status")).await;
        assert_eq!(st, 200, "the start task of {vmid} is kept: {task}");
        if acked.finished.get(upid).map(String::as_str) == Some("OK") {
            let (_, cur) = get(
                &http,
                &base,
                &format!("/nodes/{NODE}/qemu/{vmid}/status/current"),
            )
            .await;
            assert_eq!(cur["data"]["status"], "running", "VM {vmid}: {cur}");
        }
    }
    eprintln!(
        "acknowledged: {} creates, {} starts, {} tasks seen finished; {interrupted} creates interrupted",
        acked.created.len(),
        acked.started.len(),
        acked.finished.len()
    );
    assert!(acked.finished.len() >= 10);

    // The restarted world knows every id it acknowledged: none is handed out twice.
    let last = *acked.created.keys().next_back().unwrap();
    let again = [("vmid", last.to_string()), ("memory", "512".to_string())];
    let path = format!("/nodes/{NODE}/qemu");
    let (st, v) = call(&http, &base, reqwest::Method::POST, &path, &again)
        .await
        .unwrap();
    assert_eq!(st, 500, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("already exists"),
        "{v}"
    );
    let (_, next) = get(&http, &base, "/cluster/nextid").await;
    let next: u32 = next["data"].as_str().unwrap().parse().unwrap();
    assert!(!acked.created.contains_key(&next), "nextid {next} is taken");
    second.kill();
}

/// The parts of an export that are the world (the time it was taken differs).
fn world_of(file: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(file).unwrap();
    v.as_object_mut().unwrap().remove("saved_at");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_imported_elsewhere_is_the_same_world_and_bad_files_change_nothing() {
    let a = serve(&["--clock", "stepped"]);
    let b = serve(&["--clock", "stepped"]);
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let base = a.url("site-1").to_string();
    for vmid in [300u32, 301] {
        let form = [
            ("vmid", vmid.to_string()),
            ("name", format!("db-{vmid}")),
            ("scsi0", "local-lvm:2".into()),
        ];
        let (st, v) = call(
            &http,
            &base,
            reqwest::Method::POST,
            &format!("/nodes/{NODE}/qemu"),
            &form,
        )
        .await
        .unwrap();
        assert_eq!(st, 200, "{v}");
    }
    a.ctl("site-1")
        .advance_clock(Duration::from_secs(600))
        .await
        .unwrap();
    let snap = a.ctl("site-1").snapshot().await.unwrap();

    let file = a.ctl("site-1").export_state().await.unwrap();
    b.ctl("site-2").import_state(&file).await.unwrap();
    let again = b.ctl("site-1").export_state().await.unwrap();
    assert_eq!(world_of(&again), world_of(&file));
    let bbase = b.url("site-1");
    let (st, cfg) = get(&http, bbase, &format!("/nodes/{NODE}/qemu/301/config")).await;
    assert_eq!((st, cfg["data"]["name"].as_str()), (200, Some("db-301")));
    b.ctl("site-1").restore(&snap).await.unwrap();

    // Refused whole, with what is wrong; the world stays as it was.
    let before = world_of(&b.ctl("site-1").export_state().await.unwrap());
    let mut newer: Value = serde_json::from_slice(&file).unwrap();
    newer["version"] = 999.into();
    let mut broken: Value = serde_json::from_slice(&file).unwrap();
    broken["world"]["sites"][0]["vms"]["300"]["node"] = "elsewhere".into();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not a fake-proxmox state file"),
        (
            file[..file.len() / 3].to_vec(),
            "not a fake-proxmox state file",
        ),
        (serde_json::to_vec(&newer).unwrap(), "version 999"),
        (serde_json::to_vec(&broken).unwrap(), "node 'elsewhere'"),
    ];
    for (bad, want) in cases {
        match b.ctl("site-1").import_state(&bad).await {
            Err(fake_proxmox::ControlError::Refused { status, message }) => {
                assert_eq!(status, 400, "{message}");
                assert!(message.contains(want), "{message:?} does not say {want:?}");
            }
            other => panic!("a bad file was not refused: {other:?}"),
        }
    }
    assert_eq!(
        world_of(&b.ctl("site-1").export_state().await.unwrap()),
        before
    );
}

/// Run the binary on a state dir expected to be refused: its exit status and stderr.
fn refused_start(dir: &Path) -> (Option<i32>, String) {
    let mut child = command(&["--state-dir", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the server started on a bad state file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_corrupt_or_unknown_state_file_stops_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("state.json"), b"{\"format\": \"fake-prox").unwrap();
    let (code, err) = refused_start(dir.path());
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not a fake-proxmox state file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let doc = serde_json::json!({"format": "fake-proxmox-state", "version": 7, "world": {}});
    std::fs::write(dir.path().join("state.json"), doc.to_string()).unwrap();
    let (code, err) = refused_start(dir.path());
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("state file version 7"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Refused, not replaced: the file is still there for whoever can read it.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("state.json")).unwrap(),
        doc.to_string()
    );
}
