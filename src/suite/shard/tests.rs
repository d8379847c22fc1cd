#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn refs(list: &[(String, bool)]) -> Vec<ScenarioRef> {
    list.iter()
        .map(|(k, t)| ScenarioRef {
            key: k.clone(),
            together: *t,
        })
        .collect()
}

/// Scenario lists with unique keys, about one in four tagged `@reuses-lab`.
fn scenario_list(max: usize) -> impl Strategy<Value = Vec<(String, bool)>> {
    prop::collection::btree_set("[a-z]{1,6}( [a-z]{1,5}){0,2}", 1..max).prop_flat_map(|keys| {
        let n = keys.len();
        (
            Just(keys.into_iter().collect::<Vec<_>>()),
            prop::collection::vec(prop::bool::weighted(0.25), n),
        )
            .prop_map(|(keys, tags)| keys.into_iter().zip(tags).collect())
    })
}

/// Checks the invariants every assignment must hold; returns each shard's member list.
fn check_partition(s: &[ScenarioRef], a: &Assignment, n: usize) -> Vec<Vec<usize>> {
    let shards: Vec<Vec<usize>> = (1..=n)
        .map(|i| a.members(ShardSpec::new(i, n).unwrap()))
        .collect();
    let mut seen = vec![0usize; s.len()];
    for m in shards.iter().flatten() {
        seen[*m] += 1;
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every scenario exactly once: {seen:?}"
    );
    for u in units(s) {
        let first = a.shard_of[u.members[0]];
        assert!(
            u.members.iter().all(|&m| a.shard_of[m] == first),
            "unit {} split over shards",
            u.key
        );
    }
    shards
}

/// Unit key → shard, for comparing two assignments.
fn unit_shards(s: &[ScenarioRef], a: &Assignment) -> BTreeMap<String, usize> {
    units(s)
        .into_iter()
        .map(|u| (u.key.clone(), a.shard_of[u.members[0]]))
        .collect()
}

fn moved(before: &BTreeMap<String, usize>, after: &BTreeMap<String, usize>, except: &str) -> usize {
    before
        .iter()
        .filter(|(k, _)| k.as_str() != except)
        .filter(|(k, v)| after.get(*k).is_some_and(|w| w != *v))
        .count()
}

/// Positions where a lone scenario can go without splitting a `@reuses-lab` run.
fn unit_boundaries(s: &[ScenarioRef]) -> Vec<usize> {
    (0..=s.len())
        .filter(|&p| p == 0 || p == s.len() || !(s[p - 1].together && s[p].together))
        .collect()
}

#[test]
fn shard_spec_parses_i_of_n_and_rejects_the_rest() {
    let s: ShardSpec = "2/3".parse().unwrap();
    assert_eq!((s.index(), s.count()), (2, 3));
    assert_eq!(s.to_string(), "2/3");
    assert_eq!(s.dir_name(), "shard-2-of-3");
    assert_eq!(
        " 1 / 1 ".parse::<ShardSpec>().unwrap(),
        ShardSpec::new(1, 1).unwrap()
    );
    for bad in ["0/3", "4/3", "1/0"] {
        assert!(
            matches!(bad.parse::<ShardSpec>(), Err(ShardSpecError::Range { .. })),
            "{bad}"
        );
    }
    for bad in ["3", "a/b", "", "1/2/3", "-1/2"] {
        assert!(
            matches!(bad.parse::<ShardSpec>(), Err(ShardSpecError::Format(_))),
            "{bad}"
        );
    }
}

#[test]
fn consecutive_reuses_lab_scenarios_form_one_unit() {
    let s = refs(&[
        ("a".into(), true),
        ("b".into(), true),
        ("c".into(), false),
        ("d".into(), true),
        ("e".into(), false),
        ("f".into(), true),
        ("g".into(), true),
        ("h".into(), true),
    ]);
    let members: Vec<Vec<usize>> = units(&s).into_iter().map(|u| u.members).collect();
    assert_eq!(
        members,
        vec![vec![0, 1], vec![2], vec![3], vec![4], vec![5, 6, 7]]
    );
}

#[test]
fn duplicate_scenario_names_in_a_feature_get_their_line() {
    let keys = scenario_keys(
        "F",
        &[("eat".into(), 10), ("eat".into(), 11), ("sleep".into(), 20)],
    );
    assert_eq!(
        keys,
        ["F :: eat (line 10)", "F :: eat (line 11)", "F :: sleep"]
    );
}

#[test]
fn durations_that_know_none_of_the_scenarios_fall_back_to_count() {
    let s = refs(&[("a".into(), false), ("b".into(), false)]);
    let d: BTreeMap<String, f64> = [("zzz".to_string(), 5.0)].into();
    assert_eq!(assign(&s, 2, Some(&d)).mode, Mode::Count);
    let d: BTreeMap<String, f64> = [("a".to_string(), 5.0)].into();
    let a = assign(&s, 2, Some(&d));
    assert_eq!(a.mode, Mode::Durations);
    assert_eq!(a.estimated, ["b"]);
}

#[test]
fn lpt_puts_the_long_scenarios_apart() {
    let s = refs(&[
        ("a".into(), false),
        ("b".into(), false),
        ("c".into(), false),
        ("d".into(), false),
    ]);
    let d: BTreeMap<String, f64> = [("a", 100.0), ("b", 90.0), ("c", 10.0), ("d", 5.0)]
        .map(|(k, v)| (k.to_string(), v))
        .into();
    let a = assign(&s, 2, Some(&d));
    assert_ne!(
        a.shard_of[0], a.shard_of[1],
        "the two longest on different shards"
    );
    assert_eq!(a.loads.iter().cloned().fold(0.0, f64::max), 105.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Count mode: every scenario exactly once for every N from 1 to the number of scenarios,
    /// `@reuses-lab` runs never split, counts within the largest unit of the ideal.
    #[test]
    fn count_mode_partitions_and_balances(list in scenario_list(40)) {
        let s = refs(&list);
        let biggest = units(&s).iter().map(|u| u.members.len()).max().unwrap_or(1);
        for n in 1..=s.len() {
            let a = assign(&s, n, None);
            prop_assert_eq!(a.mode, Mode::Count);
            let shards = check_partition(&s, &a, n);
            let ideal = s.len() as f64 / n as f64;
            for sh in &shards {
                prop_assert!((sh.len() as f64 - ideal).abs() < biggest as f64,
                    "n={} sizes {:?}", n, shards.iter().map(Vec::len).collect::<Vec<_>>());
            }
            if biggest == 1 {
                let sizes: Vec<usize> = shards.iter().map(Vec::len).collect();
                prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
            }
            prop_assert_eq!(&assign(&s, n, None), &a, "deterministic");
        }
    }

    /// Count mode: adding, removing or renaming one scenario moves at most N − 1 other units.
    #[test]
    fn count_mode_moves_few_on_add_remove_rename(
        list in scenario_list(40),
        pick in any::<prop::sample::Index>(),
        fresh in "[A-Z]{1,8}",
    ) {
        let s = refs(&list);
        let bounds = unit_boundaries(&s);
        let p = bounds[pick.index(bounds.len())];
        let mut added = s.clone();
        added.insert(p, ScenarioRef { key: fresh.clone(), together: false });
        // Lone scenarios whose removal does not join two `@reuses-lab` runs into one.
        let lone: Vec<usize> = (0..s.len())
            .filter(|&i| units(&s).iter().any(|u| u.members == [i]))
            .filter(|&i| !(i > 0 && i + 1 < s.len() && s[i - 1].together && s[i + 1].together))
            .collect();
        for n in 1..=s.len() {
            let before = unit_shards(&s, &assign(&s, n, None));
            let after = unit_shards(&added, &assign(&added, n, None));
            let m = moved(&before, &after, &fresh);
            prop_assert!(m < n, "add at {}: {} moved with n={}", p, m, n);
            if lone.is_empty() {
                continue;
            }
            let i = lone[pick.index(lone.len())];
            let mut removed = s.clone();
            let gone = removed.remove(i).key;
            if !removed.is_empty() {
                let after = unit_shards(&removed, &assign(&removed, n, None));
                let m = moved(&before, &after, &gone);
                prop_assert!(m < n, "remove {}: {} moved with n={}", gone, m, n);
            }
            let mut renamed = s.clone();
            renamed[i].key = fresh.clone();
            let after = unit_shards(&renamed, &assign(&renamed, n, None));
            let m = moved(&before, &after, &gone);
            prop_assert!(m < n, "rename {}: {} moved with n={}", gone, m, n);
        }
    }

    /// Durations mode: a partition for every N, and the longest shard within Graham's bound:
    /// ideal + (1 − 1/N) × the longest unit.
    #[test]
    fn durations_mode_partitions_within_grahams_bound(
        list in scenario_list(30),
        secs in prop::collection::vec(0.5f64..600.0, 30),
    ) {
        let s = refs(&list);
        let d: BTreeMap<String, f64> =
            s.iter().zip(&secs).map(|(r, &x)| (r.key.clone(), (x * 1000.0).round() / 1000.0)).collect();
        let unit_secs: Vec<f64> = units(&s)
            .iter()
            .map(|u| u.members.iter().map(|&m| d[&s[m].key]).sum())
            .collect();
        let total: f64 = unit_secs.iter().sum();
        let longest_unit = unit_secs.iter().cloned().fold(0.0, f64::max);
        for n in 1..=s.len() {
            let a = assign(&s, n, Some(&d));
            prop_assert_eq!(a.mode, Mode::Durations);
            check_partition(&s, &a, n);
            let longest = a.loads.iter().cloned().fold(0.0, f64::max);
            let bound = total / n as f64 + (1.0 - 1.0 / n as f64) * longest_unit;
            prop_assert!(longest <= bound + 1e-6, "n={} longest {} bound {}", n, longest, bound);
            prop_assert!(longest + 1e-6 >= longest_unit.max(total / n as f64));
            prop_assert_eq!(&assign(&s, n, Some(&d)), &a, "deterministic");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Durations mode: a scenario the file does not know, added outside a `@reuses-lab` run,
    /// moves no other scenario.
    #[test]
    fn durations_mode_adding_a_scenario_moves_none(
        list in scenario_list(30),
        secs in prop::collection::vec(0.5f64..600.0, 30),
        pick in any::<prop::sample::Index>(),
        fresh in "[A-Z]{1,8}",
    ) {
        let s = refs(&list);
        let d: BTreeMap<String, f64> = s.iter().zip(&secs).map(|(r, &x)| (r.key.clone(), x)).collect();
        let bounds = unit_boundaries(&s);
        let p = bounds[pick.index(bounds.len())];
        let mut added = s.clone();
        added.insert(p, ScenarioRef { key: fresh.clone(), together: false });
        for n in 1..=s.len() {
            let before = unit_shards(&s, &assign(&s, n, Some(&d)));
            let after = unit_shards(&added, &assign(&added, n, Some(&d)));
            prop_assert_eq!(moved(&before, &after, &fresh), 0, "n={}", n);
        }
    }
}

#[test]
fn every_shard_index_sees_the_same_assignment() {
    // The same inputs in every shard process: the members of 1..=N are disjoint and complete.
    let s: Vec<ScenarioRef> = (0..25)
        .map(|i| ScenarioRef {
            key: format!("Feature {} :: scenario {i}", i % 4),
            together: i % 7 == 3 || i % 7 == 4,
        })
        .collect();
    for n in 1..=s.len() {
        let all: BTreeSet<usize> = (1..=n)
            .flat_map(|i| assign(&s, n, None).members(ShardSpec::new(i, n).unwrap()))
            .collect();
        assert_eq!(all.len(), s.len());
    }
}
