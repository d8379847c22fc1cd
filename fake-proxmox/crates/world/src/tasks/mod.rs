//! Tasks: UPIDs, task state machines on the simulated clock, status, logs, listings.
//!
//! Tasks know nothing of their callers: a task is generic over the work it does when it
//! completes (`Task<W>`), which the caller lays out and applies (`world::work`,
//! `world::tasks`). This module imports no other module of the crate.
//!
//! # Deviations from real PVE
//! - Task effects apply when the simulated clock passes the task's end time, observed on
//!   the next request (state is only observable through requests, so this is invisible).
//! - Only the last 10,000 tasks per site are kept.
//! - Log texts are modelled on real task logs but are not byte-identical for every type.

pub mod model;
pub mod store;
pub mod upid;
