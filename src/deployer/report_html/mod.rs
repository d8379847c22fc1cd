//! The rollout report as one self-contained HTML page with a timeline picture: one row per VM, one
//! bar per step, coloured by outcome, with a legend and a time axis.
//!
//! [`render`] is a pure function of the neutral [`Timeline`] model; [`Recorder`] builds that model
//! from the built-in deployer's progress callbacks and its [`crate::deployer::deploy::RolloutResult`].

mod model;
mod recorder;
mod render;

pub use model::{Entry, Row, StepOutcome, Timeline};
pub use recorder::Recorder;
pub use render::{esc, fmt_ms, render, render_page, svg, tick_step};

use std::path::Path;

/// Renders `timeline` and writes it to `path` (parent directories created).
pub fn write(path: &Path, timeline: &Timeline) -> std::io::Result<()> {
    write_file(path, &render(timeline))
}

/// Renders several rollouts as one page and writes it to `path` (parent directories created).
pub fn write_page(path: &Path, title: &str, timelines: &[Timeline]) -> std::io::Result<()> {
    write_file(path, &render_page(title, timelines))
}

fn write_file(path: &Path, html: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, html)
}
