//! Sharding on the real feature files (`features/rollout`, `features/lab`, `features/stack`), parsed the way the
//! runners parse them: every scenario runs in exactly one shard for every N from 1 to the
//! number of scenarios, scenarios sharing a lab stay together, a `--name`/`--tags` selection is
//! sharded too, and the recorded durations (`tests/data/*.durations.json`, written by real runs)
//! balance the shards within the stated bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/shard.rs"]
mod shard;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use provision_harness::suite::durations::Durations;
use provision_harness::suite::shard::{ScenarioRef, ShardSpec, assign, units};
use shard::{CliFilter, Plan, RunnerFilter, ShardCli};

fn features(suite: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("features")
        .join(suite)
}

fn every() -> RunnerFilter {
    Arc::new(|_, _, _| true)
}

async fn plan(suite: &str, shard: Option<ShardSpec>, durations: Option<PathBuf>) -> Plan {
    let cli = ShardCli { shard, durations };
    Plan::new(
        &features(suite),
        &Default::default(),
        &CliFilter::default(),
        &every(),
        &cli,
    )
    .await
    .unwrap()
}

fn keys(list: &[ScenarioRef]) -> BTreeSet<String> {
    list.iter().map(|s| s.key.clone()).collect()
}

#[tokio::test]
async fn every_scenario_runs_in_exactly_one_shard_for_every_n() {
    for suite in ["rollout", "lab", "stack"] {
        let all = plan(suite, None, None).await.selected;
        // A sanity floor: the features were found and parsed (the smallest suite has 8).
        assert!(all.len() >= 8, "{suite}: {} scenarios", all.len());
        assert_eq!(keys(&all).len(), all.len(), "{suite}: keys are unique");
        for n in 1..=all.len() {
            // The runner's own plans for a few N (each parses the features again), the
            // assignment they are built on for every N.
            let via_plan = [1, 2, 3, 5, all.len()].contains(&n);
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for i in 1..=n {
                let spec = ShardSpec::new(i, n).unwrap();
                let mine: Vec<String> = if via_plan {
                    plan(suite, Some(spec), None).await.running().unwrap()
                } else {
                    let a = assign(&all, n, None);
                    a.members(spec)
                        .into_iter()
                        .map(|m| all[m].key.clone())
                        .collect()
                };
                for k in mine {
                    *seen.entry(k).or_default() += 1;
                }
            }
            assert_eq!(
                seen.keys().cloned().collect::<BTreeSet<_>>(),
                keys(&all),
                "{suite} n={n}"
            );
            assert!(seen.values().all(|&c| c == 1), "{suite} n={n}: {seen:?}");
        }
    }
}

#[tokio::test]
async fn scenarios_that_share_a_lab_stay_on_one_shard() {
    let all = plan("lab", None, None).await.selected;
    let shared: Vec<&ScenarioRef> = all.iter().filter(|s| s.together).collect();
    assert!(
        shared.iter().any(|s| s
            .key
            .contains("Certificate files under the seed's original names")),
        "{shared:?}"
    );
    let groups: Vec<_> = units(&all)
        .into_iter()
        .filter(|u| u.members.len() > 1)
        .collect();
    assert!(
        !groups.is_empty(),
        "misconfig's first two scenarios share one booted lab"
    );
    for n in 2..=all.len() {
        let a = assign(&all, n, None);
        for g in &groups {
            let shards: BTreeSet<usize> = g.members.iter().map(|&m| a.shard_of[m]).collect();
            assert_eq!(shards.len(), 1, "n={n}: {} split", g.key);
        }
    }
}

#[tokio::test]
async fn a_tag_selection_is_sharded_not_replaced_by_the_shard() {
    let mut opts = cucumber::cli::Opts::<
        cucumber::parser::basic::Cli,
        cucumber::runner::basic::Cli,
        cucumber::cli::Empty,
        ShardCli,
    > {
        tags_filter: Some("@provisioned".parse().unwrap()),
        ..Default::default()
    };
    let filter = CliFilter::take(&mut opts);
    assert!(
        opts.tags_filter.is_none(),
        "cucumber must not apply it on its own"
    );
    let mut union = BTreeSet::new();
    for i in 1..=2 {
        let cli = ShardCli {
            shard: Some(ShardSpec::new(i, 2).unwrap()),
            durations: None,
        };
        let p = Plan::new(
            &features("lab"),
            &Default::default(),
            &filter,
            &every(),
            &cli,
        )
        .await
        .unwrap();
        assert!(
            p.selected.len() >= 4 && p.selected.len() < 13,
            "{:?}",
            p.selected
        );
        let mine = p.running().unwrap();
        assert!(!mine.is_empty() && mine.len() < p.selected.len());
        union.extend(mine);
    }
    assert_eq!(
        union.len(),
        6,
        "the six @provisioned scenarios, each once: {union:?}"
    );
}

/// Adding one scenario to a real feature moves at most N − 1 others (count mode).
#[tokio::test]
async fn adding_a_scenario_to_a_real_suite_moves_few_others() {
    for suite in ["rollout", "lab", "stack"] {
        let all = plan(suite, None, None).await.selected;
        for at in [0, all.len() / 2, all.len()] {
            let mut more = all.clone();
            more.insert(
                at,
                ScenarioRef {
                    key: "New feature :: a new scenario".into(),
                    together: false,
                },
            );
            for n in 1..=all.len() {
                let (a, b) = (assign(&all, n, None), assign(&more, n, None));
                // Scenarios that share a lab move as one: count the units that moved.
                let moved = units(&all)
                    .iter()
                    .filter(|u| {
                        let i = u.members[0];
                        a.shard_of[i] != b.shard_of[if i < at { i } else { i + 1 }]
                    })
                    .count();
                assert!(
                    moved < n,
                    "{suite} n={n} insert at {at}: {moved} units moved"
                );
            }
        }
    }
}

/// On the durations recorded by real runs: the longest shard stays within Graham's bound,
/// ideal + (1 − 1/N) × the longest unit, and is never below the ideal.
#[tokio::test]
async fn recorded_durations_balance_within_the_stated_bound() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut checked = 0;
    for suite in ["rollout", "lab", "stack"] {
        let file = data.join(format!("{suite}.durations.json"));
        if !file.exists() {
            continue;
        }
        let d = Durations::read(&file).unwrap();
        let all = plan(suite, None, None).await.selected;
        let known = all
            .iter()
            .filter(|s| d.scenarios.contains_key(&s.key))
            .count();
        assert!(
            known * 10 >= all.len() * 9,
            "{suite}: the recording knows {known} of {}",
            all.len()
        );
        let total: f64 = all.iter().filter_map(|s| d.scenarios.get(&s.key)).sum();
        for n in 2..=all.len() {
            let a = assign(&all, n, Some(&d.scenarios));
            let longest_unit = units(&all)
                .iter()
                .map(|u| {
                    u.members
                        .iter()
                        .filter_map(|&m| d.scenarios.get(&all[m].key))
                        .sum::<f64>()
                })
                .fold(0.0, f64::max);
            let longest = a.loads.iter().copied().fold(0.0, f64::max);
            let ideal = a.loads.iter().sum::<f64>() / n as f64;
            assert!(
                longest <= ideal + (1.0 - 1.0 / n as f64) * longest_unit + 1e-6,
                "{suite} n={n}"
            );
            assert!(longest + 1e-6 >= ideal);
            if n == 3 {
                eprintln!(
                    "{suite}: {} scenarios, {total:.1} s recorded; N=3 by durations: longest {longest:.1} s, ideal {ideal:.1} s",
                    all.len()
                );
            }
        }
        // The runner's own plan agrees with the assignment.
        let p = plan(
            suite,
            Some(ShardSpec::new(1, 3).unwrap()),
            Some(file.clone()),
        )
        .await;
        assert!(p.description.contains("balanced by"), "{}", p.description);
        checked += 1;
    }
    assert!(checked >= 1, "no recorded durations in tests/data");
}
