//! The rollout as one value: every readable manifest with its key, path, wave, validated spec
//! (or why it is invalid) and dependencies, and the waves in the seed's order. Built once from
//! the manifests and read by `plan`, `deploy`, `status` and `destroy`, so they all agree on what
//! a manifest means.

use std::collections::{BTreeMap, BTreeSet};

use crate::deployer::errors::StepError;
use crate::deployer::manifest::{ManifestSet, Unreadable};
use crate::deployer::order::order;
use crate::deployer::state::key;
use crate::deployer::validate::{ValidSpec, validate_guest};

/// One manifest of the rollout.
#[derive(Debug, Clone)]
pub struct RolloutVm {
    /// `site/name`, the state file's key.
    pub key: String,
    /// Path relative to the manifests directory.
    pub manifest: String,
    /// The manifest's own fields, kept for reporting a VM whose spec is invalid.
    pub name: String,
    pub site: String,
    pub node: String,
    pub storage: String,
    /// A VM or a container (the manifest's `kind`).
    pub kind: crate::deployer::guest::GuestKind,
    /// The wave's label (`critical`, `blockchain/validators`, …); empty when in none.
    pub wave: String,
    /// The spec as validation found it (all problems joined when invalid).
    pub spec: Result<ValidSpec, String>,
    /// Why the ordering refuses it (unknown or later `dependsOn`, cycle), if it does.
    pub order_error: Option<String>,
    pub depends_on: Vec<String>,
}

impl RolloutVm {
    /// The spec to deploy, or why this VM is not deployed. An ordering problem wins over a
    /// spec problem: the VM is refused before its fields matter.
    pub fn deployable(&self) -> Result<&ValidSpec, StepError> {
        if let Some(why) = &self.order_error {
            return Err(StepError::InvalidSpec(why.clone()));
        }
        self.spec
            .as_ref()
            .map_err(|e| StepError::InvalidSpec(e.clone()))
    }
}

/// The whole rollout; see the module doc.
#[derive(Debug, Clone, Default)]
pub struct Rollout {
    /// In manifest order.
    pub vms: Vec<RolloutVm>,
    /// Indexes into `vms`, wave by wave in the order they run.
    pub waves: Vec<Vec<usize>>,
    pub unreadable: Vec<Unreadable>,
}

impl Rollout {
    pub fn new(set: &ManifestSet) -> Self {
        let ord = order(&set.vms);
        let mut vms: Vec<RolloutVm> = set
            .vms
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let fp = &l.vm.spec.for_provider;
                RolloutVm {
                    key: key(&fp.site, &fp.name),
                    manifest: l.path.clone(),
                    name: fp.name.clone(),
                    site: fp.site.clone(),
                    node: fp.node.clone(),
                    storage: fp.storage.clone(),
                    kind: l.vm.guest_kind(),
                    wave: String::new(),
                    spec: validate_guest(fp, l.vm.guest_kind()).map_err(|e| e.to_string()),
                    order_error: ord.invalid.get(&i).cloned(),
                    depends_on: l.vm.spec.deployment.depends_on.clone(),
                }
            })
            .collect();
        let mut waves = Vec::new();
        for w in &ord.waves {
            for &m in &w.members {
                vms[m].wave = w.label();
            }
            waves.push(w.members.clone());
        }
        Self {
            vms,
            waves,
            unreadable: set.unreadable.clone(),
        }
    }

    /// Manifests plus unreadable files: what a report counts as "manifests".
    pub fn manifest_count(&self) -> usize {
        self.vms.len() + self.unreadable.len()
    }

    /// Indexes of `vms` in rollout order: wave by wave, by key inside a wave, VMs in no wave last.
    pub fn report_order(&self) -> Vec<usize> {
        let mut rank = BTreeMap::new();
        for (w, members) in self.waves.iter().enumerate() {
            for &m in members {
                rank.insert(m, w);
            }
        }
        let mut idx: Vec<usize> = (0..self.vms.len()).collect();
        idx.sort_by_key(|i| {
            (
                rank.get(i).copied().unwrap_or(usize::MAX),
                self.vms[*i].key.clone(),
            )
        });
        idx
    }

    /// Every site a manifest names, valid or not.
    pub fn sites(&self) -> BTreeSet<String> {
        self.vms.iter().map(|v| v.site.clone()).collect()
    }
}
