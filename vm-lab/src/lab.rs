//! A lab: the namespace, the nodes, their run directory and the state file the CLI reads.
//! Dropping a `Lab` kills its QEMUs and the namespace; the run directory is removed unless
//! keep-on-failure applies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::accel::{self, Accel};
use crate::error::{Error, Result};
use crate::image::{self, Image, ImageRequest};
use crate::machine::{self, LabCtx, Node, Timeouts};
use crate::namespace::Namespace;
use crate::qemu_args::{self, Boot, NodeArgs, NodePaths};
use crate::spec::{AccelChoice, BootMode, LabSpec, McastLink, NodeSpec};

/// Run directories of the labs this process owns, for [`remove_run_dirs_on_sigterm`].
static LIVE_RUN_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// On SIGTERM, remove the run directory of every lab this process owns and exit with status
/// 143. Without it a SIGTERM ends the process before any `Lab` is dropped: the QEMUs still die
/// with the lab's namespace, but the run directories (disks, snapshot images) stay behind.
/// Opt-in, because it replaces the default action of SIGTERM for the whole process; call it once
/// from inside a tokio runtime (test runners, drivers without their own signal handling).
pub fn remove_run_dirs_on_sigterm() -> Result<()> {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::Lab(format!("cannot listen for SIGTERM: {e}")))?;
    let _ = INSTALLED.set(());
    tokio::spawn(async move {
        if term.recv().await.is_some() {
            let dirs: Vec<PathBuf> = LIVE_RUN_DIRS
                .lock()
                .map(|mut g| g.drain(..).collect())
                .unwrap_or_default();
            for d in dirs {
                let _ = std::fs::remove_dir_all(&d);
            }
            // The namespaces' pipes close with the process, and the kernel kills the QEMUs.
            std::process::exit(143);
        }
    });
    Ok(())
}

/// Adds `dir` to what [`remove_run_dirs_on_sigterm`] removes (or, with `live` false, takes it
/// off): a runner's own temporary directories beside its labs (keys, a fake's state).
pub fn remove_on_sigterm(dir: &Path, live: bool) {
    track_run_dir(dir, live);
}

fn track_run_dir(dir: &Path, live: bool) {
    if let Ok(mut g) = LIVE_RUN_DIRS.lock() {
        g.retain(|d| d != dir);
        if live {
            g.push(dir.to_path_buf());
        }
    }
}

/// Options that are not part of the spec.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// Parent of the lab's run directory (default: [`default_run_root`]).
    pub run_root: Option<PathBuf>,
    /// Image and probe cache (default: [`image::default_cache_dir`]).
    pub cache_dir: Option<PathBuf>,
    /// Overrides the spec's `accel`.
    pub accel: Option<AccelChoice>,
    /// Keep the run directory (logs, disks) when the lab is dropped during a panic or after a
    /// failed `up`.
    pub keep_on_failure: bool,
    /// Overrides the default timeouts (already scaled for the accelerator).
    pub timeouts: Option<Timeouts>,
}

/// `$VM_LAB_RUN`, else `$XDG_RUNTIME_DIR/vm-lab`, else `/tmp/vm-lab-<uid>`.
pub fn default_run_root() -> PathBuf {
    if let Some(p) = std::env::var_os("VM_LAB_RUN") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(p).join("vm-lab");
    }
    PathBuf::from(format!("/tmp/vm-lab-{}", nix::unistd::getuid()))
}

/// What `lab.json` in the run directory records, for the CLI and for humans.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// The lab's name, from its spec.
    pub name: String,
    /// The run directory this file is in: node directories, logs, sockets, disks.
    pub run_dir: PathBuf,
    /// The process that owns the lab (the test, or `vm-lab supervise`).
    pub driver_pid: u32,
    /// Host PID of the `unshare` process holding the lab's namespaces.
    pub holder_pid: u32,
    /// Host PID of the namespace's init; `nsenter --target` takes it to enter the lab.
    pub ns_init_pid: u32,
    /// The accelerator the nodes run under.
    pub accel: Accel,
    /// The lab's L2 segment.
    pub mcast: McastLink,
    /// Private key every node accepts for root over SSH.
    pub ssh_key: PathBuf,
    /// The netboot kernel the nodes boot, in the image cache.
    pub kernel: PathBuf,
    /// The netboot initramfs the nodes boot, in the image cache.
    pub initrd: PathBuf,
    /// One entry per node, in spec order.
    pub nodes: Vec<NodeState>,
}

/// One node as `lab.json` records it: enough for another process (the CLI) to attach to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeState {
    /// The node's name.
    pub name: String,
    /// Its lab address with prefix, e.g. `192.168.100.11/24`.
    pub address: String,
    /// Its lab NIC's MAC, e.g. `52:54:00:00:00:11`.
    pub mac: String,
    /// How it boots.
    pub boot: BootMode,
    /// Port on `127.0.0.1` inside the lab's namespace that forwards to the guest's SSH port.
    pub ssh_port: u16,
    /// The node's directory in the run directory (QMP and agent sockets, serial log, argv, disk).
    pub dir: PathBuf,
    /// The node's full spec (absent in state files of older versions).
    #[serde(default)]
    pub spec: Option<NodeSpec>,
}

impl LabState {
    /// A handle on one of this running lab's nodes, from its `lab.json`.
    pub fn attach(&self, node: &NodeState) -> Result<Node> {
        let lab = self;
        let paths = NodePaths::new(&node.dir);
        let text = std::fs::read_to_string(&paths.argv).map_err(|e| Error::io(&paths.argv, e))?;
        let line: Vec<String> = serde_json::from_str(&text)
            .map_err(|e| Error::Lab(format!("{}: {e}", paths.argv.display())))?;
        let argv = line.into_iter().skip(1).collect();
        let spec = match &node.spec {
            Some(s) => s.clone(),
            None => NodeSpec {
                name: node.name.clone(),
                vcpus: crate::spec::DEFAULT_VCPUS,
                memory_mib: crate::spec::DEFAULT_MEMORY_MIB,
                disk_gib: 0,
                mac: node.mac.parse()?,
                address: node.address.parse()?,
                boot: node.boot,
                kernel_args: Vec::new(),
                clock_offset_s: 0,
            },
        };
        let ctx = Arc::new(LabCtx {
            name: lab.name.clone(),
            accel: lab.accel,
            timeouts: Timeouts::for_accel(lab.accel),
            ns_init_pid: lab.ns_init_pid,
            ssh_key: lab.ssh_key.clone(),
        });
        Ok(Node::attached(spec, paths, argv, node.ssh_port, ctx))
    }

    /// Read `lab.json` from a run directory. Fails when the file is missing or not a lab state.
    pub fn load(run_dir: &Path) -> Result<LabState> {
        let p = run_dir.join("lab.json");
        let text = std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
        serde_json::from_str(&text).map_err(|e| Error::Lab(format!("{}: {e}", p.display())))
    }

    /// The entry of the node named `name`; [`Error::NoSuchNode`] when there is none.
    pub fn node(&self, name: &str) -> Result<&NodeState> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| Error::NoSuchNode(name.to_string()))
    }
}

/// A running lab: the namespace, the netboot image and the nodes. Dropping it kills every QEMU
/// and the namespace and removes the run directory (kept when it failed and
/// [`LabOptions::keep_on_failure`] is set); [`Lab::down`] does the same explicitly.
pub struct Lab {
    spec: LabSpec,
    run_dir: PathBuf,
    ctx: Arc<LabCtx>,
    nodes: Vec<Node>,
    ns: Namespace,
    image: Image,
    link: McastLink,
    keep_on_failure: bool,
    failed: bool,
    down: bool,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("name", &self.spec.name)
            .field("run_dir", &self.run_dir)
            .field("accel", &self.ctx.accel)
            .finish()
    }
}

impl Lab {
    /// Build the image, start every node and wait until all are ready (boot marker + agent).
    pub async fn up(spec: LabSpec) -> Result<Lab> {
        Lab::up_with(spec, LabOptions::default()).await
    }

    /// [`Lab::up`] with options that are not part of the spec (run and cache directories, an
    /// accelerator override, timeouts). On a failed wait the lab is marked failed and dropped.
    pub async fn up_with(spec: LabSpec, opts: LabOptions) -> Result<Lab> {
        let mut lab = Lab::start(spec, opts).await?;
        if let Err(e) = lab.wait_ready().await {
            lab.failed = true;
            return Err(e);
        }
        Ok(lab)
    }

    /// Like [`Lab::up`] but returns as soon as every QEMU runs.
    pub async fn start(spec: LabSpec, opts: LabOptions) -> Result<Lab> {
        spec.validate()?;
        let t0 = Instant::now();
        let cache = opts
            .cache_dir
            .clone()
            .unwrap_or_else(image::default_cache_dir);
        std::fs::create_dir_all(&cache).map_err(|e| Error::io(&cache, e))?;
        let ssh_key = ensure_ssh_key(&cache).await?;
        let pubkey_path = ssh_key.with_extension("pub");
        let pubkey =
            std::fs::read_to_string(&pubkey_path).map_err(|e| Error::io(&pubkey_path, e))?;
        let req = ImageRequest {
            spec: spec.image.clone(),
            base_dir: spec.base_dir.clone(),
            ssh_pubkey: pubkey,
        };
        let cache2 = cache.clone();
        let image = tokio::task::spawn_blocking(move || image::build(&cache2, &req))
            .await
            .map_err(|e| Error::Image(format!("builder task: {e}")))??;
        let choice = opts.accel.unwrap_or(spec.accel);
        let t_image = t0.elapsed();
        let accel = accel::resolve(choice, &image.kernel, &cache).await?;
        tracing::debug!(
            "image ready after {t_image:.2?}, accel after {:.2?}",
            t0.elapsed()
        );

        let nonce = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        let root = opts.run_root.clone().unwrap_or_else(default_run_root);
        let run_dir = root.join(format!("{}-{nonce}", spec.name));
        std::fs::create_dir_all(&run_dir).map_err(|e| Error::io(&run_dir, e))?;
        track_run_dir(&run_dir, true);
        // Until the Lab owns the run dir, an early error must not leave it behind.
        let mut dir_guard = RunDirGuard {
            path: Some(run_dir.clone()),
            keep: opts.keep_on_failure,
        };
        let link = spec.mcast_link(&nonce);
        let ns = tokio::task::spawn_blocking(Namespace::create)
            .await
            .map_err(|e| Error::Lab(format!("namespace task: {e}")))??;
        let ctx = Arc::new(LabCtx {
            name: spec.name.clone(),
            accel,
            timeouts: opts.timeouts.unwrap_or_else(|| Timeouts::for_accel(accel)),
            ns_init_pid: ns.init_pid(),
            ssh_key: ssh_key.clone(),
        });

        let hosts = spec.hosts();
        let mut nodes = Vec::new();
        for (i, n) in spec.nodes.iter().enumerate() {
            let paths = NodePaths::new(&run_dir.join(&n.name));
            std::fs::create_dir_all(&paths.dir).map_err(|e| Error::io(&paths.dir, e))?;
            if n.disk_gib > 0 {
                create_qcow2(&paths.disk, &format!("{}G", n.disk_gib)).await?;
            }
            // Only snapshot metadata and memory images land here; the size is nominal.
            create_qcow2(&paths.state, "1M").await?;
            let cmdline = qemu_args::kernel_cmdline(n, &hosts)?;
            let boot = match n.boot {
                BootMode::Direct => Boot::Direct {
                    kernel: image.kernel.clone(),
                    initrd: image.initrd.clone(),
                    cmdline,
                },
                BootMode::Pxe => pxe_boot(&run_dir, &image, &n.name, &cmdline)?,
            };
            let ssh_port = machine::ssh_port_for(i);
            let argv = qemu_args::node_argv(&NodeArgs {
                lab: &spec.name,
                node: n,
                accel,
                paths: &paths,
                link,
                ssh_port,
                boot,
                with_disk: n.disk_gib > 0,
            })?;
            let line = serde_json::to_string_pretty(&machine::program_line(&argv))
                .map_err(|e| Error::Lab(e.to_string()))?;
            std::fs::write(&paths.argv, line).map_err(|e| Error::io(&paths.argv, e))?;
            nodes.push(Node::new(n.clone(), paths, argv, ssh_port, ctx.clone()));
        }
        dir_guard.path = None;
        let mut lab = Lab {
            spec,
            run_dir,
            ctx,
            nodes,
            ns,
            image,
            link,
            keep_on_failure: opts.keep_on_failure,
            failed: false,
            down: false,
        };
        lab.write_state()?;
        tracing::info!(
            "lab {} in {}: {} node(s), accel {}, L2 {}:{} via {}",
            lab.spec.name,
            lab.run_dir.display(),
            lab.nodes.len(),
            accel.name(),
            link.group,
            link.port,
            link.localaddr
        );
        for node in &lab.nodes {
            if let Err(e) = node.start().await {
                lab.failed = true;
                return Err(e);
            }
        }
        tracing::debug!("all QEMUs started after {:.2?}", t0.elapsed());
        Ok(lab)
    }

    fn write_state(&self) -> Result<()> {
        let state = LabState {
            name: self.spec.name.clone(),
            run_dir: self.run_dir.clone(),
            driver_pid: std::process::id(),
            holder_pid: self.ns.holder_pid(),
            ns_init_pid: self.ns.init_pid(),
            accel: self.ctx.accel,
            mcast: self.link,
            ssh_key: self.ctx.ssh_key.clone(),
            kernel: self.image.kernel.clone(),
            initrd: self.image.initrd.clone(),
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeState {
                    name: n.name().to_string(),
                    address: n.spec().address.to_string(),
                    mac: n.spec().mac.to_string(),
                    boot: n.spec().boot,
                    ssh_port: n.ssh_port(),
                    dir: n.paths().dir.clone(),
                    spec: Some(n.spec().clone()),
                })
                .collect(),
        };
        let p = self.run_dir.join("lab.json");
        let text = serde_json::to_string_pretty(&state).map_err(|e| Error::Lab(e.to_string()))?;
        std::fs::write(&p, text).map_err(|e| Error::io(&p, e))
    }

    /// Wait until every node is ready, in parallel; the first failure is returned.
    pub async fn wait_ready(&self) -> Result<()> {
        let results = futures::future::join_all(self.nodes.iter().map(|n| n.wait_ready())).await;
        results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
    }

    /// The node named `name`; [`Error::NoSuchNode`] when the lab has none.
    pub fn node(&self, name: &str) -> Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.name() == name)
            .ok_or_else(|| Error::NoSuchNode(name.to_string()))
    }

    /// Every node, in spec order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The lab's name, from its spec.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The validated spec the lab was started from.
    pub fn spec(&self) -> &LabSpec {
        &self.spec
    }

    /// The lab's run directory: `<run root>/<name>-<nonce>`.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The accelerator the nodes run under, as resolved at start.
    pub fn accel(&self) -> Accel {
        self.ctx.accel
    }

    /// The lab's L2 segment (group, port and local address).
    pub fn mcast_link(&self) -> McastLink {
        self.link
    }

    /// The netboot image the nodes boot.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// Host PID of the namespace init: `nsenter --target PID --user --net` enters the lab.
    pub fn ns_init_pid(&self) -> u32 {
        self.ns.init_pid()
    }

    /// Private key whose public half every node accepts for root.
    pub fn ssh_key(&self) -> &Path {
        &self.ctx.ssh_key
    }

    /// Mark the lab failed, so keep-on-failure keeps its run directory.
    pub fn mark_failed(&mut self) {
        self.failed = true;
    }

    /// Wait until every node reaches every other node's lab address (ping), or `timeout`.
    pub async fn wait_full_mesh(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        for a in &self.nodes {
            for b in &self.nodes {
                if a.name() == b.name() {
                    continue;
                }
                let left = timeout
                    .saturating_sub(start.elapsed())
                    .max(Duration::from_secs(1));
                a.wait_until_succeeds(&format!("ping -c1 -W1 {}", b.ip()), left)
                    .await?;
            }
        }
        Ok(())
    }

    /// Stop every node and the namespace; remove the run directory.
    pub async fn down(mut self) -> Result<()> {
        for n in &self.nodes {
            n.kill().await?;
        }
        self.teardown(false);
        Ok(())
    }

    // Prints, not logs, where a kept lab is: a failing test must say so even when no
    // tracing subscriber is installed.
    #[allow(clippy::print_stderr)]
    fn teardown(&mut self, keep: bool) {
        if self.down {
            return;
        }
        self.down = true;
        track_run_dir(&self.run_dir, false);
        for n in &self.nodes {
            n.kill_now();
        }
        self.ns.shutdown();
        if keep {
            eprintln!(
                "vm-lab: keeping {} for inspection (serial.log, qemu.stderr, qmp-events.jsonl per node)",
                self.run_dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.run_dir);
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let keep = self.keep_on_failure && (self.failed || std::thread::panicking());
        self.teardown(keep);
    }
}

/// Removes a run directory on drop unless disarmed (`path = None`) or asked to keep it.
struct RunDirGuard {
    path: Option<PathBuf>,
    keep: bool,
}

impl Drop for RunDirGuard {
    // Prints where a kept run dir is, as `Lab::teardown` does.
    #[allow(clippy::print_stderr)]
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            track_run_dir(&p, false);
            if self.keep {
                eprintln!("vm-lab: keeping {} after a failed start", p.display());
            } else {
                let _ = std::fs::remove_dir_all(p);
            }
        }
    }
}

async fn create_qcow2(path: &Path, size: &str) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let out = tokio::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(path)
        .arg(size)
        .output()
        .await
        .map_err(|e| Error::tool("qemu-img", format!("cannot run (install qemu-utils): {e}")))?;
    if !out.status.success() {
        return Err(Error::tool(
            "qemu-img",
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

/// Lay out the TFTP directory: the image's kernel and initrd plus one iPXE script per node.
fn pxe_boot(run_dir: &Path, image: &Image, node: &str, cmdline: &str) -> Result<Boot> {
    let dir = run_dir.join("tftp");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    for (name, src) in [("vmlinuz", &image.kernel), ("initrd.img", &image.initrd)] {
        let dst = dir.join(name);
        if !dst.exists() {
            std::os::unix::fs::symlink(src, &dst).map_err(|e| Error::io(&dst, e))?;
        }
    }
    let bootfile = format!("{node}.ipxe");
    let script = dir.join(&bootfile);
    std::fs::write(
        &script,
        qemu_args::ipxe_script("vmlinuz", "initrd.img", cmdline),
    )
    .map_err(|e| Error::io(&script, e))?;
    Ok(Boot::Pxe {
        tftp_dir: dir,
        bootfile,
    })
}

/// The lab SSH key (ed25519, made once per cache with the system `ssh-keygen`).
pub async fn ensure_ssh_key(cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("ssh");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let key = dir.join("id_ed25519");
    let dir2 = dir.clone();
    let key2 = key.clone();
    tokio::task::spawn_blocking(move || -> Result<()> {
        let _lock = image::lock(&dir2.join("key.lock"))?;
        if key2.exists() && key2.with_extension("pub").exists() {
            return Ok(());
        }
        let _ = std::fs::remove_file(&key2);
        let out = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "vm-lab", "-f"])
            .arg(&key2)
            .output()
            .map_err(|e| {
                Error::tool(
                    "ssh-keygen",
                    format!("cannot run (install openssh-client): {e}"),
                )
            })?;
        if !out.status.success() {
            return Err(Error::tool(
                "ssh-keygen",
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(())
    })
    .await
    .map_err(|e| Error::Lab(format!("ssh-keygen task: {e}")))??;
    Ok(key)
}
