//! A control plane behind a token (`serve --control-token`, `Builder::control_token`): every
//! `/_fake/…` request but `/_fake/health` needs `Authorization: Bearer TOKEN`; the PVE API
//! is not affected; without a token the control plane stays open.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use fake_proxmox::{ClockMode, ControlClient, ControlToken, FakeProxmox};
use serde_json::Value;

use crate::common::*;

async fn guarded(token: &str) -> Fake {
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .control_token(ControlToken::new(token).unwrap())
        .start()
        .await
        .unwrap();
    Fake { fake }
}

/// `GET url` with an optional `Authorization` header: status and JSON body.
async fn get(url: &str, auth: Option<&str>) -> (u16, Value) {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let mut req = http.get(url);
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn control_token_is_required_and_refusals_say_why() {
    let f = guarded("s3cret-token").await;
    let url = format!("{}/_fake/journal", f.fake.site("site-1").unwrap().url());
    let (status, body) = get(&url, None).await;
    assert_eq!(status, 401);
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("needs a token"), "{msg}");
    assert!(msg.contains("Authorization: Bearer"), "{msg}");

    let (status, body) = get(&url, Some("Bearer s3cret-tokem")).await;
    assert_eq!(status, 401);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("wrong control token")
    );

    let (status, body) = get(&url, Some("s3cret-token")).await;
    assert_eq!(status, 401);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("must be 'Bearer TOKEN'")
    );

    assert_eq!(get(&url, Some("Bearer s3cret-token")).await.0, 200);
}

#[tokio::test]
async fn the_typed_clients_carry_the_token() {
    let f = guarded("s3cret-token").await;
    let site = f.fake.site("site-1").unwrap();
    assert_eq!(site.control_token().unwrap().as_str(), "s3cret-token");
    f.ctl("site-1").journal().await.unwrap();
    f.ctl("site-1").export_state().await.unwrap();
    let bare = ControlClient::new(site.url(), Some(site.cert_pem()));
    let e = bare.journal().await.unwrap_err();
    assert!(
        matches!(e, fake_proxmox::ControlError::Refused { status: 401, .. }),
        "{e}"
    );
    let wrong = bare.clone().with_token("nope");
    assert!(wrong.reset().await.is_err());
    bare.with_token("s3cret-token").reset().await.unwrap();
}

#[tokio::test]
async fn health_and_the_pve_api_need_no_control_token() {
    let f = guarded("s3cret-token").await;
    let url = f.fake.site("site-1").unwrap().url().to_string();
    assert_eq!(get(&format!("{url}/_fake/health"), None).await.0, 200);
    assert_eq!(f.api("site-1").get("/version").await.status, 200);
    // A control token is not a PVE credential.
    let api = f
        .api("site-1")
        .with_headers(&[("Authorization", "Bearer s3cret-token")]);
    assert_eq!(api.get("/version").await.status, 401);
}

#[tokio::test]
async fn without_a_token_the_control_plane_stays_open() {
    let f = start().await;
    assert!(f.fake.site("site-1").unwrap().control_token().is_none());
    let url = format!("{}/_fake/journal", f.fake.site("site-1").unwrap().url());
    assert_eq!(get(&url, None).await.0, 200);
}

/// The ready lines of `fake-proxmox serve ARGS` (one per site), with `env` set.
fn ready_lines(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-proxmox"));
    cmd.arg("serve")
        .args(args)
        .env_remove("FAKE_PROXMOX_CONTROL_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let lines: Vec<String> = out.lines().take(2).map(|l| l.unwrap()).collect();
    child.kill().unwrap();
    child.wait().unwrap();
    lines
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

#[tokio::test]
async fn the_ready_lines_say_whether_the_control_plane_is_open() {
    let open = ready_lines(&[], &[]);
    assert_eq!(open.len(), 2);
    for l in &open {
        assert!(l.starts_with("ready site="), "{l}");
        assert!(field(l, "fingerprint").is_some(), "{l}");
        assert_eq!(field(l, "control"), Some("open"), "{l}");
    }
    let given = ready_lines(&["--control-token", "given-token"], &[]);
    assert_eq!(field(&given[0], "control"), Some("token"));
    assert_eq!(
        field(&given[0], "control_token"),
        None,
        "a given token is not echoed"
    );

    let auto = ready_lines(&["--control-token", "auto"], &[]);
    let token = field(&auto[0], "control_token").unwrap().to_string();
    assert_eq!(token.len(), 64);
    assert_eq!(field(&auto[1], "control_token"), Some(token.as_str()));

    let env = ready_lines(
        &["--plain-http"],
        &[("FAKE_PROXMOX_CONTROL_TOKEN", "from-env")],
    );
    assert_eq!(field(&env[0], "control"), Some("token"));
}

#[tokio::test]
async fn a_token_given_on_the_command_line_or_the_environment_guards_the_server() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-proxmox"))
        .args(["serve", "--plain-http", "--no-auth-delay"])
        .env("FAKE_PROXMOX_CONTROL_TOKEN", "from-env")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = out.next().unwrap().unwrap();
    let url = field(&line, "url").unwrap().to_string();
    let ctl = ControlClient::new(&url, None);
    assert!(ctl.journal().await.is_err());
    ctl.with_token("from-env").journal().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}
