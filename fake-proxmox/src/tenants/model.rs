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

impl TenantRequest {
    pub fn scenario(mut self, yaml: impl Into<String>) -> Self {
        self.scenario = Some(yaml.into());
        self
    }
    pub fn certificate(mut self, c: CertChoice) -> Self {
        self.certificate = Some(c);
        self
    }
    pub fn idle_timeout_secs(mut self, secs: u64) -> Self {
        self.idle_timeout_secs = Some(secs);
        self
    }
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    pub fn clock(mut self, mode: ClockMode) -> Self {
        self.clock = Some(mode);
        self
    }
    pub fn pve_version(mut self, v: PveVersion) -> Self {
        self.pve_version = Some(v);
        self
    }
}

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
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub certificate: CertChoice,
    pub idle_timeout_secs: u64,
    /// UNIX seconds.
    pub created: f64,
    /// UNIX seconds of the last request on any of its listeners (`created` before one).
    pub last_active: f64,
    /// The token of the tenant's control plane (`Authorization: Bearer …` on its
    /// listeners' `/_fake/…`): made for it at creation, good for its listeners only.
    pub control_token: String,
    pub sites: Vec<TenantSite>,
}

impl TenantInfo {
    pub fn site(&self, name: &str) -> Option<&TenantSite> {
        self.sites.iter().find(|s| s.name == name)
    }
}

/// One site of a tenant: its own listener, and who may log in.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantSite {
    pub name: String,
    /// Base URL without `/api2/json`.
    pub url: String,
    pub port: u16,
    /// `None` with plain HTTP.
    pub fingerprint: Option<String>,
    pub cert_pem: Option<String>,
    pub users: Vec<TenantUser>,
    pub tokens: Vec<TenantToken>,
    /// The tenant's control token (the same on all its sites), so that a site alone is
    /// enough to drive its control plane.
    pub control_token: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantUser {
    pub userid: String,
    pub password: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantToken {
    /// `user@realm!name`.
    pub tokenid: String,
    pub secret: String,
}

impl TenantToken {
    /// The `Authorization` header's value for this token.
    pub fn header(&self) -> String {
        format!("PVEAPIToken={}={}", self.tokenid, self.secret)
    }
}

/// Why a tenant request was refused; each maps to its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("invalid tenant request: {0}")]
    BadRequest(String),
    #[error(
        "no tenant '{0}' (never created, deleted, or reaped; GET /_fake/tenants lists the live ones)"
    )]
    NotFound(String),
    #[error("tenant '{id}' was reaped: no request on its listeners for more than {secs} s")]
    Reaped { id: String, secs: u64 },
    #[error(
        "tenant limit reached: {0} live tenants; delete some (DELETE /_fake/tenants/ID) or start the server with a larger --max-tenants"
    )]
    Limit(usize),
    #[error(
        "this listener manages no tenants: a tenant cannot create or list tenants; ask the server that created it (its own /_fake/tenants)"
    )]
    NotHere,
    #[error("the server is shutting down")]
    Closed,
    #[error("cannot start the tenant's listeners: {0}")]
    Start(String),
}

impl TenantError {
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
