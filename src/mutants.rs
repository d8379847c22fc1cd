//! Deliberately broken variants of this deployer and of the cluster provisioner ("mutants"), for
//! the harness self-tests: each is a bug a real one has had or could have, and at least one rollout
//! scenario (deployer) or `@lab` scenario (cluster provisioner, see [`LAB`]) must fail with it.
//! A mutant is active only inside [`run_as`] (a tokio task-local), so a normal run, and every
//! other run in the same process, is untouched; the hooks are one-line checks of [`active`] at the
//! place the bug would be.
//!
//! Variants that are plain options or inputs (no retries, no rollout order, a forgotten VMID,
//! doing nothing at all) need no hook and live with the self-test (`tests/rollout/mutants.rs`).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// `await_task` returns at once: the next step runs while the task still holds its lock.
    NeverWaitsForTasks,
    /// The API token goes in a `PVEAuthCookie` cookie (the seed's client), not the header.
    TokenAsCookie,
    /// `format=qcow2` on the boot disk whatever the storage (lvm-thin is raw-only).
    Qcow2OnLvmThin,
    /// Every error is retried, the fail-fast ones (bridge missing, bad spec, 401) too.
    RetriesFailFast,
    /// No look for an existing VM before creating: a re-run creates a second one.
    DuplicateOnRerun,
    /// A VM this rollout created and could not finish is left where it is.
    NoCleanupAfterFailedCreate,
    /// `DELETE …/qemu/{vmid}` without `purge=1`.
    DestroyWithoutPurge,
    /// The first IPv4 address the guest agent lists, loopback included.
    WrongIp,
    /// The manifest's `20Gi` resized as 20 GB (19073 MiB).
    DisksInGb,
    /// Containers are made privileged (`unprivileged=0`): root in the container is root on
    /// the node.
    /// Reads the manifests without their `userData`: no snippet, no `cicustom`, the VMs made
    /// as if none was asked for (PVE then writes only its own user-data).
    IgnoresUserData,
    PrivilegedContainers,
    /// A container's rootfs is left to PVE's default size (4 GiB), not the manifest's `disk`.
    RootfsDefaultSize,
    // The cluster provisioner's (`src/cluster/`, seed 002), killed by `@lab` scenarios:
    /// S5 installs everything but the first-boot script: the node boots from its disk and
    /// nothing starts the service.
    SkipsFirstBootScript,
    /// S5 installs the certificates under the seed's first names (`ca-cert.pem`, `cert.pem`,
    /// `key.pem`), not the ones `cluster-config.json` names.
    CertsUnderWrongNames,
    /// etcd serves clients and peers over plain HTTP, with no certificate asked or offered.
    EtcdWithoutTls,
    /// etcd serves TLS but asks clients for no certificate (no client CA, no client-cert-auth):
    /// anyone who reaches the client port reads and writes the cluster.
    ClientsWithoutCertificates,
    // The deployer's, which only a real guest shows (killed by `@stack` scenarios):
    NoGuestAgent,
    DefaultScsiController,
    BootsFromCloudInitDrive,
    /// A container is created without `ssh-public-keys` (the keys go only to VMs' `sshkeys`):
    /// it runs, and refuses SSH.
    ContainerWithoutSshKeys,
}

impl Mutant {
    /// Its name in the self-test's reports.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::NeverWaitsForTasks => "never-waits-for-tasks",
            Mutant::TokenAsCookie => "token-as-cookie",
            Mutant::Qcow2OnLvmThin => "qcow2-on-lvm-thin",
            Mutant::RetriesFailFast => "retries-fail-fast",
            Mutant::DuplicateOnRerun => "duplicate-on-rerun",
            Mutant::NoCleanupAfterFailedCreate => "no-cleanup-after-failed-create",
            Mutant::DestroyWithoutPurge => "destroy-without-purge",
            Mutant::WrongIp => "wrong-ip",
            Mutant::DisksInGb => "disks-in-gb",
            Mutant::IgnoresUserData => "ignores-user-data",
            Mutant::PrivilegedContainers => "privileged-containers",
            Mutant::RootfsDefaultSize => "rootfs-default-size",
            Mutant::SkipsFirstBootScript => "skips-first-boot-script",
            Mutant::CertsUnderWrongNames => "certs-under-wrong-names",
            Mutant::EtcdWithoutTls => "etcd-without-tls",
            Mutant::ClientsWithoutCertificates => "clients-without-certificates",
            Mutant::NoGuestAgent => "no-guest-agent",
            Mutant::DefaultScsiController => "default-scsi-controller",
            Mutant::BootsFromCloudInitDrive => "boots-from-cloudinit-drive",
            Mutant::ContainerWithoutSshKeys => "container-without-ssh-keys",
        }
    }

    /// The mutant named `name` (as [`Mutant::name`] spells it).
    pub fn by_name(name: &str) -> Option<Mutant> {
        ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Every mutant.
pub const ALL: [Mutant; 20] = [
    Mutant::NeverWaitsForTasks,
    Mutant::TokenAsCookie,
    Mutant::Qcow2OnLvmThin,
    Mutant::RetriesFailFast,
    Mutant::DuplicateOnRerun,
    Mutant::NoCleanupAfterFailedCreate,
    Mutant::DestroyWithoutPurge,
    Mutant::WrongIp,
    Mutant::DisksInGb,
    Mutant::IgnoresUserData,
    Mutant::PrivilegedContainers,
    Mutant::RootfsDefaultSize,
    Mutant::SkipsFirstBootScript,
    Mutant::CertsUnderWrongNames,
    Mutant::EtcdWithoutTls,
    Mutant::ClientsWithoutCertificates,
    Mutant::NoGuestAgent,
    Mutant::DefaultScsiController,
    Mutant::BootsFromCloudInitDrive,
    Mutant::ContainerWithoutSshKeys,
];

/// The cluster provisioner's mutants, in the order the lab self-test runs them.
pub const LAB: [Mutant; 4] = [
    Mutant::SkipsFirstBootScript,
    Mutant::CertsUnderWrongNames,
    Mutant::EtcdWithoutTls,
    Mutant::ClientsWithoutCertificates,
];

/// The mutation points a run went through, by mutant name: a mutant whose point a scenario never
/// reaches behaves there exactly as the deployer does, so the self-test runs each mutant only on
/// the scenarios that reach its point (as mutation-testing tools run only the covering tests).
#[derive(Debug, Clone, Default)]
pub struct Reached(Arc<Mutex<BTreeSet<&'static str>>>);

impl Reached {
    pub fn record(&self, name: &'static str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name);
    }

    pub fn names(&self) -> BTreeSet<&'static str> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Scope {
    mutant: Option<Mutant>,
    reached: Option<Reached>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Runs `f` with mutant `m` active (`None`: the deployer as it is), recording the mutation points
/// it reaches in `reached`.
pub async fn run_as<F: Future>(m: Option<Mutant>, reached: Option<Reached>, f: F) -> F::Output {
    SCOPE.scope(Scope { mutant: m, reached }, f).await
}

/// `f` carrying the current task's mutant and reach record, for a task it spawns: a task-local
/// does not follow `tokio::spawn`, and a mutant must stay active (and its points recorded) in the
/// tasks that deploy each VM.
pub fn in_current_scope<F: Future>(f: F) -> impl Future<Output = F::Output> {
    let scope = SCOPE
        .try_with(|s| Scope {
            mutant: s.mutant,
            reached: s.reached.clone(),
        })
        .ok();
    async move {
        match scope {
            Some(scope) => SCOPE.scope(scope, f).await,
            None => f.await,
        }
    }
}

/// Whether mutant `m` is active in the current task (and, when recording, that its point was
/// reached).
pub fn active(m: Mutant) -> bool {
    SCOPE
        .try_with(|s| {
            if let Some(r) = &s.reached {
                r.record(m.name());
            }
            s.mutant == Some(m)
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_spawned_task_keeps_the_scope_it_was_given() {
        let reached = Reached::default();
        let inside = run_as(Some(Mutant::WrongIp), Some(reached.clone()), async {
            let plain = tokio::spawn(async { active(Mutant::WrongIp) });
            let carried = tokio::spawn(in_current_scope(async { active(Mutant::WrongIp) }));
            (plain.await.ok(), carried.await.ok())
        })
        .await;
        assert_eq!(inside, (Some(false), Some(true)));
        assert!(reached.names().contains(Mutant::WrongIp.name()));
    }

    #[tokio::test]
    async fn active_only_inside_its_scope() {
        assert!(!active(Mutant::WrongIp));
        run_as(Some(Mutant::WrongIp), None, async {
            assert!(active(Mutant::WrongIp));
            assert!(!active(Mutant::DisksInGb));
        })
        .await;
        let reached = Reached::default();
        run_as(None, Some(reached.clone()), async {
            assert!(!active(Mutant::WrongIp))
        })
        .await;
        assert!(!active(Mutant::WrongIp));
        assert_eq!(
            reached.names().into_iter().collect::<Vec<_>>(),
            ["wrong-ip"]
        );
    }
}
