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
//!
//! # Crates (each layer imports only the ones below it; the compiler enforces it)
//! ```text
//! fake-proxmox          the server: wire format, route handlers (parse → model verb → render),
//!  │                    the route table, dispatch (auth, CSRF, schema, faults), TLS, the /_fake
//!  │                    control plane, tenants, --state-dir persistence, the binary
//!  ├ fake-proxmox-world the simulated world, no HTTP: sites, nodes, storages, access, pools,
//!  │   │                tasks on a clock, guests (qemu), agent, firewall, faults, scenarios,
//!  │   │                the execution seam (simulated, or vm-lab's real QEMU guests)
//!  │   └ vm-lab
//!  └ fake-proxmox-schema  the API schema facts and PVE's parameter checks, no HTTP, no model
//! ```
//! `fake_proxmox::{qemu, storage, exec, schema, …}` re-export the lower crates under the paths
//! they always had; a family's module here (`qemu`, `storage`, …) adds only its `routes`.
//!
//! # How the pieces fit
//! A request goes `server` → `server::dispatch` (PVE's order: auth, CSRF, schema check of
//! the parameters by `schema`, node online, faults by `faults`) → the handler of the
//! matching route in `router`'s table → a family's `routes.rs` (parse, render) → the
//! family's model verb on the [`world::Site`] under one lock (decide). Verbs that take time
//! lay out a task (`tasks`): its log lines and its end on the simulated `clock`; its effect
//! on the world is applied when the clock passes the end (`qemu::work`).
//!
//! - [`route`]: the handlers' vocabulary: `Ctx` (the site and the request) and `Route`.
//!   [`router`] is only the table of every family's routes and the path matching.
//! - [`request::Request`]: what a model verb is handed, whole: who asks, whether with a
//!   ticket, the validated parameters, the clock.
//! - [`qemu::op`]: the entry of every VM verb. `Site::vm_op` looks the VM up on its node and
//!   checks the privilege on `/vms/{vmid}`; the `VmOp` it returns carries the lock check
//!   (`skiplock`) and lays out the verb's task as the caller (`VmOp::plan`).
//!
//! - [`world`]: one `Site` per scenario site: `nodes`, `storage` per node, `qemu` VMs,
//!   `tasks`, `access` (users, tokens, ACLs, tickets), the site's seeded random source and
//!   its executor. `world::build` makes it from a [`Scenario`]; no model knows the
//!   scenario's types.
//! - Families (`access`, `cluster`, `nodes`, `storage`, `tasks`, `qemu`, `agent`,
//!   `firewall`): the state and PVE's rules in `model.rs` and verb files named after what
//!   they decide (`qemu/create.rs`, `storage/download.rs`, `access/verbs.rs`, …; no HTTP
//!   types), the wire side in `routes.rs`, which nothing but the route table imports. Each
//!   `mod.rs` lists its deviations from real PVE.
//! - [`control`]: the `/_fake` control plane for tests (reset, state, clock, faults), apart
//!   from the emulated API.
//! - [`tenants`]: many isolated fakes in one server: `/_fake/tenants` starts whole worlds of
//!   their own on their own listeners, deletes them, reaps the idle ones.
//!
//! # The execution seam
//! The qemu and agent models decide *whether* something happens to a guest (privileges,
//! locks, pending changes, PVE's errors, the task's plan); everything that *runs* a guest
//! goes through the site's [`exec::Executor`]: start (also from a RAM state), stop,
//! shutdown (a reboot is a shutdown and a start), reset, suspend, resume, whether the guest
//! agent answers and what it
//! answers. The executor writes the
//! run state it produced on the VM (`power`, `pid`, `started_at`, `agent_ready_at`), which
//! is all the routes read. [`exec::Simulated`] is the default (no process; seeded pids, a
//! boot delay on the clock, answers made up from the config); [`exec::LabExecutor`] runs
//! real QEMU guests in a vm-lab namespace (QMP for power, the real guest agent) without
//! touching the PVE rules. A scenario's `backend: lab`, `FakeProxmox::builder().backend(…)`
//! or `serve --backend lab` gives a site the lab executor with [`exec::FileDisks`]
//! (`exec::lab::backend`); `builder().executor(…)` hands in any other (it stays across
//! `/_fake/reset` and scenario loads). The agent's commands cross the seam as PVE sends
//! them to QGA (`exec`, `exec-status`, `file-open`/`read`/`write`/`close`, …), so the PVE
//! side of each route is the same for both; the simulated guest keeps its files and
//! processes on the VM (`agent::guest_os`). Consoles have no route (501) and so are not in
//! the trait yet.
//!
//! Volume *data* has a seam of its own, the site's [`exec::Disks`]: allocating, freeing,
//! growing and copying volumes (`qemu-img create/resize/convert`), RAM states, files placed
//! as volumes (download, scenario, control API) and the cloud-init drive written on start.
//! [`exec::SimulatedDisks`] keeps no data (the default); [`exec::FileDisks`] keeps every
//! volume as a real file a guest executor boots from (`Disks::path`), handed to
//! `FakeProxmox::builder().disks(…)` or `fake-proxmox serve --disks files`.

// A library reports through its return values and `tracing`, never by printing; the binary prints.
#![warn(clippy::print_stdout, clippy::print_stderr)]
#![warn(missing_docs)]

// The model (fake-proxmox-world) and the schema (fake-proxmox-schema), re-exported under the
// paths they always had: `fake_proxmox::exec::LabExecutor`, `fake_proxmox::schema::ApiSchema`, …
pub use fake_proxmox_schema as schema;
pub use fake_proxmox_schema::release as version;
pub use fake_proxmox_world::{clock, exec, faults, guest, request, rng_state, scenario, world};

// Families whose routes live here, each re-exporting its model from the world crate.
pub mod access;
pub mod agent;
pub mod cluster;
pub mod console;
pub mod firewall;
pub mod lxc;
pub mod nodes;
pub mod pools;
pub mod qemu;
pub mod rrd;
pub mod storage;
pub mod tasks;

// The server: wire format, routes, dispatch, control plane, tenants, persistence, TLS.
pub mod control;
pub mod journal;
pub mod persist;
pub mod route;
pub mod router;
pub mod server;
pub mod tenants;
#[cfg(feature = "testcontainers")]
pub mod testcontainers;
pub mod validate;
pub mod wire;

pub use clock::ClockMode;
pub use control::{ControlClient, ControlError, ControlToken};
pub use faults::FaultRule;
pub use journal::{AuthKind, JournalEntry};
pub use scenario::{Scenario, ScenarioError, SnippetShare};
pub use server::limits::Limits;
pub use server::{Builder, FakeProxmox, SiteHandle, app};
pub use tenants::{CertChoice, TenantInfo, TenantRequest, TenantSite};
pub use version::PveVersion;

/// Errors of starting and running the fake.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A site's listener could not be bound (address in use, no permission for the port,
    /// an address not on this host).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The operating system's refusal.
        source: std::io::Error,
    },
    /// The self-signed certificate could not be made, or a kept one (or its key) could not
    /// be loaded into the TLS configuration.
    #[error("TLS setup failed: {0}")]
    Tls(String),
    /// The `--state-dir` could not be created, its state writer not started, or its kept
    /// `cert.pem`/`key.pem` not parsed.
    #[error("state dir: {0}")]
    StateDir(String),
    /// The state file in `--state-dir` could not be read, parsed or written.
    #[error("state dir: {0}")]
    State(#[from] crate::persist::PersistError),
    /// The scenario is invalid (does not parse, or fails its checks).
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The start options contradict each other or the scenario (e.g. `--listen` names a
    /// site the scenario does not have) or the lab backend cannot be set up.
    #[error("{0}")]
    Config(String),
}

/// The README's example compiles as a doc test, so what it shows stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
