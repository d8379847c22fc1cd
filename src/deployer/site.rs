//! A connected site: its client, its PVE version, and the lock that keeps this deployer's own
//! `nextid` → create pairs from racing each other (other creators can still race; see pipeline).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::deployer::config::{Provider, Site};
use crate::deployer::errors::{StepError, classify};
use crate::deployer::pve::api::{
    ClusterResource, ContentEntry, NetworkIface, NodeStatus, StorageInfo, Version,
};
use crate::deployer::pve::{ClientOptions, Credentials, PveClient};

pub struct SiteCtx {
    pub name: String,
    pub client: PveClient,
    pub version: Option<Version>,
    pub create_lock: Mutex<()>,
    /// What this run last read of the site and its nodes, for VMs with nothing recorded when
    /// `listing_max_age` allows (see `Pipeline`): `/cluster/resources`, and per node its
    /// status, network, storages and a storage's content.
    pub recent: RecentReads,
    /// Where `userData` snippets are written (the provider config's `snippets`).
    pub snippets: Option<crate::deployer::config::SnippetShare>,
}

#[derive(Default)]
pub struct RecentReads {
    pub resources: Recent<GuestsByName>,
    /// `/cluster/resources` as this run first read it, for every VM's look at the nodes other
    /// than its own (its own node's guests it reads afresh): one site listing per run, not
    /// one per VM.
    pub run_resources: Recent<GuestsByName>,
    pub node_status: Recent<NodeStatus>,
    pub network: Recent<Vec<NetworkIface>>,
    pub storages: Recent<Vec<StorageInfo>>,
    pub content: Recent<Vec<ContentEntry>>,
}

/// A site listing's guest rows by name (rows without one under ""), so a VM finds the
/// guests of its name without going through all of the site's.
#[derive(Debug, Default)]
pub struct GuestsByName(HashMap<String, Vec<ClusterResource>>);

impl GuestsByName {
    pub fn new(rows: Vec<ClusterResource>) -> Self {
        let mut by_name: HashMap<String, Vec<ClusterResource>> = HashMap::new();
        for r in rows {
            by_name
                .entry(r.name.clone().unwrap_or_default())
                .or_default()
                .push(r);
        }
        Self(by_name)
    }

    /// The rows named `name`, in the listing's order.
    pub fn named(&self, name: &str) -> &[ClusterResource] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }
}

/// Answers this run read, by key, each with when it was asked for. Each key is read by one
/// caller at a time; the others wait and take its answer.
pub struct Recent<T> {
    slots: std::sync::Mutex<HashMap<String, Slot<T>>>,
}

/// One key's last answer and when it was asked for; held while it is being read.
type Slot<T> = Arc<Mutex<Option<(Instant, Arc<T>)>>>;

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            slots: std::sync::Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Recent<T> {
    /// The answer for `key` if it was asked for at most `max_age` ago, else `read`'s.
    pub async fn get_or_read<E, F>(
        &self,
        key: &str,
        max_age: Duration,
        read: F,
    ) -> Result<Arc<T>, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(slots.entry(key.to_string()).or_default())
        };
        let mut held = slot.lock().await;
        if let Some((asked, value)) = held.as_ref()
            && asked.elapsed() <= max_age
        {
            return Ok(Arc::clone(value));
        }
        let asked = Instant::now();
        let value = Arc::new(read.await?);
        *held = Some((asked, Arc::clone(&value)));
        Ok(value)
    }
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
        recent: RecentReads::default(),
        snippets: site.snippets.clone(),
    })
}
