//! The deployer's side of a trace: a `tracing_subscriber` layer that turns the spans of a
//! [`Capture`] into trace spans, the pipeline's `step` events into step spans, and retries
//! and other notable events into instants.
//!
//! Several captures can run at once in one process (cucumber runs scenarios concurrently on
//! one task): each is a root span carrying its id, and every span below it records into it.
//! Spans outside any capture are not kept.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::chrome::{Lane, Mark, Span, Trace, now_us};

/// The process every deployer span is drawn in.
pub const DEPLOYER: &str = "deployer";
/// The process the cluster provisioner's spans (bring-up steps, per-node work) are drawn in.
pub const CLUSTER: &str = "cluster";
/// The target of the cluster provisioner's spans (its module path).
const CLUSTER_TARGET: &str = "provision_harness::cluster";
/// The field naming a capture on its root span.
const CAPTURE_FIELD: &str = "trace_capture";

type Buf = Arc<Mutex<Trace>>;

/// The capture that takes cluster spans begun outside every capture (see
/// [`Capture::adopt_cluster_spans`]).
fn adopter() -> &'static Mutex<Option<Weak<Mutex<Trace>>>> {
    static A: OnceLock<Mutex<Option<Weak<Mutex<Trace>>>>> = OnceLock::new();
    A.get_or_init(Default::default)
}

fn registry() -> &'static Mutex<HashMap<u64, Weak<Mutex<Trace>>>> {
    static R: OnceLock<Mutex<HashMap<u64, Weak<Mutex<Trace>>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// What one run of the deployer records (one per scenario, or one per CLI run).
#[derive(Debug, Clone)]
pub struct Capture {
    id: u64,
    buf: Buf,
}

impl Default for Capture {
    fn default() -> Self {
        Self::new()
    }
}

impl Capture {
    pub fn new() -> Capture {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let buf: Buf = Arc::default();
        if let Ok(mut r) = registry().lock() {
            r.retain(|_, w| w.strong_count() > 0);
            r.insert(id, Arc::downgrade(&buf));
        }
        Capture { id, buf }
    }

    /// The root span: what runs inside it is recorded here. `what` names the run
    /// ("deploy", "rehearse", a scenario's deployer run).
    pub fn span(&self, what: &str) -> tracing::Span {
        tracing::info_span!(target: "provision_harness::trace", "run", trace_capture = self.id, what)
    }

    /// A root span drawn on `lane` rather than the deployer's (a harness step that drives the
    /// cluster provisioner: `Lane::new(CLUSTER, "bring-up")`).
    pub fn span_on(&self, what: &str, lane: &Lane) -> tracing::Span {
        tracing::info_span!(
            target: "provision_harness::trace",
            "run",
            trace_capture = self.id,
            what,
            trace_process = lane.process.as_str(),
            trace_thread = lane.thread.as_str()
        )
    }

    /// Makes this capture also take the cluster provisioner's spans that begin outside every
    /// capture — for a runner whose steps call the provisioner directly, one scenario at a time
    /// (the `@lab` and `@stack` runners). Process-wide, until [`Capture::stop_adopting`] or
    /// another capture adopts.
    pub fn adopt_cluster_spans(&self) {
        if let Ok(mut a) = adopter().lock() {
            *a = Some(Arc::downgrade(&self.buf));
        }
    }

    /// No capture takes stray cluster spans any more.
    pub fn stop_adopting() {
        if let Ok(mut a) = adopter().lock() {
            *a = None;
        }
    }

    /// Everything recorded so far, taken out.
    pub fn take(&self) -> Trace {
        self.buf
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default()
    }

    /// Adds what another source recorded (the fake's requests and tasks, the harness's steps).
    pub fn add(&self, other: Trace) {
        if let Ok(mut t) = self.buf.lock() {
            t.extend(other);
        }
    }

    /// Records an instant in the deployer's process (a harness-side event, e.g. a fault).
    pub fn mark(&self, lane: Lane, name: &str, cat: &str, args: Map<String, Value>) {
        if let Ok(mut t) = self.buf.lock() {
            t.mark(Mark {
                lane,
                name: name.to_string(),
                cat: cat.to_string(),
                at_us: now_us(),
                args,
            });
        }
    }
}

/// The layer; add it to the process's subscriber once (see [`install`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct TraceLayer;

/// A subscriber with only the trace layer, for a process that logs nothing else (a test
/// runner); `false` when one was already set (its own layers then decide).
pub fn install() -> bool {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    tracing_subscriber::registry()
        .with(TraceLayer.with_filter(filter()))
        .try_init()
        .is_ok()
}

/// The trace layer plus logs to stderr filtered by the environment variable `log_env`
/// (`warn` when unset), for a test runner that also logs; `false` when a subscriber was
/// already set.
pub fn install_with_logs(log_env: &str) -> bool {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_env(log_env)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        );
    tracing_subscriber::registry()
        .with(logs)
        .with(TraceLayer.with_filter(filter()))
        .try_init()
        .is_ok()
}

/// What the layer needs: this crate's spans and events at debug and above.
pub fn filter() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new().with_target("provision_harness", Level::DEBUG)
}

/// A span's record while it is open.
struct Open {
    buf: Buf,
    name: String,
    lane: Lane,
    start_us: i64,
    fields: Map<String, Value>,
    /// The pipeline step running in this span: its name and start.
    step: Option<(String, i64)>,
}

impl Open {
    fn close_step(&mut self, at: i64) {
        if let Some((name, start)) = self.step.take() {
            let mut args = Map::new();
            args.insert("step".into(), Value::String(name.clone()));
            if let Some(a) = self.fields.get("attempt") {
                args.insert("attempt".into(), a.clone());
            }
            push_span(
                &self.buf,
                Span {
                    lane: self.lane.clone(),
                    name,
                    cat: "step".into(),
                    start_us: start,
                    dur_us: (at - start).max(0),
                    args,
                },
            );
        }
    }
}

fn push_span(buf: &Buf, s: Span) {
    if let Ok(mut t) = buf.lock() {
        t.span(s);
    }
}

#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(
            field.name().to_string(),
            Value::String(format!("{value:?}")),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
}

/// A cluster span's lane: per node when it names one, else its parent's cluster lane, else the
/// bring-up's own.
fn cluster_lane(fields: &Map<String, Value>, parent: Option<&Lane>) -> Lane {
    match fields.get("node").and_then(Value::as_str) {
        Some(node) => Lane::new(CLUSTER, format!("node {node}")),
        None => parent
            .filter(|l| l.process == CLUSTER)
            .cloned()
            .unwrap_or_else(|| Lane::new(CLUSTER, "bring-up")),
    }
}

fn lane_for(fields: &Map<String, Value>, parent: Option<&Lane>) -> Lane {
    match fields.get("vm").and_then(Value::as_str) {
        Some(vm) => Lane::new(DEPLOYER, format!("vm {vm}")),
        None => parent
            .cloned()
            .unwrap_or_else(|| Lane::new(DEPLOYER, "rollout")),
    }
}

impl<S> Layer<S> for TraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let mut fields = fields.0;
        let parent = span.parent();
        let parent_open = parent.as_ref().and_then(|p| {
            p.extensions()
                .get::<Open>()
                .map(|o| (Arc::clone(&o.buf), o.lane.clone()))
        });
        let (buf, parent_lane) = match fields.remove(CAPTURE_FIELD).and_then(|v| v.as_u64()) {
            Some(cid) => {
                let found = registry()
                    .lock()
                    .ok()
                    .and_then(|r| r.get(&cid).and_then(Weak::upgrade));
                match found {
                    Some(b) => (b, None),
                    None => return,
                }
            }
            None => match parent_open {
                Some((b, l)) => (b, Some(l)),
                None if span.metadata().target().starts_with(CLUSTER_TARGET) => {
                    let adopted = adopter()
                        .lock()
                        .ok()
                        .and_then(|a| a.as_ref().and_then(Weak::upgrade));
                    match adopted {
                        Some(b) => (b, None),
                        None => return,
                    }
                }
                None => return,
            },
        };
        let field = |k: &str| {
            fields
                .get(k)
                .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
        };
        let name = match (span.name(), field("what"), field("vm"), field("attempt")) {
            ("run", Some(what), _, _) => what,
            ("attempt", _, _, Some(n)) => format!("attempt {n}"),
            ("vm", _, Some(vm), _) => format!("vm {vm}"),
            (n, ..) => n.to_string(),
        };
        let chosen = match (
            fields.remove("trace_process"),
            fields.remove("trace_thread"),
        ) {
            (Some(Value::String(p)), Some(Value::String(t))) => Some(Lane::new(p, t)),
            _ => None,
        };
        let lane = if let Some(l) = chosen {
            l
        } else if span.metadata().target().starts_with(CLUSTER_TARGET) {
            cluster_lane(&fields, parent_lane.as_ref())
        } else {
            lane_for(&fields, parent_lane.as_ref())
        };
        span.extensions_mut().insert(Open {
            buf,
            name,
            lane,
            start_us: now_us(),
            fields,
            step: None,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(open) = ext.get_mut::<Open>() {
            let mut f = Fields::default();
            values.record(&mut f);
            open.fields.extend(f.0);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut ext = span.extensions_mut();
        let Some(open) = ext.get_mut::<Open>() else {
            return;
        };
        let mut f = Fields::default();
        event.record(&mut f);
        let mut fields = f.0;
        let message = fields
            .remove("message")
            .and_then(|m| m.as_str().map(str::to_string))
            .unwrap_or_default();
        let now = now_us();
        if message == "step"
            && let Some(step) = fields.get("step").and_then(Value::as_str)
        {
            open.close_step(now);
            open.step = Some((step.to_string(), now));
            return;
        }
        if message == "pve response" {
            // The client's view of a request (the server's, from a fake's journal, is drawn
            // in the site's own process).
            let ms = fields.get("ms").and_then(Value::as_i64).unwrap_or(0);
            let method = fields.get("method").and_then(Value::as_str).unwrap_or("?");
            let path = fields.get("path").and_then(Value::as_str).unwrap_or("?");
            push_span(
                &open.buf,
                Span {
                    lane: open.lane.clone(),
                    name: format!("{method} {path}"),
                    cat: "client-request".into(),
                    start_us: now - ms * 1000,
                    dur_us: ms * 1000,
                    args: fields,
                },
            );
            return;
        }
        if *event.metadata().level() > Level::INFO {
            return;
        }
        let (name, cat) = match message.as_str() {
            "retrying" => ("retry".to_string(), "retry"),
            // `#[instrument(err)]`: the span's error, with no message of its own.
            "" if fields.contains_key("error") => ("error".to_string(), "error"),
            _ => (message, "log"),
        };
        let lane = if open.lane.process == CLUSTER {
            open.lane.clone()
        } else {
            lane_for(&fields, Some(&open.lane))
        };
        fields.insert(
            "level".into(),
            Value::String(event.metadata().level().to_string()),
        );
        if let Ok(mut t) = open.buf.lock() {
            t.mark(Mark {
                lane,
                name,
                cat: cat.to_string(),
                at_us: now,
                args: fields,
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let mut ext = span.extensions_mut();
        let Some(mut open) = ext.remove::<Open>() else {
            return;
        };
        let now = now_us();
        open.close_step(now);
        let Open {
            buf,
            name,
            lane,
            start_us,
            fields,
            ..
        } = open;
        let cat = if lane.process == CLUSTER {
            "cluster"
        } else {
            "deployer"
        };
        push_span(
            &buf,
            Span {
                lane,
                name,
                cat: cat.into(),
                start_us,
                dur_us: (now - start_us).max(0),
                args: fields,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tracing::Instrument as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[tokio::test]
    async fn a_capture_keeps_its_spans_steps_and_retries() {
        let sub = tracing_subscriber::registry().with(TraceLayer.with_filter(filter()));
        let _g = tracing::subscriber::set_default(sub);
        let cap = Capture::new();
        let other = Capture::new();
        async {
            async {
                tracing::debug!(vm = "web", step = "create", "step");
                tracing::debug!(vm = "web", step = "start", "step");
                tracing::info!(vm = "web", attempt = 1, error = "busy", "retrying");
            }
            .instrument(tracing::info_span!("attempt", vm = "web", attempt = 1))
            .await;
        }
        .instrument(cap.span("deploy"))
        .await;
        tracing::info!("outside any capture");
        let t = cap.take();
        let names: Vec<&str> = t.spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["create", "start", "attempt 1", "deploy"]);
        assert_eq!(t.spans[0].lane, Lane::new(DEPLOYER, "vm web"));
        assert_eq!(t.spans[3].lane, Lane::new(DEPLOYER, "rollout"));
        let attempt = &t.spans[2];
        for step in &t.spans[..2] {
            assert!(step.start_us >= attempt.start_us);
            assert!(step.start_us + step.dur_us <= attempt.start_us + attempt.dur_us);
        }
        assert_eq!(t.marks.len(), 1);
        assert_eq!(t.marks[0].name, "retry");
        assert_eq!(t.marks[0].args["error"], "busy");
        assert!(other.take().is_empty());
    }

    #[tokio::test]
    async fn an_adopting_capture_takes_cluster_spans_begun_outside_every_capture() {
        let sub = tracing_subscriber::registry().with(TraceLayer.with_filter(filter()));
        let _g = tracing::subscriber::set_default(sub);
        let cap = Capture::new();
        let _ = restart("adopted01", false).await;
        cap.adopt_cluster_spans();
        let _ = restart("adopted02", false).await;
        async {}
            .instrument(tracing::info_span!(target: "provision_harness::deployer", "not cluster"))
            .await;
        Capture::stop_adopting();
        let _ = restart("adopted03", false).await;
        let t = cap.take();
        // Other tests of this process may run cluster spans meanwhile: look for these only.
        let lanes: Vec<&str> = t
            .spans
            .iter()
            .filter(|s| s.lane.thread.starts_with("node adopted") || s.name == "not cluster")
            .map(|s| s.lane.thread.as_str())
            .collect();
        assert_eq!(lanes, ["node adopted02"]);
    }

    #[tracing::instrument(target = "provision_harness::cluster::lab", name = "restart", skip_all, err(Display), fields(node = node))]
    async fn restart(node: &str, fail: bool) -> Result<(), String> {
        if fail {
            Err(format!("{node} did not boot"))
        } else {
            Ok(())
        }
    }

    #[tokio::test]
    async fn cluster_spans_go_to_the_cluster_process_a_lane_per_node() {
        let sub = tracing_subscriber::registry().with(TraceLayer.with_filter(filter()));
        let _g = tracing::subscriber::set_default(sub);
        let cap = Capture::new();
        async {
            // Made inside the capture's span, as `#[instrument]` makes an async fn's span.
            let quorum =
                tracing::info_span!(target: "provision_harness::cluster::lab", "quorum wait (S6)");
            async {
                let _ = restart("node01", false).await;
                let _ = restart("node02", true).await;
            }
            .instrument(quorum)
            .await;
        }
        .instrument(cap.span_on("lab scenario", &Lane::new(CLUSTER, "bring-up")))
        .await;
        let t = cap.take();
        let got: Vec<(&str, &str, &str)> = t
            .spans
            .iter()
            .map(|s| (s.name.as_str(), s.lane.thread.as_str(), s.cat.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("restart", "node node01", "cluster"),
                ("restart", "node node02", "cluster"),
                ("quorum wait (S6)", "bring-up", "cluster"),
                ("lab scenario", "bring-up", "cluster"),
            ]
        );
        assert!(t.spans.iter().all(|s| s.lane.process == CLUSTER));
        assert!(!t.spans[3].args.contains_key("trace_process"));
        assert_eq!(t.marks.len(), 1, "{:?}", t.marks);
        assert_eq!(t.marks[0].name, "error");
        assert_eq!(t.marks[0].lane, Lane::new(CLUSTER, "node node02"));
        assert_eq!(t.marks[0].args["error"], "node02 did not boot");
    }
}
