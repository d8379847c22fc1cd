//! Reaching into a node: `ssh`, `exec`, `fault`, and building the image.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use vm_lab::LabSpec;
use vm_lab::machine::ssh_argv;
use vm_lab::qemu_args::LAN_NIC_ID;

use super::inspect::find_lab;

pub(super) fn ssh(
    root: &Path,
    which: Option<&str>,
    node: &str,
    command: &[String],
) -> Result<ExitCode> {
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

pub(super) async fn exec(
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

pub(super) async fn inject_fault(
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
        // A power loss, as the library's: SIGKILL, and wait until QEMU is gone, so an
        // immediate `vm-lab start` finds it off.
        "kill" => s.attach(n)?.kill().await.map_err(|e| e.to_string()),
        other => bail!("unknown fault {other:?}: link-down, link-up, pause, resume or kill"),
    };
    res.map_err(|e| anyhow!("node {node}: {e}"))?;
    println!("{node}: {fault}");
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn image(spec: Option<&Path>) -> Result<ExitCode> {
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

/// What `vm-lab wait` can wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WaitFor {
    /// TCP port ARG is listened on.
    Port,
    /// Nothing listens on TCP port ARG.
    ClosedPort,
    /// A serial console line matches the regular expression ARG.
    Console,
    /// The file ARG exists.
    File,
    /// A process named ARG runs.
    Process,
    /// No process named ARG runs.
    NoProcess,
    /// The shell command ARG exits 0.
    Succeeds,
}

pub(super) async fn wait(
    root: &Path,
    which: Option<&str>,
    node: &str,
    what: WaitFor,
    arg: &str,
    timeout: Duration,
) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let n = s.attach(s.node(node)?)?;
    let port = || {
        arg.parse::<u16>()
            .map_err(|e| anyhow!("{arg:?} is not a TCP port: {e}"))
    };
    let seen = match what {
        WaitFor::Port => n
            .wait_for_open_port(port()?, timeout)
            .await
            .map(|()| None)?,
        WaitFor::ClosedPort => n
            .wait_for_closed_port(port()?, timeout)
            .await
            .map(|()| None)?,
        WaitFor::Console => Some(n.wait_for_console_text(arg, timeout).await?),
        WaitFor::File => n.wait_for_file(arg, timeout).await.map(|()| None)?,
        WaitFor::Process => {
            let pids = n.wait_for_process(arg, timeout).await?;
            Some(format!("pids {pids:?}"))
        }
        WaitFor::NoProcess => n.wait_for_no_process(arg, timeout).await.map(|()| None)?,
        WaitFor::Succeeds => Some(n.wait_until_succeeds(arg, timeout).await?),
    };
    match seen {
        Some(s) => println!("{node}: {}", s.trim_end()),
        None => println!("{node}: ok"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Power a node on again (after `fault kill`); with `wait`, until it is ready.
pub(super) async fn start(
    root: &Path,
    which: Option<&str>,
    node: &str,
    wait: bool,
) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let n = s.attach(s.node(node)?)?;
    n.start().await?;
    if wait {
        n.wait_ready().await?;
        println!("{node}: running and ready");
    } else {
        println!("{node}: started");
    }
    Ok(ExitCode::SUCCESS)
}

/// `vm-lab clock [NODE OFFSET]`: set a node's wall-clock offset from the host's, or show every
/// node's offset as measured in the guest.
pub(super) async fn clock(
    root: &Path,
    which: Option<&str>,
    node: Option<&str>,
    offset: Option<&str>,
) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    match (node, offset) {
        (Some(node), Some(offset)) => {
            let secs = vm_lab::clock::parse_offset(offset)?;
            let n = s.attach(s.node(node)?)?;
            vm_lab::clock::set_offset(&s.run_dir, &n, secs).await?;
            println!("{node}: clock at host time {secs:+} s");
        }
        (None, None) => {
            for ns in &s.nodes {
                let n = s.attach(ns)?;
                match vm_lab::clock::measure_offset(&n).await {
                    Ok(off) => println!("{:<10} {off:+} s", ns.name),
                    Err(e) => println!("{:<10} unknown ({e})", ns.name),
                }
            }
        }
        _ => bail!("give both NODE and OFFSET (e.g. `vm-lab clock node02 -3d`), or neither"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts the terminal in raw mode while alive (with `stty`, only when stdin is a terminal), so
/// keys reach the guest's shell as typed; the previous settings come back on drop.
struct RawTerminal(Option<String>);

impl RawTerminal {
    fn enable() -> RawTerminal {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return RawTerminal(None);
        }
        let saved = std::process::Command::new("stty")
            .arg("-g")
            .stdin(std::process::Stdio::inherit())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if saved.is_some() {
            let _ = std::process::Command::new("stty")
                .args(["raw", "-echo"])
                .stdin(std::process::Stdio::inherit())
                .status();
        }
        RawTerminal(saved)
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            let _ = std::process::Command::new("stty")
                .arg(s)
                .stdin(std::process::Stdio::inherit())
                .status();
        }
    }
}

/// Ctrl-] leaves the console, as in telnet.
const ESCAPE: u8 = 0x1d;

/// `vm-lab shell NODE`: attach to the node's serial console (a root shell). With `until`, leave
/// once the console prints a match (for scripts: pipe commands in, wait for their answer).
pub(super) async fn shell(
    root: &Path,
    which: Option<&str>,
    node: &str,
    until: Option<&str>,
    timeout: Duration,
) -> Result<ExitCode> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = find_lab(root, which)?;
    let n = s.node(node)?;
    let until = until.map(regex::Regex::new).transpose()?;
    let sock = n.dir.join("serial.sock");
    let stream = tokio::net::UnixStream::connect(&sock)
        .await
        .map_err(|e| anyhow!("node {node}: serial console {}: {e}", sock.display()))?;
    let (mut from_guest, mut to_guest) = stream.into_split();
    eprintln!("vm-lab: {node}'s serial console (Ctrl-] leaves)\r");
    let _raw = RawTerminal::enable();
    // An Enter, so the shell prints a fresh prompt.
    to_guest.write_all(b"\n").await?;
    let keys = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 1024];
        loop {
            let k = stdin.read(&mut buf).await?;
            if k == 0 {
                // Piped input ended: keep showing the console (until a match or the timeout).
                return std::future::pending::<Result<()>>().await;
            }
            let chunk = &buf[..k];
            if let Some(i) = chunk.iter().position(|b| *b == ESCAPE) {
                to_guest.write_all(&chunk[..i]).await?;
                return Ok(());
            }
            to_guest.write_all(chunk).await?;
        }
    };
    let screen = async {
        let mut out = tokio::io::stdout();
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        loop {
            let k = from_guest.read(&mut buf).await?;
            if k == 0 {
                bail!("node {node}: the serial console closed (QEMU exited?)");
            }
            out.write_all(&buf[..k]).await?;
            out.flush().await?;
            if let Some(re) = &until {
                seen.push_str(&String::from_utf8_lossy(&buf[..k]));
                if re.is_match(&seen) {
                    return Ok(());
                }
                // Keep what a match could still span.
                if seen.len() > 64 * 1024 {
                    seen.drain(..seen.len() - 4096);
                }
            }
        }
    };
    let bounded = async {
        match until {
            Some(_) => tokio::time::timeout(timeout, screen).await.map_err(|_| {
                anyhow!("node {node}: no console output matched within {timeout:?}")
            })?,
            None => screen.await,
        }
    };
    tokio::select! {
        r = keys => r?,
        r = bounded => r?,
    }
    Ok(ExitCode::SUCCESS)
}
