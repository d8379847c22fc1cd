//! One trace per scenario, and a failure bundle for every failed one — shared by the rollout,
//! lab and stack runners.
//!
//! A runner calls [`configure`] with its reports dir and suite name, tees a [`StepTrace`]
//! writer into its writer chain, and in its after-hook hands what the World recorded (the
//! deployer's capture, the fake's journal and state, lab files) to [`finish_scenario`]. The
//! writer sees the scenario's Gherkin steps (with cucumber's own timestamps) and, at the
//! scenario's end, writes `<suite>/traces/<slug>.json` (with `--trace` or `HARNESS_TRACE=1`)
//! and, when the scenario failed, `<suite>/failures/<slug>/` whatever the setting.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use cucumber::{Event, cli, event, gherkin, parser};
use provision_harness::trace::bundle::{self, Bundle, slug};
use provision_harness::trace::fake::FakeRecord;
use provision_harness::trace::{Lane, Span, Trace, args, unix_us};
use serde_json::json;

/// Where this run's traces and bundles go, and whether every scenario gets a trace.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `<reports>/<suite>`.
    pub dir: PathBuf,
    pub every_scenario: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// `--trace` on the runner's command line (taken out, cucumber does not know it) or
/// `HARNESS_TRACE=1`.
pub fn trace_requested() -> bool {
    let flag = std::env::args().any(|a| a == "--trace");
    flag || std::env::var("HARNESS_TRACE").is_ok_and(|v| v == "1")
}

/// Sets where traces and bundles go (the first call wins).
pub fn configure(reports: &Path, suite: &str, every_scenario: bool) -> Settings {
    let s = Settings {
        dir: reports.join(suite),
        every_scenario,
    };
    let s = SETTINGS.get_or_init(|| s).clone();
    if s.every_scenario {
        println!(
            "{suite}: a trace per scenario in {}",
            s.dir.join("traces").display()
        );
    }
    s
}

pub fn settings() -> Option<&'static Settings> {
    SETTINGS.get()
}

/// Whether an after-hook should collect for this scenario (a trace is wanted, or it failed).
pub fn wanted(failed: bool) -> bool {
    settings().is_some_and(|s| s.every_scenario || failed)
}

/// What a World leaves for the writer when its scenario ends.
#[derive(Default)]
pub struct Collected {
    /// The deployer's capture and the harness's own marks (faults, lab events).
    pub trace: Trace,
    pub fake: Option<FakeRecord>,
    /// Per site: the exported state (a bundle keeps it as it is).
    pub states: Vec<(String, Vec<u8>)>,
    /// Files to keep in a failure bundle (serial logs, QMP events), with their names.
    pub files: Vec<(PathBuf, String)>,
    /// The World as `Debug` shows it.
    pub world: String,
}

fn pending() -> &'static Mutex<HashMap<String, Collected>> {
    static P: OnceLock<Mutex<HashMap<String, Collected>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

fn key(feature: &gherkin::Feature, sc: &gherkin::Scenario) -> String {
    let f = feature
        .path
        .as_ref()
        .map_or(feature.name.clone(), |p| p.display().to_string());
    format!("{f}:{}", sc.position.line)
}

/// Called from an after-hook: what the scenario's World recorded.
pub fn finish_scenario(feature: &gherkin::Feature, sc: &gherkin::Scenario, c: Collected) {
    if let Ok(mut p) = pending().lock() {
        p.insert(key(feature, sc), c);
    }
}

/// The scenario's name as a directory name (the line keeps outlines' examples apart).
pub fn scenario_slug(sc: &gherkin::Scenario) -> String {
    format!("{}-l{}", slug(&sc.name), sc.position.line)
}

struct Running {
    started: SystemTime,
    /// The step running now: its text and start.
    step: Option<(String, SystemTime)>,
    steps: Vec<Span>,
    failure: Option<String>,
}

/// The writer: Gherkin steps as spans, and the scenario's trace and bundle at its end.
#[derive(Default)]
pub struct StepTrace {
    running: HashMap<String, Running>,
}

const SCENARIO: &str = "scenario";

fn step_span(
    text: String,
    start: SystemTime,
    end: SystemTime,
    outcome: &str,
    err: Option<String>,
) -> Span {
    let mut a = args([("outcome", json!(outcome))]);
    if let Some(e) = err {
        a.insert("error".into(), json!(e));
    }
    let start_us = unix_us(start);
    Span {
        lane: Lane::new(SCENARIO, "steps"),
        name: text,
        cat: if outcome == "failed" {
            "gherkin,error"
        } else {
            "gherkin"
        }
        .into(),
        start_us,
        dur_us: (unix_us(end) - start_us).max(0),
        args: a,
    }
}

impl StepTrace {
    fn on_scenario<W>(
        &mut self,
        feat: &gherkin::Feature,
        sc: &gherkin::Scenario,
        ev: &event::Scenario<W>,
        at: SystemTime,
    ) {
        let k = key(feat, sc);
        match ev {
            event::Scenario::Started => {
                self.running.insert(
                    k,
                    Running {
                        started: at,
                        step: None,
                        steps: Vec::new(),
                        failure: None,
                    },
                );
            }
            event::Scenario::Step(step, st) | event::Scenario::Background(step, st) => {
                let Some(r) = self.running.get_mut(&k) else {
                    return;
                };
                let text = format!("{}{}", step.keyword, step.value);
                let (outcome, err) = match st {
                    event::Step::Started => {
                        r.step = Some((text, at));
                        return;
                    }
                    event::Step::Passed(..) => ("passed", None),
                    event::Step::Skipped => ("skipped", None),
                    event::Step::Failed(_, _, _, e) => ("failed", Some(e.to_string())),
                };
                let start = r.step.take().map_or(at, |(_, s)| s);
                if let Some(e) = &err {
                    r.failure = Some(format!("failed step: {text}\n{e}"));
                }
                r.steps.push(step_span(text, start, at, outcome, err));
            }
            event::Scenario::Hook(_, event::Hook::Failed(_, info)) => {
                if let Some(r) = self.running.get_mut(&k) {
                    let msg = info
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| info.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a hook panicked".into());
                    r.failure.get_or_insert(format!("hook failed: {msg}"));
                }
            }
            event::Scenario::Finished => {
                if let Some(r) = self.running.remove(&k) {
                    write_scenario(feat, sc, r, at);
                }
            }
            _ => {}
        }
    }
}

/// The trace of one scenario (and its bundle when it failed).
fn write_scenario(feat: &gherkin::Feature, sc: &gherkin::Scenario, r: Running, at: SystemTime) {
    let Some(settings) = settings() else { return };
    let collected = pending()
        .lock()
        .ok()
        .and_then(|mut p| p.remove(&key(feat, sc)))
        .unwrap_or_default();
    let failed = r.failure.is_some();
    if !settings.every_scenario && !failed {
        return;
    }
    let mut trace = Trace::default();
    let start_us = unix_us(r.started);
    trace.span(Span {
        lane: Lane::new(SCENARIO, "steps"),
        name: format!("Scenario: {}", sc.name),
        cat: "gherkin".into(),
        start_us,
        dur_us: (unix_us(at) - start_us).max(0),
        args: args([
            ("feature", json!(feat.name)),
            ("line", json!(sc.position.line)),
            ("outcome", json!(if failed { "failed" } else { "passed" })),
        ]),
    });
    // An unfinished step (a panic in a hook) ends with the scenario.
    let mut steps = r.steps;
    if let Some((text, s)) = r.step {
        steps.push(step_span(text, s, at, "unfinished", None));
    }
    for s in steps {
        trace.span(s);
    }
    trace.extend(collected.trace);
    if let Some(f) = &collected.fake {
        f.add_to(&mut trace);
    }
    let name = scenario_slug(sc);
    if settings.every_scenario {
        let file = settings.dir.join("traces").join(format!("{name}.json"));
        if let Err(e) = trace.write(&file) {
            eprintln!("trace of \"{}\": {}: {e}", sc.name, file.display());
        }
    }
    if let Some(failure) = r.failure {
        let dir = settings.dir.join("failures").join(&name);
        let summary = format!(
            "scenario: {}\nfeature: {} (line {})\n{failure}\n\nworld: {}\n",
            sc.name, feat.name, sc.position.line, collected.world
        );
        let journal = collected.fake.as_ref().map_or(&[][..], |f| &f.journal[..]);
        let b = Bundle {
            summary,
            trace: Some(&trace),
            journal,
            states: collected.states,
            files: collected.files,
        };
        match bundle::write(&dir, &b) {
            Ok(_) => eprintln!("failure bundle of \"{}\": {}", sc.name, dir.display()),
            Err(e) => eprintln!("failure bundle of \"{}\": {}: {e}", sc.name, dir.display()),
        }
    }
}

impl<W: 'static> cucumber::Writer<W> for StepTrace {
    type Cli = cli::Empty;

    async fn handle_event(&mut self, ev: parser::Result<Event<event::Cucumber<W>>>, _: &Self::Cli) {
        let Ok(ev) = ev else { return };
        let at = ev.at;
        if let event::Cucumber::Feature(feat, fe) = &ev.value {
            match fe {
                event::Feature::Scenario(sc, rs) => self.on_scenario(feat, sc, &rs.event, at),
                event::Feature::Rule(_, event::Rule::Scenario(sc, rs)) => {
                    self.on_scenario(feat, sc, &rs.event, at)
                }
                _ => {}
            }
        }
    }
}

/// Under `root` (a lab's run dir, or a lab-backed fake's state dir): every guest's serial log
/// and its stamps, QEMU stderr and QMP event log, named `<guest>.<file>`, and its boots,
/// console milestones and QMP events on the guest's lane of the "lab" process.
pub fn lab_files(root: &Path) -> (Vec<(PathBuf, String)>, Trace) {
    provision_harness::trace::lab::collect(root)
}
