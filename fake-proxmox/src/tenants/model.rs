//! What `/_fake/tenants` takes and answers: the request for a tenant, what a tenant is to
//! its user (its sites, certificate, credentials, idle limit and times), and the refusals.

use serde::{Deserialize, Serialize};

use crate::clock::ClockMode;
use crate::version::PveVersion;

/// `POST /_fake/tenants`: every field optional.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantRequest {
    /// Scenario YAML; default: the scenario the server was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// The server's certificate (default) or one of the tenant's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertChoice>,
    /// Idle seconds after which the tenant is deleted; default: the server's
    /// `--tenant-idle-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_secs: Option<u64>,
    /// A label for people (the CI job, say); not unique, not an identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tenant's clock; default: the mode the server was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockMode>,
    /// The PVE release every site of the tenant runs (`"7.4"`, `"8.4"`, `"9.1"`), whatever
    /// the scenario's `version:` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pve_version: Option<PveVersion>,
}

/// Builder-style setters for clients (`TenantRequest::default().name("ci-42")…`); each sets
/// one field and leaves the rest at the server's defaults. Nothing is checked here: the server
/// checks the request when it is posted and answers 400 for a bad one.
impl TenantRequest {
    /// Run the tenant's world from this scenario YAML instead of the server's. The server
    /// parses it on `POST` and refuses (400) a scenario that does not parse, has no sites, or
    /// asks for the lab backend.
    pub fn scenario(mut self, yaml: impl Into<String>) -> Self {
        self.scenario = Some(yaml.into());
        self
    }
    /// Serve the tenant's sites with the server's certificate ([`CertChoice::Shared`]) or a
    /// fresh one of its own ([`CertChoice::Own`]).
    pub fn certificate(mut self, c: CertChoice) -> Self {
        self.certificate = Some(c);
        self
    }
    /// Reap the tenant after this many seconds with no request on its listeners; must be at
    /// least 1 (0 is refused with 400).
    pub fn idle_timeout_secs(mut self, secs: u64) -> Self {
        self.idle_timeout_secs = Some(secs);
        self
    }
    /// A label shown in the tenant's listing; at most 128 characters, none of them control
    /// characters (else 400).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// The tenant's clock mode; a scaled clock's factor must be finite and > 0 (else 400).
    pub fn clock(mut self, mode: ClockMode) -> Self {
        self.clock = Some(mode);
        self
    }
    /// Force every site of the tenant's scenario to answer as this PVE release.
    pub fn pve_version(mut self, v: PveVersion) -> Self {
        self.pve_version = Some(v);
        self
    }
}

/// Which TLS certificate a tenant's listeners present; `"shared"` or `"own"` in JSON.
/// Irrelevant for sites served over plain HTTP.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CertChoice {
    /// The server's own certificate: one fingerprint to pin for every tenant.
    #[default]
    Shared,
    /// A fresh self-signed certificate: the tenant's fingerprint is its own.
    Own,
}

/// A tenant as `/_fake/tenants` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantInfo {
    /// The tenant's identifier in `/_fake/tenants/{id}`: `t` and 16 lowercase hex digits,
    /// random, unique among the live tenants.
    pub id: String,
    /// The label it was created with, if any.
    #[serde(default)]
    pub name: Option<String>,
    /// The certificate its listeners present.
    pub certificate: CertChoice,
    /// Its idle limit in seconds: the one asked for, else the server's default.
    pub idle_timeout_secs: u64,
    /// UNIX seconds.
    pub created: f64,
    /// UNIX seconds of the last request on any of its listeners (`created` before one).
    pub last_active: f64,
    /// The token of the tenant's control plane (`Authorization: Bearer …` on its
    /// listeners' `/_fake/…`): made for it at creation, good for its listeners only.
    pub control_token: String,
    /// One entry per site of its scenario, in the scenario's order.
    pub sites: Vec<TenantSite>,
}

impl TenantInfo {
    /// The tenant's site named `name` (the scenario's site name), if it has one.
    pub fn site(&self, name: &str) -> Option<&TenantSite> {
        self.sites.iter().find(|s| s.name == name)
    }
}

/// One site of a tenant: its own listener, and who may log in.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantSite {
    /// The site's name in the scenario.
    pub name: String,
    /// Base URL without `/api2/json`.
    pub url: String,
    /// The listener's port: an ephemeral port on the host server's bind address.
    pub port: u16,
    /// SHA-256 of the certificate's DER as uppercase hex pairs joined by `:`, the form PVE
    /// shows and clients pin; `None` with plain HTTP.
    pub fingerprint: Option<String>,
    /// The listener's certificate in PEM, for clients that trust a CA file rather than pin
    /// a fingerprint; `None` with plain HTTP.
    pub cert_pem: Option<String>,
    /// The users of the site's scenario, with their passwords (for `POST /access/ticket`).
    pub users: Vec<TenantUser>,
    /// The API tokens of the site's scenario, with their secrets.
    pub tokens: Vec<TenantToken>,
    /// The tenant's control token (the same on all its sites), so that a site alone is
    /// enough to drive its control plane.
    pub control_token: String,
}

/// A user who may log in on a tenant's site, as its scenario declares it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantUser {
    /// `user@realm`, e.g. `root@pam`.
    pub userid: String,
    /// The password `POST /access/ticket` accepts for it, in clear (it is a test fake).
    pub password: String,
}

/// An API token of a tenant's site, as its scenario declares it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantToken {
    /// `user@realm!name`.
    pub tokenid: String,
    /// The token's secret (PVE shows a UUID; the fake takes whatever the scenario says).
    pub secret: String,
}

impl TenantToken {
    /// The `Authorization` header's value for this token, in PVE's form:
    /// `PVEAPIToken=user@realm!name=secret`.
    pub fn header(&self) -> String {
        format!("PVEAPIToken={}={}", self.tokenid, self.secret)
    }
}

/// Why a tenant request was refused; each maps to its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// 400: the request is invalid (scenario does not parse or has no sites, lab backend,
    /// idle limit 0, bad clock factor, bad name, unknown field); the text says which.
    #[error("invalid tenant request: {0}")]
    BadRequest(String),
    /// 404: no live tenant has this id, and the reaper did not delete it recently.
    #[error(
        "no tenant '{0}' (never created, deleted, or reaped; GET /_fake/tenants lists the live ones)"
    )]
    NotFound(String),
    /// 404: the reaper deleted this tenant after `secs` seconds without a request (the
    /// last 1024 reaped ids are remembered, to say so rather than "not found").
    #[error("tenant '{id}' was reaped: no request on its listeners for more than {secs} s")]
    Reaped {
        /// The reaped tenant's id.
        id: String,
        /// Its idle limit in seconds, which it passed.
        secs: u64,
    },
    /// 429: the server already runs (or is starting) its maximum of tenants, given here.
    #[error(
        "tenant limit reached: {0} live tenants; delete some (DELETE /_fake/tenants/ID) or start the server with a larger --max-tenants"
    )]
    Limit(usize),
    /// 403: the request reached a tenant's own listener; only the host server manages
    /// tenants.
    #[error(
        "this listener manages no tenants: a tenant cannot create or list tenants; ask the server that created it (its own /_fake/tenants)"
    )]
    NotHere,
    /// 503: the host server is shutting down and starts no more tenants.
    #[error("the server is shutting down")]
    Closed,
    /// 503: the tenant's listeners could not be started (e.g. no port to bind, no
    /// certificate); the text is the cause.
    #[error("cannot start the tenant's listeners: {0}")]
    Start(String),
}

impl TenantError {
    /// The HTTP status `/_fake/tenants` answers with for this error: 400, 403, 404, 429 or
    /// 503 as each variant says.
    pub fn status(&self) -> u16 {
        match self {
            TenantError::BadRequest(_) => 400,
            TenantError::NotHere => 403,
            TenantError::NotFound(_) | TenantError::Reaped { .. } => 404,
            TenantError::Limit(_) => 429,
            TenantError::Closed | TenantError::Start(_) => 503,
        }
    }
}
