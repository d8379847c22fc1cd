//! The server side of tenants: how a tenant's world is started (a whole server of its own,
//! built like the host's, on the host's bind address) and stopped.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;

use super::tls::Cert;
use super::{Builder, FakeProxmox};
use crate::tenants::{
    CertChoice, Spawn, TenantError, TenantSite, TenantWorld, WorldProbe, WorldSpec,
};

/// What every tenant of one host shares with it.
pub(super) struct Template {
    pub tls: bool,
    pub auth_failure_delay: bool,
    pub bind_ip: IpAddr,
    pub cert: Arc<Cert>,
    pub limits: super::limits::Limits,
}

pub(super) fn spawner(t: Template) -> Spawn {
    Box::new(move |spec: WorldSpec| {
        let mut b = Builder::default()
            .scenario(spec.scenario.clone())
            .tls(t.tls)
            .auth_failure_delay(t.auth_failure_delay)
            .clock(spec.clock);
        b.tenant = Some(spec.activity);
        b.tenant_limits = None;
        b.control_token = Some(spec.control_token.clone());
        b.limits = t.limits;
        if spec.certificate == CertChoice::Shared {
            b.cert = Some(t.cert.clone());
        }
        for s in &spec.scenario.sites {
            b = b.listen(&s.name, SocketAddr::new(t.bind_ip, 0));
        }
        let fake = b
            .start_now()
            .map_err(|e| TenantError::Start(e.to_string()))?;
        let sites = fake
            .sites
            .iter()
            .map(|h| {
                let (users, tokens) = spec
                    .scenario
                    .sites
                    .iter()
                    .find(|s| s.name == h.name)
                    .map(crate::tenants::credentials)
                    .unwrap_or_default();
                TenantSite {
                    name: h.name.clone(),
                    url: h.url.clone(),
                    port: h.addr.port(),
                    fingerprint: h.tls.then(|| h.fingerprint.clone()),
                    cert_pem: h.tls.then(|| h.cert_pem.clone()),
                    users,
                    tokens,
                    control_token: spec.control_token.as_str().to_string(),
                }
            })
            .collect();
        Ok(Box::new(Tenant { fake, sites }) as Box<dyn TenantWorld>)
    })
}

struct Tenant {
    fake: FakeProxmox,
    sites: Vec<TenantSite>,
}

impl TenantWorld for Tenant {
    fn sites(&self) -> Vec<TenantSite> {
        self.sites.clone()
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(self.fake.shutdown())
    }

    fn probe(&self) -> WorldProbe {
        let weak: std::sync::Weak<super::state::Shared> = Arc::downgrade(&self.fake.shared);
        WorldProbe(weak)
    }
}
