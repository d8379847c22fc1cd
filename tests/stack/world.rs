//! The World of the `@stack` features: a lab-backed fake-proxmox whose VMs are real QEMU guests,
//! the deployer's rollout against it, and the cluster formed on the VMs it made.

use std::path::PathBuf;

use fake_proxmox::FakeProxmox;
use provision_harness::cluster::ClusterError;
use provision_harness::cluster::quorum::Quorum;
use provision_harness::cluster::stack::{StackCluster, StackVm};
use provision_harness::deploy::RolloutResult;
use provision_harness::deployer::guest::GuestKind;
use provision_harness::pve::PveClient;
use provision_harness::rehearse::{RehearseOptions, Rollout, run_against};
use provision_harness::rehearse_stack::containers;
use provision_harness::rehearse_stack::{
    SITE, golden_image_qcow2, pve_client, ssh_keypair, stack_options, stack_rollout, stack_vms,
    stage_cluster, start_lab_fake,
};
use tracing::Instrument as _;

pub use provision_harness::rehearse_stack::QUORUM_TIMEOUT;

/// What a running rollout target holds: the fake (and its real guests), the deployer's inputs,
/// and the SSH key its manifests carry.
pub struct Target {
    pub fake: FakeProxmox,
    pub rollout: Rollout,
    pub options: RehearseOptions,
    pub key: PathBuf,
    /// The fake's state directory (its guests' run directories are under `lab/`).
    pub state: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("state", &self.state)
            .finish()
    }
}

/// A formed cluster kept for the next scenario that starts from one.
pub struct Formed {
    pub target: Target,
    pub deploy: RolloutResult,
    pub cluster: StackCluster,
}

static FORMED: std::sync::Mutex<Option<Formed>> = std::sync::Mutex::new(None);

pub fn take_formed() -> Option<Formed> {
    FORMED.lock().map(|mut g| g.take()).unwrap_or(None)
}

pub fn keep_formed(f: Formed) {
    if let Ok(mut g) = FORMED.lock() {
        *g = Some(f);
    }
}

/// The cloud image with the cluster's packages baked in, as qcow2 (built once per run).
static IMAGE: tokio::sync::OnceCell<Result<(tempfile::TempDir, PathBuf), String>> =
    tokio::sync::OnceCell::const_new();

async fn golden_image() -> Result<PathBuf, ClusterError> {
    let r = IMAGE
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| {
                let dir = tempfile::Builder::new()
                    .prefix("stack-image-")
                    .tempdir()
                    .map_err(|e| e.to_string())?;
                vm_lab::lab::remove_on_sigterm(dir.path(), true);
                let p = golden_image_qcow2(dir.path()).map_err(|e| e.to_string())?;
                Ok((dir, p))
            })
            .await
            .map_err(|e| e.to_string())?
        })
        .await;
    match r {
        Ok((_, p)) => Ok(p.clone()),
        Err(e) => Err(ClusterError::Lab(format!("the cluster's cloud image: {e}"))),
    }
}

/// vm-lab's container template with the cluster's packages (built once per run, cached by
/// vm-lab across runs).
static TEMPLATE: tokio::sync::OnceCell<Result<PathBuf, String>> =
    tokio::sync::OnceCell::const_new();

async fn container_template() -> Result<PathBuf, ClusterError> {
    let r = TEMPLATE
        .get_or_init(|| async {
            tokio::task::spawn_blocking(containers::container_template)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        })
        .await;
    r.clone().map_err(ClusterError::Lab)
}

/// Removes the image built for this run (a static's value is never dropped).
pub fn remove_image() {
    if let Some(Ok((dir, _))) = IMAGE.get() {
        let _ = std::fs::remove_dir_all(dir.path());
    }
}

#[derive(Debug, Default, cucumber::World)]
pub struct StackWorld {
    pub target: Option<Target>,
    pub deploy: Option<RolloutResult>,
    pub cluster: Option<StackCluster>,
    pub quorum: Option<Quorum>,
    pub old_leader: Option<String>,
    /// The error of the last step that was expected to be able to fail.
    pub last_error: Option<String>,
    /// The deployer's bug this scenario runs it with (a mutant), if any.
    pub mutant: Option<provision_harness::mutants::Mutant>,
    /// What the deployer recorded for the scenario's trace.
    pub capture: provision_harness::trace::Capture,
}

impl StackWorld {
    /// A fresh lab-backed fake for the PhotonCloud rollout, its manifests carrying a new key.
    pub async fn start_target(&mut self) -> Result<(), ClusterError> {
        self.start_target_with(|_| Ok(())).await
    }

    /// [`StackWorld::start_target`] with the rollout (its manifests and the fake's scenario)
    /// changed by `change` before the fake starts.
    pub async fn start_target_with(
        &mut self,
        change: impl FnOnce(&mut Rollout) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        let image = golden_image().await?;
        let tmp = tempfile::Builder::new()
            .prefix("stack-")
            .tempdir()
            .map_err(|e| ClusterError::Lab(e.to_string()))?;
        // A CI timeout's SIGTERM must not leave the guests' disks and the fake's state behind.
        vm_lab::lab::remove_on_sigterm(tmp.path(), true);
        let (key, public) = ssh_keypair(tmp.path())?;
        let mut rollout =
            stack_rollout(&image, &public).map_err(|e| ClusterError::Spec(e.to_string()))?;
        change(&mut rollout)?;
        let options = stack_options();
        let state = tmp.path().join("state");
        let fake = start_lab_fake(&rollout, &options, &state)
            .await
            .map_err(|e| ClusterError::Lab(format!("the lab-backed fake: {e}")))?;
        self.target = Some(Target {
            fake,
            rollout,
            options,
            key,
            state,
            tmp,
        });
        Ok(())
    }

    pub fn t(&self) -> Result<&Target, ClusterError> {
        self.target
            .as_ref()
            .ok_or_else(|| ClusterError::Lab("no rollout target in this scenario".into()))
    }

    pub fn tm(&mut self) -> Result<&mut Target, ClusterError> {
        self.target
            .as_mut()
            .ok_or_else(|| ClusterError::Lab("no rollout target in this scenario".into()))
    }

    pub fn c(&self) -> Result<&StackCluster, ClusterError> {
        self.cluster
            .as_ref()
            .ok_or_else(|| ClusterError::Spec("the cluster provisioner has not run".into()))
    }

    pub fn cm(&mut self) -> Result<&mut StackCluster, ClusterError> {
        self.cluster
            .as_mut()
            .ok_or_else(|| ClusterError::Spec("the cluster provisioner has not run".into()))
    }

    pub fn deployed(&self) -> Result<&RolloutResult, ClusterError> {
        self.deploy
            .as_ref()
            .ok_or_else(|| ClusterError::Spec("the deployer has not run".into()))
    }

    /// The deployer plans and deploys the manifests against the target (a re-run converges).
    pub async fn roll_out(&mut self) -> Result<(), ClusterError> {
        let t = self.t()?;
        let r = &t.rollout;
        let report = provision_harness::mutants::run_as(
            self.mutant,
            None,
            run_against(
                &t.fake,
                r.label.clone(),
                r.manifests.clone(),
                r.provider.clone(),
                &t.options,
            )
            .instrument(self.capture.span("deployer")),
        )
        .await
        .map_err(|e| ClusterError::Spec(format!("the rollout: {e}")))?;
        self.deploy = Some(report.deploy);
        Ok(())
    }

    /// A PVE client for the site, as the deployer reaches it (token, pinned certificate).
    pub fn pve(&self) -> Result<PveClient, ClusterError> {
        let t = self.t()?;
        pve_client(&t.fake, SITE, &t.rollout)
    }

    /// How the harness reaches each VM the deployer reported.
    pub async fn stack_vms(&self) -> Result<Vec<StackVm>, ClusterError> {
        let t = self.t()?;
        stack_vms(
            &t.fake,
            SITE,
            self.deployed()?,
            &t.rollout.manifests,
            &t.key,
        )
        .await
    }

    /// The cluster provisioner on the deployer's VMs, up to S4 (nothing written to a VM yet).
    pub async fn stage_cluster(&mut self) -> Result<(), ClusterError> {
        let t = self.t()?;
        let c = stage_cluster(&t.fake, &t.rollout, self.deployed()?, &t.key)
            .instrument(self.capture.span_on("stage cluster", &bring_up()))
            .await?;
        self.cluster = Some(c);
        Ok(())
    }

    /// Rollout, S2–S5 and the quorum: a cluster formed from nothing, or the one an earlier
    /// scenario left formed.
    pub async fn formed_cluster(&mut self) -> Result<(), ClusterError> {
        if let Some(f) = take_formed() {
            self.target = Some(f.target);
            self.deploy = Some(f.deploy);
            self.cluster = Some(f.cluster);
        } else {
            self.start_target().await?;
            self.roll_out().await?;
            self.stage_cluster().await?;
            let span = self.capture.span_on("provision", &bring_up());
            self.cm()?.provision_over_ssh().instrument(span).await?;
        }
        let span = self.capture.span_on("quorum", &bring_up());
        let q = self
            .cm()?
            .wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT)
            .instrument(span)
            .await?;
        self.quorum = Some(q);
        Ok(())
    }

    /// The console log of the guest named `name`: the cluster's record of it, or (before the
    /// cluster provisioner ran, or when it could not) for a container what the fake's
    /// `…/lxc/{vmid}/guest` route names, for a VM the lab backend's run directory of the VM
    /// the deployer reported (`<state>/lab/<host>/<node>-<vmid>/serial.log`).
    pub async fn console_of(&self, name: &str) -> Result<PathBuf, ClusterError> {
        if let Some(p) = self
            .cluster
            .as_ref()
            .and_then(|c| c.vm(name).ok())
            .and_then(|v| v.serial_log.clone())
        {
            return Ok(p);
        }
        let v = self
            .deployed()?
            .vms
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| ClusterError::Spec(format!("the deployer reports no {name}")))?;
        let vmid = v
            .vmid
            .ok_or_else(|| ClusterError::Spec(format!("{name} has no VMID")))?;
        if self.is_container(name)? {
            let t = self.t()?;
            let ctl = t
                .fake
                .site(SITE)
                .ok_or_else(|| ClusterError::Spec(format!("the fake has no site {SITE}")))?
                .control();
            let access = ctl
                .ct_access(&v.node, vmid, "root", &t.key)
                .await
                .map_err(|e| ClusterError::Lab(format!("{name}: container access: {e}")))?;
            return access
                .serial_log
                .map(PathBuf::from)
                .ok_or_else(|| ClusterError::Lab(format!("the fake names no console of {name}")));
        }
        let guest = format!("{}-{vmid}", v.node);
        let lab = self.t()?.state.join("lab");
        std::fs::read_dir(&lab)
            .into_iter()
            .flatten()
            .flatten()
            .map(|host| host.path().join(&guest).join("serial.log"))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                ClusterError::Lab(format!("no console of {name} under {}", lab.display()))
            })
    }

    /// Whether the manifest of `name` asks for a container.
    pub fn is_container(&self, name: &str) -> Result<bool, ClusterError> {
        self.t()?
            .rollout
            .manifests
            .vms
            .iter()
            .find(|m| m.vm.spec.for_provider.name == name)
            .map(|m| GuestKind::of_manifest(&m.vm.kind) == Some(GuestKind::Container))
            .ok_or_else(|| ClusterError::Spec(format!("no manifest for {name}")))
    }

    /// vm-lab's container template with the cluster's packages uploaded to the site's storage
    /// through the PVE API, as a team uploads one; its volid.
    pub async fn upload_container_template(&self) -> Result<String, ClusterError> {
        let template = container_template().await?;
        let t = self.t()?;
        let node = t
            .rollout
            .manifests
            .vms
            .first()
            .map(|m| m.vm.spec.for_provider.node.clone())
            .ok_or_else(|| ClusterError::Spec("the rollout has no manifests".into()))?;
        containers::upload_template(&t.fake, SITE, &t.rollout, &node, &template).await
    }

    /// A node named in a step: a VM name, or "the old leader".
    pub fn resolve(&self, who: &str) -> Result<String, ClusterError> {
        match who {
            "the old leader" | "the old leader's VM" => self
                .old_leader
                .clone()
                .ok_or_else(|| ClusterError::Validation("no leader was recorded".into())),
            n => Ok(n.to_owned()),
        }
    }

    /// What the scenario recorded, for its trace and failure bundle: the deployer's spans,
    /// the fake's journal and state, the guests' serial logs and QMP events.
    pub async fn collect_trace(&self) -> crate::trace_writer::Collected {
        let mut c = crate::trace_writer::Collected {
            trace: self.capture.take(),
            world: format!("{self:?}"),
            ..Default::default()
        };
        let Some(t) = &self.target else { return c };
        let controls: Vec<_> = t.fake.sites().map(|s| s.control()).collect();
        match provision_harness::trace::fake::FakeRecord::read(&controls).await {
            Ok(rec) => {
                c.states.push(("all-sites".into(), rec.state.clone()));
                c.fake = Some(rec);
            }
            Err(e) => eprintln!("trace: the fake's journal and state: {e}"),
        }
        let (files, lab) = crate::trace_writer::lab_files(&t.state);
        c.files = files;
        c.trace.extend(lab);
        c
    }

    /// Shuts the target down (its guests with it).
    pub async fn shutdown(&mut self) {
        self.cluster = None;
        if let Some(t) = self.target.take() {
            t.fake.shutdown().await;
            vm_lab::lab::remove_on_sigterm(t.tmp.path(), false);
        }
    }
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lane the scenario's cluster bring-up is drawn on (the cluster provisioner's own spans
/// go below it, per node where they name one).
fn bring_up() -> provision_harness::trace::Lane {
    provision_harness::trace::Lane::new(provision_harness::trace::CLUSTER, "bring-up")
}
