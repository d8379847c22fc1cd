//! The bring-up on a vm-lab lab, step by step as seed 002 lists it (S1–S6). The Gherkin steps
//! and the benchmark both drive this; each verb is one step of the seed.
//!
//! What the cluster adds to the lab's netboot image (through vm-lab's image `packages` and
//! `files`): Debian's `etcd-server`/`etcd-client`, and the boot hook `/etc/vmlab/rc.local`,
//! which vm-lab's init runs before it reports ready: it mounts the disk partition labelled
//! [`DISK_LABEL`] and runs the first-boot script the provisioner installed there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vm_lab::{Lab, LabOptions, LabSpec};

use super::config::{self, NodeConfig, StageOptions, StagedCluster};
use super::error::ClusterError;
use super::external::{self, ExternalContext};
use super::provision::{self, BOOT_FAILED_MARKER, BOOT_MARKER, DISK_LABEL, ProvisionOptions};
use super::quorum::{self, Node, Quorum};
use super::tls::{self, ClusterTls};
use super::topology::{ClusterSpec, GuestLayout, NodeIdentity, Ports};
use super::transport::{NodeShell, SshShell, SshTarget};

/// Where vm-lab's init looks for a user hook.
pub const HOOK_PATH: &str = "/etc/vmlab/rc.local";
/// Debian packages the cluster needs in the netboot image.
pub const PACKAGES: [&str; 2] = ["etcd-server", "etcd-client"];

/// The boot hook: mount the provisioned disk, if there is one, and run its first-boot script.
pub fn boot_hook(layout: &GuestLayout) -> String {
    format!(
        r#"#!/bin/sh
# provision-harness cluster boot hook: start the cluster service from the node's disk.
dev=$(findfs LABEL={label} 2>/dev/null) || exit 0
mkdir -p {mnt}
mount "$dev" {mnt} || {{ echo "{failed}: cannot mount $dev on {mnt}" > /dev/console; exit 0; }}
[ -x {script} ] && {script}
exit 0
"#,
        label = DISK_LABEL,
        mnt = layout.mount,
        script = layout.boot_script(),
        failed = BOOT_FAILED_MARKER,
    )
}

/// Adds the cluster's packages and boot hook to a lab spec. The hook file is written into
/// `work_dir`, which must outlive the image build.
pub fn prepare_lab_spec(
    spec: &mut LabSpec,
    layout: &GuestLayout,
    work_dir: &Path,
) -> Result<(), ClusterError> {
    for p in PACKAGES {
        if !spec.image.packages.iter().any(|x| x == p) {
            spec.image.packages.push(p.to_owned());
        }
    }
    // Under TCG on a loaded host the kernel's IO-APIC timer check sometimes misses its tick
    // and panics at boot ("IO-APIC + timer doesn't work"); skip that check.
    for n in &mut spec.nodes {
        if !n.kernel_args.iter().any(|a| a == "no_timer_check") {
            n.kernel_args.push("no_timer_check".to_owned());
        }
    }
    std::fs::create_dir_all(work_dir).map_err(|e| ClusterError::io(work_dir, e))?;
    let hook = work_dir.join("rc.local");
    std::fs::write(&hook, boot_hook(layout)).map_err(|e| ClusterError::io(&hook, e))?;
    spec.image.files.retain(|f| f.dst != HOOK_PATH);
    spec.image.files.push(vm_lab::spec::ExtraFile {
        src: hook,
        dst: HOOK_PATH.to_owned(),
        mode: Some(0o755),
    });
    Ok(())
}

/// The cluster's members are the lab's nodes; hostnames are the node names.
pub fn cluster_spec(lab: &LabSpec) -> ClusterSpec {
    ClusterSpec {
        name: lab.name.clone(),
        nodes: lab
            .nodes
            .iter()
            .map(|n| NodeIdentity {
                name: n.name.clone(),
                hostname: n.name.clone(),
                address: std::net::IpAddr::V4(n.address.ip),
            })
            .collect(),
        ports: Ports::default(),
    }
}

fn lab_err(e: vm_lab::Error) -> ClusterError {
    ClusterError::Lab(e.to_string())
}

/// The SSH invocation vm-lab offers for a node (system `ssh` in the lab's namespace, lab key).
pub fn ssh_target(lab: &Lab, node: &vm_lab::Node) -> SshTarget {
    SshTarget::from_command(node.name(), &node.ssh_command(&[]), lab.ssh_key())
}

/// A cluster being brought up on a lab.
pub struct Bringup {
    pub lab: Lab,
    pub cluster: ClusterSpec,
    pub layout: GuestLayout,
    pub tls: Option<ClusterTls>,
    pub staged: Option<StagedCluster>,
    pub configs: Vec<NodeConfig>,
    pub shells: Vec<SshShell>,
    pub provision: ProvisionOptions,
    /// Wall time of each step, for the benchmark and the logs.
    pub timings: BTreeMap<String, Duration>,
    work: PathBuf,
    _work_guard: tempfile::TempDir,
}

impl std::fmt::Debug for Bringup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bringup")
            .field("lab", &self.lab)
            .field("cluster", &self.cluster.name)
            .field("staged", &self.staged.as_ref().map(|s| s.root.clone()))
            .finish()
    }
}

impl Bringup {
    /// S1: the lab's VMs up on their multicast L2, netbooted from the image with the cluster's
    /// packages and boot hook.
    #[tracing::instrument(name = "lab up (S1)", skip_all, err(Display), fields(lab = %spec.name, nodes = spec.nodes.len()))]
    pub async fn start_lab(mut spec: LabSpec, opts: LabOptions) -> Result<Self, ClusterError> {
        let t = Instant::now();
        let layout = GuestLayout::default();
        let guard = tempfile::Builder::new()
            .prefix("cluster-")
            .tempdir()
            .map_err(|e| ClusterError::io(std::env::temp_dir(), e))?;
        let work = guard.path().to_owned();
        prepare_lab_spec(&mut spec, &layout, &work.join("image"))?;
        let cluster = cluster_spec(&spec);
        cluster.check()?;
        let lab = Lab::up_with(spec, opts).await.map_err(lab_err)?;
        let shells = lab
            .nodes()
            .iter()
            .map(|n| SshShell::new(ssh_target(&lab, n)))
            .collect();
        let mut timings = BTreeMap::new();
        timings.insert("s1_lab_up".to_owned(), t.elapsed());
        Ok(Self {
            lab,
            cluster,
            layout,
            tls: None,
            staged: None,
            configs: Vec::new(),
            shells,
            provision: ProvisionOptions::default(),
            timings,
            work,
            _work_guard: guard,
        })
    }

    /// Forgets S3–S6 (certificates, staged configs, timings) so the same booted lab can host
    /// another bring-up attempt. Only sound while no node's disk was written.
    pub fn reset_cluster_state(&mut self) -> Result<(), ClusterError> {
        self.tls = None;
        self.staged = None;
        self.configs.clear();
        self.timings.retain(|k, _| k == "s1_lab_up");
        let staged = self.work.join("staged");
        if staged.exists() {
            std::fs::remove_dir_all(&staged).map_err(|e| ClusterError::io(&staged, e))?;
        }
        Ok(())
    }

    pub fn work_dir(&self) -> &Path {
        &self.work
    }

    pub fn shell(&self, node: &str) -> Result<&SshShell, ClusterError> {
        self.shells
            .iter()
            .find(|s| s.node() == node)
            .ok_or_else(|| ClusterError::Spec(format!("no node named {node} in the lab")))
    }

    /// S2: every node answers over SSH with the lab's baked-in key, as itself.
    #[tracing::instrument(name = "SSH check (S2)", skip_all, err(Display))]
    pub async fn check_ssh(&mut self) -> Result<(), ClusterError> {
        let t = Instant::now();
        provision::check_hostnames(&self.shells, Duration::from_secs(60)).await?;
        self.timings.insert("s2_ssh".into(), t.elapsed());
        Ok(())
    }

    /// S3: the CA and node certificates.
    #[tracing::instrument(name = "certificates (S3)", skip_all, err(Display))]
    pub fn make_certificates(&mut self) -> Result<(), ClusterError> {
        let t = Instant::now();
        self.tls = Some(tls::generate(&self.cluster)?);
        self.timings.insert("s3_tls".into(), t.elapsed());
        Ok(())
    }

    /// S4: stage configs, hosts mappings and secrets, then check every node's.
    #[tracing::instrument(name = "configs (S4)", skip_all, err(Display))]
    pub fn stage_configs(&mut self, opts: StageOptions) -> Result<(), ClusterError> {
        let t = Instant::now();
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| ClusterError::Tls("S3 has not made certificates yet".into()))?;
        let (staged, configs) = provision::stage_with_boot_scripts(
            &self.cluster,
            &self.layout,
            tls,
            &self.work.join("staged"),
            opts,
            self.provision.timing,
        )?;
        self.staged = Some(staged);
        self.configs = configs;
        self.timings.insert("s4_configs".into(), t.elapsed());
        Ok(())
    }

    /// The S4 check on its own (a step that changes a staged file runs it again).
    pub fn check_configs(&mut self) -> Result<(), ClusterError> {
        let staged = self.staged()?;
        let cfgs = config::check_all(staged)?;
        self.configs = cfgs;
        Ok(())
    }

    pub fn staged(&self) -> Result<&StagedCluster, ClusterError> {
        self.staged
            .as_ref()
            .ok_or_else(|| ClusterError::Spec("S4 has not staged the node configs yet".into()))
    }

    /// S5: provision every node over SSH (in parallel), then restart each from the same
    /// netboot image with its disk attached and wait for its first boot to start the service.
    #[tracing::instrument(name = "provision over SSH (S5)", skip_all, err(Display))]
    pub async fn provision_over_ssh(&mut self) -> Result<(), ClusterError> {
        let t = Instant::now();
        let staged = self.staged()?.clone();
        let opts = self.provision.clone();
        let jobs = self
            .shells
            .iter()
            .map(|s| provision::provision_node(&staged, s, &opts));
        let mut cfgs = Vec::new();
        for r in futures::future::join_all(jobs).await {
            cfgs.push(r?);
        }
        self.configs = cfgs;
        self.timings.insert("s5_install".into(), t.elapsed());
        self.restart_all().await?;
        self.timings.insert("s5_provision".into(), t.elapsed());
        Ok(())
    }

    /// S5 by the user's own command (see [`external`]): the harness restarts the nodes after it.
    #[tracing::instrument(name = "provision by command (S5)", skip_all, err(Display))]
    pub async fn provision_with_command(&mut self, cmd: &str) -> Result<(), ClusterError> {
        let t = Instant::now();
        let staged = self.staged()?.clone();
        let targets: Vec<(SshTarget, String)> = self
            .shells
            .iter()
            .map(|s| {
                let addr = self
                    .cluster
                    .node(s.node())
                    .map(|n| n.address.to_string())
                    .unwrap_or_default();
                (s.target.clone(), addr)
            })
            .collect();
        let ctx = ExternalContext::new(&self.cluster.name, &targets, &staged.root, &self.layout);
        external::run(cmd, &ctx, Duration::from_secs(600)).await?;
        self.configs = config::check_all(&staged)?;
        self.restart_all().await?;
        self.timings.insert("s5_provision".into(), t.elapsed());
        Ok(())
    }

    /// Restart every node from its netboot image with its disk attached, in parallel, and wait
    /// until each one's first-boot script reports the service started.
    pub async fn restart_all(&self) -> Result<(), ClusterError> {
        let names: Vec<String> = self.cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let jobs = names.iter().map(|n| self.restart(n));
        for r in futures::future::join_all(jobs).await {
            r?;
        }
        Ok(())
    }

    /// Restart one node (power cycle, same image, same disk) and wait for its service to start.
    #[tracing::instrument(name = "restart", skip_all, err(Display), fields(node = node))]
    pub async fn restart(&self, node: &str) -> Result<(), ClusterError> {
        let n = self.lab.node(node).map_err(lab_err)?;
        n.restart().await.map_err(lab_err)?;
        self.wait_service_started(node).await
    }

    /// Waits until the node's boot hook reports the service started on this boot (or fails).
    /// vm-lab's init runs the hook before it prints `VMLAB-READY`, and the first-boot script
    /// reports before it returns: a node ready without a report has no first-boot script that
    /// ran (no disk labelled [`DISK_LABEL`], or no executable script on it), which fails at once
    /// rather than after the whole boot timeout.
    #[tracing::instrument(name = "wait for the service", skip_all, err(Display), fields(node = node))]
    pub async fn wait_service_started(&self, node: &str) -> Result<(), ClusterError> {
        let n = self.lab.node(node).map_err(lab_err)?;
        let ready = async {
            n.wait_for_serial(vm_lab::qemu_args::READY_MARKER, n.timeouts().boot)
                .await?;
            // The console is one stream; a short grace only guards against a slow flush.
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, vm_lab::Error>(())
        };
        tokio::select! {
            biased;
            r = self.wait_reported(node) => r,
            r = ready => {
                let log = n.serial_log();
                let this_boot = log.rsplit("VMLAB-INIT").next().unwrap_or("");
                let reported = [BOOT_MARKER, BOOT_FAILED_MARKER].iter().any(|m| this_boot.contains(m));
                if r.is_ok() && !reported {
                    return Err(ClusterError::Remote {
                        node: node.to_owned(),
                        step: "first boot from disk".into(),
                        code: 0,
                        detail: format!(
                            "the node booted (VMLAB-READY) and no first-boot script reported: \
                             no disk labelled {DISK_LABEL}, or no executable {} on it",
                            self.layout.boot_script()
                        ),
                    });
                }
                // Reported, or the wait itself failed: the report (or its timeout) says which.
                self.wait_reported(node).await
            }
        }
    }

    /// The first-boot script's report on this boot: started, or failed with its reason.
    async fn wait_reported(&self, node: &str) -> Result<(), ClusterError> {
        let n = self.lab.node(node).map_err(lab_err)?;
        let timeout = n.timeouts().boot;
        let ok = n.wait_for_serial(BOOT_MARKER, timeout);
        let failed = n.wait_for_serial(BOOT_FAILED_MARKER, timeout);
        tokio::select! {
            r = ok => r.map_err(|e| ClusterError::Remote {
                node: node.to_owned(),
                step: "first boot from disk".into(),
                code: 0,
                detail: e.to_string(),
            }),
            r = failed => {
                let detail = if r.is_ok() {
                    n.serial_log()
                        .lines()
                        .rev()
                        .find(|l| l.contains(BOOT_FAILED_MARKER))
                        .unwrap_or(BOOT_FAILED_MARKER)
                        .to_owned()
                } else {
                    "boot did not report".to_owned()
                };
                Err(ClusterError::Remote {
                    node: node.to_owned(),
                    step: "first boot from disk".into(),
                    code: 1,
                    detail,
                })
            }
        }
    }

    /// The nodes with their configs, for the S6 checks.
    pub fn members(&self) -> Vec<Node<'_, SshShell>> {
        quorum::members(&self.shells, &self.configs)
    }

    pub fn member(&self, node: &str) -> Result<Node<'_, SshShell>, ClusterError> {
        quorum::member(&self.shells, &self.configs, node)
    }

    /// S6 (first part): `expected` members started, at least `answering` of them answer and
    /// agree on one leader, within `timeout`. Only the nodes in `via` are asked (all when empty).
    #[tracing::instrument(name = "quorum wait (S6)", skip_all, err(Display), fields(expected = expected, answering = answering))]
    pub async fn wait_for_quorum(
        &mut self,
        via: &[&str],
        expected: usize,
        answering: usize,
        timeout: Duration,
    ) -> Result<Quorum, ClusterError> {
        let t = Instant::now();
        let members: Vec<_> = self
            .members()
            .into_iter()
            .filter(|m| via.is_empty() || via.contains(&m.cfg.node_id.as_str()))
            .collect();
        let q =
            quorum::wait_for_quorum(&members, &self.layout, expected, answering, timeout).await?;
        let e = t.elapsed();
        self.timings.insert("s6_quorum".into(), e);
        Ok(q)
    }
}
