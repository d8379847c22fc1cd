//! The deployer against fake-proxmox (in-process, TLS with a pinned certificate, fast clock): the
//! whole pipeline, the seed's six failure modes, the nextid race, re-runs, adoption, a run killed
//! mid-way and resumed, destroy, and plan/rehearse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "deployer_fake/convergence.rs"]
mod convergence;
#[path = "deployer_fake/failures.rs"]
mod failures;
#[path = "deployer_fake/pipeline.rs"]
mod pipeline;
#[path = "deployer_fake/plan_schema.rs"]
mod plan_schema;
#[path = "deployer_fake/support.rs"]
mod support;
