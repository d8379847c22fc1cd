//! The control plane for tests, under `/_fake/...` on every site listener (never under
//! `/api2`): scenario load/reset, snapshots, the clock, faults, node/storage/task knobs,
//! volumes, the journal and a state dump. JSON in and out.

pub mod client;
pub mod routes;

pub use client::{ControlClient, ControlError};
pub use routes::router;
