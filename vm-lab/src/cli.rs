//! The `vm-lab` command line: `up` starts a supervisor process that owns the lab (its
//! namespace and QEMUs) and outlives the command; `status`, `ssh`, `exec`, `logs`, `fault` and
//! `down` find the lab through `lab.json` in its run directory.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use vm_lab::lab::{LabState, default_run_root};
use vm_lab::machine::ssh_argv;
use vm_lab::namespace::alive;
use vm_lab::qemu_args::LAN_NIC_ID;
use vm_lab::{AccelChoice, Lab, LabOptions, LabSpec};

#[derive(Parser)]
#[command(
    name = "vm-lab",
    version,
    about = "Rootless QEMU labs: N nodes on a private multicast L2"
)]
struct Cli {
    /// Parent directory of lab run directories [default: $VM_LAB_RUN, $XDG_RUNTIME_DIR/vm-lab or /tmp/vm-lab-UID]
    #[arg(long, global = true, env = "VM_LAB_RUN")]
    run_root: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a lab from a spec; returns once every node is ready, the lab keeps running.
    Up {
        spec: PathBuf,
        #[command(flatten)]
        opts: UpOpts,
        /// Run the lab in this process until Ctrl-C instead of a background supervisor.
        #[arg(long)]
        foreground: bool,
    },
    /// (internal) The process that owns a lab started by `up`.
    #[command(hide = true)]
    Supervise {
        spec: PathBuf,
        #[command(flatten)]
        opts: UpOpts,
    },
    /// List labs and their nodes.
    Status {
        #[arg(long)]
        lab: Option<String>,
    },
    /// SSH into a node (system ssh, the lab key); with a command, run it.
    Ssh {
        node: String,
        #[arg(long)]
        lab: Option<String>,
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Run a command in a node through the guest agent; exits with its status.
    Exec {
        node: String,
        #[arg(long)]
        lab: Option<String>,
        /// Seconds to wait for the command.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Print a node's logs.
    Logs {
        node: String,
        #[arg(long)]
        lab: Option<String>,
        /// serial, stderr, events or argv
        #[arg(long, default_value = "serial")]
        what: String,
        /// Only the last N lines.
        #[arg(short = 'n', long)]
        lines: Option<usize>,
    },
    /// Inject a fault: link-down, link-up, pause, resume, kill.
    Fault {
        node: String,
        fault: String,
        #[arg(long)]
        lab: Option<String>,
    },
    /// Stop a lab: its supervisor tears down every QEMU and the namespace.
    Down {
        #[arg(long)]
        lab: Option<String>,
    },
    /// Remove run directories of labs whose driver is gone (kept after failures or SIGKILL).
    Prune,
    /// Build (or find in the cache) the guest image and print its paths.
    Image {
        /// A spec whose `image:` section (extra packages/files) to use.
        #[arg(long)]
        spec: Option<PathBuf>,
    },
}

#[derive(clap::Args, Clone)]
struct UpOpts {
    /// auto (KVM after a probe, else TCG), kvm (fail if unusable) or tcg.
    #[arg(long)]
    accel: Option<String>,
    /// If the lab does not come up, keep it running (and its logs) for inspection.
    #[arg(long)]
    keep_on_failure: bool,
    /// Image/probe cache [default: $VM_LAB_CACHE, $XDG_CACHE_HOME/vm-lab or ~/.cache/vm-lab]
    #[arg(long, env = "VM_LAB_CACHE")]
    cache: Option<PathBuf>,
}

pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VM_LAB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let root = cli.run_root.clone().unwrap_or_else(default_run_root);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vm-lab: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.cmd, root)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vm-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd, root: PathBuf) -> Result<ExitCode> {
    match cmd {
        Cmd::Up {
            spec,
            opts,
            foreground,
        } => {
            if foreground {
                supervise(&spec, &opts, &root, false).await
            } else {
                up(&spec, &opts, &root)
            }
        }
        Cmd::Supervise { spec, opts } => supervise(&spec, &opts, &root, true).await,
        Cmd::Status { lab } => status(&root, lab.as_deref()).await,
        Cmd::Ssh { node, lab, command } => ssh(&root, lab.as_deref(), &node, &command),
        Cmd::Exec {
            node,
            lab,
            timeout,
            command,
        } => {
            exec(
                &root,
                lab.as_deref(),
                &node,
                &command.join(" "),
                Duration::from_secs(timeout),
            )
            .await
        }
        Cmd::Logs {
            node,
            lab,
            what,
            lines,
        } => logs(&root, lab.as_deref(), &node, &what, lines),
        Cmd::Fault { node, fault, lab } => inject_fault(&root, lab.as_deref(), &node, &fault).await,
        Cmd::Down { lab } => down(&root, lab.as_deref()),
        Cmd::Prune => prune(&root),
        Cmd::Image { spec } => image(spec.as_deref()).await,
    }
}

fn lab_options(opts: &UpOpts, root: &Path) -> Result<LabOptions> {
    Ok(LabOptions {
        run_root: Some(root.to_path_buf()),
        cache_dir: opts.cache.clone(),
        accel: opts
            .accel
            .as_deref()
            .map(str::parse::<AccelChoice>)
            .transpose()?,
        keep_on_failure: opts.keep_on_failure,
        timeouts: None,
    })
}

/// Start `vm-lab supervise` in its own process group and wait for its READY/FAILED line.
fn up(spec_path: &Path, opts: &UpOpts, root: &Path) -> Result<ExitCode> {
    let spec = LabSpec::from_file(spec_path)?;
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let log = root.join(format!("{}.supervisor.log", spec.name));
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let exe = std::env::current_exe().context("locating the vm-lab binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--run-root")
        .arg(root)
        .arg("supervise")
        .arg(spec_path);
    if let Some(a) = &opts.accel {
        cmd.args(["--accel", a]);
    }
    if opts.keep_on_failure {
        cmd.arg("--keep-on-failure");
    }
    if let Some(c) = &opts.cache {
        cmd.arg("--cache").arg(c);
    }
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .context("starting the lab supervisor")?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no supervisor stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let line = line.trim();
    if let Some(dir) = line.strip_prefix("READY ") {
        let state = LabState::load(Path::new(dir))?;
        println!(
            "lab {} is up (accel {}, supervisor pid {}, run dir {})",
            state.name,
            state.accel.name(),
            state.driver_pid,
            dir
        );
        for n in &state.nodes {
            println!(
                "  {:<10} {:<18} {}  ({:?} boot)",
                n.name, n.address, n.mac, n.boot
            );
        }
        println!(
            "next: vm-lab ssh {0} | vm-lab exec {0} -- hostname | vm-lab down",
            state.nodes[0].name
        );
        Ok(ExitCode::SUCCESS)
    } else {
        let detail = line.strip_prefix("FAILED ").unwrap_or(line);
        eprintln!("vm-lab: the lab did not come up: {detail}");
        eprintln!("supervisor log: {}", log.display());
        if !opts.keep_on_failure {
            let _ = child.wait();
        }
        Ok(ExitCode::FAILURE)
    }
}

/// Own a lab until SIGTERM/SIGINT/SIGHUP (or, in the foreground, Ctrl-C).
async fn supervise(spec_path: &Path, opts: &UpOpts, root: &Path, report: bool) -> Result<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let say = |line: String| {
        if report {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{}", line.replace('\n', " | "));
            let _ = out.flush();
        }
    };
    let spec = match LabSpec::from_file(spec_path) {
        Ok(s) => s,
        Err(e) => {
            say(format!("FAILED {e}"));
            return Err(e.into());
        }
    };
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let lab_opts = lab_options(opts, root)?;
    let mut lab = match Lab::start(spec, lab_opts).await {
        Ok(l) => l,
        Err(e) => {
            say(format!("FAILED {e}"));
            return Err(e.into());
        }
    };
    let ready = tokio::select! {
        r = lab.wait_ready() => r,
        _ = term.recv() => Err(vm_lab::Error::Lab("stopped before ready".into())),
        _ = int.recv() => Err(vm_lab::Error::Lab("stopped before ready".into())),
    };
    let code = match ready {
        Ok(()) => {
            say(format!("READY {}", lab.run_dir().display()));
            if !report {
                println!(
                    "lab {} ready in {}; Ctrl-C to stop",
                    lab.name(),
                    lab.run_dir().display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{e}");
            lab.mark_failed();
            if opts.keep_on_failure {
                say(format!(
                    "FAILED {e} (kept running for inspection: vm-lab status/logs/exec/ssh, then vm-lab down)"
                ));
            } else {
                say(format!("FAILED {e}"));
                return Ok(ExitCode::FAILURE);
            }
            ExitCode::FAILURE
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
    tracing::info!("stopping lab {}", lab.name());
    lab.down().await?;
    Ok(code)
}

/// Labs under the run root, newest first.
fn labs(root: &Path) -> Vec<LabState> {
    let mut out: Vec<(std::time::SystemTime, LabState)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let s = LabState::load(&e.path()).ok()?;
            let t = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((t, s))
        })
        .collect();
    out.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
    out.into_iter().map(|(_, s)| s).collect()
}

fn find_lab(root: &Path, which: Option<&str>) -> Result<LabState> {
    let all = labs(root);
    let matching: Vec<LabState> = all
        .into_iter()
        .filter(|s| match which {
            Some(w) => {
                s.name == w
                    || s.run_dir.file_name().and_then(|f| f.to_str()) == Some(w)
                    || s.run_dir == Path::new(w)
            }
            None => alive(s.driver_pid),
        })
        .collect();
    match matching.len() {
        0 => bail!(
            "no {}lab found under {}",
            which
                .map(|w| format!("{w:?} "))
                .unwrap_or_else(|| "running ".into()),
            root.display()
        ),
        1 => Ok(matching
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("no lab"))?),
        _ => bail!(
            "several labs match; pick one with --lab: {}",
            matching
                .iter()
                .map(|s| s
                    .run_dir
                    .file_name()
                    .and_then(|f| f.to_str())
                    .unwrap_or("?")
                    .to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

async fn status(root: &Path, which: Option<&str>) -> Result<ExitCode> {
    let list = match which {
        Some(_) => vec![find_lab(root, which)?],
        None => labs(root),
    };
    if list.is_empty() {
        println!("no labs under {}", root.display());
    }
    for s in list {
        let state = if alive(s.driver_pid) {
            "running"
        } else {
            "stale (driver gone)"
        };
        println!(
            "lab {} [{}] accel {} L2 {}:{} via {} — {}",
            s.name,
            state,
            s.accel.name(),
            s.mcast.group,
            s.mcast.port,
            s.mcast.localaddr,
            s.run_dir.display()
        );
        for n in &s.nodes {
            let pid = std::fs::read_to_string(n.dir.join("pid"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            let run = match pid {
                Some(p) if alive(p) => {
                    match vm_lab::qmp::execute(
                        &n.dir.join("qmp-ctl.sock"),
                        qapi::qmp::query_status {},
                        Duration::from_secs(5),
                    )
                    .await
                    {
                        Ok(st) => serde_json::to_value(st.status)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_else(|| "?".into()),
                        Err(e) => format!("qmp: {e}"),
                    }
                }
                _ => "off".to_string(),
            };
            println!(
                "  {:<10} {:<18} {}  qemu {:<8} {}",
                n.name,
                n.address,
                n.mac,
                pid.map(|p| p.to_string()).unwrap_or("-".into()),
                run
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn ssh(root: &Path, which: Option<&str>, node: &str, command: &[String]) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let n = s.node(node)?;
    let remote: Vec<&str> = command.iter().map(String::as_str).collect();
    let mut argv = ssh_argv(s.ns_init_pid, &s.ssh_key, n.ssh_port, &remote);
    if remote.is_empty() {
        // Interactive: allocate a terminal (inserted before the destination).
        let pos = argv
            .iter()
            .position(|a| a == "root@127.0.0.1")
            .unwrap_or(argv.len());
        argv.insert(pos, "-t".into());
    }
    let err = std::process::Command::new("nsenter").args(&argv).exec();
    Err(anyhow!("cannot run nsenter/ssh: {err}"))
}

async fn exec(
    root: &Path,
    which: Option<&str>,
    node: &str,
    command: &str,
    timeout: Duration,
) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let n = s.node(node)?;
    let sock = n.dir.join("qga.sock");
    let start = Instant::now();
    let conn = loop {
        match vm_lab::qga::connect(&sock, vm_lab::qga::ATTEMPT_TIMEOUT).await {
            Ok(c) => break c,
            Err(e) if start.elapsed() > timeout => bail!("node {node}: guest agent: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    };
    match vm_lab::qga::exec(&conn, command, timeout)
        .await
        .map_err(|e| anyhow!("node {node}: {e}"))?
    {
        Some((code, out, err)) => {
            std::io::stdout().write_all(&out)?;
            std::io::stderr().write_all(&err)?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        None => bail!("node {node}: `{command}` did not finish within {timeout:?}"),
    }
}

fn logs(
    root: &Path,
    which: Option<&str>,
    node: &str,
    what: &str,
    lines: Option<usize>,
) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let n = s.node(node)?;
    let file = match what {
        "serial" => "serial.log",
        "stderr" => "qemu.stderr",
        "events" => "qmp-events.jsonl",
        "argv" => "argv.json",
        other => bail!("unknown log {other:?}: serial, stderr, events or argv"),
    };
    let path = n.dir.join(file);
    let text =
        String::from_utf8_lossy(&std::fs::read(&path).with_context(|| path.display().to_string())?)
            .into_owned();
    let all: Vec<&str> = text.lines().collect();
    let from = lines.map(|l| all.len().saturating_sub(l)).unwrap_or(0);
    for l in &all[from..] {
        println!("{l}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn inject_fault(
    root: &Path,
    which: Option<&str>,
    node: &str,
    fault: &str,
) -> Result<ExitCode> {
    use qapi::qmp;
    let s = find_lab(root, which)?;
    let n = s.node(node)?;
    let sock = n.dir.join("qmp-ctl.sock");
    let t = Duration::from_secs(10);
    let res = match fault {
        "link-down" => vm_lab::qmp::execute(
            &sock,
            qmp::set_link {
                name: LAN_NIC_ID.into(),
                up: false,
            },
            t,
        )
        .await
        .map(|_| ()),
        "link-up" => vm_lab::qmp::execute(
            &sock,
            qmp::set_link {
                name: LAN_NIC_ID.into(),
                up: true,
            },
            t,
        )
        .await
        .map(|_| ()),
        "pause" => vm_lab::qmp::execute(&sock, qmp::stop {}, t)
            .await
            .map(|_| ()),
        "resume" => vm_lab::qmp::execute(&sock, qmp::cont {}, t)
            .await
            .map(|_| ()),
        "kill" => vm_lab::qmp::execute(&sock, qmp::quit {}, t)
            .await
            .map(|_| ()),
        other => bail!("unknown fault {other:?}: link-down, link-up, pause, resume or kill"),
    };
    res.map_err(|e| anyhow!("node {node}: {e}"))?;
    println!("{node}: {fault}");
    Ok(ExitCode::SUCCESS)
}

fn down(root: &Path, which: Option<&str>) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(s.driver_pid)?);
    if alive(s.driver_pid) {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let start = Instant::now();
        while alive(s.driver_pid) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if alive(s.driver_pid) {
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)?;
        }
    }
    // The namespace dies with the supervisor; a stale run dir is removed here.
    if s.run_dir.exists() {
        std::fs::remove_dir_all(&s.run_dir).with_context(|| s.run_dir.display().to_string())?;
    }
    println!("lab {} is down", s.name);
    Ok(ExitCode::SUCCESS)
}

fn prune(root: &Path) -> Result<ExitCode> {
    for s in labs(root) {
        if !alive(s.driver_pid) && s.run_dir.starts_with(root) {
            std::fs::remove_dir_all(&s.run_dir).with_context(|| s.run_dir.display().to_string())?;
            println!("removed {}", s.run_dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn image(spec: Option<&Path>) -> Result<ExitCode> {
    let (image_spec, base) = match spec {
        Some(p) => {
            let s = LabSpec::from_file(p)?;
            (s.image, s.base_dir)
        }
        None => (Default::default(), PathBuf::from(".")),
    };
    let cache = vm_lab::image::default_cache_dir();
    let key = vm_lab::lab::ensure_ssh_key(&cache).await?;
    let pubkey = std::fs::read_to_string(key.with_extension("pub"))?;
    let req = vm_lab::image::ImageRequest {
        spec: image_spec,
        base_dir: base,
        ssh_pubkey: pubkey,
    };
    let img = tokio::task::spawn_blocking(move || vm_lab::image::build(&cache, &req)).await??;
    println!("kernel  {}", img.kernel.display());
    println!(
        "initrd  {} ({} bytes)",
        img.initrd.display(),
        img.initrd_bytes
    );
    println!("release {}", img.kernel_release);
    Ok(ExitCode::SUCCESS)
}
