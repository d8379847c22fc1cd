//! Serving: one listener per site (TLS by default), the axum app, the public handle.

pub mod dispatch;
pub mod http;
pub mod state;
pub mod tls;
pub mod upload;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::any;
// API clients wait for each answer before the next request: Nagle's algorithm only adds delay.
use axum_server::accept::NoDelayAcceptor;

use crate::clock::ClockMode;
use crate::control::ControlClient;
use crate::exec::lab::backend::LabOptions;
use crate::exec::{Disks, Executor, Simulated, SimulatedDisks};
use crate::scenario::{Backend, Scenario};
use crate::world::Runners;
use state::{Shared, SharedRef, SiteCtx};

/// The axum app of one site's listener: the control plane under `/_fake`, everything
/// else through PVE's request pipeline.
pub fn app(shared: SharedRef, site: &str) -> Router {
    let ctx = SiteCtx {
        shared,
        site: site.to_string(),
    };
    Router::new()
        .nest("/_fake", crate::control::router())
        .fallback(any(dispatch::api_handler))
        .with_state(ctx)
}

pub struct Builder {
    scenario: Scenario,
    tls: bool,
    auth_failure_delay: bool,
    clock: ClockMode,
    listen: BTreeMap<String, SocketAddr>,
    state_dir: Option<PathBuf>,
    exec: Arc<dyn Executor>,
    disks: Arc<dyn Disks>,
    /// Set by `executor`/`disks`: those run every site, whatever its `backend`.
    explicit_runners: bool,
    backend: Backend,
    lab: LabOptions,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            scenario: Scenario::embedded_default(),
            tls: true,
            auth_failure_delay: true,
            clock: ClockMode::Real,
            listen: BTreeMap::new(),
            state_dir: None,
            exec: Arc::new(Simulated),
            disks: Arc::new(SimulatedDisks),
            explicit_runners: false,
            backend: Backend::Simulated,
            lab: LabOptions::default(),
        }
    }
}

impl Builder {
    pub fn scenario(mut self, s: Scenario) -> Self {
        self.scenario = s;
        self
    }
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }
    pub fn auth_failure_delay(mut self, on: bool) -> Self {
        self.auth_failure_delay = on;
        self
    }
    pub fn clock(mut self, c: ClockMode) -> Self {
        self.clock = c;
        self
    }
    pub fn listen(mut self, site: &str, addr: SocketAddr) -> Self {
        self.listen.insert(site.to_string(), addr);
        self
    }
    pub fn state_dir(mut self, p: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(p.into());
        self
    }
    /// What runs the VMs (default: [`Simulated`]); see `exec`.
    pub fn executor(mut self, exec: Arc<dyn Executor>) -> Self {
        self.exec = exec;
        self.explicit_runners = true;
        self
    }
    /// What runs the VMs of sites whose scenario sets no `backend` (default: simulated).
    /// `Backend::Lab` boots real QEMU guests from real volume files (see `exec::lab`).
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = b;
        self
    }
    /// How the lab backend runs (memory cap, shutdown timeout); its files go under the
    /// state dir when one is set.
    pub fn lab_options(mut self, o: LabOptions) -> Self {
        self.lab = o;
        self
    }
    /// What holds the volumes' data (default: [`SimulatedDisks`], no files; `FileDisks`
    /// keeps real ones); see `exec::Disks`. It stays across `/_fake/reset` and scenario
    /// loads, which drop the previous world's volumes.
    pub fn disks(mut self, disks: Arc<dyn Disks>) -> Self {
        self.disks = disks;
        self.explicit_runners = true;
        self
    }

    /// The runners of sites without a `backend` and, when another site asks for the lab
    /// backend, the lab's.
    fn runners(&self) -> Result<(Runners, Option<(Backend, Runners)>), crate::Error> {
        let given = Runners {
            exec: self.exec.clone(),
            disks: self.disks.clone(),
        };
        if self.explicit_runners {
            return Ok((given, None));
        }
        let any_lab = self
            .scenario
            .sites
            .iter()
            .any(|s| s.uses_backend(Backend::Lab, self.backend));
        if !any_lab {
            return Ok((given, None));
        }
        let mut opts = self.lab.clone();
        if opts.state_dir.is_none() {
            opts.state_dir = self.state_dir.clone();
        }
        let lab = crate::exec::lab::backend::runners(&opts).map_err(crate::Error::Config)?;
        Ok(match self.backend {
            Backend::Lab => (lab, Some((Backend::Simulated, given))),
            Backend::Simulated => (given, Some((Backend::Lab, lab))),
        })
    }

    /// Bind every site's listener and start serving.
    pub async fn start(self) -> Result<FakeProxmox, crate::Error> {
        for s in self.listen.keys() {
            if !self.scenario.sites.iter().any(|x| &x.name == s) {
                return Err(crate::Error::Config(format!(
                    "--listen names unknown site '{s}'"
                )));
            }
        }
        let (default, other) = self.runners()?;
        let shared = Shared::new(
            &self.scenario,
            self.clock,
            self.auth_failure_delay,
            default,
            other,
        );
        let names: Vec<String> = self
            .scenario
            .sites
            .iter()
            .flat_map(|s| s.nodes.iter().map(|n| n.name.clone()))
            .collect();
        let cert = tls::make_cert(&names)?;
        let mut sites = Vec::new();
        for s in &self.scenario.sites {
            let addr = self
                .listen
                .get(&s.name)
                .copied()
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
            let listener = std::net::TcpListener::bind(addr)
                .map_err(|e| crate::Error::Bind { addr, source: e })?;
            listener
                .set_nonblocking(true)
                .map_err(|e| crate::Error::Bind { addr, source: e })?;
            let local = listener
                .local_addr()
                .map_err(|e| crate::Error::Bind { addr, source: e })?;
            let handle = axum_server::Handle::new();
            let router = app(shared.clone(), &s.name);
            let svc = router.into_make_service();
            if self.tls {
                let cfg =
                    axum_server::tls_rustls::RustlsConfig::from_config(tls::server_config(&cert)?);
                let server = axum_server::from_tcp_rustls(listener, cfg)
                    .map_err(|e| crate::Error::Bind { addr, source: e })?
                    .map(|tls| tls.acceptor(NoDelayAcceptor::new()))
                    .handle(handle.clone());
                tokio::spawn(async move {
                    if let Err(e) = server.serve(svc).await {
                        tracing::error!("listener stopped: {e}");
                    }
                });
            } else {
                let server = axum_server::from_tcp(listener)
                    .map_err(|e| crate::Error::Bind { addr, source: e })?
                    .acceptor(NoDelayAcceptor::new())
                    .handle(handle.clone());
                tokio::spawn(async move {
                    if let Err(e) = server.serve(svc).await {
                        tracing::error!("listener stopped: {e}");
                    }
                });
            }
            let scheme = if self.tls { "https" } else { "http" };
            sites.push(SiteHandle {
                name: s.name.clone(),
                addr: local,
                url: format!("{scheme}://{local}"),
                fingerprint: cert.fingerprint.clone(),
                cert_pem: cert.cert_pem.clone(),
                tls: self.tls,
                handle,
            });
        }
        if let Some(dir) = &self.state_dir {
            std::fs::create_dir_all(dir).map_err(|e| crate::Error::StateDir(e.to_string()))?;
            let w = |f: &str, s: &str| {
                std::fs::write(dir.join(f), s).map_err(|e| crate::Error::StateDir(e.to_string()))
            };
            w("cert.pem", &cert.cert_pem)?;
            w("fingerprint", &format!("{}\n", cert.fingerprint))?;
            let urls: String = sites
                .iter()
                .map(|s| format!("{} {}\n", s.name, s.url))
                .collect();
            w("sites", &urls)?;
        }
        Ok(FakeProxmox { shared, sites })
    }
}

/// One site's listener.
#[derive(Clone)]
pub struct SiteHandle {
    name: String,
    addr: SocketAddr,
    url: String,
    fingerprint: String,
    cert_pem: String,
    tls: bool,
    handle: axum_server::Handle<SocketAddr>,
}

impl SiteHandle {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Base URL without `/api2/json`.
    pub fn url(&self) -> &str {
        &self.url
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    /// A typed client for this listener's control plane.
    pub fn control(&self) -> ControlClient {
        let pem = self.tls.then(|| self.cert_pem.clone());
        ControlClient::new(&self.url, pem.as_deref())
    }
}

/// A running fake: its sites, and the shared state behind them.
pub struct FakeProxmox {
    shared: SharedRef,
    sites: Vec<SiteHandle>,
}

impl FakeProxmox {
    pub fn builder() -> Builder {
        Builder::default()
    }
    pub fn site(&self, name: &str) -> Option<&SiteHandle> {
        self.sites.iter().find(|s| s.name == name)
    }
    pub fn sites(&self) -> impl Iterator<Item = &SiteHandle> {
        self.sites.iter()
    }
    /// Direct access to the shared state (in-process tests and benchmarks).
    pub fn shared(&self) -> &SharedRef {
        &self.shared
    }
    pub async fn shutdown(self) {
        for s in &self.sites {
            s.handle.shutdown();
        }
    }
}
