//! Shared server state: the world under one lock, with the clock, faults and journal.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::ClockMode;
use crate::scenario::{Backend, Scenario};
use crate::world::Runners;

// `Inner` lives below this file, so the state dir's writer, which this file holds, can name it.
pub use super::inner::Inner;

/// The state of one fake (or tenant), shared by its listeners and background tasks.
pub struct Shared {
    /// The state, under one lock.
    pub inner: Mutex<Inner>,
    /// Failed authentications wait before their 401, as PVE's do.
    pub auth_failure_delay: bool,
    /// Set with a state dir: answers wait until the state they saw is durable.
    pub persist: Option<Arc<crate::persist::writer::Persister>>,
}

/// How the listeners hold the shared state.
pub type SharedRef = Arc<Shared>;

impl Shared {
    /// A new state from `scenario`'s world on a new clock, without a state dir; `default` runs
    /// the guests of the sites of the default backend, `other` those of another backend.
    pub fn new(
        scenario: &Scenario,
        clock: ClockMode,
        auth_failure_delay: bool,
        default: Runners,
        other: Option<(Backend, Runners)>,
    ) -> SharedRef {
        Arc::new(Shared {
            inner: Mutex::new(Inner::fresh(scenario, clock, default, other)),
            auth_failure_delay,
            persist: None,
        })
    }
}

impl Shared {
    /// The shared state around a ready `inner` (a state read back), with its persister.
    pub fn from_inner(
        inner: Inner,
        auth_failure_delay: bool,
        persist: Option<Arc<crate::persist::writer::Persister>>,
    ) -> SharedRef {
        Arc::new(Shared {
            inner: Mutex::new(inner),
            auth_failure_delay,
            persist,
        })
    }
}

/// The axum state of one site's listener.
#[derive(Clone)]
pub struct SiteCtx {
    /// The fake's state.
    pub shared: SharedRef,
    /// Shared, not owned: the context is cloned for every request.
    pub site: Arc<str>,
    /// The certificate the listener serves (self-signed: its own root), which the fake's
    /// nodes hand out where PVE hands out `/etc/pve/pve-root-ca.pem`. `None` for an app
    /// made without one (`server::app`).
    pub ca_pem: Option<Arc<str>>,
    /// The PVE version the site answered its last request as.
    pub version: VersionHint,
}

/// The PVE version a site answered its last request as: the next request resolves its route
/// and checks its parameters for it before taking the lock, and only again under the lock
/// should the version have changed since (a scenario loaded through the control API).
#[derive(Clone, Default)]
pub struct VersionHint(Arc<std::sync::atomic::AtomicU8>);

impl VersionHint {
    /// The version last seen; `None` before the first request.
    pub fn get(&self) -> Option<crate::version::PveVersion> {
        let i = self.0.load(std::sync::atomic::Ordering::Relaxed);
        crate::version::PveVersion::ALL
            .get(usize::from(i).checked_sub(1)?)
            .copied()
    }

    /// Remember `v` as the site's version.
    pub fn set(&self, v: crate::version::PveVersion) {
        let i = crate::version::PveVersion::ALL
            .iter()
            .position(|x| *x == v)
            .map_or(0, |i| i as u8 + 1);
        self.0.store(i, std::sync::atomic::Ordering::Relaxed);
    }
}
