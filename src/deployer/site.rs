//! A connected site: its client, its PVE version, and the lock that keeps this deployer's own
//! `nextid` → create pairs from racing each other (other creators can still race; see pipeline).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::deployer::config::{Provider, Site};
use crate::deployer::errors::{StepError, classify};
use crate::deployer::pve::api::{ClusterResource, Version};
use crate::deployer::pve::{ClientOptions, Credentials, PveClient};

pub struct SiteCtx {
    pub name: String,
    pub client: PveClient,
    pub version: Option<Version>,
    pub create_lock: Mutex<()>,
    /// The last `/cluster/resources` this run read, with when it was asked for: what VMs with
    /// nothing recorded adopt from when `listing_max_age` allows (see `Pipeline`).
    pub listing: Mutex<Option<(Instant, Arc<Vec<ClusterResource>>)>>,
}

impl SiteCtx {
    pub fn version_pair(&self) -> Option<(u32, u32)> {
        self.version.as_ref().and_then(Version::major_minor)
    }
}

/// Connects the provider's site called `name`; a name the provider config lacks is
/// [`StepError::SiteUnknown`]. The one way `plan`, `deploy`, `status` and `destroy` connect.
pub async fn connect_named(
    provider: &Provider,
    name: &str,
    timeout: Duration,
) -> Result<SiteCtx, StepError> {
    match provider.site(name) {
        None => Err(StepError::SiteUnknown(name.to_string())),
        Some(site) => connect(site, &provider.credentials, timeout).await,
    }
}

/// Builds the client and proves the credentials with `GET /version` (which needs auth).
pub async fn connect(
    site: &Site,
    credentials: &Credentials,
    timeout: Duration,
) -> Result<SiteCtx, StepError> {
    let options = ClientOptions {
        tls: site.tls.clone(),
        timeout,
        connect_timeout: timeout.min(Duration::from_secs(10)),
    };
    let client = PveClient::new(&site.endpoint, credentials.clone(), &options)
        .map_err(|e| StepError::InvalidSpec(format!("site {}: {e}", site.name)))?;
    client
        .authenticate()
        .await
        .map_err(|e| classify(&site.name, site.node.as_deref().unwrap_or("?"), None, &e))?;
    let version = client
        .version()
        .await
        .map_err(|e| classify(&site.name, site.node.as_deref().unwrap_or("?"), None, &e))?;
    tracing::info!(site = %site.name, version = %version.version, principal = %client.principal(), "connected");
    Ok(SiteCtx {
        name: site.name.clone(),
        client,
        version: Some(version),
        create_lock: Mutex::new(()),
        listing: Mutex::new(None),
    })
}
