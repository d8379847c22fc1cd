//! `fake-proxmox serve` / `fake-proxmox scenario dump`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

use fake_proxmox::exec::FileDisks;
use fake_proxmox::exec::lab::backend::LabOptions;
use fake_proxmox::persist::journal::StateSync;
use fake_proxmox::scenario::Backend;
use fake_proxmox::{ClockMode, ControlToken, FakeProxmox, Limits, PveVersion, Scenario};

/// mimalloc rather than glibc's allocator: a request makes some thirty small allocations, and
/// glibc's malloc and free (with its consolidation of freed chunks) were about a fifth of the
/// server's CPU per `status/current` under load (`cargo bench -p fake-proxmox --bench load`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "fake-proxmox",
    version,
    about = "A stateful, faithful Proxmox VE API simulator"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve every site of the scenario on its own listener.
    Serve {
        /// Scenario YAML (default: the embedded seed scenario).
        #[arg(long)]
        scenario: Option<PathBuf>,
        /// Every site of the scenario runs this PVE release (7.4, 8.4, 9.1; or the 7.1
        /// profile), whatever its `version:` says: its `/version`, its whole API's schema,
        /// its behaviour gates.
        #[arg(long, value_name = "RELEASE")]
        pve_version: Option<PveVersion>,
        /// `SITE=ADDR:PORT`, repeatable (default: 127.0.0.1 with a free port per site).
        #[arg(long = "listen", value_parser = parse_listen)]
        listen: Vec<(String, SocketAddr)>,
        /// Serve plain HTTP instead of HTTPS.
        #[arg(long)]
        plain_http: bool,
        /// Do not delay authentication failures by 3 s.
        #[arg(long)]
        no_auth_delay: bool,
        /// `real`, `scaled:N` or `stepped`.
        #[arg(long, default_value = "real", value_parser = ClockMode::parse)]
        clock: ClockMode,
        /// Keep the world here across restarts (`state.json`, written crash-safely before
        /// each change is answered), with the certificate (`cert.pem`, `key.pem`,
        /// `fingerprint`, reused on restart) and the site URLs (`sites`). A state dir
        /// that holds a world serves it, whatever `--scenario` says.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// When a change to the state dir is acknowledged: `write` (once written: survives the
        /// process dying any way; synced within a second) or `data` (once fdatasynced:
        /// survives a power loss too, one disk sync per lone request).
        #[arg(long, default_value = "write", value_parser = parse_state_sync)]
        state_sync: StateSync,
        /// `simulated` (volumes are records only) or `files` (every volume a real file,
        /// under `STATE_DIR/disks`, else a temp dir removed on exit).
        #[arg(long, default_value = "simulated", value_parser = ["simulated", "files"])]
        disks: String,
        /// What runs the VMs of sites whose scenario sets no `backend`: `simulated`, or `lab`
        /// (real QEMU guests booting from real volume files under `STATE_DIR`, else temp dirs).
        #[arg(long, default_value = "simulated", value_parser = parse_backend)]
        backend: Backend,
        /// The lab backend: the most memory one guest's QEMU gets (PVE-side figures keep the
        /// config's `memory`).
        #[arg(long, default_value_t = 1024)]
        memory_cap_mib: u64,
        /// At most this many live tenants (`POST /_fake/tenants`); more are refused with 429.
        #[arg(long, default_value_t = 256)]
        max_tenants: usize,
        /// A tenant with no request on its listeners for this many seconds is deleted
        /// (unless it asked for another limit).
        #[arg(long, value_name = "SECS", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..))]
        tenant_idle_timeout: u64,
        /// Require `Authorization: Bearer TOKEN` on every `/_fake/…` request (but
        /// `/_fake/health`); `auto` makes a random one and prints it on the ready lines
        /// (`control_token=…`). Without it the control plane is open to anyone who reaches
        /// the port (the ready lines say `control=open`).
        #[arg(
            long,
            env = "FAKE_PROXMOX_CONTROL_TOKEN",
            value_name = "TOKEN|auto",
            hide_env_values = true
        )]
        control_token: Option<String>,
        /// Bytes of one request body, API (uploads) and control plane (state imports);
        /// more get 413. Real PVE's 512 KiB for a non-upload body applies below it.
        #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_body)]
        max_body: usize,
        /// Guests (VMs and containers) of one world: the server's own, and each tenant's;
        /// a create or clone past it is refused with a message naming this flag.
        #[arg(long, value_name = "N", default_value_t = Limits::default().max_guests)]
        max_guests: usize,
        /// Tasks kept per site of one world; past it the oldest finished ones are forgotten.
        #[arg(long, value_name = "N", default_value_t = Limits::default().max_tasks, value_parser = at_least_one)]
        max_tasks: usize,
        /// Journal entries kept per world; past it the oldest are dropped (a ring).
        #[arg(long, value_name = "N", default_value_t = Limits::default().max_journal, value_parser = at_least_one)]
        max_journal: usize,
        /// Connections open at once on one tenant's listeners; one more is answered 503 and
        /// closed (the server's own listeners are not limited).
        #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections, value_parser = at_least_one)]
        max_tenant_connections: usize,
    },
    /// Scenario utilities.
    Scenario {
        #[command(subcommand)]
        cmd: ScenarioCmd,
    },
}

#[derive(Subcommand)]
enum ScenarioCmd {
    /// Print the embedded default scenario YAML.
    Dump,
    /// Check a scenario file.
    Check { file: PathBuf },
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a whole number of at least 1")),
    }
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    match s {
        "simulated" => Ok(Backend::Simulated),
        "lab" => Ok(Backend::Lab),
        _ => Err(format!("unknown backend '{s}' (simulated or lab)")),
    }
}

fn parse_listen(s: &str) -> Result<(String, SocketAddr), String> {
    let (site, addr) = s.split_once('=').ok_or("expected SITE=ADDR:PORT")?;
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("bad address '{addr}': {e}"))?;
    Ok((site.to_string(), addr))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Scenario {
            cmd: ScenarioCmd::Dump,
        } => {
            print!("{}", Scenario::default_yaml());
        }
        Cmd::Scenario {
            cmd: ScenarioCmd::Check { file },
        } => {
            let s = Scenario::from_yaml_file(&file)?;
            println!("ok: {} site(s)", s.sites.len());
        }
        Cmd::Serve {
            scenario,
            pve_version,
            listen,
            plain_http,
            no_auth_delay,
            clock,
            state_dir,
            state_sync,
            disks,
            backend,
            memory_cap_mib,
            max_tenants,
            tenant_idle_timeout,
            control_token,
            max_body,
            max_guests,
            max_tasks,
            max_journal,
            max_tenant_connections,
        } => {
            let (control_token, print_token) = match control_token.as_deref() {
                None => (None, false),
                Some("auto") => (Some(ControlToken::generate()), true),
                Some(t) => (
                    Some(
                        ControlToken::new(t)
                            .map_err(|e| anyhow::anyhow!("--control-token: {e}"))?,
                    ),
                    false,
                ),
            };
            let mut sc = match scenario {
                Some(p) => Scenario::from_yaml_file(&p)
                    .with_context(|| format!("loading {}", p.display()))?,
                None => Scenario::embedded_default(),
            };
            if let Some(v) = pve_version {
                for site in &mut sc.sites {
                    site.version = v;
                }
            }
            let mut b = FakeProxmox::builder()
                .scenario(sc)
                .tls(!plain_http)
                .auth_failure_delay(!no_auth_delay)
                .clock(clock)
                .backend(backend)
                .lab_options(LabOptions {
                    memory_cap_mib,
                    ..LabOptions::default()
                })
                .limits(Limits {
                    max_body,
                    max_guests,
                    max_tasks,
                    max_journal,
                    max_connections: max_tenant_connections,
                })
                .max_tenants(max_tenants)
                .tenant_idle_timeout(std::time::Duration::from_secs(tenant_idle_timeout));
            for (site, addr) in listen {
                b = b.listen(&site, addr);
            }
            if disks == "files" && backend == Backend::Lab {
                bail!(
                    "--backend lab keeps every volume as a real file already: drop --disks files"
                );
            }
            if disks == "files" {
                let files = match &state_dir {
                    Some(d) => FileDisks::new(d.join("disks")),
                    None => FileDisks::temp().context("making a temp dir for the disks")?,
                };
                b = b.disks(Arc::new(files));
            }
            if let Some(d) = state_dir {
                b = b.state_dir(d).state_sync(state_sync);
            }
            if let Some(t) = &control_token {
                b = b.control_token(t.clone());
            }
            let fake = b.start().await?;
            let control = match (&control_token, print_token) {
                (None, _) => "control=open".to_string(),
                (Some(t), true) => format!("control=token control_token={}", t.as_str()),
                (Some(_), false) => "control=token".to_string(),
            };
            for s in fake.sites() {
                println!(
                    "ready site={} url={} fingerprint={} {control}",
                    s.name(),
                    s.url(),
                    s.fingerprint()
                );
            }
            if fake.sites().next().is_none() {
                bail!("no sites to serve");
            }
            tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?;
            fake.shutdown().await;
        }
    }
    Ok(())
}

/// `--state-sync`: `write` or `data`.
fn parse_state_sync(s: &str) -> Result<StateSync, String> {
    s.parse()
}
