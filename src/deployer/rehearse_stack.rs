//! `rehearse --stack`: the whole stack outside the test suite. The deployer makes seed 002's
//! three PhotonCloud nodes through the PVE API of a lab-backed fake (real QEMU guests booting
//! the project's cloud image with the cluster's packages baked in), then the cluster provisioner
//! forms the cluster on them and restarts them through the PVE API; the run ends at a quorate
//! cluster that stores and reads a key. The `@stack` features (`tests/stack.rs`) reach the same
//! pieces through these functions; [`containers`] makes a member a container.

pub mod containers;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_proxmox::{ClockMode, FakeProxmox};
use serde::Serialize;

use crate::cluster::ClusterError;
use crate::cluster::config::StageOptions;
use crate::cluster::stack::{
    CLUSTER_ROW, ConsoleWatch, GuestFamily, Milestone, StackCluster, StackOptions, StackStep,
    StackVm, VmPower,
};
use crate::cluster::transport::SshTarget;
use crate::deployer::deploy::RolloutResult;
use crate::deployer::guest::GuestKind;
use crate::deployer::manifest::ManifestSet;
use crate::deployer::pve::tasks::TaskWait;
use crate::deployer::pve::tls::{TlsMode, parse_fingerprint};
use crate::deployer::pve::{ClientOptions, PveClient};
use crate::deployer::rehearse::{
    RehearseError, RehearseOptions, Rollout, RunReport, cloud_image_qcow2_with, lab_rollout,
    run_against,
};
use crate::deployer::report_html::{Entry, StepOutcome, Timeline};

/// The lab-backed site of `examples/photoncloud-t036/rollout/`.
pub const SITE: &str = "lab";
/// Seed 002's cluster name.
pub const CLUSTER: &str = "photoncloud";
/// How long the cluster may take to reach quorum after the reboots (three TCG guests, 2 cores).
pub const QUORUM_TIMEOUT: Duration = Duration::from_secs(180);

/// The cloud image with the cluster's packages baked in (a golden image), as qcow2 in `dir`.
/// Blocking.
pub fn golden_image_qcow2(dir: &Path) -> Result<PathBuf, RehearseError> {
    let req = vm_lab::image::cloud::CloudImageRequest {
        packages: crate::cluster::lab::PACKAGES.map(str::to_owned).to_vec(),
        ..Default::default()
    };
    cloud_image_qcow2_with(dir, &req)
}

/// A fresh ed25519 key pair in `dir` (the system `ssh-keygen`): the private key's path and the
/// public key's line.
pub fn ssh_keypair(dir: &Path) -> Result<(PathBuf, String), ClusterError> {
    let key = dir.join("id_ed25519");
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .output()
        .map_err(|e| ClusterError::Lab(format!("ssh-keygen (install openssh-client): {e}")))?;
    if !out.status.success() {
        return Err(ClusterError::Lab(format!(
            "ssh-keygen: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let public = std::fs::read_to_string(key.with_extension("pub"))
        .map_err(|e| ClusterError::io(key.with_extension("pub"), e))?;
    Ok((key, public.trim().to_owned()))
}

/// The lab rollout (`lab_rollout` with `image`) whose manifests carry `public_key` in `sshKeys`.
pub fn stack_rollout(image: &Path, public_key: &str) -> Result<Rollout, RehearseError> {
    let mut rollout = lab_rollout(image)?;
    for m in &mut rollout.manifests.vms {
        m.vm.spec.for_provider.ssh_keys = vec![public_key.to_owned()];
    }
    Ok(rollout)
}

/// The options of a stack run: `RehearseOptions::lab()` with a bounded wait for an address.
pub fn stack_options() -> RehearseOptions {
    let mut options = RehearseOptions::lab();
    // A guest that has no address by then will not get one.
    options.deploy.pipeline.ip_wait = Duration::from_secs(300);
    // Three VMs: asking their agents four times a second costs nothing, and a guest's address
    // is then seen within a quarter second of its agent reporting it, not a whole one.
    options.deploy.pipeline.ip_poll = Duration::from_millis(250);
    options
}

/// A PVE client for `site` of the fake, reached as the deployer reaches it (the provider's
/// credentials, the site's certificate pinned).
pub fn pve_client(
    fake: &FakeProxmox,
    site: &str,
    rollout: &Rollout,
) -> Result<PveClient, ClusterError> {
    let handle = fake
        .site(site)
        .ok_or_else(|| ClusterError::Spec(format!("the fake has no site {site}")))?;
    let pin = parse_fingerprint(handle.fingerprint()).map_err(ClusterError::Tls)?;
    PveClient::new(
        handle.url(),
        rollout.provider.credentials.clone(),
        &ClientOptions {
            tls: TlsMode::Pinned(pin),
            timeout: Duration::from_secs(60),
            ..ClientOptions::default()
        },
    )
    .map_err(|e| ClusterError::Spec(e.to_string()))
}

/// The cluster's power verbs through the deployer's PVE client:
/// `POST …/{qemu|lxc}/{vmid}/status/{verb}`, then the task awaited.
pub struct ApiPower {
    pub client: PveClient,
    pub wait: TaskWait,
}

impl VmPower for ApiPower {
    fn power<'a>(
        &'a self,
        node: &'a str,
        family: GuestFamily,
        vmid: u32,
        verb: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            let upid: String = self
                .client
                .post(
                    &format!("/nodes/{node}/{}/{vmid}/status/{verb}", family.api()),
                    &[],
                )
                .await
                .map_err(|e| e.to_string())?;
            self.client
                .await_task(&upid, self.wait)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

/// How the harness reaches each guest the deployer reported: the address it reported (a VM's
/// guest agent's, a container's `interfaces`), SSH as root with `key` (the fake's guest-access
/// routes, `…/qemu/{vmid}/guest` and `…/lxc/{vmid}/guest`, give the command line that enters
/// the lab's namespace), and the guest's console. Which are containers the manifests say.
/// Sorted by name.
pub async fn stack_vms(
    fake: &FakeProxmox,
    site: &str,
    deploy: &RolloutResult,
    manifests: &ManifestSet,
    key: &Path,
) -> Result<Vec<StackVm>, ClusterError> {
    let ctl = fake
        .site(site)
        .ok_or_else(|| ClusterError::Spec(format!("the fake has no site {site}")))?
        .control();
    let mut vms = Vec::new();
    for v in &deploy.vms {
        let vmid = v
            .vmid
            .ok_or_else(|| ClusterError::Spec(format!("{} has no VMID", v.name)))?;
        let address =
            v.ip.as_deref()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| ClusterError::Spec(format!("{} has no address: {v:?}", v.name)))?;
        let family = match manifests
            .vms
            .iter()
            .find(|m| m.vm.spec.for_provider.name == v.name)
            .and_then(|m| GuestKind::of_manifest(&m.vm.kind))
        {
            Some(GuestKind::Container) => GuestFamily::Lxc,
            _ => GuestFamily::Qemu,
        };
        let access = match family {
            GuestFamily::Qemu => ctl.guest_access(&v.node, vmid, "root", key).await,
            GuestFamily::Lxc => ctl.ct_access(&v.node, vmid, "root", key).await,
        }
        .map_err(|e| ClusterError::Lab(format!("{}: guest access: {e}", v.name)))?;
        if access.ssh.is_empty() {
            return Err(ClusterError::Lab(format!(
                "{}: the fake gave no ssh command",
                v.name
            )));
        }
        vms.push(StackVm {
            name: v.name.clone(),
            node: v.node.clone(),
            vmid,
            family,
            address,
            ssh: SshTarget {
                node: v.name.clone(),
                base: access.ssh,
                key: key.to_owned(),
            },
            serial_log: access.serial_log.map(PathBuf::from),
        });
    }
    vms.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(vms)
}

/// S2–S4 on the deployer's VMs: nothing is written to a VM yet.
pub async fn stage_cluster(
    fake: &FakeProxmox,
    rollout: &Rollout,
    deploy: &RolloutResult,
    key: &Path,
) -> Result<StackCluster, ClusterError> {
    let vms = stack_vms(fake, SITE, deploy, &rollout.manifests, key).await?;
    let power = Arc::new(ApiPower {
        client: pve_client(fake, SITE, rollout)?,
        wait: TaskWait {
            poll: Duration::from_millis(100),
            timeout: Duration::from_secs(300),
        },
    });
    let mut c = StackCluster::new(CLUSTER, vms, power, StackOptions::default())?;
    vm_lab::lab::remove_on_sigterm(c.work_dir(), true);
    c.check_ssh().await?;
    c.make_certificates()?;
    c.stage_configs(StageOptions::default())?;
    Ok(c)
}

/// A fake for `rollout`'s scenario as a rehearsal runs it (TLS, the fast task clock of
/// `options`), its lab-backed sites' guests and disks under `state`.
pub async fn start_lab_fake(
    rollout: &Rollout,
    options: &RehearseOptions,
    state: &Path,
) -> Result<FakeProxmox, RehearseError> {
    let mut lab = options.lab.clone();
    lab.state_dir = Some(state.to_path_buf());
    Ok(FakeProxmox::builder()
        .scenario(rollout.scenario.clone())
        .tls(true)
        .auth_failure_delay(false)
        .clock(ClockMode::Scaled {
            factor: options.clock_factor,
        })
        .lab_options(lab)
        .start()
        .await?)
}

/// What `rehearse --stack` did.
#[derive(Debug, Clone, Serialize)]
pub struct StackReport {
    /// The rollout (plan, deploy, and the timeline with the guest-side steps added).
    pub run: RunReport,
    /// The leader the cluster agreed on, and its members.
    pub leader: String,
    pub members: Vec<String>,
    /// Wall time of each phase, in ms: `deploy`, `cluster` (SSH to quorum), `total`.
    pub phases_ms: std::collections::BTreeMap<String, u128>,
    /// Per VM, the API steps and the guest-side ones on one time axis (what the HTML draws).
    pub timeline: Timeline,
}

/// The whole stack (see the module doc). `progress` gets one line per phase.
pub async fn rehearse_stack(
    options: &RehearseOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<StackReport, RehearseError> {
    let started = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("rehearse-stack-")
        .tempdir()
        .map_err(|e| RehearseError::Image(format!("making a temporary directory: {e}")))?;
    vm_lab::lab::remove_on_sigterm(dir.path(), true);
    progress("building (or finding) the cloud image with etcd baked in");
    let path = dir.path().to_path_buf();
    let image = tokio::task::spawn_blocking(move || golden_image_qcow2(&path))
        .await
        .map_err(|e| RehearseError::Image(e.to_string()))??;
    let (key, public) = ssh_keypair(dir.path()).map_err(stack_err)?;
    let rollout = stack_rollout(&image, &public)?;
    let fake = start_lab_fake(&rollout, options, &dir.path().join("state")).await?;
    let watch = ConsoleWatch::start_under(dir.path().join("state").join("lab"));
    let result = run_stack(&fake, &rollout, &key, options, progress, started, watch).await;
    fake.shutdown().await;
    vm_lab::lab::remove_on_sigterm(dir.path(), false);
    result
}

async fn run_stack(
    fake: &FakeProxmox,
    rollout: &Rollout,
    key: &Path,
    options: &RehearseOptions,
    progress: &(dyn Fn(&str) + Sync),
    started: Instant,
    watch: ConsoleWatch,
) -> Result<StackReport, RehearseError> {
    progress("deploying node01–03 through the PVE API (real QEMU guests under the fake)");
    let t = Instant::now();
    let mut run = run_against(
        fake,
        rollout.label.clone(),
        rollout.manifests.clone(),
        rollout.provider.clone(),
        options,
    )
    .await?;
    let deploy_ms = t.elapsed().as_millis();
    let deploy_start = Instant::now()
        .checked_sub(Duration::from_millis(
            u64::try_from(run.deploy.elapsed_ms).unwrap_or(0),
        ))
        .unwrap_or(t);
    if !run.deploy.all_ready() {
        return Err(stack_err(ClusterError::Spec(format!(
            "the deploy left VMs not ready: {}",
            run.deploy
                .vms
                .iter()
                .filter_map(|v| v
                    .error
                    .as_ref()
                    .map(|e| format!("{}: {}", v.name, e.message)))
                .collect::<Vec<_>>()
                .join("; ")
        ))));
    }
    let t = Instant::now();
    progress("the cluster provisioner: SSH, certificates, configs");
    let formed = async {
        let mut c = stage_cluster(fake, rollout, &run.deploy, key).await?;
        progress(
            "installing onto each VM's disk over SSH, then rebooting them through the PVE API",
        );
        c.provision_over_ssh().await?;
        progress("waiting for quorum");
        let q = c.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
        let writer = c.member("node01")?;
        writer
            .put(&c.layout, "photoncloud/rehearse", "stack")
            .await?;
        let got = c
            .member("node03")?
            .get(&c.layout, "photoncloud/rehearse")
            .await?;
        if got.as_deref() != Some("stack") {
            return Err(ClusterError::Validation(format!(
                "node03 reads photoncloud/rehearse = {got:?} after node01 wrote \"stack\""
            )));
        }
        Ok::<_, ClusterError>((c, q))
    }
    .await;
    // The watch names consoles by guest directory (`<node>-<vmid>`): name them by VM.
    let names: std::collections::BTreeMap<String, String> = run
        .deploy
        .vms
        .iter()
        .filter_map(|v| {
            v.vmid
                .map(|id| (format!("{}-{id}", v.node), v.name.clone()))
        })
        .collect();
    let milestones: Vec<Milestone> = watch
        .finish()
        .await
        .into_iter()
        .filter_map(|m| names.get(&m.vm).map(|n| Milestone { vm: n.clone(), ..m }))
        .collect();
    let (cluster, quorum) = formed.map_err(stack_err)?;
    let cluster_ms = t.elapsed().as_millis();
    add_guest_side(
        &mut run.timeline,
        deploy_start,
        &cluster.steps(),
        &milestones,
    );
    progress(&format!(
        "quorum: {} members, leader {}",
        quorum.members.len(),
        quorum.leader
    ));
    let phases_ms = [
        ("deploy".to_owned(), deploy_ms),
        ("cluster".to_owned(), cluster_ms),
        ("total".to_owned(), started.elapsed().as_millis()),
    ]
    .into_iter()
    .collect();
    Ok(StackReport {
        timeline: run.timeline.clone(),
        run,
        leader: quorum.leader,
        members: quorum.members,
        phases_ms,
    })
}

fn stack_err(e: ClusterError) -> RehearseError {
    RehearseError::Stack(e.to_string())
}

/// Adds the harness's steps on each VM and the guests' console milestones to the deploy's
/// timeline, on its time axis (ms since the deploy started).
pub fn add_guest_side(
    timeline: &mut Timeline,
    deploy_start: Instant,
    steps: &[StackStep],
    milestones: &[Milestone],
) {
    let ms = |at: Instant| {
        u64::try_from(at.saturating_duration_since(deploy_start).as_millis()).unwrap_or(u64::MAX)
    };
    for s in steps.iter().filter(|s| s.vm == CLUSTER_ROW) {
        timeline.notes.push(format!(
            "Cluster: {} took {} ({}){}",
            s.step,
            crate::deployer::report_html::fmt_ms(ms(s.end).saturating_sub(ms(s.start))),
            if s.error.is_some() { "failed" } else { "ok" },
            s.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
    }
    for s in steps.iter().filter(|s| s.vm != CLUSTER_ROW) {
        timeline.entries.push(Entry {
            vm: s.vm.clone(),
            group: "cluster".into(),
            step: s.step.clone(),
            start_ms: ms(s.start),
            end_ms: ms(s.end),
            outcome: if s.error.is_some() {
                StepOutcome::Failed
            } else {
                StepOutcome::Ok
            },
            detail: s.error.clone().unwrap_or_default(),
        });
    }
    // A milestone is drawn as a bar from the one before it in the same boot (or from the moment
    // that boot's console appeared).
    for m in milestones {
        let end = ms(m.at);
        let start = ms(m.since).min(end);
        timeline.entries.push(Entry {
            vm: m.vm.clone(),
            group: "guest console".into(),
            step: m.what.to_owned(),
            start_ms: start,
            end_ms: end,
            outcome: StepOutcome::Ok,
            detail: "seen on the VM's serial console".into(),
        });
    }
    let end = timeline.entries.iter().map(|e| e.end_ms).max().unwrap_or(0);
    timeline.elapsed_ms = timeline.elapsed_ms.max(end);
    timeline
        .notes
        .push("Guest side: the cluster provisioner's steps per VM and the milestones each VM's console showed, on the deploy's time axis.".into());
}
