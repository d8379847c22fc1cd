//! `provision-harness`: plan, deploy, inspect and remove a ProxmoxVM rollout; rehearse it against
//! an embedded fake-proxmox.
//!
//! Exit codes: 0 success · 1 internal error · 2 usage error · 3 the plan's verdict is "would fail"
//! (`plan`, or `rehearse --strict`) · 4 some VM failed (`deploy`, `status`, `destroy`, or
//! `rehearse --strict`) · 5 bad input (provider config, credentials, manifests dir, state file).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use provision_harness::config::{Provider, load_provider};
use provision_harness::deploy::{DeployOptions, Deployer, RolloutResult};
use provision_harness::manifest::{ManifestSet, load_dir};
use provision_harness::plan::{PlanOptions, Verdict, plan};
use provision_harness::rehearse::{RehearseOptions, RehearseReport, rehearse};
use provision_harness::report::{render_plan, render_rollout};
use provision_harness::trace;

const EXIT_WOULD_FAIL: u8 = 3;
const EXIT_VM_FAILED: u8 = 4;
const EXIT_BAD_INPUT: u8 = 5;

#[derive(Parser)]
#[command(
    name = "provision-harness",
    version,
    about = "Plan, deploy and rehearse a Proxmox VE VM rollout (seed 000's 30 VMs, done the way real PVE needs it)"
)]
struct Cli {
    /// Log filter (tracing env-filter syntax), also from PROVISION_HARNESS_LOG.
    #[arg(
        long,
        global = true,
        env = "PROVISION_HARNESS_LOG",
        default_value = "warn"
    )]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Inputs {
    /// The ProviderConfig YAML (sites, endpoints, TLS options).
    #[arg(long, default_value = "examples/sankofa/provider-config.yaml")]
    provider_config: PathBuf,
    /// A YAML holding the credentials Secret (default: found next to the provider config).
    /// PVE_TOKEN_ID + PVE_TOKEN_SECRET (or PVE_USERNAME + PVE_PASSWORD) override it.
    #[arg(long)]
    credentials: Option<PathBuf>,
    /// Directory of ProxmoxVM manifests (searched recursively).
    #[arg(long, default_value = "examples/sankofa/production")]
    manifests: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Seconds before one API call gives up.
    #[arg(long, default_value_t = 30)]
    http_timeout: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Check a rollout against the live API without changing anything (GET requests only).
    Plan {
        #[command(flatten)]
        inputs: Inputs,
        /// Allowed total vCPUs per node as a multiple of its CPU threads.
        #[arg(long, default_value_t = 1.0)]
        cpu_overcommit: f64,
    },
    /// Create, configure and start every VM of the rollout; converge on re-runs.
    Deploy(DeployArgs),
    /// What exists for each manifest right now (read-only).
    Status {
        #[command(flatten)]
        inputs: Inputs,
        #[arg(long, default_value = "provision-state.json")]
        state: PathBuf,
    },
    /// Stop and delete (purge) the VMs this rollout created; adopted VMs are left alone.
    Destroy {
        #[command(flatten)]
        inputs: Inputs,
        #[arg(long, default_value = "provision-state.json")]
        state: PathBuf,
    },
    /// Plan + deploy the seed rollout, then the fixed one, against an embedded fake-proxmox.
    Rehearse(RehearseArgs),
    /// Test reports of a sharded suite run.
    #[command(subcommand)]
    Report(ReportCommand),
    /// Remove every VM whose name starts with PREFIX on every site (what an interrupted test run
    /// against a shared cluster left; the run prints its prefix). Exits 4 if a VM could not be
    /// removed.
    Cleanup {
        #[command(flatten)]
        inputs: Inputs,
        /// The run's name prefix, e.g. `ph-3fa9c1d2-` (at least 6 characters, ending in '-').
        #[arg(long)]
        prefix: String,
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum ReportCommand {
    /// Merge the shards' JUnit, cucumber JSON and durations files into one set and one HTML
    /// summary; a shard's missing or unreadable report counts as a failed scenario.
    /// Exits 4 when the merged run has a failed scenario.
    Merge {
        /// One directory per shard, holding that shard's reports.
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// Where the merged reports and summary.html go (created).
        #[arg(long, default_value = "target/cucumber/merged")]
        out: PathBuf,
    },
}

#[derive(Args)]
struct DeployArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// The rollout's state file (written atomically; a killed run resumes from it).
    #[arg(long, default_value = "provision-state.json")]
    state: PathBuf,
    /// VMs deployed at once within a wave.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Attempts per VM for retryable errors (exponential backoff with jitter).
    #[arg(long, default_value_t = 8)]
    max_attempts: u32,
    /// Leave VMs stopped after creating them.
    #[arg(long)]
    no_start: bool,
    /// Seconds to wait for a guest agent IP after start.
    #[arg(long, default_value_t = 120)]
    ip_wait: u64,
    /// Milliseconds what this run read of a site (its VM listing, a node's status, network,
    /// storages and image content) may be reused by the next VM (0: fresh reads per VM). For
    /// rollouts of thousands of VMs per site; VMs with a recorded VMID and retries always read
    /// afresh.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    listing_max_age: u64,
    /// Write the run's trace (Chrome trace-event JSON: steps, retries, API calls) here.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

#[derive(Args)]
struct RehearseArgs {
    /// What runs the VMs: `simulated` (the seed's 30 VMs and the fixed rollout, as rows in the
    /// fake) or `lab` (seed 002's three PhotonCloud nodes as real QEMU guests booting the
    /// project's cloud image; needs QEMU).
    #[arg(long, value_enum, default_value = "simulated")]
    backend: RehearseBackend,
    /// A fake-proxmox scenario YAML to use instead of the seed's two sites.
    #[arg(long, conflicts_with = "backend")]
    scenario: Option<PathBuf>,
    /// The whole stack: the PhotonCloud nodes deployed onto real guests (as `--backend lab`),
    /// then seed 002's cluster formed on them, every restart through the PVE API; ends at a
    /// quorate cluster. Needs QEMU. The HTML timeline gains each VM's guest-side steps.
    #[arg(long, conflicts_with_all = ["backend", "scenario"])]
    stack: bool,
    /// Only the seed rollout, not the fixed one.
    #[arg(long)]
    seed_only: bool,
    /// Exit 3/4 when the rehearsal finds problems (default: report them and exit 0).
    #[arg(long)]
    strict: bool,
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long)]
    json: bool,
    /// Also write the rollouts' timelines as one self-contained HTML page here.
    #[arg(long, default_value = "target/rehearse-report.html")]
    html: PathBuf,
    /// Do not write the HTML report.
    #[arg(long, conflicts_with = "html")]
    no_html: bool,
    /// Write one trace of the rehearsal (Chrome trace-event JSON: the deployer's steps and
    /// retries, the fake's requests and tasks) here; open it in ui.perfetto.dev.
    #[arg(long, value_name = "FILE", conflicts_with = "stack")]
    trace: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RehearseBackend {
    Simulated,
    Lab,
}

/// `status` and `destroy`: read or remove what the state file says this rollout made.
#[derive(Clone, Copy)]
enum Lifecycle {
    Status,
    Destroy,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let traced = match &cli.command {
        Command::Deploy(a) => a.trace.is_some(),
        Command::Rehearse(a) => a.trace.is_some(),
        _ => false,
    };
    {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let trace_layer = traced.then(|| trace::TraceLayer.with_filter(trace::filter()));
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_filter(filter),
            )
            .with(trace_layer)
            .init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(Failure::BadInput(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Err(Failure::Internal(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    BadInput(anyhow::Error),
    Internal(anyhow::Error),
}

fn bad<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::BadInput(e.into())
}

fn internal<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Internal(e.into())
}

fn load(inputs: &Inputs) -> Result<(Provider, ManifestSet), Failure> {
    let provider =
        load_provider(&inputs.provider_config, inputs.credentials.as_deref()).map_err(bad)?;
    let set = load_dir(&inputs.manifests).map_err(bad)?;
    if set.vms.is_empty() && set.unreadable.is_empty() {
        return Err(bad(anyhow::anyhow!(
            "no ProxmoxVM manifests under {}",
            inputs.manifests.display()
        )));
    }
    Ok((provider, set))
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v)
        .context("render JSON")
        .map_err(internal)?;
    println!("{text}");
    Ok(())
}

/// A progress bar on stderr, only when it is a terminal.
fn progress(total: usize, opts: &mut DeployOptions) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    let b1 = bar.clone();
    opts.on_step = Some(Arc::new(move |vm: &str, step: &str| {
        b1.set_message(format!("{vm}: {step}"))
    }));
    let b2 = bar.clone();
    opts.on_done = Some(Arc::new(move |_: &str, _: bool| b2.inc(1)));
    Some(bar)
}

fn rollout_code(r: &RolloutResult) -> u8 {
    if r.summary.failed > 0 || r.summary.unreadable > 0 {
        EXIT_VM_FAILED
    } else {
        0
    }
}

fn deploy_options(inputs: &Inputs, state: &Path) -> DeployOptions {
    DeployOptions {
        state_path: Some(state.to_path_buf()),
        http_timeout: Duration::from_secs(inputs.http_timeout),
        ..DeployOptions::default()
    }
}

async fn run(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Plan {
            inputs,
            cpu_overcommit,
        } => run_plan(&inputs, cpu_overcommit).await,
        Command::Deploy(args) => run_deploy(args).await,
        Command::Status { inputs, state } => {
            run_lifecycle(&inputs, &state, Lifecycle::Status).await
        }
        Command::Destroy { inputs, state } => {
            run_lifecycle(&inputs, &state, Lifecycle::Destroy).await
        }
        Command::Rehearse(args) => run_rehearse(args).await,
        Command::Report(ReportCommand::Merge { dirs, out }) => run_merge(&dirs, &out),
        Command::Cleanup {
            inputs,
            prefix,
            dry_run,
        } => run_cleanup(&inputs, &prefix, dry_run).await,
    }
}

async fn run_cleanup(inputs: &Inputs, prefix: &str, dry_run: bool) -> Result<u8, Failure> {
    use provision_harness::deployer::cleanup::{CleanupOptions, cleanup};
    let provider =
        load_provider(&inputs.provider_config, inputs.credentials.as_deref()).map_err(bad)?;
    let options = CleanupOptions {
        dry_run,
        http_timeout: Duration::from_secs(inputs.http_timeout),
        ..CleanupOptions::default()
    };
    let report = cleanup(&provider, prefix, &options).await.map_err(bad)?;
    if inputs.json {
        print_json(&report)?;
    } else {
        for vm in &report.vms {
            println!(
                "{:<10} {:<12} {:>6}  {:<40} {}",
                vm.site, vm.node, vm.vmid, vm.name, vm.outcome
            );
        }
        println!("{} VM(s) named {}*", report.vms.len(), report.prefix);
    }
    Ok(if report.failed() > 0 {
        EXIT_VM_FAILED
    } else {
        0
    })
}

async fn run_plan(inputs: &Inputs, cpu_overcommit: f64) -> Result<u8, Failure> {
    let (provider, set) = load(inputs)?;
    let options = PlanOptions {
        cpu_overcommit,
        http_timeout: Duration::from_secs(inputs.http_timeout),
        ..PlanOptions::default()
    };
    let report = plan(&provider, &set, &options).await;
    if inputs.json {
        print_json(&report)?;
    } else {
        print!("{}", render_plan(&report));
    }
    Ok(if report.verdict == Verdict::WouldFail {
        EXIT_WOULD_FAIL
    } else {
        0
    })
}

async fn run_deploy(args: DeployArgs) -> Result<u8, Failure> {
    let inputs = &args.inputs;
    let (provider, set) = load(inputs)?;
    let mut opts = deploy_options(inputs, &args.state);
    opts.concurrency = args.concurrency;
    opts.backoff.max_attempts = args.max_attempts.max(1);
    opts.pipeline.start = !args.no_start;
    opts.pipeline.ip_wait = Duration::from_secs(args.ip_wait);
    opts.pipeline.listing_max_age = Duration::from_millis(args.listing_max_age);
    let bar = progress(set.vms.len(), &mut opts);
    let deployer = Deployer::new(provider, opts).map_err(bad)?;
    let capture = trace::Capture::new();
    let result = deployer
        .deploy(&set)
        .instrument(capture.span("deploy run"))
        .await
        .map_err(internal)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(path) = &args.trace {
        write_trace(path, &capture)?;
    }
    if inputs.json {
        print_json(&result)?;
    } else {
        print!("{}", render_rollout("DEPLOY", &result));
    }
    Ok(rollout_code(&result))
}

async fn run_lifecycle(inputs: &Inputs, state: &Path, what: Lifecycle) -> Result<u8, Failure> {
    let (provider, set) = load(inputs)?;
    let deployer = Deployer::new(provider, deploy_options(inputs, state)).map_err(bad)?;
    let (title, result) = match what {
        Lifecycle::Status => ("STATUS", deployer.status(&set).await),
        Lifecycle::Destroy => ("DESTROY", deployer.destroy(&set).await),
    };
    let result = result.map_err(internal)?;
    if inputs.json {
        print_json(&result)?;
    } else {
        print!("{}", render_rollout(title, &result));
    }
    Ok(match what {
        Lifecycle::Status => rollout_code(&result),
        // Unreadable manifests do not stop a destroy: it works from the state file.
        Lifecycle::Destroy if result.summary.failed > 0 => EXIT_VM_FAILED,
        Lifecycle::Destroy => 0,
    })
}

async fn run_rehearse(args: RehearseArgs) -> Result<u8, Failure> {
    if args.stack {
        return run_rehearse_stack(args).await;
    }
    let scenario = match &args.scenario {
        Some(p) => Some(fake_proxmox::Scenario::from_yaml_file(p).map_err(bad)?),
        None => None,
    };
    let capture = trace::Capture::new();
    let traced = args.trace.as_ref().map(|_| capture.clone());
    let report = async {
        match args.backend {
            RehearseBackend::Simulated => {
                let options = RehearseOptions {
                    concurrency: args.concurrency,
                    trace: traced,
                    ..RehearseOptions::default()
                };
                rehearse(scenario, !args.seed_only, &options).await
            }
            RehearseBackend::Lab => {
                let options = RehearseOptions {
                    concurrency: args.concurrency,
                    trace: traced,
                    ..RehearseOptions::lab()
                };
                provision_harness::rehearse::rehearse_lab(&options).await
            }
        }
    }
    .instrument(capture.span("rehearse"))
    .await
    .map_err(internal)?;
    if let Some(path) = &args.trace {
        write_trace(path, &capture)?;
    }
    if !args.no_html {
        let timelines: Vec<_> = report.runs.iter().map(|r| r.timeline.clone()).collect();
        provision_harness::report_html::write_page(&args.html, "rehearse", &timelines)
            .with_context(|| format!("writing the HTML report {}", args.html.display()))
            .map_err(internal)?;
        eprintln!("HTML report: {}", args.html.display());
    }
    if args.json {
        print_json(&report)?;
    } else {
        print_rehearsal(&report);
    }
    if args.strict && report.has_problems() {
        let plan_fails = report
            .runs
            .iter()
            .any(|r| r.plan.verdict == Verdict::WouldFail);
        return Ok(if plan_fails {
            EXIT_WOULD_FAIL
        } else {
            EXIT_VM_FAILED
        });
    }
    Ok(0)
}

/// Writes what `capture` recorded to `path` and says where it went.
fn write_trace(path: &Path, capture: &trace::Capture) -> Result<(), Failure> {
    capture
        .take()
        .write(path)
        .with_context(|| format!("writing the trace {}", path.display()))
        .map_err(internal)?;
    eprintln!(
        "trace: {} (open it in ui.perfetto.dev or chrome://tracing)",
        path.display()
    );
    Ok(())
}

/// `rehearse --stack`: progress on stderr, the rollout and the cluster on stdout.
async fn run_rehearse_stack(args: RehearseArgs) -> Result<u8, Failure> {
    // A SIGTERM (Ctrl-C aside, what a CI timeout sends) must not leave guests' disks behind.
    vm_lab::lab::remove_run_dirs_on_sigterm().map_err(internal)?;
    let options = RehearseOptions {
        concurrency: args.concurrency,
        ..provision_harness::rehearse_stack::stack_options()
    };
    let started = std::time::Instant::now();
    let progress = move |line: &str| {
        eprintln!("[{:>6.1} s] {line}", started.elapsed().as_secs_f64());
    };
    let report = provision_harness::rehearse_stack::rehearse_stack(&options, &progress)
        .await
        .map_err(internal)?;
    if !args.no_html {
        provision_harness::report_html::write_page(
            &args.html,
            "rehearse --stack",
            std::slice::from_ref(&report.run.timeline),
        )
        .with_context(|| format!("writing the HTML report {}", args.html.display()))
        .map_err(internal)?;
        eprintln!("HTML report: {}", args.html.display());
    }
    if args.json {
        print_json(&report)?;
    } else {
        println!("==== {} ====\n", report.run.label);
        print!("{}", render_rollout("DEPLOY", &report.run.deploy));
        println!(
            "\nCLUSTER  {} members ({}), leader {}; a key written on node01 read back on node03",
            report.members.len(),
            report.members.join(", "),
            report.leader
        );
        let ms = |k: &str| report.phases_ms.get(k).copied().unwrap_or(0) as f64 / 1000.0;
        println!(
            "TIME     deploy {:.1} s, cluster (SSH to quorum) {:.1} s, total {:.1} s",
            ms("deploy"),
            ms("cluster"),
            ms("total")
        );
    }
    Ok(0)
}

fn run_merge(dirs: &[PathBuf], out: &Path) -> Result<u8, Failure> {
    use provision_harness::suite::merge::{MergeError, merge};
    let merged = merge(dirs, out).map_err(|e| match e {
        MergeError::Io { .. } => internal(e),
        _ => bad(e),
    })?;
    for p in &merged.problems {
        eprintln!("warning: {p}");
    }
    for s in &merged.shards {
        println!(
            "{}: {} scenarios, {} failed, {:.1} s",
            s.label, s.scenarios, s.failed, s.seconds
        );
    }
    println!(
        "merged: {} scenarios, {} failed, {} skipped; {} files and {} in {}",
        merged.scenarios,
        merged.failed,
        merged.skipped,
        merged.written.len(),
        provision_harness::suite::merge::SUMMARY_HTML,
        out.display()
    );
    Ok(if merged.failed > 0 { EXIT_VM_FAILED } else { 0 })
}

fn print_rehearsal(report: &RehearseReport) {
    for r in &report.runs {
        println!("==== {} ====\n", r.label);
        print!("{}", render_plan(&r.plan));
        println!();
        print!("{}", render_rollout("DEPLOY", &r.deploy));
        println!();
    }
    println!("rehearsal finished in {} ms", report.elapsed_ms);
}
