//! Throws random requests at the control plane (`/_fake/…`) of a server started with a
//! control token, and checks what must hold whatever arrives: a request without the right
//! token never gets past the token check (`401`, JSON `{"error"}`; only `/_fake/health`
//! answers), nothing panics, and a request with the token gets a status from a small known
//! set. The tenants' routes are left out (creating hundreds of tenants is another test's job).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::LazyLock;

use fake_proxmox::{ClockMode, ControlToken, FakeProxmox};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::Value;

const TOKEN: &str = "fuzz-control-token";

/// The control routes, with realistic path values.
const PATHS: &[&str] = &[
    "/health",
    "/reset",
    "/scenario",
    "/snapshot",
    "/restore/1",
    "/clock",
    "/clock/advance",
    "/faults",
    "/nodes/ml110-01/online",
    "/nodes/ml110-01/fail-next-task",
    "/nodes/ml110-01/storage/local-lvm/full",
    "/nodes/ml110-01/storage/local-lvm/capacity",
    "/nodes/ml110-01/storage/local/volumes",
    "/nodes/ml110-01/qemu/100/guest",
    "/nodes/ml110-01/qemu/100/fault",
    "/nodes/ml110-01/qemu/100/agent",
    "/nodes/ml110-01/lxc/100/guest",
    "/nodes/ml110-01/fault",
    "/journal",
    "/state",
    "/state/export",
    "/state/import",
    "/nope",
    "/nodes/%00/online",
];

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH"];

/// What a control route may answer a request with the right token.
const STATUSES: &[u16] = &[200, 201, 400, 404, 405, 409, 413, 415, 422];

#[derive(Debug, Clone)]
enum Auth {
    None,
    Right,
    Wrong(String),
    /// The right token, but not as `Bearer`.
    Raw,
    /// A prefix of the right token.
    Prefix(usize),
}

#[derive(Debug, Clone)]
struct Fuzzed {
    path: usize,
    method: usize,
    auth: Auth,
    body: Option<Vec<u8>>,
    json: bool,
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    url: String,
    http: reqwest::Client,
    _fake: FakeProxmox,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(async {
        FakeProxmox::builder()
            .tls(false)
            .auth_failure_delay(false)
            .clock(ClockMode::Stepped)
            .control_token(ControlToken::new(TOKEN).unwrap())
            .start()
            .await
            .unwrap()
    });
    let url = fake.site("site-1").unwrap().url().to_string();
    Fixture {
        rt,
        url,
        http: reqwest::Client::new(),
        _fake: fake,
    }
});

fn fuzzed() -> impl Strategy<Value = Fuzzed> {
    let auth = prop_oneof![
        Just(Auth::None),
        Just(Auth::Right),
        Just(Auth::Right),
        "[ -~]{0,40}".prop_map(Auth::Wrong),
        Just(Auth::Raw),
        (0..TOKEN.len()).prop_map(Auth::Prefix),
    ];
    let body = prop_oneof![
        Just(None),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Some),
        "\\{\"(seconds|online|mode|factor|count|status)\": ?(-?[0-9]{1,4}|true|\"x\"|null)\\}"
            .prop_map(|s| Some(s.into_bytes())),
    ];
    (0..PATHS.len(), 0..METHODS.len(), auth, body, any::<bool>()).prop_map(
        |(path, method, auth, body, json)| Fuzzed {
            path,
            method,
            auth,
            body,
            json,
        },
    )
}

fn send(f: &Fuzzed) -> (u16, Vec<u8>) {
    let fx = &*FIXTURE;
    let method = reqwest::Method::from_bytes(METHODS[f.method].as_bytes()).unwrap();
    let mut req = fx
        .http
        .request(method, format!("{}/_fake{}", fx.url, PATHS[f.path]));
    req = match &f.auth {
        Auth::None => req,
        Auth::Right => req.bearer_auth(TOKEN),
        Auth::Wrong(t) => req.header("Authorization", format!("Bearer {t}")),
        Auth::Raw => req.header("Authorization", TOKEN),
        Auth::Prefix(n) => req.bearer_auth(&TOKEN[..*n]),
    };
    if f.json {
        req = req.header("Content-Type", "application/json");
    }
    if let Some(b) = &f.body {
        req = req.body(b.clone());
    }
    fx.rt.block_on(async {
        let resp = req.send().await.expect("the server answers");
        let status = resp.status().as_u16();
        (status, resp.bytes().await.unwrap().to_vec())
    })
}

#[test]
fn the_control_plane_holds_its_token_and_never_falls_over() {
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 400,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    runner
        .run(&fuzzed(), |f| {
            let (status, body) = send(&f);
            let health = PATHS[f.path] == "/health";
            let authorized = matches!(f.auth, Auth::Right)
                || matches!(&f.auth, Auth::Wrong(t) if t.trim() == TOKEN);
            if !authorized && !health {
                prop_assert_eq!(status, 401, "{:?}", f);
                let v: Value = serde_json::from_slice(&body).unwrap();
                prop_assert!(v["error"].as_str().is_some_and(|m| !m.is_empty()));
            } else {
                prop_assert!(STATUSES.contains(&status), "{} for {:?}", status, f);
            }
            Ok(())
        })
        .unwrap();
}
