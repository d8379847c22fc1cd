//! The rollout order: the seed's phases (critical path → high → medium → blockchain groups, each
//! group deployed together → test VMs), split into waves run one after another, and explicit
//! `dependsOn` edges checked for unknown names, cycles and backwards references.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::deployer::manifest::{Loaded, Phase};

/// A set of VMs deployed together (bounded concurrency inside, waves strictly in sequence).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Wave {
    pub phase: Phase,
    pub group: Option<String>,
    /// Indexes into the manifest list.
    pub members: Vec<usize>,
}

impl Wave {
    pub fn label(&self) -> String {
        match &self.group {
            Some(g) => format!("{}/{g}", self.phase.as_str()),
            None => self.phase.as_str().to_string(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Order {
    pub waves: Vec<Wave>,
    /// Problems with dependencies, per manifest index (those VMs are not deployed).
    pub invalid: BTreeMap<usize, String>,
}

/// Orders loaded manifests. Within a phase, groups go by their `wave` number, then name.
pub fn order(vms: &[Loaded]) -> Order {
    let mut by_key: BTreeMap<(Phase, u32, Option<String>), Vec<usize>> = BTreeMap::new();
    for (i, l) in vms.iter().enumerate() {
        let d = &l.vm.spec.deployment;
        by_key
            .entry((d.phase, d.wave.unwrap_or(0), d.group.clone()))
            .or_default()
            .push(i);
    }
    let waves: Vec<Wave> = by_key
        .into_iter()
        .map(|((phase, _, group), members)| Wave {
            phase,
            group,
            members,
        })
        .collect();
    let mut wave_of = BTreeMap::new();
    for (w, wave) in waves.iter().enumerate() {
        for &m in &wave.members {
            wave_of.insert(m, w);
        }
    }
    let index_of: BTreeMap<&str, usize> = vms
        .iter()
        .enumerate()
        .map(|(i, l)| (l.vm.spec.for_provider.name.as_str(), i))
        .collect();
    let mut invalid = BTreeMap::new();
    for (i, l) in vms.iter().enumerate() {
        for dep in &l.vm.spec.deployment.depends_on {
            match index_of.get(dep.as_str()) {
                None => {
                    invalid.insert(i, format!("dependsOn '{dep}', which is not in the rollout"));
                }
                Some(&j) if wave_of.get(&j) > wave_of.get(&i) => {
                    invalid.insert(
                        i,
                        format!(
                            "dependsOn '{dep}', which deploys in a later wave ({})",
                            waves[wave_of[&j]].label()
                        ),
                    );
                }
                Some(_) => {}
            }
        }
    }
    for cycle_member in cycles(vms, &index_of) {
        invalid.insert(cycle_member, "dependsOn forms a cycle".to_string());
    }
    Order { waves, invalid }
}

/// Manifests on a dependency cycle (Kahn's algorithm: whatever cannot be peeled off).
fn cycles(vms: &[Loaded], index_of: &BTreeMap<&str, usize>) -> BTreeSet<usize> {
    let mut indegree = vec![0usize; vms.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); vms.len()];
    for (i, l) in vms.iter().enumerate() {
        for dep in &l.vm.spec.deployment.depends_on {
            if let Some(&j) = index_of.get(dep.as_str()) {
                indegree[i] += 1;
                dependents[j].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..vms.len()).filter(|&i| indegree[i] == 0).collect();
    let mut done = BTreeSet::new();
    while let Some(i) = ready.pop() {
        done.insert(i);
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.push(d);
            }
        }
    }
    (0..vms.len()).filter(|i| !done.contains(i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployer::manifest::parse_manifest;

    fn vm(
        name: &str,
        phase: &str,
        group: Option<&str>,
        wave: Option<u32>,
        deps: &[&str],
    ) -> Loaded {
        let mut text = format!(
            "apiVersion: v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    node: n\n    name: {name}\n    cpu: 1\n    memory: 1Gi\n    disk: 1Gi\n    storage: s\n    network: vmbr0\n    image: i.img\n    site: site-1\n  deployment:\n    phase: {phase}\n"
        );
        if let Some(g) = group {
            text.push_str(&format!("    group: {g}\n"));
        }
        if let Some(w) = wave {
            text.push_str(&format!("    wave: {w}\n"));
        }
        if !deps.is_empty() {
            text.push_str(&format!("    dependsOn: [{}]\n", deps.join(", ")));
        }
        Loaded {
            path: format!("{name}.yaml"),
            vm: parse_manifest("x", &text).expect("ok").expect("vm"),
        }
    }

    #[test]
    fn phases_then_groups() {
        let vms = vec![
            vm("t", "test", None, None, &[]),
            vm("svc", "blockchain", Some("services"), Some(4), &[]),
            vm("val", "blockchain", Some("validators"), Some(1), &[]),
            vm("nginx", "critical", None, None, &[]),
            vm("git", "high", None, None, &["nginx"]),
        ];
        let o = order(&vms);
        let labels: Vec<String> = o.waves.iter().map(Wave::label).collect();
        assert_eq!(
            labels,
            [
                "critical",
                "high",
                "blockchain/validators",
                "blockchain/services",
                "test"
            ]
        );
        assert!(o.invalid.is_empty());
    }

    #[test]
    fn bad_dependencies() {
        let vms = vec![
            vm("a", "critical", None, None, &["b"]),
            vm("b", "test", None, None, &[]),
            vm("c", "medium", None, None, &["d"]),
            vm("d", "medium", None, None, &["c"]),
            vm("e", "medium", None, None, &["nope"]),
        ];
        let o = order(&vms);
        assert!(o.invalid[&0].contains("later wave"));
        assert!(o.invalid[&2].contains("cycle"));
        assert!(o.invalid[&3].contains("cycle"));
        assert!(o.invalid[&4].contains("not in the rollout"));
    }
}
