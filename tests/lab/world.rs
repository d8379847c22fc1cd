//! The World of the `@lab` features: one lab (and the cluster on it) per scenario, plus what the
//! steps remember between them (the last error, the leader before a fault, keys written).

use std::path::PathBuf;
use std::time::Duration;

use provision_harness::cluster::ClusterError;
use provision_harness::cluster::config::StageOptions;
use provision_harness::cluster::external::ENV_CMD;
use provision_harness::cluster::lab::Bringup;
use provision_harness::cluster::quorum::Quorum;
use vm_lab::{BootMode, LabOptions, LabSpec};

/// The seed's lab file (vm-lab's), relative to the workspace root.
pub const LAB_FILE: &str = "examples/photoncloud-t036/lab.yaml";

/// Bounds for the cluster to reach a state; generous for three TCG guests on two cores.
pub const QUORUM_TIMEOUT: Duration = Duration::from_secs(150);

#[derive(Debug, Default, cucumber::World)]
pub struct LabWorld {
    pub bringup: Option<Bringup>,
    pub stage: StageOptions,
    /// The error of the last step that was expected to be able to fail.
    pub last_error: Option<String>,
    pub quorum: Option<Quorum>,
    /// The leader before a fault was injected.
    pub old_leader: Option<String>,
    /// The user's provisioning command, when a scenario (or `LAB_PROVISIONER_CMD`) names one.
    pub external_cmd: Option<String>,
    /// Tagged `@reuses-lab`: the scenario never writes a node's disk, so it may take over the
    /// booted lab a previous such scenario left (and leave it for the next one if it passes).
    pub reuses_lab: bool,
    /// The scenario's lab holds the provisioned cluster's snapshot and goes back to
    /// [`PROVISIONED_LAB`] afterwards.
    pub holds_snapshot: bool,
    /// The scenario's lab holds the booted (not yet provisioned) lab's snapshot and goes back to
    /// [`BOOTED_LAB`] afterwards (only in runs that set [`RESTORE_BOOTED`]).
    pub holds_boot_snapshot: bool,
    /// The cluster provisioner's spans, for the scenario's trace (bring-ups run inside it).
    pub capture: provision_harness::trace::Capture,
}

/// The snapshot of the freshly booted lab (S1 done, every disk blank).
pub const BOOTED_SNAPSHOT: &str = "booted";

/// Set by a runner that brings the same lab up many times (the lab self-test, which runs one
/// scenario against every mutant of the provisioner): the first direct-boot `lab_up` snapshots the
/// booted lab, later ones restore it (disks blank again) instead of booting three guests.
pub static RESTORE_BOOTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The lab holding [`BOOTED_SNAPSHOT`] between scenarios.
pub static BOOTED_LAB: std::sync::Mutex<Option<Bringup>> = std::sync::Mutex::new(None);

pub fn take_booted() -> Option<Bringup> {
    BOOTED_LAB.lock().map(|mut g| g.take()).unwrap_or(None)
}

pub fn keep_booted(b: Bringup) {
    if let Ok(mut g) = BOOTED_LAB.lock() {
        *g = Some(b);
    }
}

/// The snapshot of the provisioned cluster that `@provisioned` scenarios start from.
pub const PROVISIONED_SNAPSHOT: &str = "provisioned";

/// The lab with the provisioned cluster and its snapshot, kept between `@provisioned` scenarios
/// (`LAB_REBUILD=1` rebuilds the cluster for every scenario instead).
pub static PROVISIONED_LAB: std::sync::Mutex<Option<Bringup>> = std::sync::Mutex::new(None);

pub fn take_provisioned() -> Option<Bringup> {
    PROVISIONED_LAB.lock().map(|mut g| g.take()).unwrap_or(None)
}

pub fn keep_provisioned(b: Bringup) {
    if let Ok(mut g) = PROVISIONED_LAB.lock() {
        *g = Some(b);
    }
}

fn restore_enabled() -> bool {
    std::env::var_os("LAB_REBUILD").is_none()
}

/// The booted lab handed from one `@reuses-lab` scenario to the next.
pub static SPARE_LAB: std::sync::Mutex<Option<Bringup>> = std::sync::Mutex::new(None);

pub fn take_spare() -> Option<Bringup> {
    SPARE_LAB.lock().map(|mut g| g.take()).unwrap_or(None)
}

pub fn keep_spare(b: Bringup) {
    if let Ok(mut g) = SPARE_LAB.lock() {
        *g = Some(b);
    }
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl LabWorld {
    /// S1 with the seed's lab file, every node booted in `mode` (its spans in the trace).
    pub async fn lab_up(&mut self, mode: BootMode) -> Result<(), ClusterError> {
        use tracing::Instrument as _;
        let span = self.capture.span_on("lab up", &bring_up());
        self.lab_up_untraced(mode).instrument(span).await
    }

    async fn lab_up_untraced(&mut self, mode: BootMode) -> Result<(), ClusterError> {
        if self.external_cmd.is_none() {
            self.external_cmd = std::env::var(ENV_CMD).ok().filter(|c| !c.trim().is_empty());
        }
        if self.reuses_lab
            && mode == BootMode::Direct
            && let Some(mut b) = take_spare()
        {
            b.reset_cluster_state()?;
            self.bringup = Some(b);
            return Ok(());
        }
        let booted =
            mode == BootMode::Direct && RESTORE_BOOTED.load(std::sync::atomic::Ordering::Relaxed);
        if booted && let Some(mut b) = take_booted() {
            b.reset_cluster_state()?;
            self.holds_boot_snapshot = true;
            self.bringup = Some(b);
            let lab = &self.b()?.lab;
            lab.restore(BOOTED_SNAPSHOT)
                .await
                .map_err(|e| ClusterError::Lab(e.to_string()))?;
            for n in lab.nodes() {
                n.link_up()
                    .await
                    .map_err(|e| ClusterError::Lab(e.to_string()))?;
            }
            return Ok(());
        }
        let path = workspace_root().join(LAB_FILE);
        let mut spec = LabSpec::from_file(&path)
            .map_err(|e| ClusterError::Lab(format!("{}: {e}", path.display())))?;
        for n in &mut spec.nodes {
            n.boot = mode;
        }
        let opts = LabOptions {
            keep_on_failure: std::env::var_os("LAB_KEEP_ON_FAILURE").is_some(),
            ..LabOptions::default()
        };
        self.bringup = Some(Bringup::start_lab(spec, opts).await?);
        if booted {
            self.b()?
                .lab
                .snapshot(BOOTED_SNAPSHOT)
                .await
                .map_err(|e| ClusterError::Lab(e.to_string()))?;
            self.holds_boot_snapshot = true;
        }
        Ok(())
    }

    pub fn b(&self) -> Result<&Bringup, ClusterError> {
        self.bringup
            .as_ref()
            .ok_or_else(|| ClusterError::Lab("no lab is up in this scenario".into()))
    }

    pub fn bm(&mut self) -> Result<&mut Bringup, ClusterError> {
        self.bringup
            .as_mut()
            .ok_or_else(|| ClusterError::Lab("no lab is up in this scenario".into()))
    }

    /// S5 with the built-in provisioner, or the user's command when one is set.
    pub async fn provision(&mut self) -> Result<(), ClusterError> {
        use tracing::Instrument as _;
        let span = self.capture.span_on("provision", &bring_up());
        let cmd = self.external_cmd.clone();
        let b = self.bm()?;
        async {
            match cmd {
                Some(c) => b.provision_with_command(&c).await,
                None => b.provision_over_ssh().await,
            }
        }
        .instrument(span)
        .await
    }

    /// S1–S6 in one go, for scenarios that start from a healthy cluster: restored from the
    /// snapshot an earlier scenario took when there is one, else built and then snapshotted.
    pub async fn provisioned_cluster(&mut self) -> Result<(), ClusterError> {
        use tracing::Instrument as _;
        let span = self.capture.span_on("provisioned cluster", &bring_up());
        self.provisioned_cluster_untraced().instrument(span).await
    }

    async fn provisioned_cluster_untraced(&mut self) -> Result<(), ClusterError> {
        let restore = restore_enabled();
        if restore && let Some(b) = take_provisioned() {
            self.holds_snapshot = true;
            self.bringup = Some(b);
            let lab = &self.b()?.lab;
            lab.restore(PROVISIONED_SNAPSHOT)
                .await
                .map_err(|e| ClusterError::Lab(e.to_string()))?;
            // A cable unplugged by the last scenario is QEMU's state, not the guest's.
            for n in lab.nodes() {
                n.link_up()
                    .await
                    .map_err(|e| ClusterError::Lab(e.to_string()))?;
            }
            let q = self
                .bm()?
                .wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT)
                .await?;
            self.quorum = Some(q);
            return Ok(());
        }
        self.build_provisioned_cluster().await?;
        if restore {
            self.b()?
                .lab
                .snapshot(PROVISIONED_SNAPSHOT)
                .await
                .map_err(|e| ClusterError::Lab(e.to_string()))?;
            self.holds_snapshot = true;
        }
        Ok(())
    }

    async fn build_provisioned_cluster(&mut self) -> Result<(), ClusterError> {
        self.lab_up(BootMode::Direct).await?;
        let stage = self.stage;
        let b = self.bm()?;
        b.check_ssh().await?;
        b.make_certificates()?;
        b.stage_configs(stage)?;
        self.provision().await?;
        let q = self
            .bm()?
            .wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT)
            .await?;
        self.quorum = Some(q);
        Ok(())
    }

    /// A node named in a step: a node name, or "the old leader".
    pub fn resolve(&self, who: &str) -> Result<String, ClusterError> {
        match who {
            "the old leader" => self
                .old_leader
                .clone()
                .ok_or_else(|| ClusterError::Validation("no leader was recorded".into())),
            n => Ok(n.to_owned()),
        }
    }

    /// Records the outcome of a step that a scenario expects may fail.
    pub fn record<T>(&mut self, r: Result<T, ClusterError>) {
        self.last_error = r.err().map(|e| e.to_string());
    }
}

/// The lane the scenario's cluster bring-up is drawn on (the cluster provisioner's own spans
/// go below it, per node where they name one).
fn bring_up() -> provision_harness::trace::Lane {
    provision_harness::trace::Lane::new(provision_harness::trace::CLUSTER, "bring-up")
}
