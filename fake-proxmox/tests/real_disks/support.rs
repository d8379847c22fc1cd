//! The fixture of `real_disks`: a fake with `FileDisks` over a temp dir, an API client
//! that steps the clock through tasks, and readers of images and ISOs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fake_proxmox::exec::{Disks, FileDisks};
use fake_proxmox::storage::model::Content;
use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
use serde_json::Value;

pub const TOKEN: &str = "root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a";
pub const NODE: &str = "ml110-01";
pub const MIB: u64 = 1024 * 1024;

pub struct Lab {
    pub fake: FakeProxmox,
    disks: Arc<FileDisks>,
    http: reqwest::Client,
    base: String,
    pub tmp: tempfile::TempDir,
}

/// The seed's sites, `local` also taking disks and kept in a directory of the test's own.
pub async fn start() -> Lab {
    start_with(|_, _| {}).await
}

/// As `start`, the scenario changed first by `tweak` (given the test's temp dir).
pub async fn start_with(tweak: impl FnOnce(&mut Scenario, &Path)) -> Lab {
    let tmp = tempfile::tempdir().unwrap();
    let mut sc = Scenario::embedded_default();
    tweak(&mut sc, tmp.path());
    let local = &mut sc.sites[0].nodes[0].storages[0];
    assert_eq!(local.name, "local");
    local.content.push(Content::Images);
    local.backing_dir = Some(tmp.path().join("var-lib-vz"));
    let disks = Arc::new(FileDisks::new(tmp.path().join("disks")));
    let fake = FakeProxmox::builder()
        .scenario(sc)
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .disks(disks.clone())
        .start()
        .await
        .unwrap();
    let site = fake.site("site-1").unwrap();
    let cert = reqwest::Certificate::from_pem(site.cert_pem().as_bytes()).unwrap();
    let http = reqwest::Client::builder()
        .tls_certs_only([cert])
        .build()
        .unwrap();
    let base = format!("{}/api2/json", site.url());
    Lab {
        fake,
        disks,
        http,
        base,
        tmp,
    }
}

impl Lab {
    pub async fn call(&self, method: reqwest::Method, path: &str, form: &[(&str, &str)]) -> Value {
        let url = format!("{}{path}", self.base);
        let rb = self
            .http
            .request(method.clone(), url)
            .header("Authorization", format!("PVEAPIToken={TOKEN}"));
        let rb = if method == reqwest::Method::GET || method == reqwest::Method::DELETE {
            rb.query(form)
        } else {
            rb.form(form)
        };
        let r = rb.send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {body}");
        body["data"].clone()
    }

    /// `POST …/storage/{storage}/upload` with `data` as the multipart file part named
    /// `file_name` (as a browser or proxmoxer sends it): the UPID.
    pub async fn upload(
        &self,
        storage: &str,
        content: &str,
        file_name: &str,
        data: Vec<u8>,
    ) -> String {
        let boundary = "----real-disks-upload-5f1e";
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\n{content}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&data);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let r = self
            .http
            .post(format!(
                "{}/nodes/{NODE}/storage/{storage}/upload",
                self.base
            ))
            .header("Authorization", format!("PVEAPIToken={TOKEN}"))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert!(status.is_success(), "upload: {status} {v}");
        v["data"].as_str().unwrap().to_string()
    }

    /// Start a task with `method path form`, step the clock until it ends: (status, log).
    pub async fn task(
        &self,
        method: &str,
        path: &str,
        form: &[(&str, &str)],
    ) -> (Value, Vec<String>) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let upid = self.call(m, path, form).await;
        let upid = upid.as_str().unwrap().to_string();
        self.wait(&upid).await
    }

    /// Step the clock until task `upid` ends: (status, log).
    pub async fn wait(&self, upid: &str) -> (Value, Vec<String>) {
        let ctl = self.fake.site("site-1").unwrap().control();
        for _ in 0..300 {
            let st = self
                .call(
                    reqwest::Method::GET,
                    &format!("/nodes/{NODE}/tasks/{upid}/status"),
                    &[],
                )
                .await;
            if st["status"] == "stopped" {
                let log = self
                    .call(
                        reqwest::Method::GET,
                        &format!("/nodes/{NODE}/tasks/{upid}/log"),
                        &[("limit", "0")],
                    )
                    .await;
                let lines = log
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l["t"].as_str().unwrap().to_string())
                    .collect();
                return (st, lines);
            }
            ctl.advance_clock(Duration::from_secs(1)).await.unwrap();
        }
        panic!("task {upid} never ended");
    }

    pub fn path(&self, storage: &str, volname: &str) -> PathBuf {
        self.disks.path(NODE, storage, volname).unwrap()
    }
}

pub fn run(program: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub fn info(path: &Path) -> Value {
    let out = run(
        "qemu-img",
        &["info", "--output=json", path.to_str().unwrap()],
    );
    serde_json::from_slice(&out).unwrap()
}

/// A 64 MiB qcow2 whose first MiB is 0xab (written with qemu-io, else imported from raw).
pub fn source_image(dir: &Path) -> PathBuf {
    let img = dir.join("src.qcow2");
    let p = img.to_str().unwrap();
    run("qemu-img", &["create", "-q", "-f", "qcow2", p, "64M"]);
    let io = Command::new("qemu-io")
        .args(["-f", "qcow2", "-c", "write -P 0xab 0 1M", p])
        .output();
    if !io.is_ok_and(|o| o.status.success()) {
        let raw = dir.join("src.raw");
        let mut bytes = vec![0xab_u8; MIB as usize];
        bytes.resize(64 * MIB as usize, 0);
        std::fs::write(&raw, bytes).unwrap();
        run(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "qcow2",
                raw.to_str().unwrap(),
                p,
            ],
        );
    }
    img
}

/// The bytes of `len` at `offset` of an image, read through qemu-img as raw.
pub fn raw_bytes(image: &Path, dir: &Path, offset: u64, len: u64) -> Vec<u8> {
    let raw = dir.join("read.raw");
    let (i, r) = (image.to_str().unwrap(), raw.to_str().unwrap());
    run("qemu-img", &["convert", "-O", "raw", i, r]);
    let all = std::fs::read(&raw).unwrap();
    all[offset as usize..(offset + len) as usize].to_vec()
}

/// A file of the cloud-init image in a volume (any format).
pub fn iso_file(volume: &Path, dir: &Path, name: &str) -> String {
    let iso = dir.join("read.iso");
    let (v, i) = (volume.to_str().unwrap(), iso.to_str().unwrap());
    run("qemu-img", &["convert", "-O", "raw", v, i]);
    String::from_utf8(run("isoinfo", &["-R", "-i", i, "-x", name])).unwrap()
}

/// The volume label of the ISO 9660 image in a volume.
pub fn iso_label(volume: &Path, dir: &Path) -> String {
    let bytes = raw_bytes(volume, dir, 0x8028, 32);
    String::from_utf8(bytes).unwrap().trim_end().to_string()
}
