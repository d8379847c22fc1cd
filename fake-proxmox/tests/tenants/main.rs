//! Tenants (`/_fake/tenants`): isolated worlds of one server. Isolation of VMs, tasks,
//! journal, faults and clocks; shared and own certificates; deletion stops the listeners and
//! frees the world; idle tenants are reaped, busy ones are not; bad requests and the limit are
//! refused clearly; and, with the real binary, creating and deleting tenants does not make the
//! process grow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod limits;
mod memory;
mod tokens;

use std::time::{Duration, Instant};

use fake_proxmox::{
    CertChoice, ClockMode, ControlClient, ControlError, FakeProxmox, FaultRule, PveVersion,
    TenantInfo, TenantRequest, TenantSite,
};
use serde_json::Value;

const NODE: &str = "ml110-01";

async fn host() -> FakeProxmox {
    host_with(|b| b).await
}

async fn host_with(f: impl FnOnce(fake_proxmox::Builder) -> fake_proxmox::Builder) -> FakeProxmox {
    f(FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped))
    .start()
    .await
    .unwrap()
}

fn ctl(fake: &FakeProxmox) -> ControlClient {
    fake.site("site-1").unwrap().control()
}

/// A PVE client of one tenant site, with its first token.
struct Api {
    base: String,
    auth: String,
    http: reqwest::Client,
}

impl Api {
    fn of(site: &TenantSite) -> Api {
        let pem = site.cert_pem.as_deref().unwrap();
        let http = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(pem.as_bytes()).unwrap()])
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        Api {
            base: format!("{}/api2/json", site.url),
            auth: site.tokens[0].header(),
            http,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        let resp = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("Authorization", &self.auth)
            .form(form)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn create_vm(&self, vmid: u32) {
        let id = vmid.to_string();
        let form = [
            ("vmid", id.as_str()),
            ("name", "web"),
            ("memory", "512"),
            ("scsi0", "local-lvm:1"),
            ("net0", "virtio,bridge=vmbr0"),
        ];
        let (status, body) = self
            .call(reqwest::Method::POST, &format!("/nodes/{NODE}/qemu"), &form)
            .await;
        assert_eq!(status, 200, "create VM {vmid}: {body}");
    }
}

fn vmids(state: &Value) -> Vec<u64> {
    state["sites"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["vms"].as_array().unwrap().iter())
        .map(|v| v["vmid"].as_u64().unwrap())
        .collect()
}

fn task_count(state: &Value) -> usize {
    state["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tasks"].as_array().unwrap().len())
        .sum()
}

fn refused(r: Result<impl std::fmt::Debug, ControlError>) -> (u16, String) {
    match r {
        Err(ControlError::Refused { status, message }) => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn site1(t: &TenantInfo) -> &TenantSite {
    t.site("site-1").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_others_vms_tasks_journal_faults_or_clock() {
    let host = host().await;
    let host_ctl = ctl(&host);
    let req = TenantRequest::default().clock(ClockMode::Stepped);
    let a = host_ctl.create_tenant(&req).await.unwrap();
    let b = host_ctl.create_tenant(&req).await.unwrap();
    assert_ne!(a.id, b.id);
    assert_ne!(site1(&a).port, site1(&b).port);
    let (ca, cb) = (site1(&a).control(), site1(&b).control());

    // A VM created in A, its task done on A's clock.
    Api::of(site1(&a)).create_vm(100).await;
    ca.advance_clock(Duration::from_secs(60)).await.unwrap();
    let (sa, sb, sh) = (
        ca.state().await.unwrap(),
        cb.state().await.unwrap(),
        host_ctl.state().await.unwrap(),
    );
    assert_eq!(vmids(&sa), vec![100]);
    assert!(vmids(&sb).is_empty(), "B sees A's VM: {sb}");
    assert!(vmids(&sh).is_empty(), "the host sees A's VM: {sh}");
    assert!(task_count(&sa) >= 1);
    assert_eq!(task_count(&sb), 0);
    assert_eq!(task_count(&sh), 0);
    // B's clock did not move with A's.
    let now = |s: &Value| s["now"].as_f64().unwrap();
    assert!(now(&sa) - now(&sb) >= 59.0, "A {} B {}", now(&sa), now(&sb));

    // Journals: A's request only in A's.
    let ja = ca.journal().await.unwrap();
    assert!(
        ja.iter()
            .any(|e| e.method == "POST" && e.path.ends_with("/qemu"))
    );
    assert!(cb.journal().await.unwrap().is_empty());
    assert!(host_ctl.journal().await.unwrap().is_empty());

    // A fault on A answers A's requests only.
    ca.add_fault(FaultRule {
        path_pattern: Some("/version".into()),
        status: Some(503),
        message: Some("A is down".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let (status_a, _) = Api::of(site1(&a))
        .call(reqwest::Method::GET, "/version", &[])
        .await;
    let (status_b, _) = Api::of(site1(&b))
        .call(reqwest::Method::GET, "/version", &[])
        .await;
    assert_eq!((status_a, status_b), (503, 200));
    assert!(cb.faults().await.unwrap().is_empty());
    assert!(host_ctl.faults().await.unwrap().is_empty());

    // Resetting the host leaves A's world alone; resetting B leaves A's too.
    host_ctl.reset().await.unwrap();
    cb.reset().await.unwrap();
    assert_eq!(vmids(&ca.state().await.unwrap()), vec![100]);

    // The other site of A is A's world too (one world per tenant, as per server).
    let a2 = a.site("site-2").unwrap().control();
    assert_eq!(vmids(&a2.state().await.unwrap()), vec![100]);
    host.shutdown().await;
}

#[tokio::test]
async fn a_tenant_cannot_manage_tenants() {
    let host = host().await;
    let t = ctl(&host)
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    let inner = site1(&t).control();
    let (status, msg) = refused(inner.create_tenant(&TenantRequest::default()).await);
    assert_eq!(status, 403);
    assert!(msg.contains("a tenant cannot create"), "{msg}");
    assert_eq!(refused(inner.tenants().await).0, 403);
    assert_eq!(ctl(&host).tenants().await.unwrap().len(), 1);
    host.shutdown().await;
}

/// A client trusting `pem` and nothing else.
fn pinned(pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
async fn shared_certificate_is_the_hosts_and_own_is_the_tenants_alone() {
    let host = host().await;
    let h = host.site("site-1").unwrap();
    let c = ctl(&host);
    let shared = c.create_tenant(&TenantRequest::default()).await.unwrap();
    let own = |c: &ControlClient| {
        let c = c.clone();
        async move {
            c.create_tenant(&TenantRequest::default().certificate(CertChoice::Own))
                .await
                .unwrap()
        }
    };
    let (o1, o2) = (own(&c).await, own(&c).await);
    assert_eq!(shared.certificate, CertChoice::Shared);
    assert_eq!(site1(&shared).fingerprint.as_deref(), Some(h.fingerprint()));
    assert_eq!(o1.certificate, CertChoice::Own);
    let fp = |t: &TenantInfo| site1(t).fingerprint.clone().unwrap();
    assert_ne!(fp(&o1), h.fingerprint());
    assert_ne!(fp(&o1), fp(&o2));
    // Both sites of one tenant serve its one certificate.
    assert_eq!(o1.site("site-2").unwrap().fingerprint, Some(fp(&o1)));

    // A client pinned to the host's certificate reaches the shared tenant, not the own one.
    let host_pinned = pinned(h.cert_pem());
    let health = |s: &TenantSite| format!("{}/_fake/health", s.url);
    assert!(host_pinned.get(health(site1(&shared))).send().await.is_ok());
    assert!(host_pinned.get(health(site1(&o1))).send().await.is_err());
    let own_pinned = pinned(site1(&o1).cert_pem.as_deref().unwrap());
    let resp = own_pinned.get(health(site1(&o1))).send().await.unwrap();
    assert!(resp.status().is_success());
    host.shutdown().await;
}

#[tokio::test]
async fn plain_http_tenants_have_no_fingerprint() {
    let host = host_with(|b| b.tls(false)).await;
    let t = ctl(&host)
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    let s = site1(&t);
    assert!(s.url.starts_with("http://"), "{}", s.url);
    assert_eq!(
        (s.fingerprint.as_deref(), s.cert_pem.as_deref()),
        (None, None)
    );
    s.control().state().await.unwrap();
    host.shutdown().await;
}

#[tokio::test]
async fn a_given_scenario_gives_its_own_sites_and_credentials() {
    let host = host().await;
    let yaml = fake_proxmox::Scenario::default_yaml()
        .replace("site-1", "job-a")
        .replace(
            "3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a",
            "00000000-1111-2222-3333-444444444444",
        );
    let t = ctl(&host)
        .create_tenant(&TenantRequest::default().scenario(yaml).name("ci job 17"))
        .await
        .unwrap();
    assert_eq!(t.name.as_deref(), Some("ci job 17"));
    assert!(t.site("site-1").is_none());
    let s = t.site("job-a").unwrap();
    let token = s
        .tokens
        .iter()
        .find(|k| k.tokenid == "root@pam!harness")
        .unwrap();
    assert_eq!(token.secret, "00000000-1111-2222-3333-444444444444");
    assert_eq!(s.users[0].userid, "root@pam");
    let (status, body) = Api::of(s).call(reqwest::Method::GET, "/nodes", &[]).await;
    assert_eq!(status, 200, "{body}");
    // The host's token is not this tenant's.
    let mut api = Api::of(s);
    api.auth = "PVEAPIToken=root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a".into();
    assert_eq!(api.call(reqwest::Method::GET, "/nodes", &[]).await.0, 401);
    host.shutdown().await;
}

/// `pve_version` makes every site of the tenant run that release: its `/version`, and its
/// API (7.4 has no `ciupgrade`, 8.1's).
#[tokio::test]
async fn a_tenant_runs_the_pve_release_it_asks_for() {
    let host = host().await;
    let t = ctl(&host)
        .create_tenant(&TenantRequest::default().pve_version(PveVersion::V7_4))
        .await
        .unwrap();
    for site in &t.sites {
        let api = Api::of(site);
        let (status, body) = api.call(reqwest::Method::GET, "/version", &[]).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["data"]["version"], "7.4-16", "{}", site.name);
        assert_eq!(body["data"]["release"], "7.4");
    }
    let api = Api::of(site1(&t));
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            &format!("/nodes/{NODE}/qemu"),
            &[("vmid", "4400"), ("ciupgrade", "1")],
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["errors"]["ciupgrade"]
            .as_str()
            .is_some_and(|m| m.starts_with("property is not defined in schema")),
        "{body}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn delete_closes_the_listeners_and_frees_the_world() {
    let host = host().await;
    let c = ctl(&host);
    let t = c.create_tenant(&TenantRequest::default()).await.unwrap();
    let api = Api::of(site1(&t));
    api.create_vm(100).await;
    // A kept-alive connection must not keep the world alive.
    assert_eq!(api.call(reqwest::Method::GET, "/version", &[]).await.0, 200);
    let probe = host.tenants().unwrap().probe(&t.id).unwrap();
    assert!(probe.is_alive());
    c.delete_tenant(&t.id).await.unwrap();

    for s in &t.sites {
        let err = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{}",
            s.url
        );
    }
    let (status, msg) = refused(c.tenant(&t.id).await);
    assert_eq!(status, 404);
    assert!(msg.contains(&t.id) && msg.contains("no tenant"), "{msg}");
    assert_eq!(refused(c.delete_tenant(&t.id).await).0, 404);
    assert!(c.tenants().await.unwrap().is_empty());
    // Connection tasks end on their own schedule; the world must go with them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe.is_alive() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !probe.is_alive(),
        "the deleted tenant's world is still in memory"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_state_dir_keeps_the_hosts_world_never_a_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(|b| b.state_dir(dir.path())).await;
    let t = ctl(&host)
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    Api::of(site1(&t)).create_vm(100).await;
    site1(&t)
        .control()
        .advance_clock(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        vmids(&site1(&t).control().state().await.unwrap()),
        vec![100]
    );
    // The host's own VM 200 is kept; the tenant's VM 100 is not.
    let h = host.site("site-1").unwrap();
    let host_api = Api {
        base: format!("{}/api2/json", h.url()),
        auth: site1(&t).tokens[0].header(),
        http: reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .unwrap(),
    };
    host_api.create_vm(200).await;
    ctl(&host)
        .advance_clock(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(vmids(&ctl(&host).state().await.unwrap()), vec![200]);
    host.shutdown().await;
    // Started again on the same state dir: the host's world, no tenant, no tenant's VM.
    let again = host_with(|b| b.state_dir(dir.path())).await;
    assert!(ctl(&again).tenants().await.unwrap().is_empty());
    assert_eq!(vmids(&ctl(&again).state().await.unwrap()), vec![200]);
    again.shutdown().await;
}

#[tokio::test]
async fn stopping_the_host_stops_its_tenants() {
    let host = host().await;
    let t = ctl(&host)
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    host.shutdown().await;
    let err = std::net::TcpStream::connect(("127.0.0.1", site1(&t).port)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
}

/// Poll `id` until it is gone; the refusal's message.
async fn wait_gone(c: &ControlClient, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.tenant(id).await {
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Ok(_) => panic!("tenant {id} was not reaped"),
            Err(e) => {
                let (status, msg) = refused(Err::<(), _>(e));
                assert_eq!(status, 404);
                return msg;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tenants_are_reaped_busy_ones_are_not() {
    let host = host_with(|b| b.tenant_idle_timeout(Duration::from_secs(1))).await;
    let c = ctl(&host);
    let idle = c.create_tenant(&TenantRequest::default()).await.unwrap();
    assert_eq!(idle.idle_timeout_secs, 1);
    let busy = c.create_tenant(&TenantRequest::default()).await.unwrap();
    let patient = c
        .create_tenant(&TenantRequest::default().idle_timeout_secs(3600))
        .await
        .unwrap();
    // The busy one gets a request every 200 ms (API or control plane) until the idle one is gone.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pinger = {
        let (stop, api, ctl) = (stop.clone(), Api::of(site1(&busy)), site1(&busy).control());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if n.is_multiple_of(2) {
                    api.call(reqwest::Method::GET, "/version", &[]).await;
                } else {
                    ctl.journal().await.unwrap();
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let msg = wait_gone(&c, &idle.id).await;
    assert!(msg.contains("reaped") && msg.contains("1 s"), "{msg}");
    let err = std::net::TcpStream::connect(("127.0.0.1", site1(&idle).port)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    // Two more reaper rounds with the busy one kept busy.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let live: Vec<String> = c
        .tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert!(
        live.contains(&busy.id) && live.contains(&patient.id),
        "{live:?}"
    );
    let b = c.tenant(&busy.id).await.unwrap();
    assert!(b.last_active > b.created, "{b:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    pinger.await.unwrap();
    // Left alone, the busy one goes too; the patient one stays.
    wait_gone(&c, &busy.id).await;
    c.tenant(&patient.id).await.unwrap();
    host.shutdown().await;
}

#[tokio::test]
async fn bad_requests_are_refused_with_400_naming_the_problem() {
    let host = host().await;
    let url = format!("{}/_fake/tenants", host.site("site-1").unwrap().url());
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let lab = fake_proxmox::Scenario::default_yaml().replacen(
        "  - name: site-1\n",
        "  - name: site-1\n    backend: lab\n",
        1,
    );
    assert!(lab.contains("backend: lab"));
    let cases: Vec<(String, &str)> = vec![
        ("{not json".into(), "invalid tenant request"),
        (r#"{"colour": "red"}"#.into(), "unknown field `colour`"),
        (
            r#"{"certificate": "mine"}"#.into(),
            "unknown variant `mine`",
        ),
        (r#"{"idle_timeout_secs": 0}"#.into(), "at least 1"),
        (r#"{"idle_timeout_secs": -5}"#.into(), "expected u64"),
        (
            r#"{"scenario": "sites: [{name: x"}"#.into(),
            "invalid scenario YAML",
        ),
        (r#"{"scenario": "sites: []"}"#.into(), "no sites"),
        (
            serde_json::json!({"scenario": lab}).to_string(),
            "simulated backend only",
        ),
        (
            r#"{"clock": {"mode": "scaled", "factor": 0}}"#.into(),
            "factor > 0",
        ),
        (
            serde_json::json!({"name": "x".repeat(200)}).to_string(),
            "at most 128",
        ),
    ];
    for (body, want) in cases {
        let resp = http.post(&url).body(body.clone()).send().await.unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap();
        let msg = v["error"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{body}: {v}");
        assert!(msg.contains(want), "{body}: {msg}");
    }
    assert!(ctl(&host).tenants().await.unwrap().is_empty());
    // An empty body asks for the defaults.
    let resp = http.post(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    host.shutdown().await;
}

#[tokio::test]
async fn the_tenant_limit_is_enforced() {
    let host = host_with(|b| b.max_tenants(2)).await;
    let c = ctl(&host);
    let a = c.create_tenant(&TenantRequest::default()).await.unwrap();
    c.create_tenant(&TenantRequest::default()).await.unwrap();
    let (status, msg) = refused(c.create_tenant(&TenantRequest::default()).await);
    assert_eq!(status, 429);
    assert!(
        msg.contains("limit") && msg.contains("--max-tenants"),
        "{msg}"
    );
    assert_eq!(c.tenants().await.unwrap().len(), 2);
    c.delete_tenant(&a.id).await.unwrap();
    c.create_tenant(&TenantRequest::default()).await.unwrap();
    host.shutdown().await;
}
