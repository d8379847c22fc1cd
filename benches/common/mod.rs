//! What the `tenants` and `soak` benches share: the fake in a child process (the bench binary
//! re-executed with `--serve-fake DIR`), its memory and descriptors read from `/proc`, a
//! rollout pointed at one tenant's sites, and `rehearse`'s options with waits long enough for
//! many rollouts sharing two cores.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_proxmox::{Builder, ClockMode, FakeProxmox, TenantInfo, TenantRequest};
use provision_harness::config::Provider;
use provision_harness::pve::tls::{TlsMode, parse_fingerprint};
use provision_harness::rehearse::{RehearseOptions, Rollout, share_snippets};

/// The argument that puts the bench binary in child mode.
pub const SERVE_FAKE: &str = "--serve-fake";

/// A `/proc/PID/status` field in KiB (`VmRSS:`, `VmHWM:`); 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The server's builder as the benches run it: TLS, no delay on failed logins, the scaled
/// clock `rehearse` uses.
pub fn fake_builder(clock_factor: f64) -> Builder {
    FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Scaled {
            factor: clock_factor,
        })
}

/// Child mode: serve `builder`'s fake until stdin closes; its first site's certificate and
/// URL go to `dir` (the URL last: once it is there, the server answers).
pub fn serve_fake(dir: &Path, builder: Builder) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let fake = builder.start().await.unwrap();
        let site = fake.sites().next().unwrap();
        std::fs::write(dir.join("cert.pem"), site.cert_pem()).unwrap();
        std::fs::write(dir.join("url"), site.url()).unwrap();
        let _ = tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        })
        .await;
        fake.shutdown().await;
    });
}

/// The fake in a child process: this binary again with `--serve-fake DIR`.
pub struct ChildFake {
    pub child: Child,
    pub url: String,
    pub cert_pem: String,
    /// Holds the URL and certificate files while the child runs.
    _dir: tempfile::TempDir,
}

impl ChildFake {
    /// Start the child (`cmd` adds its environment and stderr) and wait until it serves.
    pub fn start(configure: impl FnOnce(&mut Command)) -> ChildFake {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.arg(SERVE_FAKE).arg(dir.path()).stdin(Stdio::piped());
        configure(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let url_file = dir.path().join("url");
        let started = Instant::now();
        let url = loop {
            let url = std::fs::read_to_string(&url_file).unwrap_or_default();
            if url.starts_with("https://") && url.len() > "https://".len() {
                break url;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the fake exited before it served: {status}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "fake did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let cert_pem = std::fs::read_to_string(dir.path().join("cert.pem")).unwrap();
        ChildFake {
            child,
            url,
            cert_pem,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Close its stdin (it shuts down) and wait for it.
    pub fn stop(mut self) -> std::process::ExitStatus {
        drop(self.child.stdin.take());
        self.child.wait().unwrap()
    }
}

/// `rollout` with each site's snippets storage shared under `dir` (made here), and the request
/// for a tenant serving its scenario: the deployer writes the manifests' userData where the
/// tenant's PVE reads it (the server runs on this machine).
pub fn shared(mut rollout: Rollout, dir: &Path) -> (Rollout, TenantRequest) {
    std::fs::create_dir_all(dir).unwrap();
    share_snippets(&mut rollout, dir).unwrap();
    let req = TenantRequest::default().scenario(rollout.scenario.to_yaml());
    (rollout, req)
}

/// Point every site of `provider` at the tenant's listener of the same name, its certificate
/// pinned.
pub fn point_at(provider: &mut Provider, tenant: &TenantInfo) {
    for s in &tenant.sites {
        let pin = parse_fingerprint(s.fingerprint.as_deref().unwrap()).unwrap();
        provider.override_endpoint(&s.name, &s.url, TlsMode::Pinned(pin));
    }
}

/// `rehearse`'s options, with the deployer's real-time waits long enough for 100 rollouts
/// sharing two cores (the fake's clock still runs 2000× faster).
pub fn options() -> RehearseOptions {
    let mut o = RehearseOptions::default();
    o.deploy.http_timeout = Duration::from_secs(120);
    o.deploy.pipeline.ip_wait = Duration::from_secs(120);
    o.deploy.pipeline.task_wait.timeout = Duration::from_secs(300);
    o
}
