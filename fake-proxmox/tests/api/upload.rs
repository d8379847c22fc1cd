//! `POST /nodes/{node}/storage/{storage}/upload` as pveproxy takes it: a multipart body whose
//! file part is spooled to `/var/tmp/pveupload-…`, then the `imgcopy` task that makes it a
//! volume; PVE's refusals, and the spooled file gone whatever the outcome.

use crate::common::*;

const NODE: &str = "ml110-01";

/// A multipart/form-data body: the text fields, then the file as part `filename`.
fn multipart(fields: &[(&str, &str)], file_name: &str, data: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----harness-upload-boundary-7d3c";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn upload(
    api: &Api,
    storage: &str,
    fields: &[(&str, &str)],
    name: &str,
    data: &[u8],
) -> Resp {
    let (ct, body) = multipart(fields, name, data);
    let mut rb = api
        .http
        .post(format!(
            "{}/nodes/{NODE}/storage/{storage}/upload",
            api.base
        ))
        .header("content-type", ct)
        .body(body);
    for (k, v) in &api.headers {
        rb = rb.header(k, v);
    }
    let r = rb.send().await.expect("request");
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    Resp { status, body, json }
}

/// Spooled files holding exactly `data` (each test uploads its own bytes).
fn spooled_with(data: &[u8]) -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/var/tmp")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains("pveupload-"))
                .filter(|p| std::fs::read(p).is_ok_and(|b| b == data))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_uploaded_iso_becomes_a_volume_and_its_spool_file_goes() {
    let f = start().await;
    let api = f.api("site-1");
    let data = b"harness upload test iso 1\n".repeat(1000);
    let r = upload(
        &api,
        "local",
        &[("content", "iso")],
        "../my disk.iso",
        &data,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    assert!(upid.contains(":imgcopy:"), "{upid}");
    let st = wait_task(&f, &api, NODE, &upid).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log.iter()
            .any(|l| l.starts_with("starting file import from: /var/tmp/pveupload-")),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l == &format!("file size is: {}", data.len())),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l == "finished file import successfully"),
        "{log:?}"
    );

    let content = api
        .get(&format!("/nodes/{NODE}/storage/local/content"))
        .await;
    let vol = content
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["volid"] == "local:iso/my_disk.iso")
        .unwrap_or_else(|| panic!("the file name normalized as PVE does: {}", content.body));
    assert_eq!(vol["size"].as_u64(), Some(data.len() as u64));
    assert!(
        spooled_with(&data).is_empty(),
        "the spooled file is removed"
    );

    // The same name again overwrites it, as PVE does.
    let bigger = b"harness upload test iso 2\n".repeat(2000);
    let r = upload(&api, "local", &[("content", "iso")], "my_disk.iso", &bigger).await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local/content"))
        .await;
    let sizes: Vec<u64> = content
        .data()
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["volid"] == "local:iso/my_disk.iso")
        .filter_map(|v| v["size"].as_u64())
        .collect();
    assert_eq!(sizes, [bigger.len() as u64]);
}

#[tokio::test]
async fn refused_uploads_say_why_and_leave_no_spool_file() {
    let f = start().await;
    let api = f.api("site-1");
    let data = b"harness upload refused 3\n".repeat(100);
    let r = upload(&api, "local-lvm", &[("content", "iso")], "a.iso", &data).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body
            .contains("can't upload to storage type 'lvmthin', not a file based storage!"),
        "{}",
        r.body
    );
    let r = upload(&api, "local", &[("content", "iso")], "a.exe", &data).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("wrong file extension"), "{}", r.body);
    let r = upload(&api, "local", &[("content", "images")], "a.raw", &data).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        spooled_with(&data).is_empty(),
        "refused uploads remove their file"
    );

    // Without a file (a plain form), even naming a spool file itself: PVE's REST layer alone
    // sets `tmpfilename`.
    let r = api
        .post(
            &format!("/nodes/{NODE}/storage/local/upload"),
            &[
                ("content", "iso"),
                ("filename", "a.iso"),
                ("tmpfilename", "/var/tmp/pveupload-0123456789abcdef"),
            ],
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.body.contains("missing temporary file name"), "{}", r.body);
}

#[tokio::test]
async fn a_checksum_that_does_not_match_fails_the_task() {
    let f = start().await;
    let api = f.api("site-1");
    let data = b"harness upload checksum 4\n".repeat(10);
    let good = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&data))
    };
    let fields = [
        ("content", "iso"),
        ("checksum", good.as_str()),
        ("checksum-algorithm", "sha256"),
    ];
    let r = upload(&api, "local", &fields, "ok.iso", &data).await;
    let upid = r.data().as_str().unwrap().to_string();
    assert_eq!(wait_task(&f, &api, NODE, &upid).await["exitstatus"], "OK");
    let log = task_log(&api, NODE, &upid).await;
    assert!(
        log.iter()
            .any(|l| l == "calculating checksum...OK, checksum verified"),
        "{log:?}"
    );

    let wrong = "0".repeat(64);
    let fields = [
        ("content", "iso"),
        ("checksum", wrong.as_str()),
        ("checksum-algorithm", "sha256"),
    ];
    let r = upload(&api, "local", &fields, "bad.iso", &data).await;
    let st = wait_task(&f, &api, NODE, r.data().as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        format!("checksum mismatch: got '{good}' != expect '{wrong}'"),
        "{st}"
    );
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local/content"))
        .await;
    assert!(!content.body.contains("iso/bad.iso"), "{}", content.body);
    assert!(spooled_with(&data).is_empty());
}
