//! The rollout World's part of a scenario's trace: the deployer runs inside the World's
//! capture, fault steps leave instants, and the after-hook reads the fake's journal and
//! state before the fake stops (see `trace_writer.rs` for the rest).

use std::sync::Arc;

use provision_harness::trace::fake::FakeRecord;
use provision_harness::trace::{Capture, Lane};
use serde_json::{Map, Value};
use tracing::Instrument as _;

use super::adapter::{Deployer, PlanFuture, RunFuture, RunRequest};
use super::trace_writer::Collected;
use super::world::{RolloutWorld, Target};

/// A deployer whose runs record into a scenario's capture.
#[derive(Debug)]
pub struct Traced {
    pub inner: Arc<dyn Deployer>,
    pub capture: Capture,
}

impl Deployer for Traced {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn run(&self, req: RunRequest) -> RunFuture {
        let span = self
            .capture
            .span(&format!("deployer {}", req.action.as_str()));
        Box::pin(self.inner.run(req).instrument(span))
    }

    fn plan(&self, req: RunRequest) -> PlanFuture {
        Box::pin(
            self.inner
                .plan(req)
                .instrument(self.capture.span("deployer plan")),
        )
    }
}

/// A fault a step set up, as an instant on the harness's "faults" lane.
pub fn fault(w: &RolloutWorld, what: &str, args: Map<String, Value>) {
    w.capture
        .mark(Lane::new("harness", "faults"), what, "fault", args);
}

/// What the World recorded, read before its fake stops.
pub async fn collect(w: &RolloutWorld) -> Collected {
    let mut c = Collected {
        trace: w.capture.take(),
        world: format!("{w:?}"),
        ..Collected::default()
    };
    if let Some(Target::Fake(fake)) = &w.target {
        let controls: Vec<_> = fake.sites().map(|s| s.control()).collect();
        match FakeRecord::read(&controls).await {
            Ok(rec) => {
                c.states.push(("all-sites".into(), rec.state.clone()));
                c.fake = Some(rec);
            }
            Err(e) => eprintln!("trace: the fake's journal and state: {e}"),
        }
    }
    c
}
