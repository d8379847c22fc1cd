//! Tasks: UPIDs, task state machines on the simulated clock, status, logs, listings.
//!
//! # Deviations from real PVE
//! - Task effects apply when the simulated clock passes the task's end time, observed on
//!   the next request (state is only observable through requests, so this is invisible).
//! - Only the last 10,000 tasks per site are kept.
//! - Log texts are modelled on real task logs but are not byte-identical for every type.

pub mod model;
pub mod store;
pub mod upid;
pub mod verbs;
