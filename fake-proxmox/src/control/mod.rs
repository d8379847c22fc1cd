//! The control plane for tests, under `/_fake/...` on every site listener (never under
//! `/api2`): scenario load/reset, snapshots, the clock, faults, node/storage/task knobs,
//! volumes, the journal, a state dump, and the state file (export/import). JSON in and out.

pub mod auth;
pub mod client;
pub mod routes;
pub mod state_file;

pub use auth::ControlToken;
pub use client::{ControlClient, ControlError};
pub use routes::router;
