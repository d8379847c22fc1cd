//! Sharding for the cucumber runners (`tests/rollout.rs`, `tests/lab.rs`, and any new one):
//! `--shard I/N` (or `HARNESS_SHARD=I/N`) runs shard I of N of the selected scenarios,
//! `--durations FILE` (or `HARNESS_DURATIONS`) balances the shards by a previous run's
//! durations. The assignment itself is `provision_harness::suite::shard`; this file turns
//! cucumber's parsed features into its input and its answer into a scenario filter.
//!
//! A runner:
//! 1. parses its CLI with [`ShardCli`] as cucumber's custom options,
//! 2. takes the `--name`/`--tags` filter out of them ([`CliFilter::take`]) — cucumber would
//!    otherwise apply it *instead of* the runner's own filter, shard included,
//! 3. builds a [`Plan`] over the features, runs with [`Plan::filter`], writes its reports to
//!    [`Plan::reports_dir`] and its durations with [`Plan::write_durations`].

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cucumber::gherkin::tagexpr::TagOperation;
use cucumber::gherkin::{Feature, Rule, Scenario};
use cucumber::tag::Ext as _;
use futures::StreamExt as _;
use provision_harness::suite::durations::{Durations, recorded_scenarios};
use provision_harness::suite::shard::{self, Mode, ScenarioRef, ShardSpec};

/// The options every runner adds to cucumber's CLI.
#[derive(Debug, Clone, Default, clap::Args)]
#[group(skip)]
pub struct ShardCli {
    /// Run only shard I of N (1-based) of the selected scenarios.
    #[arg(long, env = "HARNESS_SHARD", value_name = "I/N")]
    pub shard: Option<ShardSpec>,
    /// Balance the shards by this durations file from a previous run (`<suite>.durations.json`
    /// next to its reports); without it, by scenario count.
    #[arg(long, env = "HARNESS_DURATIONS", value_name = "FILE")]
    pub durations: Option<PathBuf>,
}

/// The runner's own choice of scenarios (e.g. "not `@wip`").
pub type RunnerFilter = Arc<dyn Fn(&Feature, Option<&Rule>, &Scenario) -> bool + Send + Sync>;

/// cucumber's `--name` and `--tags`, applied as cucumber does: `--name` wins, then `--tags`,
/// else the runner's own filter.
#[derive(Clone, Default)]
pub struct CliFilter {
    name: Option<regex::Regex>,
    tags: Option<TagOperation>,
}

impl CliFilter {
    /// Moves the filter out of cucumber's options (so cucumber does not apply it on its own).
    pub fn take<P, R, W>(opts: &mut cucumber::cli::Opts<P, R, W, ShardCli>) -> Self
    where
        P: clap::Args,
        R: clap::Args,
        W: clap::Args,
    {
        Self {
            name: opts.re_filter.take(),
            tags: opts.tags_filter.take(),
        }
    }

    pub fn selects(
        &self,
        runner: &RunnerFilter,
        f: &Feature,
        r: Option<&Rule>,
        s: &Scenario,
    ) -> bool {
        if let Some(re) = &self.name {
            return re.is_match(&s.name);
        }
        if let Some(tags) = &self.tags {
            return tags.eval(
                f.tags
                    .iter()
                    .chain(r.iter().flat_map(|r| &r.tags))
                    .chain(&s.tags),
            );
        }
        runner(f, r, s)
    }
}

/// Where a scenario is during the run: its feature file and its line and column.
type Spot = (Option<PathBuf>, usize, usize);

fn spot(f: &Feature, s: &Scenario) -> Spot {
    (f.path.clone(), s.position.line, s.position.col)
}

/// The name cucumber's JSON report gives a scenario: a rule's name, a space, the scenario's.
fn report_name(r: Option<&Rule>, s: &Scenario) -> String {
    match r {
        Some(r) => format!("{} {}", r.name, s.name),
        None => s.name.clone(),
    }
}

/// Scenario key by (feature name, report name, line).
type Keys = HashMap<(String, String, usize), String>;

/// Every parsed scenario's key, and the selected ones in run order (a feature's scenarios,
/// then its rules'), each with where it is and whether it shares a lab with its neighbours.
/// Parse errors are left to cucumber, which reports them as failures.
fn enumerate(
    parsed: &[Result<Feature, cucumber::parser::Error>],
    filter: &CliFilter,
    runner: &RunnerFilter,
) -> (Keys, Vec<(Spot, ScenarioRef)>) {
    let mut keys = HashMap::new();
    let mut selected = Vec::new();
    for f in parsed.iter().flatten() {
        let all: Vec<(Option<&Rule>, &Scenario)> = f
            .scenarios
            .iter()
            .map(|s| (None, s))
            .chain(
                f.rules
                    .iter()
                    .flat_map(|r| r.scenarios.iter().map(move |s| (Some(r), s))),
            )
            .collect();
        let names: Vec<(String, usize)> = all
            .iter()
            .map(|(r, s)| (report_name(*r, s), s.position.line))
            .collect();
        let feature_keys = shard::scenario_keys(&f.name, &names);
        for (((r, s), (name, line)), key) in all.iter().zip(names).zip(feature_keys) {
            keys.insert((f.name.clone(), name, line), key.clone());
            if filter.selects(runner, f, *r, s) {
                let together = f
                    .tags
                    .iter()
                    .chain(r.iter().flat_map(|r| &r.tags))
                    .chain(&s.tags)
                    .any(|t| t == shard::TOGETHER_TAG);
                selected.push((spot(f, s), ScenarioRef { key, together }));
            }
        }
    }
    (keys, selected)
}

/// This run's scenarios and where its reports go.
pub struct Plan {
    spec: Option<ShardSpec>,
    /// The scenarios this shard runs (`None`: not sharded, every selected scenario).
    run: Option<HashSet<Spot>>,
    /// Their keys, in run order.
    running: Option<Vec<String>>,
    /// (feature name, report name, line) → scenario key, for every scenario parsed.
    keys: Keys,
    /// Every selected scenario (all shards), in run order.
    pub selected: Vec<ScenarioRef>,
    /// One line for the log: what this shard runs and why.
    pub description: String,
}

impl Plan {
    /// Parses the features as cucumber will (same parser, same `--input` glob), selects with
    /// `filter` and `runner`, and assigns the selected scenarios to shards.
    pub async fn new(
        features: &Path,
        parser_cli: &cucumber::parser::basic::Cli,
        filter: &CliFilter,
        runner: &RunnerFilter,
        cli: &ShardCli,
    ) -> anyhow::Result<Self> {
        use cucumber::Parser as _;
        let parsed: Vec<_> = cucumber::parser::Basic::new()
            .parse(features, parser_cli.clone())
            .collect()
            .await;
        let (keys, selected) = enumerate(&parsed, filter, runner);
        let refs: Vec<ScenarioRef> = selected.iter().map(|(_, r)| r.clone()).collect();
        let Some(spec) = cli.shard else {
            return Ok(Self {
                spec: None,
                run: None,
                running: None,
                keys,
                description: format!("{} scenarios, not sharded", refs.len()),
                selected: refs,
            });
        };
        let durations = cli.durations.as_deref().map(Durations::read).transpose()?;
        let a = shard::assign(
            &refs,
            spec.count(),
            durations.as_ref().map(|d| &d.scenarios),
        );
        let mine = a.members(spec);
        let run: HashSet<Spot> = mine.iter().map(|&i| selected[i].0.clone()).collect();
        let load = a.loads[spec.index() - 1];
        let longest = a.loads.iter().copied().fold(0.0, f64::max);
        let how = match (a.mode, &cli.durations) {
            (Mode::Durations, Some(p)) => format!(
                "balanced by {} ({} unknown): this shard {load:.0} s, the longest {longest:.0} s",
                p.display(),
                a.estimated.len()
            ),
            _ => "by count".to_owned(),
        };
        Ok(Self {
            spec: Some(spec),
            description: format!(
                "shard {spec}: {} of {} selected scenarios, {how}",
                run.len(),
                selected.len()
            ),
            run: Some(run),
            running: Some(mine.iter().map(|&i| refs[i].key.clone()).collect()),
            keys,
            selected: refs,
        })
    }

    /// The keys of the scenarios this shard runs, in run order (`None` when not sharded).
    pub fn running(&self) -> Option<Vec<String>> {
        self.running.clone()
    }

    /// The scenario filter for `filter_run`: the CLI's or the runner's selection, and this
    /// shard's part of it.
    pub fn filter(
        &self,
        filter: CliFilter,
        runner: RunnerFilter,
    ) -> impl Fn(&Feature, Option<&Rule>, &Scenario) -> bool + 'static {
        let run = self.run.clone().map(Arc::new);
        move |f, r, s| {
            filter.selects(&runner, f, r, s)
                && run.as_ref().is_none_or(|run| run.contains(&spot(f, s)))
        }
    }

    /// `base`, or `base/shard-I-of-N` when sharded (so shards run one after another on one
    /// machine keep their reports apart).
    pub fn reports_dir(&self, base: &Path) -> PathBuf {
        match self.spec {
            Some(spec) => base.join(spec.dir_name()),
            None => base.to_path_buf(),
        }
    }

    /// Writes the durations of the scenarios in the cucumber JSON report `report` to `out`.
    pub fn write_durations(&self, report: &Path, out: &Path) -> anyhow::Result<usize> {
        let text = std::fs::read_to_string(report)?;
        let recorded = recorded_scenarios(&text)?;
        let scenarios = recorded
            .iter()
            .filter_map(|r| {
                let key = self
                    .keys
                    .get(&(r.feature.clone(), r.name.clone(), r.line))?
                    .clone();
                Some((key, (r.seconds * 1000.0).round() / 1000.0))
            })
            .collect();
        let d = Durations::new(scenarios);
        d.write(out)?;
        Ok(d.scenarios.len())
    }
}
