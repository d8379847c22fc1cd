//! The cluster on VMs a deployer made through the PVE API (the whole stack): the same S2–S6 as
//! on a vm-lab lab, but each VM is reached over SSH at the address its guest agent reported, the
//! cluster's files go onto the cloud image's persistent disk ([`Onto::CloudImage`]), and every
//! restart, stop and start goes through the PVE API (`POST …/status/reboot|stop|start`), never
//! around it. What a boot did is read from the VM's serial console when the target offers one
//! (a lab-backed fake does), otherwise from the node over SSH.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{self, NodeConfig, StageOptions, StagedCluster};
use super::error::ClusterError;
use super::etcd::{self, sh_quote};
use super::provision::{
    self, BOOT_FAILED_MARKER, BOOT_MARKER, Onto, PER_BOOT_SCRIPT, ProvisionOptions,
};
use super::quorum::{self, Node, Quorum};
use super::tls::{self, ClusterTls};
use super::topology::{ClusterSpec, GuestLayout, NodeIdentity, Ports};
use super::transport::{NodeShell, SshShell, SshTarget, last_lines};

/// What the project's cloud image prints once a boot is done (its per-boot scripts ran).
const CLOUD_READY: &str = "CLOUDIMG-READY";
/// The prefix of the cloud image's cloud-init failures.
const CLOUD_ERROR: &str = "CLOUDINIT-ERROR:";

/// One VM of the cluster, as the deployer made it and the target lets the harness reach it.
#[derive(Debug, Clone)]
pub struct StackVm {
    /// The VM's name (also its hostname and its member name).
    pub name: String,
    /// The PVE node it runs on.
    pub node: String,
    pub vmid: u32,
    /// The address its guest agent reported.
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

/// How the cluster's VMs are powered: `verb` (`reboot`, `stop`, `start`) on VM `vmid` of PVE
/// node `node`, done when the VM has done it (a PVE client posts `…/status/{verb}` and awaits
/// the task). The provisioner never reaches around the API; the deployer's client implements
/// this where the two are joined (`rehearse_stack`), so neither product imports the other.
pub trait VmPower: Send + Sync {
    fn power<'a>(
        &'a self,
        node: &'a str,
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
                        wait_console(&vm.name, log, CLOUD_READY, boot_timeout).await?;
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
        let opts = self.provision.clone();
        let jobs = self
            .shells
            .iter()
            .filter(|s| only.is_none_or(|n| n == s.node()))
            .map(|s| {
                let (staged, opts, steps) = (&staged, &opts, &self.steps);
                async move {
                    let start = Instant::now();
                    let r = provision::provision_node(staged, s, opts).await;
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

    /// Every step the harness took on each VM so far, in the order they ended.
    pub fn steps(&self) -> Vec<StackStep> {
        self.steps.all()
    }

    /// A power verb through the PVE API, awaited as a task.
    async fn power(&self, name: &str, verb: &str) -> Result<(), ClusterError> {
        let vm = self.vm(name)?;
        self.pve
            .power(&vm.node, vm.vmid, verb)
            .await
            .map_err(|detail| ClusterError::Remote {
                node: name.to_owned(),
                step: format!("{verb} through the PVE API"),
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
        match &vm.serial_log {
            Some(log) => wait_console_report(name, log, mark, self.options.boot_timeout).await,
            None => self.wait_service_over_ssh(name).await,
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

/// Waits until the console shows `marker` (from its start).
async fn wait_console(
    name: &str,
    log: &Path,
    marker: &str,
    timeout: Duration,
) -> Result<(), ClusterError> {
    let start = Instant::now();
    loop {
        let text = read_from(log, 0);
        if text.contains(marker) {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(ClusterError::Remote {
                node: name.to_owned(),
                step: "boot".into(),
                code: 1,
                detail: format!(
                    "no {marker} on its console within {} s; it ends: {}",
                    timeout.as_secs(),
                    last_lines(&text, 6)
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `e` with what the VM's console says its last boot applied (the cloud image's ready line:
/// hostname, users, addresses), when there is a console.
fn with_console(vm: &StackVm, e: ClusterError) -> ClusterError {
    let Some(log) = &vm.serial_log else { return e };
    let text = read_from(log, 0);
    let Some(line) = text.lines().rev().find(|l| l.contains(CLOUD_READY)) else {
        return e;
    };
    let applied: Vec<&str> = line
        .split_whitespace()
        .filter(|w| {
            ["host=", "users=", "addrs=", "cloudinit="]
                .iter()
                .any(|k| w.starts_with(k))
        })
        .collect();
    ClusterError::Remote {
        node: vm.name.clone(),
        step: "SSH".into(),
        code: 0,
        detail: format!("{e}; its console says it applied {}", applied.join(" ")),
    }
}

/// A guest-side milestone: when the harness first saw it on a VM's console, and since when the
/// VM had been on its way to it (the previous milestone of the same boot, or the moment the
/// boot's console appeared).
#[derive(Debug, Clone)]
pub struct Milestone {
    pub vm: String,
    pub what: &'static str,
    pub since: Instant,
    pub at: Instant,
}

/// What each boot prints on the project's cloud image, in order, and what it means.
pub const CONSOLE_MILESTONES: [(&str, &str); 4] = [
    ("CLOUDIMG-INIT", "booted (init runs)"),
    (CLOUD_READY, "cloud-init applied, SSH up"),
    (BOOT_MARKER, "etcd started"),
    (provision::HEALTHY_MARKER, "etcd healthy"),
];

/// Which consoles a [`ConsoleWatch`] reads.
enum Consoles {
    /// These VMs' logs.
    Of(Vec<(String, PathBuf)>),
    /// Every `*/*/serial.log` under a lab backend's run root (`<host>/<node>-<vmid>/`), named by
    /// their guest directory (`pve-01-100`), as the guests appear.
    Under(PathBuf),
}

impl Consoles {
    fn list(&self) -> Vec<(String, PathBuf)> {
        match self {
            Consoles::Of(v) => v.clone(),
            Consoles::Under(root) => std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|host| {
                    std::fs::read_dir(host.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                })
                .map(|g| {
                    (
                        g.file_name().to_string_lossy().into_owned(),
                        g.path().join("serial.log"),
                    )
                })
                .filter(|(_, p)| p.is_file())
                .collect(),
        }
    }
}

/// Watches consoles in the background and timestamps every milestone of every boot
/// ([`CONSOLE_MILESTONES`]) as it appears, to put the guest's side on the same time axis as the
/// API's. Resolution: its poll interval (200 ms); what was there when it started is stamped then.
pub struct ConsoleWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: tokio::task::JoinHandle<Vec<Milestone>>,
}

/// What the watch knows of one console: the file of the current boot, when it appeared, the
/// occurrences of each marker seen, and the last milestone's time.
struct Seen {
    mark: ConsoleMark,
    counts: [usize; 4],
    last: Instant,
}

impl ConsoleWatch {
    /// Watches these VMs' consoles.
    pub fn start(vms: &[StackVm]) -> Self {
        Self::spawn(Consoles::Of(
            vms.iter()
                .filter_map(|v| v.serial_log.clone().map(|p| (v.name.clone(), p)))
                .collect(),
        ))
    }

    /// Watches every guest a lab backend runs under `root` (its state directory's `lab/`),
    /// from before the guests exist: milestones are named by guest directory (`<node>-<vmid>`).
    pub fn start_under(root: PathBuf) -> Self {
        Self::spawn(Consoles::Under(root))
    }

    fn spawn(consoles: Consoles) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = tokio::spawn(async move {
            let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
            let mut out = Vec::new();
            loop {
                let done = flag.load(std::sync::atomic::Ordering::Relaxed);
                for (vm, log) in consoles.list() {
                    let mark = ConsoleMark::of(&log);
                    let text = read_from(&log, 0);
                    let now = Instant::now();
                    let entry = seen.entry(vm.clone()).or_insert(Seen {
                        mark,
                        counts: [0; 4],
                        last: now,
                    });
                    if entry.mark.inode != mark.inode || entry.mark.born != mark.born {
                        *entry = Seen {
                            mark,
                            counts: [0; 4],
                            last: now,
                        };
                    }
                    for (i, (marker, what)) in CONSOLE_MILESTONES.iter().enumerate() {
                        let n = text.matches(marker).count();
                        for _ in entry.counts[i]..n {
                            out.push(Milestone {
                                vm: vm.clone(),
                                what,
                                since: entry.last,
                                at: now,
                            });
                            entry.last = now;
                        }
                        entry.counts[i] = entry.counts[i].max(n);
                    }
                }
                if done {
                    return out;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { stop, handle }
    }

    /// Stops watching (after one last look) and returns the milestones in the order seen.
    pub async fn finish(self) -> Vec<Milestone> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.await.unwrap_or_default()
    }
}

/// A place in a console log: the file (its inode and birth time, which tell a file made anew
/// even when the inode number is reused) and its length then. A guest's next QEMU may write a new
/// file (the lab backend makes a guest's run directory anew on every start), whose text all
/// counts as later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsoleMark {
    inode: u64,
    born: Option<std::time::SystemTime>,
    len: u64,
}

impl ConsoleMark {
    pub fn of(log: &Path) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(log)
            .map(|m| Self {
                inode: m.ino(),
                born: m.created().ok(),
                len: m.len(),
            })
            .unwrap_or_default()
    }

    /// Where in `log`, as it is now, the text after this mark begins.
    fn offset_in(self, log: &Path) -> u64 {
        let now = Self::of(log);
        if now.inode == self.inode && now.born == self.born && now.len >= self.len {
            self.len
        } else {
            0
        }
    }
}

/// What a boot printed after `mark`: the first-boot script's report, a failure, or a boot that
/// finished without either (no per-boot script on the disk).
async fn wait_console_report(
    name: &str,
    log: &Path,
    mark: ConsoleMark,
    timeout: Duration,
) -> Result<(), ClusterError> {
    let start = Instant::now();
    let fail = |detail: String| ClusterError::Remote {
        node: name.to_owned(),
        step: "boot".into(),
        code: 1,
        detail,
    };
    loop {
        let text = read_from(log, mark.offset_in(log));
        if text.contains(BOOT_MARKER) {
            return Ok(());
        }
        if let Some(l) = text.lines().find(|l| l.contains(BOOT_FAILED_MARKER)) {
            return Err(fail(l.trim().to_owned()));
        }
        if text.contains(CLOUD_READY) {
            // The image runs its per-boot scripts before it reports ready.
            let errors: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(CLOUD_ERROR))
                .map(str::trim)
                .collect();
            return Err(fail(if errors.is_empty() {
                format!(
                    "the VM booted and no first-boot script reported: no {PER_BOOT_SCRIPT} \
                     on its disk"
                )
            } else {
                errors.join(" | ")
            }));
        }
        if start.elapsed() >= timeout {
            return Err(fail(format!(
                "no report within {} s; its console ends: {}",
                timeout.as_secs(),
                last_lines(&text, 6)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The console log from byte `mark` on (empty when it cannot be read).
fn read_from(log: &Path, mark: u64) -> String {
    let bytes = std::fs::read(log).unwrap_or_default();
    let from = usize::try_from(mark).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn log_with(text: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("serial.log");
        std::fs::write(&p, text).unwrap();
        (d, p)
    }

    #[tokio::test]
    async fn a_boot_report_counts_only_after_the_mark() {
        let before = format!("{BOOT_MARKER} (pid 1)\n");
        let (_d, p) = log_with(&before);
        let mark = ConsoleMark::of(&p);
        std::fs::write(&p, format!("{before}{CLOUD_READY} host=node01\n")).unwrap();
        let err = wait_console_report("node01", &p, mark, Duration::from_secs(1))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no first-boot script reported"), "{err}");
        wait_console_report("node01", &p, ConsoleMark::default(), Duration::from_secs(1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_console_made_anew_by_the_next_boot_counts_from_its_start() {
        let (d, p) = log_with(&"SeaBIOS and a long first boot\n".repeat(50));
        let mark = ConsoleMark::of(&p);
        // The next QEMU writes a new, shorter file at the same path.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(
            d.path().join("serial.log"),
            format!("{BOOT_MARKER} (pid 7)\n"),
        )
        .unwrap();
        wait_console_report("node01", &p, mark, Duration::from_secs(1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_console_watch_stamps_each_boot_s_milestones_as_they_appear() {
        let (d, p) = log_with("CLOUDIMG-INIT\n");
        let vm = StackVm {
            name: "node01".into(),
            node: "pve-01".into(),
            vmid: 100,
            address: "192.168.100.11".parse().unwrap(),
            ssh: SshTarget {
                node: "node01".into(),
                base: vec!["ssh".into()],
                key: d.path().join("key"),
            },
            serial_log: Some(p.clone()),
        };
        let watch = ConsoleWatch::start(std::slice::from_ref(&vm));
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::write(
            &p,
            format!("CLOUDIMG-INIT\n{CLOUD_READY} host=node01\n{BOOT_MARKER} (pid 9)\n"),
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The next boot writes a new file: its init counts again.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "CLOUDIMG-INIT\n").unwrap();
        let seen: Vec<&str> = watch.finish().await.iter().map(|m| m.what).collect();
        assert_eq!(
            seen,
            [
                "booted (init runs)",
                "cloud-init applied, SSH up",
                "etcd started",
                "booted (init runs)"
            ]
        );
    }

    #[tokio::test]
    async fn a_failed_boot_names_its_cause() {
        let (_d, p) = log_with(&format!(
            "cloudimg: per-boot\n{BOOT_FAILED_MARKER}: /cluster/secrets/ca.crt is missing\n"
        ));
        let err = wait_console_report("node02", &p, ConsoleMark::default(), Duration::from_secs(1))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node02") && err.contains("ca.crt is missing"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_silent_console_times_out_with_its_tail() {
        let (_d, p) = log_with("SeaBIOS\nBooting from Hard Disk...\n");
        let err = wait_console_report(
            "node03",
            &p,
            ConsoleMark::default(),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("Booting from Hard Disk"), "{err}");
    }
}
