//! Serving: one listener per site (TLS by default), the axum app, the public handle.

pub mod dispatch;
pub mod http;
pub mod inner;
pub mod limits;
pub mod state;
mod tenant_host;
pub mod tls;
pub mod upload;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
// API clients wait for each answer before the next request: Nagle's algorithm only adds delay.
use limits::{Connections, CountingAcceptor, Limits};

use crate::clock::ClockMode;
use crate::control::{ControlClient, ControlToken};
use crate::exec::lab::backend::LabOptions;
use crate::exec::{Disks, Executor, Simulated, SimulatedDisks};
use crate::scenario::{Backend, Scenario};
use crate::tenants::routes::TenantsState;
use crate::tenants::{Activity, TenantLimits, Tenants};
use crate::world::Runners;
use state::{Shared, SharedRef, SiteCtx};

/// The axum app of one site's listener: the control plane under `/_fake`, everything
/// else through PVE's request pipeline. It manages no tenants (`/_fake/tenants` answers 403).
pub fn app(shared: SharedRef, site: &str) -> Router {
    let limits = shared.inner.lock().limits;
    app_with(shared, site, None, None, None, None, limits)
}

/// [`app`] of a host server (it manages `tenants`) or of a tenant (every request stamps its
/// `activity`).
fn app_with(
    shared: SharedRef,
    site: &str,
    tenants: TenantsState,
    activity: Option<Arc<Activity>>,
    ca_pem: Option<Arc<str>>,
    control_token: Option<ControlToken>,
    limits: Limits,
) -> Router {
    let ctx = SiteCtx {
        shared,
        site: Arc::from(site),
        ca_pem,
        version: Default::default(),
    };
    let control = crate::control::router()
        .merge(crate::tenants::routes::router().with_state(tenants))
        // Behind the token too: an unknown `/_fake/…` path says nothing to a stranger.
        .fallback(control_not_found)
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body))
        .layer(axum::middleware::from_fn_with_state(
            control_token,
            crate::control::auth::require,
        ));
    // One middleware for the checks every request passes (a layer each cost a boxed future
    // and a clone of its state per request, a measurable part of a status read).
    let router = Router::new()
        .nest("/_fake", control)
        .fallback(dispatch::api_handler)
        .layer(axum::middleware::from_fn_with_state(
            Gate {
                ctx: ctx.clone(),
                max_body: limits.max_body,
            },
            gate,
        ))
        .with_state(ctx);
    match activity {
        Some(a) => router.layer(axum::middleware::from_fn_with_state(a, active)),
        None => router,
    }
}

async fn control_not_found(uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let msg = format!("no control route '/_fake{}'", uri.path());
    (
        axum::http::StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({"error": msg})),
    )
        .into_response()
}

/// A tenant's listeners: every request keeps the tenant from being reaped while it runs.
async fn active(
    axum::extract::State(activity): axum::extract::State<Arc<Activity>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let _busy = activity.begin();
    next.run(req).await
}

/// What [`gate`] needs: the site, and the largest body it takes.
#[derive(Clone)]
struct Gate {
    ctx: SiteCtx,
    max_body: usize,
}

/// The checks in front of every request of a listener, in this order: a tenant's connection
/// past its limit (`503`), a body past `max_body` (`413`), then the request, made
/// [`durable`].
async fn gate(
    axum::extract::State(gate): axum::extract::State<Gate>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if let Some(refused) = limits::connection_refusal(&req) {
        return refused;
    }
    if let Some(refused) = limits::body_refusal(gate.max_body, &req) {
        return refused;
    }
    durable(&gate.ctx, req, next).await
}

/// With a state dir, an answer leaves only once the state it reflects is durable: a request
/// that may have changed it (any method but GET/HEAD) counts a change, and every request
/// waits for the changes it saw (a read must not show what a crash could still undo).
async fn durable(
    ctx: &SiteCtx,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let Some(persist) = ctx.shared.persist.as_ref() else {
        return next.run(req).await;
    };
    let writes = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let resp = next.run(req).await;
    // An API answer says what it saw (`dispatch::Seen`, its change counted); the control
    // plane's are counted here.
    let change = match resp.extensions().get::<dispatch::Seen>() {
        Some(seen) => seen.0,
        None => {
            let mut inner = ctx.shared.inner.lock();
            if writes {
                inner.dirty += 1;
            }
            inner.dirty
        }
    };
    if persist.is_durable(change) {
        return resp;
    }
    match persist.wait(change).await {
        Ok(()) => resp,
        Err(e) => {
            use axum::response::IntoResponse;
            let msg = format!("fake-proxmox: the state could not be made durable: {e}");
            (axum::http::StatusCode::INTERNAL_SERVER_ERROR, msg).into_response()
        }
    }
}

/// How a [`FakeProxmox`] is set up before it starts: scenario, TLS, clock, listeners, state
/// dir, backends and limits ([`FakeProxmox::builder`]).
pub struct Builder {
    scenario: Scenario,
    tls: bool,
    auth_failure_delay: bool,
    clock: ClockMode,
    listen: BTreeMap<String, SocketAddr>,
    state_dir: Option<PathBuf>,
    state_sync: crate::persist::journal::StateSync,
    exec: Arc<dyn Executor>,
    disks: Arc<dyn Disks>,
    /// Set by `executor`/`disks`: those run every site, whatever its `backend`.
    explicit_runners: bool,
    backend: Backend,
    lab: LabOptions,
    /// The certificate to serve instead of a new one (a tenant sharing its host's).
    cert: Option<Arc<tls::Cert>>,
    /// `Some`: this server manages tenants, within these limits.
    tenant_limits: Option<TenantLimits>,
    /// `Some`: this server is a tenant, and this is its activity.
    tenant: Option<Arc<Activity>>,
    /// `Some`: every `/_fake/…` request must carry it (`Authorization: Bearer …`).
    control_token: Option<ControlToken>,
    /// What the world (and each tenant's) may take.
    limits: Limits,
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
            state_sync: crate::persist::journal::StateSync::default(),
            exec: Arc::new(Simulated),
            disks: Arc::new(SimulatedDisks),
            explicit_runners: false,
            backend: Backend::Simulated,
            lab: LabOptions::default(),
            cert: None,
            tenant_limits: Some(TenantLimits::default()),
            tenant: None,
            control_token: None,
            limits: Limits::default(),
        }
    }
}

impl Builder {
    /// The world to start from (default: the embedded seed scenario).
    pub fn scenario(mut self, s: Scenario) -> Self {
        self.scenario = s;
        self
    }
    /// HTTPS with a new self-signed certificate (default), or plain HTTP.
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }
    /// Whether a failed login or token waits before its 401, as PVE's does (default: on; off
    /// keeps tests fast).
    pub fn auth_failure_delay(mut self, on: bool) -> Self {
        self.auth_failure_delay = on;
        self
    }
    /// The simulated clock: real time (default), scaled, or manual.
    pub fn clock(mut self, c: ClockMode) -> Self {
        self.clock = c;
        self
    }
    /// Where `site` listens (default: `127.0.0.1` on a free port); port 0 picks a free one.
    pub fn listen(mut self, site: &str, addr: SocketAddr) -> Self {
        self.listen.insert(site.to_string(), addr);
        self
    }
    /// Keep the state in this directory: read back at start, made durable before each answer
    /// that changed it (see the book's state-dir page).
    pub fn state_dir(mut self, p: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(p.into());
        self
    }
    /// When an answer that changed the state is given: once its journal record is written
    /// (default; survives the process dying) or once it is synced (survives power loss too).
    pub fn state_sync(mut self, sync: crate::persist::journal::StateSync) -> Self {
        self.state_sync = sync;
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

    /// Require `Authorization: Bearer TOKEN` on every `/_fake/…` request (but
    /// `/_fake/health`); without it the control plane is open to anyone who reaches the port.
    pub fn control_token(mut self, token: ControlToken) -> Self {
        self.control_token = Some(token);
        self
    }

    /// What this server's world and each of its tenants' may take: body size, guests,
    /// tasks and journal entries kept, a tenant's open connections (see `server::limits`).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// At most `n` live tenants (`POST /_fake/tenants`); more are refused with 429.
    /// Default 256.
    pub fn max_tenants(mut self, n: usize) -> Self {
        if let Some(l) = &mut self.tenant_limits {
            l.max = n;
        }
        self
    }
    /// A tenant with no request on its listeners for this long is deleted, unless it asked
    /// for another limit. Default 30 minutes.
    pub fn tenant_idle_timeout(mut self, d: Duration) -> Self {
        if let Some(l) = &mut self.tenant_limits {
            l.idle_timeout = d;
        }
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

    /// The shared state: the state dir's world when it holds one (then its scenario is
    /// the one served), else the scenario's; with a state dir, written there before
    /// anything is served and after every change (see `persist`).
    fn shared(&mut self) -> Result<SharedRef, crate::Error> {
        let Some(dir) = self.state_dir.clone() else {
            let (default, other) = self.runners()?;
            return Ok(Shared::new(
                &self.scenario,
                self.clock,
                self.auth_failure_delay,
                default,
                other,
            ));
        };
        std::fs::create_dir_all(&dir).map_err(|e| crate::Error::StateDir(e.to_string()))?;
        let restored = crate::persist::load(&dir)?;
        let mut seq = 0;
        let mut inner = match restored {
            Some(st) => {
                seq = st.journal_seq;
                if st.scenario() != &self.scenario {
                    tracing::warn!(
                        "{} holds a world: serving it, not the scenario given",
                        dir.display()
                    );
                }
                self.scenario = st.scenario().clone();
                let (default, other) = self.runners()?;
                let at = st.saved_at;
                let mut inner = crate::persist::restored_inner(st, default, other);
                let n = crate::persist::interrupt_running(&mut inner, at);
                if n > 0 {
                    tracing::warn!("{n} task(s) were running when the last process stopped");
                }
                inner
            }
            None => {
                let (default, other) = self.runners()?;
                state::Inner::fresh(&self.scenario, self.clock, default, other)
            }
        };
        inner.dirty = 0;
        // A snapshot of what was read back, the journal emptied (a torn record dropped).
        let journal = crate::persist::journal::Journal::start(&dir, &mut inner, seq)?
            .with_sync(self.state_sync)?;
        let persister = crate::persist::writer::Persister::new(dir, 0);
        let shared = Shared::from_inner(inner, self.auth_failure_delay, Some(persister.clone()));
        persister
            .spawn(WeakState(Arc::downgrade(&shared)), journal)
            .map_err(|e| crate::Error::StateDir(format!("starting the state writer: {e}")))?;
        Ok(shared)
    }

    /// Bind every site's listener and start serving.
    pub async fn start(self) -> Result<FakeProxmox, crate::Error> {
        self.start_now()
    }

    /// [`Builder::start`], from within a tokio runtime (nothing in it waits).
    fn start_now(mut self) -> Result<FakeProxmox, crate::Error> {
        let shared = self.shared()?;
        shared.inner.lock().set_limits(self.limits);
        // A tenant's listeners count their connections together.
        let conns = self
            .tenant
            .is_some()
            .then(|| Connections::new(self.limits.max_connections));
        for s in self.listen.keys() {
            if !self.scenario.sites.iter().any(|x| &x.name == s) {
                return Err(crate::Error::Config(format!(
                    "--listen names unknown site '{s}'"
                )));
            }
        }
        let names: Vec<String> = self
            .scenario
            .sites
            .iter()
            .flat_map(|s| s.nodes.iter().map(|n| n.name.clone()))
            .collect();
        let cert = match (&self.cert, &self.state_dir) {
            (Some(c), _) => c.clone(),
            (None, Some(dir)) => Arc::new(tls::kept_cert(dir, &names)?),
            (None, None) => Arc::new(tls::make_cert(&names)?),
        };
        let mut bound = Vec::new();
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
            bound.push((s.name.clone(), addr, local, listener));
        }
        // Tenants listen where the host's first site does (all interfaces in a container).
        let tenants = self.tenant_limits.map(|limits| {
            let bind_ip = bound
                .first()
                .map_or(IpAddr::from([127, 0, 0, 1]), |b| b.2.ip());
            let spawn = tenant_host::spawner(tenant_host::Template {
                tls: self.tls,
                auth_failure_delay: self.auth_failure_delay,
                bind_ip,
                cert: cert.clone(),
                limits: self.limits,
            });
            Tenants::new(spawn, self.scenario.clone(), self.clock, limits)
        });
        let server_config = match self.tls {
            true => Some(tls::server_config(&cert)?),
            false => None,
        };
        let mut sites = Vec::new();
        let mut tasks = Vec::new();
        for (name, addr, local, listener) in bound {
            let handle = axum_server::Handle::new();
            let router = app_with(
                shared.clone(),
                &name,
                tenants.clone(),
                self.tenant.clone(),
                Some(Arc::from(cert.cert_pem.as_str())),
                self.control_token.clone(),
                self.limits,
            );
            let svc = router.into_make_service();
            let task = if let Some(cfg) = &server_config {
                let cfg = axum_server::tls_rustls::RustlsConfig::from_config(cfg.clone());
                let server = axum_server::from_tcp_rustls(listener, cfg)
                    .map_err(|e| crate::Error::Bind { addr, source: e })?
                    .map(|tls| tls.acceptor(CountingAcceptor::new(conns.clone())))
                    .handle(handle.clone());
                tokio::spawn(async move {
                    if let Err(e) = server.serve(svc).await {
                        tracing::error!("listener stopped: {e}");
                    }
                })
            } else {
                let server = axum_server::from_tcp(listener)
                    .map_err(|e| crate::Error::Bind { addr, source: e })?
                    .acceptor(CountingAcceptor::new(conns.clone()))
                    .handle(handle.clone());
                tokio::spawn(async move {
                    if let Err(e) = server.serve(svc).await {
                        tracing::error!("listener stopped: {e}");
                    }
                })
            };
            tasks.push(task);
            let scheme = if self.tls { "https" } else { "http" };
            sites.push(SiteHandle {
                name,
                addr: local,
                url: format!("{scheme}://{local}"),
                fingerprint: cert.fingerprint.clone(),
                cert_pem: cert.cert_pem.clone(),
                tls: self.tls,
                control_token: self.control_token.clone(),
                handle,
            });
        }
        if let Some(dir) = &self.state_dir {
            let w = |f: &str, s: &str| crate::persist::write_atomic(dir, f, s.as_bytes());
            w("fingerprint", &format!("{}\n", cert.fingerprint))?;
            let urls: String = sites
                .iter()
                .map(|s| format!("{} {}\n", s.name, s.url))
                .collect();
            w("sites", &urls)?;
        }
        Ok(FakeProxmox {
            shared,
            sites,
            tenants,
            tasks,
        })
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
    control_token: Option<ControlToken>,
    handle: axum_server::Handle<SocketAddr>,
}

impl SiteHandle {
    /// The site's name, as the scenario gives it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Base URL without `/api2/json`.
    pub fn url(&self) -> &str {
        &self.url
    }
    /// The address the listener is bound to (the actual port when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// The certificate's SHA-256 fingerprint as PVE shows it (`AB:CD:…`), for clients that pin
    /// it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    /// The listener's certificate in PEM, for clients that trust it as a CA.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    /// The token this listener's control plane requires, if any.
    pub fn control_token(&self) -> Option<&ControlToken> {
        self.control_token.as_ref()
    }
    /// A typed client for this listener's control plane (with its token, if it needs one).
    pub fn control(&self) -> ControlClient {
        let pem = self.tls.then(|| self.cert_pem.clone());
        let c = ControlClient::new(&self.url, pem.as_deref());
        match &self.control_token {
            Some(t) => c.with_token(t.as_str()),
            None => c,
        }
    }
}

/// A running fake: its sites, and the shared state behind them.
pub struct FakeProxmox {
    shared: SharedRef,
    sites: Vec<SiteHandle>,
    /// `None` for a tenant (it manages none).
    tenants: Option<Arc<Tenants>>,
    /// The listeners' serving tasks: shutdown waits for them, so a stopped server's ports
    /// refuse connections.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FakeProxmox {
    /// A builder with the defaults (embedded scenario, HTTPS, real clock, simulated guests).
    pub fn builder() -> Builder {
        Builder::default()
    }
    /// The listener of the site named `name`.
    pub fn site(&self, name: &str) -> Option<&SiteHandle> {
        self.sites.iter().find(|s| s.name == name)
    }
    /// Every site's listener, in the scenario's order.
    pub fn sites(&self) -> impl Iterator<Item = &SiteHandle> {
        self.sites.iter()
    }
    /// Direct access to the shared state (in-process tests and benchmarks).
    pub fn shared(&self) -> &SharedRef {
        &self.shared
    }
    /// The tenants this server manages (`/_fake/tenants`), for in-process use.
    pub fn tenants(&self) -> Option<&Arc<Tenants>> {
        self.tenants.as_ref()
    }
    /// Stop every tenant, then the listeners; done once they refuse connections.
    pub async fn shutdown(self) {
        if let Some(t) = &self.tenants {
            t.shutdown().await;
        }
        for s in &self.sites {
            s.handle.shutdown();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The server's state as the state file's writer takes it.
struct WeakState(std::sync::Weak<Shared>);

impl crate::persist::writer::StateSource for WeakState {
    fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    fn with_state(
        &self,
        f: &mut dyn FnMut(&mut state::Inner) -> crate::persist::journal::Pending,
    ) -> Option<(u64, crate::persist::journal::Pending)> {
        let sh = self.0.upgrade()?;
        let mut inner = sh.inner.lock();
        // Complete what is due first: a task that ended before the state was taken is
        // recorded as ended, not as running when the process stopped.
        let now = inner.clock.now();
        inner.world.tick(now);
        let pending = f(&mut inner);
        Some((inner.dirty, pending))
    }
}
