//! One trace per run: everything a rehearsal, a deploy or a scenario did, in time order, as
//! one Chrome trace-event JSON file that Perfetto (ui.perfetto.dev) and `chrome://tracing`
//! open.
//!
//! How the pieces fit: each source adds spans and instants to a [`Trace`] in wall-clock time —
//! the deployer through [`TraceLayer`] (its spans, pipeline steps, retries) inside a
//! [`Capture`], the fake through its request journal and exported state ([`fake`]), the
//! harness through its Gherkin steps and faults, the lab through its guests' boots, console
//! milestones and QMP events ([`lab`]) — and [`Trace::to_json`] lays
//! them out on one origin with a process per source. A failed run also keeps a [`bundle`].

pub mod bundle;
mod chrome;
pub mod fake;
pub mod lab;
mod layer;

pub use chrome::{Lane, Mark, Span, Trace, args, now_us, unix_us};
pub use layer::{CLUSTER, Capture, DEPLOYER, TraceLayer, filter, install, install_with_logs};
