//! The mutants the harness self-test runs the rollout suite against: thin variants of this
//! repository's deployer, each with one bug a real deployer has had. Most are a hook in the
//! library (`provision_harness::mutants`, active only inside one run); the rest are options or
//! inputs changed here, in the adapter — no mutant is a copy of the deployer.
//!
//! To add one when a real bug slipped through: add a variant here (name, what it does, and how —
//! a library hook, an option, or an input), run `cargo test --test harness_selftest`, and if it
//! survives, write the scenario (or sharpen the step) that kills it. Book: docs/src/mutation-score.md.

use std::path::Path;

use anyhow::Context;
use provision_harness::deploy::DeployOptions;
use provision_harness::deployer::state::{Stage, StateStore, journal_path};
use provision_harness::manifest::ManifestSet;
use provision_harness::mutants::{Mutant as Hook, Reached};
use serde_json::{Value, json};

use super::adapter::{Action, RunRequest};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    DoesNothing,
    NeverWaitsForTasks,
    TokenAsCookie,
    Qcow2OnLvmThin,
    RetriesFailFast,
    NeverRetries,
    IgnoresOrder,
    DuplicateOnRerun,
    NoCleanupAfterFailedCreate,
    DestroyWithoutPurge,
    WrongIp,
    DisksInGb,
    IgnoresUserData,
    PrivilegedContainers,
    RootfsDefaultSize,
    IgnoresRecordedVmid,
}

impl Mutant {
    pub const ALL: [Mutant; 16] = [
        Mutant::DoesNothing,
        Mutant::NeverWaitsForTasks,
        Mutant::TokenAsCookie,
        Mutant::Qcow2OnLvmThin,
        Mutant::RetriesFailFast,
        Mutant::NeverRetries,
        Mutant::IgnoresOrder,
        Mutant::DuplicateOnRerun,
        Mutant::NoCleanupAfterFailedCreate,
        Mutant::DestroyWithoutPurge,
        Mutant::WrongIp,
        Mutant::DisksInGb,
        Mutant::IgnoresUserData,
        Mutant::PrivilegedContainers,
        Mutant::RootfsDefaultSize,
        Mutant::IgnoresRecordedVmid,
    ];

    /// Its name: a library hook's own, so the points the library records match.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::DoesNothing => "does-nothing",
            Mutant::NeverRetries => "never-retries",
            Mutant::IgnoresOrder => "ignores-order",
            Mutant::IgnoresRecordedVmid => "ignores-recorded-vmid",
            hooked => hooked.hook().map_or("?", Hook::name),
        }
    }

    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn what(self) -> &'static str {
        match self {
            Mutant::DoesNothing => {
                "creates nothing and reports every VM ready, running, with a VMID and an IP"
            }
            Mutant::NeverWaitsForTasks => "never polls a task: goes on while it still runs",
            Mutant::TokenAsCookie => "sends the API token as a PVEAuthCookie cookie",
            Mutant::Qcow2OnLvmThin => "asks for format=qcow2 on the boot disk, lvm-thin included",
            Mutant::RetriesFailFast => "retries what must fail fast (bridge missing, 401, …)",
            Mutant::NeverRetries => "never retries (one attempt per VM)",
            Mutant::IgnoresOrder => "ignores phases, groups, waves and dependsOn",
            Mutant::DuplicateOnRerun => "never looks for an existing VM: a re-run creates another",
            Mutant::NoCleanupAfterFailedCreate => {
                "leaves a VM it created behind when the VM then fails"
            }
            Mutant::DestroyWithoutPurge => "deletes VMs without purge=1",
            Mutant::WrongIp => "reports the guest agent's first IPv4 address, loopback included",
            Mutant::DisksInGb => "sizes disks in GB instead of GiB (20Gi becomes 19073 MiB)",
            Mutant::IgnoresUserData => {
                "reads the manifests without their userData: no snippet, no cicustom"
            }
            Mutant::PrivilegedContainers => "makes containers privileged (unprivileged=0)",
            Mutant::RootfsDefaultSize => {
                "leaves a container's rootfs at PVE's default 4 GiB, not the manifest's disk"
            }
            Mutant::IgnoresRecordedVmid => {
                "on resume, forgets the VMID it recorded before a create and matches by name only"
            }
        }
    }

    /// The library hook, for the mutants that are one.
    pub fn hook(self) -> Option<Hook> {
        match self {
            Mutant::NeverWaitsForTasks => Some(Hook::NeverWaitsForTasks),
            Mutant::TokenAsCookie => Some(Hook::TokenAsCookie),
            Mutant::Qcow2OnLvmThin => Some(Hook::Qcow2OnLvmThin),
            Mutant::RetriesFailFast => Some(Hook::RetriesFailFast),
            Mutant::DuplicateOnRerun => Some(Hook::DuplicateOnRerun),
            Mutant::NoCleanupAfterFailedCreate => Some(Hook::NoCleanupAfterFailedCreate),
            Mutant::DestroyWithoutPurge => Some(Hook::DestroyWithoutPurge),
            Mutant::WrongIp => Some(Hook::WrongIp),
            Mutant::DisksInGb => Some(Hook::DisksInGb),
            Mutant::IgnoresUserData => Some(Hook::IgnoresUserData),
            Mutant::PrivilegedContainers => Some(Hook::PrivilegedContainers),
            Mutant::RootfsDefaultSize => Some(Hook::RootfsDefaultSize),
            Mutant::DoesNothing
            | Mutant::NeverRetries
            | Mutant::IgnoresOrder
            | Mutant::IgnoresRecordedVmid => None,
        }
    }

    /// The mutation points of the mutants that are not library hooks, as far as the input shows
    /// them (`never-retries` is recorded after the run, when a VM needed a second attempt).
    pub fn record_input_points(reached: &Reached, set: &ManifestSet, req: &RunRequest) {
        reached.record(Mutant::DoesNothing.name());
        let ordered = set
            .vms
            .iter()
            .any(|l| l.vm.spec.deployment != Default::default());
        if set.vms.len() > 1 && ordered {
            reached.record(Mutant::IgnoresOrder.name());
        }
        let state = req.state_dir.join("state.json");
        let creating = StateStore::read(&state).is_ok_and(|s| {
            s.vms
                .values()
                .any(|r| r.stage == Stage::Creating && r.vmid.is_some())
        });
        if req.action == Action::Deploy && creating {
            reached.record(Mutant::IgnoresRecordedVmid.name());
        }
    }

    /// The mutants that are an option of the deployer.
    pub fn adjust_options(self, o: &mut DeployOptions) {
        if self == Mutant::NeverRetries {
            o.backoff.max_attempts = 1;
        }
    }

    /// The mutants that misread their input.
    pub fn adjust_manifests(self, set: &mut ManifestSet) {
        if self == Mutant::IgnoresOrder {
            for l in &mut set.vms {
                l.vm.spec.deployment = Default::default();
            }
        }
    }

    /// The mutants that lose part of their state between runs: the VMID recorded before a create
    /// call (stage `creating`) is dropped, so a resumed run can only find its VM by name.
    pub fn before_run(self, state_file: &Path) -> anyhow::Result<()> {
        let journal = journal_path(state_file);
        if self != Mutant::IgnoresRecordedVmid || (!state_file.exists() && !journal.exists()) {
            return Ok(());
        }
        // A killed run's latest records are in the journal: forget the VMIDs there too, and
        // leave one snapshot behind.
        let mut state = StateStore::read(state_file).context("the state file")?;
        for rec in state.vms.values_mut() {
            if rec.stage == Stage::Creating {
                rec.vmid = None;
            }
        }
        std::fs::write(state_file, serde_json::to_vec_pretty(&state)?)
            .with_context(|| format!("writing {}", state_file.display()))?;
        match std::fs::remove_file(&journal) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", journal.display()))
            }
            _ => Ok(()),
        }
    }
}

/// What the do-nothing mutant prints for any action: every readable manifest's VM ready and
/// running (destroyed, for `destroy`) with a made-up VMID and IP, the unreadable ones listed as
/// the loader found them — the most convincing status a deployer can print without working.
pub fn claim_everything(set: &ManifestSet, action: Action) -> Value {
    let vms: Vec<Value> = set
        .vms
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let fp = &l.vm.spec.for_provider;
            let destroyed = action == Action::Destroy;
            json!({
                "name": fp.name, "site": fp.site, "node": fp.node, "manifest": l.path,
                "outcome": if destroyed { "destroyed" } else { "ready" },
                "vmid": (!destroyed).then_some(100 + i),
                "state": (!destroyed).then_some("running"),
                "ip": (!destroyed).then(|| format!("10.0.0.{}", 10 + i)),
                "attempts": 1,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Running", "message": ""}],
            })
        })
        .collect();
    json!({"vms": vms, "unreadable": set.unreadable})
}
