//! provision-harness: two products and the CLI that drives them, tested by the Gherkin features
//! in `features/`.
//!
//! # How the pieces fit
//!
//! - [`deployer`] — seed 000's Proxmox rollout, done the way real PVE needs it. ProxmoxVM
//!   manifests ([`manifest`]) and a ProviderConfig ([`config`]) go in. A [`rollout::Rollout`]
//!   is built once from the manifests: each VM's key, wave ([`order`]), validated spec
//!   ([`validate`]) or why it is invalid, and dependencies. [`plan`] (the pre-flight check, GET
//!   requests only), [`deploy`], `status` and `destroy` all read that one value. [`deploy`]
//!   runs every VM through the per-VM [`pipeline`] (its steps a typed list,
//!   [`pipeline::Step`]) on a connected [`site`] (a [`pve`] client), retrying retryable
//!   [`errors`] with [`retry`]'s backoff and recording what it created in the [`state`] file
//!   so a killed run resumes; [`lifecycle`] answers `status` and `destroy`. [`report`] and [`report_html`] render the results; [`rehearse`]
//!   runs the compiled-in [`examples`] against an embedded fake-proxmox.
//! - [`cluster`] — seed 002's cluster provisioner: a CA and node certificates, node configs,
//!   provisioning over SSH (netbooted nodes on a vm-lab lab, [`cluster::lab`], or the VMs a
//!   deployer made through a PVE API, [`cluster::stack`]), and the Raft quorum check.
//! - [`suite`] — running the Gherkin suites on many machines: which scenarios a shard runs
//!   ([`suite::shard`]), their recorded durations, and one report merged from the shards'.
//! - [`trace`] — one trace per run: the deployer's spans, the fake's requests and tasks, the
//!   harness's steps and lab events merged into one Chrome trace-event file, and the failure
//!   bundle a failed run keeps.
//! - `main.rs` — the `provision-harness` CLI (`plan`, `deploy`, `status`, `destroy`, `rehearse`,
//!   `report merge`), a thin layer over [`deployer`] and [`suite`].
//!
//! The two products never import each other; a whole-stack run chains them (the deployer makes
//! the VMs, the provisioner brings the cluster up on them): [`rehearse_stack`], where the
//! deployer's PVE client powers the provisioner's VMs ([`cluster::stack::VmPower`]).
//!
//! The deployer's modules are re-exported at the crate root (`provision_harness::deploy`,
//! `provision_harness::pve`, …), the paths the tests, benchmarks and CLI use.

// A library reports through its return values and `tracing`, never by printing; the CLI prints.
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod cluster;
pub mod deployer;
pub mod mutants;
pub mod suite;
pub mod trace;

pub use deployer::{
    config, deploy, errors, examples, image, lifecycle, manifest, order, pipeline, plan, pve,
    rehearse, rehearse_stack, report, report_html, retry, rollout, site, state, validate,
};
