//! Lifecycle: `up` (a supervisor process that owns the lab), `supervise`, `down`, `prune`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use vm_lab::lab::LabState;
use vm_lab::namespace::alive;
use vm_lab::{Lab, LabSpec};

use super::inspect::{find_lab, labs};
use super::{UpOpts, lab_options};

/// Start `vm-lab supervise` in its own process group and wait for its READY/FAILED line.
pub(super) fn up(spec_path: &Path, opts: &UpOpts, root: &Path) -> Result<ExitCode> {
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
pub(super) async fn supervise(
    spec_path: &Path,
    opts: &UpOpts,
    root: &Path,
    report: bool,
) -> Result<ExitCode> {
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

pub(super) fn down(root: &Path, which: Option<&str>) -> Result<ExitCode> {
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

pub(super) fn prune(root: &Path) -> Result<ExitCode> {
    for s in labs(root) {
        if !alive(s.driver_pid) && s.run_dir.starts_with(root) {
            std::fs::remove_dir_all(&s.run_dir).with_context(|| s.run_dir.display().to_string())?;
            println!("removed {}", s.run_dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn attach_all(s: &LabState) -> Result<Vec<vm_lab::Node>> {
    Ok(s.nodes
        .iter()
        .map(|n| s.attach(n))
        .collect::<vm_lab::Result<_>>()?)
}

/// `vm-lab snapshot NAME`: every node paused, saved, resumed.
pub(super) async fn snapshot(root: &Path, which: Option<&str>, name: &str) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let nodes = attach_all(&s)?;
    let refs: Vec<&vm_lab::Node> = nodes.iter().collect();
    let info = vm_lab::snapshot::take(&s.run_dir, &refs, name).await?;
    println!(
        "snapshot {} of {} node(s) (paused {} ms)",
        info.name,
        info.nodes.len(),
        info.paused_ms
    );
    Ok(ExitCode::SUCCESS)
}

/// `vm-lab restore NAME`: every node back to the snapshot, together.
pub(super) async fn restore(root: &Path, which: Option<&str>, name: &str) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let nodes = attach_all(&s)?;
    let refs: Vec<&vm_lab::Node> = nodes.iter().collect();
    let took = vm_lab::snapshot::restore(&s.run_dir, &refs, name).await?;
    println!("restored {name} in {:.2} s", took.as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

/// `vm-lab snapshots`: the lab's snapshots, oldest first.
pub(super) fn snapshots(root: &Path, which: Option<&str>) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let list = vm_lab::snapshot::list(&s.run_dir);
    if list.is_empty() {
        println!("no snapshots");
    }
    for i in list {
        println!(
            "{:<20} taken at {} (unix), nodes {}",
            i.name,
            i.taken_at,
            i.nodes.join(",")
        );
    }
    Ok(ExitCode::SUCCESS)
}
