//! fake-proxmox: a stateful simulator of the Proxmox VE HTTP API, faithful where a
//! deployer can tell the difference (auth, CSRF, envelopes, status lines, tasks, locks,
//! storage rules), with a control plane for tests under `/_fake`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fake_proxmox::{ClockMode, FakeProxmox, Scenario};
//! let fake = FakeProxmox::builder()
//!     .scenario(Scenario::embedded_default())
//!     .auth_failure_delay(false)
//!     .clock(ClockMode::Scaled(50.0))
//!     .start()
//!     .await?;
//! let site = fake.site("site-1").expect("site");
//! println!("{} {}", site.url(), site.fingerprint());
//! # Ok(()) }
//! ```

pub mod access;
pub mod agent;
pub mod clock;
pub mod cluster;
pub mod control;
pub mod faults;
pub mod journal;
pub mod nodes;
pub mod qemu;
pub mod router;
pub mod scenario;
pub mod schema;
pub mod server;
pub mod storage;
pub mod tasks;
#[cfg(feature = "testcontainers")]
pub mod testcontainers;
pub mod validate;
pub mod version;
pub mod wire;
pub mod world;

pub use clock::ClockMode;
pub use control::{ControlClient, ControlError};
pub use faults::FaultRule;
pub use journal::{AuthKind, JournalEntry};
pub use scenario::{Scenario, ScenarioError};
pub use server::{Builder, FakeProxmox, SiteHandle, app};
pub use version::PveVersion;

/// Errors of starting and running the fake.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS setup failed: {0}")]
    Tls(String),
    #[error("state dir: {0}")]
    StateDir(String),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("{0}")]
    Config(String),
}
