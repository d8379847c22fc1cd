//! The rollout report as one self-contained HTML page with a timeline picture: one row per VM, one
//! bar per step, coloured by outcome, with a legend and a time axis.
//!
//! [`render`] is a pure function of the neutral [`Timeline`] model; [`Recorder`] builds that model
//! from the built-in deployer's progress callbacks and its [`crate::deploy::RolloutResult`].

mod model;
mod recorder;
mod render;

pub use model::{Entry, Row, StepOutcome, Timeline};
pub use recorder::{BACKOFF_STEP, Recorder};
pub use render::{esc, fmt_ms, render, svg, tick_step};

use std::path::Path;

/// Renders `timeline` and writes it to `path` (parent directories created), atomically.
pub fn write(path: &Path, timeline: &Timeline) -> std::io::Result<()> {
    crate::state::write_atomic(path, render(timeline).as_bytes())
}
