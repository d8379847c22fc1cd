//! The cluster on guests a deployer made through the PVE API (the whole stack): the same S2–S6
//! as on a vm-lab lab, but each guest is reached over SSH at the address PVE reported (a VM's
//! guest agent, a container's `interfaces`), the cluster's files go onto a VM's persistent disk
//! ([`Onto::CloudImage`]) or a container's root file system ([`Onto::ContainerRoot`]), and every
//! restart, stop and start goes through the PVE API (`POST …/{qemu|lxc}/{vmid}/status/…`), never
//! around it. What a boot did is read from the guest's console when the target offers one (a
//! lab-backed fake does), otherwise from the node over SSH.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{self, NodeConfig, StageOptions, StagedCluster};
use super::console::{BootMarkers, BootReport, read_from, wait_boot_report, wait_console};
pub use super::console::{CONSOLE_MILESTONES, ConsoleMark, ConsoleWatch, Milestone};
use super::error::ClusterError;
use super::etcd::{self, sh_quote};
use super::provision::{self, Onto, PER_BOOT_SCRIPT, ProvisionOptions, RC_LOCAL};
use super::quorum::{self, Node, Quorum};
use super::tls::{self, ClusterTls};
use super::topology::{ClusterSpec, GuestLayout, NodeIdentity, Ports};
use super::transport::{NodeShell, SshShell, SshTarget};

/// Which kind of PVE guest a member runs in: PVE's API family, `qemu` or `lxc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuestFamily {
    /// A QEMU VM booting the project's cloud image.
    #[default]
    Qemu,
    /// A Linux container made from vm-lab's container template.
    Lxc,
}

impl GuestFamily {
    /// PVE's path segment: `qemu` or `lxc`.
    pub fn api(self) -> &'static str {
        match self {
            GuestFamily::Qemu => "qemu",
            GuestFamily::Lxc => "lxc",
        }
    }

    /// What its boots print on the console.
    pub fn markers(self) -> &'static BootMarkers {
        match self {
            GuestFamily::Qemu => &super::console::CLOUD_IMAGE,
            GuestFamily::Lxc => &super::console::CONTAINER,
        }
    }

    /// How a step names it: `VM` or `container`.
    pub fn noun(self) -> &'static str {
        match self {
            GuestFamily::Qemu => "VM",
            GuestFamily::Lxc => "container",
        }
    }
}

/// One guest of the cluster (a VM or a container), as the deployer made it and the target lets
/// the harness reach it.
#[derive(Debug, Clone)]
pub struct StackVm {
    /// The guest's name (also its hostname and its member name).
    pub name: String,
    /// The PVE node it runs on.
    pub node: String,
    pub vmid: u32,
    /// A VM or a container.
    pub family: GuestFamily,
    /// The address PVE reported for it (a VM's guest agent, a container's `interfaces`).
    pub address: IpAddr,
    /// How to reach its SSH server.
    pub ssh: SshTarget,
    /// Its serial console on this host, when the target offers it.
    pub serial_log: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct StackOptions {
    /// How long a boot may take until the service reports started.
    pub boot_timeout: Duration,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            boot_timeout: Duration::from_secs(300),
        }
    }
}

/// How the cluster's guests are powered: `verb` (`reboot`, `stop`, `start`) on guest `vmid` of
/// `family` on PVE node `node`, done when the guest has done it (a PVE client posts
/// `…/{qemu|lxc}/{vmid}/status/{verb}` and awaits the task). The provisioner never reaches around
/// the API; the deployer's client implements this where the two are joined (`rehearse_stack`),
/// so neither product imports the other.
pub trait VmPower: Send + Sync {
    fn power<'a>(
        &'a self,
        node: &'a str,
        family: GuestFamily,
        vmid: u32,
        verb: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;
}

/// A cluster being brought up on the deployer's VMs.
pub struct StackCluster {
    pve: Arc<dyn VmPower>,
    pub vms: Vec<StackVm>,
    pub cluster: ClusterSpec,
    pub layout: GuestLayout,
    pub tls: Option<ClusterTls>,
    pub staged: Option<StagedCluster>,
    pub configs: Vec<NodeConfig>,
    pub shells: Vec<SshShell>,
    pub provision: ProvisionOptions,
    pub options: StackOptions,
    /// Wall time of each step.
    pub timings: BTreeMap<String, Duration>,
    steps: StepLog,
    work: tempfile::TempDir,
}

/// The row of the cluster-wide steps (certificates, configs, quorum) in [`StackCluster::steps`].
pub const CLUSTER_ROW: &str = "cluster";

/// One step the harness took on one VM (or on the whole cluster, [`CLUSTER_ROW`]), as it saw it.
#[derive(Debug, Clone)]
pub struct StackStep {
    pub vm: String,
    pub step: String,
    pub start: Instant,
    pub end: Instant,
    /// The error, when the step failed.
    pub error: Option<String>,
}

/// The steps, recorded from the parallel per-VM jobs.
#[derive(Debug, Default)]
struct StepLog(std::sync::Mutex<Vec<StackStep>>);

impl StepLog {
    fn record<T>(&self, vm: &str, step: &str, start: Instant, r: &Result<T, ClusterError>) {
        let s = StackStep {
            vm: vm.to_owned(),
            step: step.to_owned(),
            start,
            end: Instant::now(),
            error: r.as_ref().err().map(ToString::to_string),
        };
        // A panic elsewhere leaves plain data behind; keep recording.
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    }

    fn all(&self) -> Vec<StackStep> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl std::fmt::Debug for StackCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackCluster")
            .field("cluster", &self.cluster.name)
            .field("vms", &self.vms)
            .finish()
    }
}

impl StackCluster {
    /// The cluster `name` on `vms`, powered through `pve` (a PVE API).
    pub fn new(
        name: &str,
        vms: Vec<StackVm>,
        pve: Arc<dyn VmPower>,
        options: StackOptions,
    ) -> Result<Self, ClusterError> {
        let cluster = ClusterSpec {
            name: name.to_owned(),
            nodes: vms
                .iter()
                .map(|v| NodeIdentity {
                    name: v.name.clone(),
                    hostname: v.name.clone(),
                    address: v.address,
                })
                .collect(),
            ports: Ports::default(),
        };
        cluster.check()?;
        let work = tempfile::Builder::new()
            .prefix("stack-cluster-")
            .tempdir()
            .map_err(|e| ClusterError::io(std::env::temp_dir(), e))?;
        let shells = vms.iter().map(|v| SshShell::new(v.ssh.clone())).collect();
        Ok(Self {
            pve,
            vms,
            cluster,
            layout: GuestLayout::default(),
            tls: None,
            staged: None,
            configs: Vec::new(),
            shells,
            provision: ProvisionOptions {
                onto: Onto::cloud_image(),
                ..ProvisionOptions::default()
            },
            options,
            timings: BTreeMap::new(),
            steps: StepLog::default(),
            work,
        })
    }

    pub fn work_dir(&self) -> &Path {
        self.work.path()
    }

    pub fn vm(&self, name: &str) -> Result<&StackVm, ClusterError> {
        self.vms
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| ClusterError::Spec(format!("no VM named {name} in the cluster")))
    }

    pub fn shell(&self, name: &str) -> Result<&SshShell, ClusterError> {
        self.shells
            .iter()
            .find(|s| s.node() == name)
            .ok_or_else(|| ClusterError::Spec(format!("no VM named {name} in the cluster")))
    }

    /// S2: every VM answers over SSH as itself, once its boot is done (the agent, and so the
    /// deployer, sees the address before the SSH server runs). A VM that does not answer is
    /// named with what its console says it applied (addresses, users).
    #[tracing::instrument(name = "SSH check (S2)", skip_all, err(Display))]
    pub async fn check_ssh(&mut self) -> Result<(), ClusterError> {
        let t = Instant::now();
        let boot_timeout = self.options.boot_timeout;
        let steps = &self.steps;
        let checks = self
            .vms
            .iter()
            .zip(&self.shells)
            .map(|(vm, shell)| async move {
                let start = Instant::now();
                let r = async {
                    if let Some(log) = &vm.serial_log {
                        wait_console(&vm.name, log, vm.family.markers(), boot_timeout).await?;
                    }
                    provision::check_hostnames(std::slice::from_ref(shell), Duration::from_secs(60))
                        .await
                        .map_err(|e| with_console(vm, e))
                }
                .await;
                steps.record(&vm.name, "SSH up (as itself)", start, &r);
                r
            });
        for r in futures::future::join_all(checks).await {
            r?;
        }
        self.timings.insert("s2_ssh".into(), t.elapsed());
        Ok(())
    }

    /// S3: the CA and node certificates.
    #[tracing::instrument(name = "certificates (S3)", skip_all, err(Display))]
    pub fn make_certificates(&mut self) -> Result<(), ClusterError> {
        let t = Instant::now();
        let r = tls::generate(&self.cluster);
        self.steps.record(CLUSTER_ROW, "CA and certificates", t, &r);
        self.tls = Some(r?);
        self.timings.insert("s3_tls".into(), t.elapsed());
        Ok(())
    }

    /// S4: configs, hosts mappings, secrets and first-boot scripts, staged and checked.
    #[tracing::instrument(name = "configs (S4)", skip_all, err(Display))]
    pub fn stage_configs(&mut self, opts: StageOptions) -> Result<(), ClusterError> {
        let t = Instant::now();
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| ClusterError::Tls("S3 has not made certificates yet".into()))?;
        let r = provision::stage_with_boot_scripts(
            &self.cluster,
            &self.layout,
            tls,
            &self.work.path().join("staged"),
            opts,
            self.provision.timing,
        );
        self.steps
            .record(CLUSTER_ROW, "configs and hosts mapping", t, &r);
        let (staged, configs) = r?;
        self.staged = Some(staged);
        self.configs = configs;
        self.timings.insert("s4_configs".into(), t.elapsed());
        Ok(())
    }

    pub fn staged(&self) -> Result<&StagedCluster, ClusterError> {
        self.staged
            .as_ref()
            .ok_or_else(|| ClusterError::Spec("S4 has not staged the node configs yet".into()))
    }

    /// S5: install every node's files onto its disk over SSH (in parallel), then reboot every
    /// VM through the PVE API and wait until each one's per-boot script started the service.
    #[tracing::instrument(name = "provision over SSH (S5)", skip_all, err(Display))]
    pub async fn provision_over_ssh(&mut self) -> Result<(), ClusterError> {
        let t = Instant::now();
        self.install(None).await?;
        self.timings.insert("s5_install".into(), t.elapsed());
        self.reboot_all().await?;
        self.timings.insert("s5_provision".into(), t.elapsed());
        Ok(())
    }

    /// Installs the staged files onto every VM (or only `only`), without restarting it.
    #[tracing::instrument(name = "install", skip_all, err(Display), fields(only = only.unwrap_or("all")))]
    pub async fn install(&mut self, only: Option<&str>) -> Result<(), ClusterError> {
        let staged = self.staged()?.clone();
        let jobs = self
            .vms
            .iter()
            .zip(&self.shells)
            .filter(|(_, s)| only.is_none_or(|n| n == s.node()))
            .map(|(vm, s)| {
                let (staged, opts, steps) = (&staged, self.provision_for(vm), &self.steps);
                async move {
                    let start = Instant::now();
                    let r = provision::provision_node(staged, s, &opts).await;
                    steps.record(s.node(), "install over SSH", start, &r);
                    r
                }
            });
        let mut cfgs = Vec::new();
        for r in futures::future::join_all(jobs).await {
            cfgs.push(r?);
        }
        for cfg in cfgs {
            self.configs.retain(|c| c.node_id != cfg.node_id);
            self.configs.push(cfg);
        }
        Ok(())
    }

    /// Reboots every VM through the API (in parallel) and waits for each service to start.
    pub async fn reboot_all(&self) -> Result<(), ClusterError> {
        let jobs = self.vms.iter().map(|v| self.reboot(&v.name));
        for r in futures::future::join_all(jobs).await {
            r?;
        }
        Ok(())
    }

    /// `POST …/status/reboot`, then the service's report on the boot that follows.
    #[tracing::instrument(name = "reboot", skip_all, err(Display), fields(node = name))]
    pub async fn reboot(&self, name: &str) -> Result<(), ClusterError> {
        let start = Instant::now();
        let r = async {
            let mark = self.console_mark(name)?;
            self.power(name, "reboot").await?;
            self.wait_service_started(name, mark).await
        }
        .await;
        self.steps
            .record(name, "reboot (PVE API) until etcd started", start, &r);
        r
    }

    /// `POST …/status/stop` (a hard stop, as PVE's stop is).
    #[tracing::instrument(name = "stop", skip_all, err(Display), fields(node = name))]
    pub async fn stop(&self, name: &str) -> Result<(), ClusterError> {
        let start = Instant::now();
        let r = self.power(name, "stop").await;
        self.steps.record(name, "stop (PVE API)", start, &r);
        r
    }

    /// `POST …/status/start`, then the service's report on that boot.
    #[tracing::instrument(name = "start", skip_all, err(Display), fields(node = name))]
    pub async fn start(&self, name: &str) -> Result<(), ClusterError> {
        let start = Instant::now();
        let r = async {
            let mark = self.console_mark(name)?;
            self.power(name, "start").await?;
            self.wait_service_started(name, mark).await
        }
        .await;
        self.steps
            .record(name, "start (PVE API) until etcd started", start, &r);
        r
    }

    /// How `vm` is provisioned: [`StackCluster::provision`], with a container's files on its
    /// root file system.
    pub fn provision_for(&self, vm: &StackVm) -> ProvisionOptions {
        let mut opts = self.provision.clone();
        if vm.family == GuestFamily::Lxc {
            opts.onto = Onto::ContainerRoot;
        }
        opts
    }

    /// Every step the harness took on each VM so far, in the order they ended.
    pub fn steps(&self) -> Vec<StackStep> {
        self.steps.all()
    }

    /// A power verb through the PVE API, awaited as a task.
    async fn power(&self, name: &str, verb: &str) -> Result<(), ClusterError> {
        let vm = self.vm(name)?;
        self.pve
            .power(&vm.node, vm.family, vm.vmid, verb)
            .await
            .map_err(|detail| ClusterError::Remote {
                node: name.to_owned(),
                step: format!("{verb} of the {} through the PVE API", vm.family.noun()),
                code: 0,
                detail,
            })
    }

    /// Where the VM's console log ends now (so a wait reads only what a later boot printed).
    fn console_mark(&self, name: &str) -> Result<ConsoleMark, ClusterError> {
        Ok(match &self.vm(name)?.serial_log {
            Some(p) => ConsoleMark::of(p),
            None => ConsoleMark::default(),
        })
    }

    /// Waits until the boot after `mark` reported the service started (or why it did not).
    #[tracing::instrument(name = "wait for the service", skip_all, err(Display), fields(node = name))]
    pub async fn wait_service_started(
        &self,
        name: &str,
        mark: ConsoleMark,
    ) -> Result<(), ClusterError> {
        let vm = self.vm(name)?;
        let Some(log) = &vm.serial_log else {
            return self.wait_service_over_ssh(name).await;
        };
        let fail = |detail: String| ClusterError::Remote {
            node: name.to_owned(),
            step: "boot".into(),
            code: 1,
            detail,
        };
        let report = wait_boot_report(
            name,
            log,
            mark,
            vm.family.markers(),
            self.options.boot_timeout,
        )
        .await?;
        match (report, vm.family) {
            (BootReport::Started, _) => Ok(()),
            (BootReport::Booted { errors }, _) if !errors.is_empty() => {
                Err(fail(errors.join(" | ")))
            }
            (BootReport::Booted { .. }, GuestFamily::Qemu) => Err(fail(format!(
                "the VM booted and no first-boot script reported: no {PER_BOOT_SCRIPT} on its disk"
            ))),
            (BootReport::Booted { .. }, GuestFamily::Lxc) => Err(fail(format!(
                "the container booted and no boot hook reported: no {RC_LOCAL} on its root file system"
            ))),
        }
    }

    /// Without a console: the node answers over SSH and runs etcd.
    async fn wait_service_over_ssh(&self, name: &str) -> Result<(), ClusterError> {
        let shell = self.shell(name)?;
        quorum::wait_until(
            &format!("{name}: etcd running after boot"),
            self.options.boot_timeout,
            || async {
                shell
                    .run("pidof etcd", Duration::from_secs(20))
                    .await?
                    .check(name, "etcd running after boot")
                    .map(|_| ())
            },
        )
        .await
    }

    /// The nodes with their configs, for the S6 checks.
    pub fn members(&self) -> Vec<Node<'_, SshShell>> {
        quorum::members(&self.shells, &self.configs)
    }

    pub fn member(&self, name: &str) -> Result<Node<'_, SshShell>, ClusterError> {
        quorum::member(&self.shells, &self.configs, name)
    }

    /// S6: `expected` members started, at least `answering` of them answer and agree on one
    /// leader. Only the VMs in `via` are asked (all when empty).
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
        let r = quorum::wait_for_quorum(&members, &self.layout, expected, answering, timeout).await;
        self.steps.record(CLUSTER_ROW, "quorum", t, &r);
        let q = r?;
        self.timings.insert("s6_quorum".into(), t.elapsed());
        Ok(q)
    }

    /// Day 2: `name`'s VM came back with an empty disk (destroyed and re-created by the
    /// deployer). Through a surviving member its old member is removed and added anew (etcd's
    /// runtime reconfiguration: a member with an empty data directory must not rejoin under its
    /// old identity), its config is staged again with `initial-cluster-state=existing`, its files
    /// are installed, and it is rebooted through the PVE API to start from them.
    #[tracing::instrument(name = "replace member", skip_all, err(Display), fields(node = name))]
    pub async fn replace_member(&mut self, name: &str) -> Result<(), ClusterError> {
        let t = Instant::now();
        let layout = self.layout.clone();
        let cfg = self
            .configs
            .iter()
            .find(|c| c.node_id == name)
            .cloned()
            .ok_or_else(|| ClusterError::Spec(format!("{name} is not a provisioned member")))?;
        let peer_url = format!("https://{}:{}", cfg.hostname, cfg.ports.peer);
        let survivor = self
            .members()
            .into_iter()
            .find(|m| m.cfg.node_id != name)
            .ok_or_else(|| ClusterError::Spec(format!("no member besides {name}")))?;
        let ctl = |args: &str| etcd::etcdctl(survivor.cfg, &layout, args);
        let via = survivor.cfg.node_id.clone();
        let timeout = Duration::from_secs(60);
        let listed = survivor
            .shell
            .run(&ctl("member list -w json"), timeout)
            .await?
            .check(&via, "etcdctl member list")?;
        let members = etcd::parse_member_list(&listed.stdout)?;
        if let Some(old) = members
            .iter()
            .find(|m| m.name == name || m.peer_urls.contains(&peer_url))
        {
            survivor
                .shell
                .run(&ctl(&format!("member remove {:x}", old.id)), timeout)
                .await?
                .check(&via, &format!("etcdctl member remove ({name})"))?;
        }
        survivor
            .shell
            .run(
                &ctl(&format!(
                    "member add {} --peer-urls={}",
                    sh_quote(name),
                    sh_quote(&peer_url)
                )),
                timeout,
            )
            .await?
            .check(&via, &format!("etcdctl member add ({name})"))?;
        let staged = self.staged()?;
        let path = staged.node_dir(name).join(config::CONFIG_FILE);
        let joining = NodeConfig {
            bootstrap: false,
            ..cfg
        };
        let body = serde_json::to_string_pretty(&joining)
            .map_err(|e| ClusterError::Spec(format!("{name}'s config: {e}")))?;
        std::fs::write(&path, body).map_err(|e| ClusterError::io(&path, e))?;
        self.install(Some(name)).await?;
        self.reboot(name).await?;
        self.timings.insert(format!("replace_{name}"), t.elapsed());
        Ok(())
    }

    /// Replaces a VM (re-created by the deployer: new VMID, maybe a new address) and its shell.
    pub fn replace_vm(&mut self, vm: StackVm) -> Result<(), ClusterError> {
        let i = self
            .vms
            .iter()
            .position(|v| v.name == vm.name)
            .ok_or_else(|| ClusterError::Spec(format!("no VM named {} in the cluster", vm.name)))?;
        if vm.address != self.vms[i].address {
            return Err(ClusterError::Spec(format!(
                "{} came back at {} instead of {}: its peers' configs name the old address",
                vm.name, vm.address, self.vms[i].address
            )));
        }
        self.shells[i] = SshShell::new(vm.ssh.clone());
        self.vms[i] = vm;
        Ok(())
    }
}

/// `e` with what the guest's console says its last boot applied (the ready line's hostname,
/// users and addresses) or why it failed, when there is a console.
fn with_console(vm: &StackVm, e: ClusterError) -> ClusterError {
    let Some(log) = &vm.serial_log else { return e };
    let text = read_from(log, 0);
    let markers = vm.family.markers();
    let said = match text.lines().rev().find(|l| l.contains(markers.ready)) {
        Some(line) => {
            let applied: Vec<&str> = line
                .split_whitespace()
                .filter(|w| {
                    ["host=", "hostname=", "users=", "addrs=", "cloudinit="]
                        .iter()
                        .any(|k| w.starts_with(k))
                })
                .collect();
            format!("its console says it applied {}", applied.join(" "))
        }
        None => {
            let errors = super::console::error_lines(&text, markers);
            if errors.is_empty() {
                return e;
            }
            format!("its console says {}", errors.join(" | "))
        }
    };
    ClusterError::Remote {
        node: vm.name.clone(),
        step: "SSH".into(),
        code: 0,
        detail: format!("{e}; {said}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn guest(family: GuestFamily, console: &str) -> (tempfile::TempDir, StackVm) {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("console.log");
        std::fs::write(&log, console).unwrap();
        let vm = StackVm {
            name: "node03".into(),
            node: "pve-01".into(),
            vmid: 102,
            family,
            address: "192.168.100.13".parse().unwrap(),
            ssh: SshTarget {
                node: "node03".into(),
                base: vec!["ssh".into()],
                key: d.path().join("key"),
            },
            serial_log: Some(log),
        };
        (d, vm)
    }

    fn refused() -> ClusterError {
        ClusterError::Remote {
            node: "node03".into(),
            step: "hostname over SSH".into(),
            code: 255,
            detail: "Connection timed out".into(),
        }
    }

    #[test]
    fn an_unreachable_guest_is_named_with_what_its_console_says() {
        let (_d, ct) = guest(
            GuestFamily::Lxc,
            "CT-INIT\nCT-READY hostname=node03 addrs=192.168.100.13/30\n",
        );
        let e = with_console(&ct, refused()).to_string();
        assert!(
            e.contains("node03") && e.contains("applied hostname=node03 addrs=192.168.100.13/30"),
            "{e}"
        );
        let (_d, ct) = guest(
            GuestFamily::Lxc,
            "CT-INIT\nCT-ERROR: eth0: cannot route via gateway 192.168.100.254\n",
        );
        let e = with_console(&ct, refused()).to_string();
        assert!(e.contains("says CT-ERROR: eth0: cannot route"), "{e}");
        // A VM's console is read with the cloud image's lines, not the container's.
        let (_d, vm) = guest(
            GuestFamily::Qemu,
            "CLOUDIMG-READY host=node03 users=root addrs=eth0=192.168.100.13/24\n",
        );
        let e = with_console(&vm, refused()).to_string();
        assert!(e.contains("applied host=node03 users=root addrs="), "{e}");
        let (_d, vm) = guest(GuestFamily::Qemu, "CT-READY hostname=x\n");
        assert_eq!(
            with_console(&vm, refused()).to_string(),
            refused().to_string()
        );
    }
}
