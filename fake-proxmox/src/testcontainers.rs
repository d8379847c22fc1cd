//! fake-proxmox as a [testcontainers](https://docs.rs/testcontainers) module: start the container
//! image (built by `fake-proxmox/container/build.sh`), wait until every site has printed its
//! readiness line, and get each site's endpoint, certificate fingerprint and credentials.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fake_proxmox::testcontainers::Error> {
//! use fake_proxmox::testcontainers::{FakeProxmoxImage, start};
//! let fake = start(FakeProxmoxImage::default().clock_scaled(50.0).no_auth_delay()).await?;
//! let site = fake.site("site-1").expect("site-1");
//! println!("{} pinned {} token {}", site.url, site.fingerprint, site.credentials.token_header());
//! # Ok(()) }
//! ```
//!
//! The image is looked up in the local engine first (testcontainers pulls only when it is
//! missing), so an image built here never needs a registry. Engines older than the API version
//! testcontainers speaks are served through [`docker_api`]'s version shim.

pub mod docker_api;

use std::borrow::Cow;

use testcontainers::core::{ContainerPort, CopyToContainer, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, Image};

use crate::control::ControlClient;

/// The image `build.sh` tags by default.
pub const DEFAULT_IMAGE: &str = "fake-proxmox";
/// The tag `build.sh` gives the image by default (`fake-proxmox:dev`).
pub const DEFAULT_TAG: &str = "dev";
/// The container port of the first site served (PVE's own port); further sites take the next ones.
pub const API_PORT: u16 = 8006;
/// Where the image's entrypoint writes `cert.pem`, `fingerprint` and `sites`.
pub const STATE_DIR: &str = "/var/lib/fake-proxmox";
/// Where a scenario given with [`FakeProxmoxImage::scenario_yaml`] is placed in the container.
pub const SCENARIO_PATH: &str = "/etc/fake-proxmox/scenario.yaml";

/// The embedded default scenario's credentials (the same on both seed sites).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user to log in as (`POST /access/ticket`), `user@realm`; default `root@pam`.
    pub username: String,
    /// That user's password.
    pub password: String,
    /// The API token's id, `user@realm!name`.
    pub token_id: String,
    /// The API token's secret (a UUID, as PVE makes them).
    pub token_secret: String,
}

impl Default for Credentials {
    fn default() -> Self {
        Self {
            username: "root@pam".into(),
            password: "harness".into(),
            token_id: "root@pam!harness".into(),
            token_secret: "3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a".into(),
        }
    }
}

impl Credentials {
    /// The `Authorization` header value PVE expects for an API token.
    pub fn token_header(&self) -> String {
        format!("PVEAPIToken={}={}", self.token_id, self.token_secret)
    }
}

/// The fake-proxmox container image and how to run it.
#[derive(Debug, Clone)]
pub struct FakeProxmoxImage {
    name: String,
    tag: String,
    /// Sites to serve, in port order from [`API_PORT`].
    sites: Vec<String>,
    clock: Option<String>,
    auth_delay: bool,
    plain_http: bool,
    scenario: Option<CopyToContainer>,
    credentials: Credentials,
    ports: Vec<ContainerPort>,
    ready: Vec<String>,
    cmd: Vec<String>,
    /// Passed as `FAKE_PROXMOX_CONTROL_TOKEN` (not on the command line).
    control_token: Option<String>,
}

impl Default for FakeProxmoxImage {
    /// Both seed sites (`site-1` on 8006, `site-2` on 8007), real-time clock, PVE's auth delay.
    fn default() -> Self {
        let mut me = Self {
            name: DEFAULT_IMAGE.into(),
            tag: DEFAULT_TAG.into(),
            sites: vec!["site-1".into(), "site-2".into()],
            clock: None,
            auth_delay: true,
            plain_http: false,
            scenario: None,
            credentials: Credentials::default(),
            ports: Vec::new(),
            ready: Vec::new(),
            cmd: Vec::new(),
            control_token: None,
        };
        me.refresh();
        me
    }
}

impl FakeProxmoxImage {
    /// Another name or tag than `fake-proxmox:dev`.
    pub fn with_image(mut self, name: impl Into<String>, tag: impl Into<String>) -> Self {
        self.name = name.into();
        self.tag = tag.into();
        self
    }

    /// Serve exactly these sites, the first on container port 8006, the next on 8007, …
    pub fn sites<S: Into<String>>(mut self, sites: impl IntoIterator<Item = S>) -> Self {
        self.sites = sites.into_iter().map(Into::into).collect();
        self.refresh();
        self
    }

    /// Tasks run `factor` times faster than real time.
    pub fn clock_scaled(mut self, factor: f64) -> Self {
        self.clock = Some(format!("scaled:{factor}"));
        self.refresh();
        self
    }

    /// Refused logins answer at once instead of after PVE's 3 s.
    pub fn no_auth_delay(mut self) -> Self {
        self.auth_delay = false;
        self.refresh();
        self
    }

    /// Plain HTTP instead of HTTPS.
    pub fn plain_http(mut self) -> Self {
        self.plain_http = true;
        self.refresh();
        self
    }

    /// Serve this scenario (YAML, as `fake-proxmox scenario dump` prints) instead of the embedded
    /// default; it is copied into the container before start. Set [`Self::credentials`] to match.
    pub fn scenario_yaml(mut self, yaml: impl Into<String>) -> Self {
        self.scenario = Some(CopyToContainer::new(
            yaml.into().into_bytes(),
            SCENARIO_PATH,
        ));
        self.refresh();
        self
    }

    /// The credentials handed back with the endpoints (default: the seed scenario's).
    pub fn credentials(mut self, c: Credentials) -> Self {
        self.credentials = c;
        self
    }

    /// Require this token on the control plane (`--control-token`, passed through the
    /// environment so it stays off the command line); `"auto"` lets the server make one,
    /// read back from its readiness line. Every [`SiteEndpoint::control`] carries it.
    pub fn control_token(mut self, token: impl Into<String>) -> Self {
        self.control_token = Some(token.into());
        self
    }

    /// The container port serving `site`.
    pub fn port_of(&self, site: &str) -> Option<u16> {
        let i = self.sites.iter().position(|s| s == site)?;
        API_PORT.checked_add(u16::try_from(i).ok()?)
    }

    /// The arguments after the image's `fake-proxmox serve --state-dir …` entrypoint.
    pub fn args(&self) -> &[String] {
        &self.cmd
    }

    fn refresh(&mut self) {
        let mut cmd = Vec::new();
        for (i, site) in self.sites.iter().enumerate() {
            let port = API_PORT.saturating_add(u16::try_from(i).unwrap_or(u16::MAX));
            cmd.push("--listen".to_string());
            cmd.push(format!("{site}=0.0.0.0:{port}"));
        }
        if let Some(c) = &self.clock {
            cmd.push("--clock".into());
            cmd.push(c.clone());
        }
        if !self.auth_delay {
            cmd.push("--no-auth-delay".into());
        }
        if self.plain_http {
            cmd.push("--plain-http".into());
        }
        if self.scenario.is_some() {
            cmd.push("--scenario".into());
            cmd.push(SCENARIO_PATH.into());
        }
        self.cmd = cmd;
        self.ports = (0..self.sites.len())
            .filter_map(|i| API_PORT.checked_add(u16::try_from(i).ok()?))
            .map(ContainerPort::Tcp)
            .collect();
        self.ready = self
            .sites
            .iter()
            .map(|s| format!("ready site={s} "))
            .collect();
    }
}

impl Image for FakeProxmoxImage {
    fn name(&self) -> &str {
        &self.name
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    /// The server prints `ready site=NAME url=… fingerprint=…` once per site, after binding.
    fn ready_conditions(&self) -> Vec<WaitFor> {
        self.ready.iter().map(WaitFor::message_on_stdout).collect()
    }

    fn cmd(&self) -> impl IntoIterator<Item = impl Into<Cow<'_, str>>> {
        self.cmd.iter().map(String::as_str)
    }

    fn env_vars(
        &self,
    ) -> impl IntoIterator<Item = (impl Into<Cow<'_, str>>, impl Into<Cow<'_, str>>)> {
        self.control_token
            .iter()
            .map(|t| ("FAKE_PROXMOX_CONTROL_TOKEN", t.as_str()))
    }

    fn expose_ports(&self) -> &[ContainerPort] {
        &self.ports
    }

    fn copy_to_sources(&self) -> impl IntoIterator<Item = &CopyToContainer> {
        self.scenario.iter()
    }
}

/// One served site, as seen from the machine running the tests.
#[derive(Debug, Clone)]
pub struct SiteEndpoint {
    /// The site's name in the scenario (`site-1`, …).
    pub site: String,
    /// Base URL without `/api2/json`, e.g. `https://127.0.0.1:49153`.
    pub url: String,
    /// SHA-256 of the certificate, `AA:BB:…` as PVE shows it (empty over plain HTTP).
    pub fingerprint: String,
    /// The self-signed certificate (valid for `127.0.0.1` and `localhost`).
    pub cert_pem: String,
    /// Who may log in: the image's [`FakeProxmoxImage::credentials`], as given (they are not
    /// read back from the container).
    pub credentials: Credentials,
    /// The control plane's token, when the server requires one.
    pub control_token: Option<String>,
}

impl SiteEndpoint {
    /// The PVE API root, `…/api2/json`.
    pub fn api_url(&self) -> String {
        format!("{}/api2/json", self.url)
    }

    /// A client for the fake's `/_fake` control plane, trusting the site's certificate.
    pub fn control(&self) -> ControlClient {
        let pem = (!self.cert_pem.is_empty()).then_some(self.cert_pem.as_str());
        let c = ControlClient::new(&self.url, pem);
        match &self.control_token {
            Some(t) => c.with_token(t.clone()),
            None => c,
        }
    }
}

/// Why the container could not be started or its sites read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The container did not start (no Docker engine, image not built, ports taken).
    #[error(
        "cannot start the fake-proxmox container {image}: {source}\n(is Docker running and the image built? `fake-proxmox/container/build.sh --tag {image}`)"
    )]
    Start {
        /// The image asked for, `name:tag`.
        image: String,
        /// testcontainers' error.
        source: testcontainers::TestcontainersError,
    },
    /// Talking to the started container failed: reading its output, copying its
    /// certificate out, or looking up its mapped ports.
    #[error("fake-proxmox container: {0}")]
    Container(#[from] testcontainers::TestcontainersError),
    /// A site the image serves printed no readiness line (or has no port), so its endpoint
    /// is unknown.
    #[error("the container never printed a readiness line for site '{0}'")]
    NotReady(String),
}

/// A running container and its sites. Dropping it removes the container.
pub struct RunningFake {
    /// The container itself (its logs, `exec`, stopping it early).
    pub container: ContainerAsync<FakeProxmoxImage>,
    /// Every served site's endpoint, in the image's site order.
    pub sites: Vec<SiteEndpoint>,
}

impl RunningFake {
    /// The endpoint of the site named `name`, if the container serves it.
    pub fn site(&self, name: &str) -> Option<&SiteEndpoint> {
        self.sites.iter().find(|s| s.site == name)
    }
}

/// Starts `image` and waits for every site; see the module doc.
pub async fn start(image: FakeProxmoxImage) -> Result<RunningFake, Error> {
    let label = format!("{}:{}", image.name, image.tag);
    let container = image.start().await.map_err(|source| Error::Start {
        image: label,
        source,
    })?;
    let sites = endpoints(&container).await?;
    Ok(RunningFake { container, sites })
}

/// Reads every site's endpoint from a started container: host port, the fingerprint from the
/// readiness line, the certificate from the state dir.
pub async fn endpoints(
    container: &ContainerAsync<FakeProxmoxImage>,
) -> Result<Vec<SiteEndpoint>, Error> {
    let image = container.image();
    let stdout = String::from_utf8_lossy(&container.stdout_to_vec().await?).into_owned();
    let ready = parse_ready_lines(&stdout);
    let cert_pem = if image.plain_http {
        String::new()
    } else {
        let bytes: Vec<u8> = container
            .copy_file_from(format!("{STATE_DIR}/cert.pem"), Vec::new())
            .await?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut host = container.get_host().await?.to_string();
    if host == "localhost" {
        // The certificate names 127.0.0.1; "localhost" may resolve to ::1 first.
        host = "127.0.0.1".into();
    }
    let scheme = if image.plain_http { "http" } else { "https" };
    let mut out = Vec::new();
    for site in &image.sites {
        let line = ready
            .iter()
            .find(|r| &r.site == site)
            .ok_or_else(|| Error::NotReady(site.clone()))?;
        let port = image
            .port_of(site)
            .ok_or_else(|| Error::NotReady(site.clone()))?;
        let host_port = container.get_host_port_ipv4(port).await?;
        out.push(SiteEndpoint {
            site: site.clone(),
            url: format!("{scheme}://{host}:{host_port}"),
            fingerprint: line.fingerprint.clone(),
            cert_pem: cert_pem.clone(),
            credentials: image.credentials.clone(),
            control_token: match image.control_token.as_deref() {
                Some("auto") => line.control_token.clone(),
                other => other.map(str::to_string),
            },
        });
    }
    Ok(out)
}

/// One `ready site=… url=… fingerprint=…` line of `fake-proxmox serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyLine {
    /// The site's name (`site=`).
    pub site: String,
    /// The URL as the server sees itself (inside a container: its bind address).
    pub url: String,
    /// The certificate's fingerprint (`fingerprint=`), `AA:BB:…`; empty when the line has
    /// none (plain HTTP).
    pub fingerprint: String,
    /// `control=open` or `control=token`: whether the control plane needs a token.
    pub control_open: bool,
    /// The token, printed only when the server made it (`--control-token auto`).
    pub control_token: Option<String>,
}

/// Every readiness line in a server's output, in order; other lines are ignored.
pub fn parse_ready_lines(output: &str) -> Vec<ReadyLine> {
    output
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("ready ")?;
            let mut site = None;
            let mut url = None;
            let mut fingerprint = String::new();
            let mut control_open = true;
            let mut control_token = None;
            for kv in rest.split_whitespace() {
                match kv.split_once('=') {
                    Some(("site", v)) => site = Some(v.to_string()),
                    Some(("url", v)) => url = Some(v.to_string()),
                    Some(("fingerprint", v)) => fingerprint = v.to_string(),
                    Some(("control", v)) => control_open = v != "token",
                    Some(("control_token", v)) => control_token = Some(v.to_string()),
                    _ => {}
                }
            }
            Some(ReadyLine {
                site: site?,
                url: url?,
                fingerprint,
                control_open,
                control_token,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_the_options() {
        let i = FakeProxmoxImage::default();
        assert_eq!(
            i.args(),
            [
                "--listen",
                "site-1=0.0.0.0:8006",
                "--listen",
                "site-2=0.0.0.0:8007"
            ]
        );
        assert_eq!(
            i.expose_ports(),
            [ContainerPort::Tcp(8006), ContainerPort::Tcp(8007)]
        );
        let i = FakeProxmoxImage::default()
            .sites(["site-2"])
            .clock_scaled(50.0)
            .no_auth_delay()
            .scenario_yaml("sites: []");
        assert_eq!(
            i.args(),
            [
                "--listen",
                "site-2=0.0.0.0:8006",
                "--clock",
                "scaled:50",
                "--no-auth-delay",
                "--scenario",
                SCENARIO_PATH
            ]
        );
        assert_eq!(i.port_of("site-2"), Some(8006));
        assert_eq!(i.port_of("site-1"), None);
        assert_eq!(i.ready_conditions().len(), 1);
    }

    #[test]
    fn readiness_lines_are_parsed_and_noise_ignored() {
        let out = "starting\nready site=site-1 url=https://0.0.0.0:8006 fingerprint=AB:CD\nready nonsense\nready site=site-2 url=http://0.0.0.0:8007\n";
        let r = parse_ready_lines(out);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].site, "site-1");
        assert_eq!(r[0].fingerprint, "AB:CD");
        assert_eq!(r[1].url, "http://0.0.0.0:8007");
        assert_eq!(r[1].fingerprint, "");
        assert!(r[0].control_open);
        let r = parse_ready_lines(
            "ready site=s url=https://x fingerprint=AB control=token control_token=abc\nready site=t url=https://y fingerprint=AB control=token\n",
        );
        assert!(!r[0].control_open);
        assert_eq!(r[0].control_token.as_deref(), Some("abc"));
        assert!(!r[1].control_open);
        assert_eq!(r[1].control_token, None);
    }

    #[test]
    fn the_control_token_goes_through_the_environment() {
        let i = FakeProxmoxImage::default().control_token("s3cret");
        assert!(!i.args().iter().any(|a| a.contains("s3cret")));
        let env: Vec<(String, String)> = i
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.into().into_owned(), v.into().into_owned()))
            .collect();
        assert_eq!(
            env,
            [(
                "FAKE_PROXMOX_CONTROL_TOKEN".to_string(),
                "s3cret".to_string()
            )]
        );
    }

    #[test]
    fn token_header_has_pve_shape() {
        assert_eq!(
            Credentials::default().token_header(),
            "PVEAPIToken=root@pam!harness=3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a"
        );
    }
}
