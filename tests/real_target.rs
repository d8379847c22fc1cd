//! `cargo test --test real_target`: the rollout features in real-target mode against a black box.
//!
//! A separate `fake-proxmox serve` process (one site, node `pve1`, its own credentials:
//! `tests/data/blackbox-cluster.yaml`) stands in for a user's PVE test cluster. The suite reaches
//! it only through its URL, an API token, a password and the certificate fingerprint it prints —
//! exactly what `HARNESS_PVE_URL` and friends give it for a real cluster — so every scenario not
//! tagged `@fake` must pass without the fake's control API, and any scenario that secretly
//! depends on the fake fails here. Scenarios run in parallel (4 at once) on the one node, so a
//! name collision between them fails too.
//!
//! `HARNESS_BLACKBOX_IMAGE=fake-proxmox:dev` runs the same against the container image instead
//! (`.ci/run` runs it so, inside the README's test command; ci.yml's `real_target` step runs the
//! process).
//!
//! Then an interrupted run: the `provision-harness` CLI starts deploying two VMs named with a run
//! prefix and is killed (SIGKILL) as soon as the first exists, mid-create; `provision-harness
//! cleanup --prefix` must remove what it left (waiting for a create still holding its VM's lock,
//! disks included) and leave a VM of another prefix alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "rollout/mod.rs"]
mod rollout;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use rollout::adapter::{Action, Creds, External, RunRequest, SiteTarget};
use rollout::pve::Observer;
use rollout::target::{RealPve, set_real_target};

const TOKEN_ID: &str = "root@pam!ci-rollout";
const TOKEN_SECRET: &str = "7d0c6c1e-5b8a-4f3e-9a21-3e4f5a6b7c8d";
const PASSWORD: &str = "blackbox-Passw0rd";
const NODE: &str = "pve1";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `fake-proxmox` binary next to this test's sibling binaries, built if it is not there
/// (`cargo test -p provision-harness` builds only this package's binaries).
fn fake_binary() -> anyhow::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_BIN_EXE_provision-harness"))
        .parent()
        .context("binary dir")?
        .to_path_buf();
    let bin = dir.join("fake-proxmox");
    if !bin.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "fake-proxmox", "--bin", "fake-proxmox"])
            .current_dir(repo());
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        let st = cmd.status().context("cargo build -p fake-proxmox")?;
        ensure!(st.success(), "building fake-proxmox failed: {st}");
    }
    Ok(bin)
}

/// The black-box server and what it printed.
struct Server {
    url: String,
    fingerprint: String,
    run: Running,
    _dir: tempfile::TempDir,
}

/// How the server runs: a `fake-proxmox serve` child process, or a container of the image.
enum Running {
    Process(Child),
    Container(String),
}

impl Running {
    /// What stops it, callable from anywhere (the Ctrl-C path exits without destructors).
    fn stopper(&self) -> Box<dyn Fn() + Send + Sync> {
        match self {
            Running::Process(child) => {
                let pid = i32::try_from(child.id())
                    .ok()
                    .filter(|p| *p > 0)
                    .map(nix::unistd::Pid::from_raw);
                Box::new(move || {
                    if let Some(pid) = pid {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                })
            }
            Running::Container(id) => {
                let id = id.clone();
                Box::new(move || {
                    let _ = Command::new("docker")
                        .args(["rm", "-f", &id])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status();
                })
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.run.stopper()();
        if let Running::Process(child) = &mut self.run {
            let _ = child.wait();
        }
    }
}

/// `ready site=… url=… fingerprint=…`: the named field.
fn ready_field(line: &str, k: &str) -> anyhow::Result<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{k}=")))
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no {k}= in {line:?}"))
}

/// The server arguments after `serve`: the black-box cluster, a clock 100× (a real cluster's
/// boots and imports take minutes), no 3 s delay on a refused login.
const SERVE_ARGS: [&str; 4] = ["--clock", "scaled:100", "--no-auth-delay", "--scenario"];

fn start_server() -> anyhow::Result<Server> {
    match std::env::var("HARNESS_BLACKBOX_IMAGE") {
        Ok(image) if !image.trim().is_empty() => start_container(image.trim()),
        _ => start_process(),
    }
}

fn start_process() -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(fake_binary()?)
        .arg("serve")
        .args(SERVE_ARGS)
        .arg(repo().join("tests/data/blackbox-cluster.yaml"))
        .arg("--state-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting fake-proxmox serve")?;
    let stdout = child.stdout.take().context("serve's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .next()
        .ok_or_else(|| anyhow!("fake-proxmox serve exited before it was ready"))??;
    let server = Server {
        url: ready_field(&line, "url")?,
        fingerprint: ready_field(&line, "fingerprint")?,
        run: Running::Process(child),
        _dir: dir,
    };
    // Keep reading its stdout so the pipe never fills.
    std::thread::spawn(move || for _ in lines {});
    Ok(server)
}

/// The container image (`HARNESS_BLACKBOX_IMAGE`, e.g. `fake-proxmox:dev` as `.ci/run` builds
/// it), its port published on a free loopback port.
fn start_container(image: &str) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let scenario = dir.path().join("scenario.yaml");
    std::fs::copy(repo().join("tests/data/blackbox-cluster.yaml"), &scenario)?;
    let out = Command::new("docker")
        .args(["run", "-d", "--rm", "-p", "127.0.0.1::8006", "-v"])
        .arg(format!("{}:/scenario.yaml:ro", scenario.display()))
        .arg(image)
        .args(["--listen", "pve-test=0.0.0.0:8006"])
        .args(SERVE_ARGS)
        .arg("/scenario.yaml")
        .output()
        .context("docker run")?;
    ensure!(
        out.status.success(),
        "docker run {image}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let run = Running::Container(id.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let logs = Command::new("docker").args(["logs", &id]).output()?;
        let text = String::from_utf8_lossy(&logs.stdout).into_owned();
        if let Some(l) = text.lines().find(|l| l.starts_with("ready ")) {
            break l.to_string();
        }
        if Instant::now() > deadline {
            run.stopper()();
            bail!(
                "the container printed no ready line in 30 s: {text}{}",
                String::from_utf8_lossy(&logs.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let port = Command::new("docker")
        .args(["port", &id, "8006/tcp"])
        .output()?;
    let published = String::from_utf8_lossy(&port.stdout);
    let Some(addr) = published.lines().find(|l| l.starts_with("127.0.0.1:")) else {
        run.stopper()();
        bail!("docker port {id}: {published}");
    };
    Ok(Server {
        url: format!("https://{}", addr.trim()),
        fingerprint: ready_field(&line, "fingerprint")?,
        run,
        _dir: dir,
    })
}

fn target(s: &Server) -> RealPve {
    let mut t = RealPve::new(
        s.url.clone(),
        Some(s.fingerprint.clone()),
        false,
        NODE.into(),
        Some((TOKEN_ID.into(), TOKEN_SECRET.into())),
        Some(("root@pam".into(), PASSWORD.into())),
    );
    // 4 at once on one node (HARNESS_PVE_PARALLEL=1 records cassettes that replay on a fresh
    // fake: each scenario then starts on an empty cluster).
    t.parallel = std::env::var("HARNESS_PVE_PARALLEL")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    t
}

/// An interrupted run's leftovers are removed by `provision-harness cleanup --prefix`.
async fn interrupted_run_is_cleaned_up(s: &Server) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let t = target(s);
    let prefix = t.run_prefix.clone();
    let other = format!(
        "{}-",
        rollout::target::new_run_prefix().trim_end_matches('-')
    );
    ensure!(other != prefix, "two runs drew the same prefix {prefix}");
    // Two manifest sets: another run's VM, deployed to the end, and this run's two VMs.
    let theirs = dir.path().join("theirs");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&theirs)?;
    std::fs::create_dir_all(&manifests)?;
    let other_vm = format!("{other}s01-web");
    let write = |d: &Path, n: &str| {
        let mut m = rollout::manifest::VmManifest::standard(n, NODE, "target");
        // No snippets share with the container's storage: nothing to carry userData.
        m.user_data = None;
        std::fs::write(d.join(format!("{n}.yaml")), m.to_yaml())
    };
    write(&theirs, &other_vm)?;
    for n in [format!("{prefix}s01-web"), format!("{prefix}s02-db")] {
        write(&manifests, &n)?;
    }
    let req = RunRequest {
        action: Action::Deploy,
        sites: vec![SiteTarget {
            name: "target".into(),
            url: s.url.clone(),
            node: NODE.into(),
            fingerprint: Some(s.fingerprint.clone()),
            insecure: false,
            snippets: None,
        }],
        creds: Creds::Token {
            id: TOKEN_ID.into(),
            secret: TOKEN_SECRET.into(),
        },
        manifests_dir: manifests.clone(),
        state_dir: dir.path().to_path_buf(),
        concurrency: 3,
        reached: None,
    };
    let config = dir.path().join("provider.yaml");
    std::fs::write(&config, External::provider_yaml(&req))?;
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_provision-harness"))
            .args(args)
            .arg("--provider-config")
            .arg(&config)
            .output()
            .context("provision-harness")
    };
    let deploy = |m: &Path, state: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_provision-harness"));
        c.args(["deploy", "--json", "--provider-config"])
            .arg(&config)
            .arg("--manifests")
            .arg(m)
            .arg("--state")
            .arg(dir.path().join(state))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    let done = deploy(&theirs, "theirs.json").status()?;
    ensure!(done.success(), "the other run's deploy: {done}");
    let obs = Observer::new(
        &s.url,
        Creds::Token {
            id: TOKEN_ID.into(),
            secret: TOKEN_SECRET.into(),
        },
    )?;
    // This run is killed (SIGKILL) as soon as its first VM exists: mid-create, as a cancelled
    // CI job leaves it.
    let mut run = deploy(&manifests, "ours.json").spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let vms = obs.vms().await?;
        if vms.iter().any(|v| v.name.starts_with(&prefix)) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the interrupted run created nothing within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.kill()?;
    run.wait()?;
    // Requests the killed run had already sent may still make a VM: wait until the list is
    // stable (two looks 300 ms apart agree).
    let named = |vms: &[rollout::pve::VmSeen]| -> Vec<u32> {
        vms.iter()
            .filter(|v| v.name.starts_with(&prefix))
            .map(|v| v.vmid)
            .collect()
    };
    let mut before = obs.vms().await?;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = obs.vms().await?;
        let stable = named(&again) == named(&before);
        before = again;
        if stable {
            break;
        }
    }
    let ours: Vec<_> = before
        .iter()
        .filter(|v| v.name.starts_with(&prefix))
        .cloned()
        .collect();
    ensure!(!ours.is_empty(), "no VM named {prefix}*: {before:?}");

    // A prefix too loose to be a run's is refused before anything is touched.
    let loose = cli(&["cleanup", "--prefix", "ph-"])?;
    ensure!(
        loose.status.code() == Some(5),
        "cleanup --prefix ph- should be refused (exit 5), got {:?}: {}",
        loose.status.code(),
        String::from_utf8_lossy(&loose.stderr)
    );
    let dry = cli(&["cleanup", "--dry-run", "--json", "--prefix", &prefix])?;
    let listed: serde_json::Value = serde_json::from_slice(&dry.stdout)
        .with_context(|| format!("dry run: {}", String::from_utf8_lossy(&dry.stderr)))?;
    ensure!(
        listed["vms"].as_array().map(Vec::len) == Some(ours.len())
            && listed["vms"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|v| v["outcome"] == "would remove"),
        "dry run: {listed}"
    );
    ensure!(
        obs.vms().await?.len() == before.len(),
        "the dry run removed something"
    );
    let run = cli(&["cleanup", "--prefix", &prefix])?;
    let out = String::from_utf8_lossy(&run.stdout);
    ensure!(
        run.status.success(),
        "cleanup: {out}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let after = obs.vms().await?;
    let left: Vec<_> = after
        .iter()
        .filter(|v| v.name.starts_with(&prefix))
        .collect();
    ensure!(left.is_empty(), "cleanup left {left:?}\n{out}");
    ensure!(
        after.iter().any(|v| v.name == other_vm),
        "cleanup removed the other run's VM {other_vm}: {after:?}"
    );
    let vols = obs.image_volumes(NODE).await?;
    for v in &ours {
        let tag = format!(":vm-{}-", v.vmid);
        ensure!(
            !vols.iter().any(|x| x.contains(&tag)),
            "disks of {} ({}) are left: {vols:?}",
            v.name,
            v.vmid
        );
    }
    // Clean up the other "run" too, so the server ends empty.
    let rest = cli(&["cleanup", "--prefix", &other])?;
    ensure!(rest.status.success(), "cleanup of {other}");
    println!("interrupted run: cleanup --prefix {prefix} removed {ours:?}:\n{out}");
    Ok(())
}

#[tokio::main]
async fn main() {
    let started = Instant::now();
    let server = match start_server() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("real_target: {e:#}");
            std::process::exit(2);
        }
    };
    rollout::set_reports_base(
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .join(match server.run {
                Running::Process(_) => "cucumber-real-target",
                Running::Container(_) => "cucumber-real-target-container",
            }),
    );
    set_real_target(target(&server));
    // Ctrl-C exits from inside the suite (after removing the run's VMs): stop the server too.
    let stop = server.run.stopper();
    rollout::before_interrupted_exit(stop);
    let outcome = rollout::run_suite().await;
    let suite = started.elapsed();
    let cleanup = interrupted_run_is_cleaned_up(&server).await;
    let mut code = outcome.code;
    if let Err(e) = &cleanup {
        eprintln!("real_target: the interrupted-run cleanup test failed: {e:#}");
        code = code.max(1);
    }
    // Everything the suite made was removed by its own cleanup.
    if code == 0
        && let Err(e) = nothing_left(&server).await
    {
        eprintln!("real_target: {e:#}");
        code = 1;
    }
    println!(
        "real_target: suite {:.1} s, with the cleanup test {:.1} s",
        suite.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(server);
    if code != 0 {
        std::process::exit(code);
    }
}

async fn nothing_left(s: &Server) -> anyhow::Result<()> {
    let obs = Observer::new(
        &s.url,
        Creds::Token {
            id: TOKEN_ID.into(),
            secret: TOKEN_SECRET.into(),
        },
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let vms = obs.vms().await?;
        if vms.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the black-box cluster still holds VMs after the run: {vms:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
