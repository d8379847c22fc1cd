//! The `vm-lab` command line: `up` starts a supervisor process that owns the lab (its
//! namespace and QEMUs) and outlives the command; `status`, `ssh`, `exec`, `logs`, `fault` and
//! `down` find the lab through `lab.json` in its run directory.

mod cloud;
mod guest;
mod inspect;
mod lifecycle;
mod net;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use vm_lab::lab::default_run_root;
use vm_lab::{AccelChoice, LabOptions};

use cloud::ImageKind;
use guest::{WaitFor, clock, exec, image, inject_fault, shell, ssh, start, wait};
use inspect::{logs, status};
use lifecycle::{down, prune, restore, snapshot, snapshots, supervise, up};
use net::{NetCmd, net};

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
    /// Attach to a node's serial console (a root shell); Ctrl-] leaves.
    Shell {
        node: String,
        #[arg(long)]
        lab: Option<String>,
        /// Leave once the console prints a match of this regex (for scripts).
        #[arg(long)]
        until: Option<String>,
        /// Seconds to wait for --until.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
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
    /// Per-link network faults: partition, cut, delay, loss, shape, heal, show.
    Net {
        #[command(subcommand)]
        cmd: NetCmd,
        #[arg(long, global = true)]
        lab: Option<String>,
    },
    /// Set a node's wall clock OFFSET from the host's (+2y, -3d, 90s; 0 = host time), or with
    /// no arguments show every node's offset as measured in the guest.
    Clock {
        node: Option<String>,
        #[arg(allow_hyphen_values = true)]
        offset: Option<String>,
        #[arg(long)]
        lab: Option<String>,
    },
    /// Save the whole lab (every node paused, memory + devices + disks) under NAME.
    Snapshot {
        name: String,
        #[arg(long)]
        lab: Option<String>,
    },
    /// Put every node back to the snapshot NAME, together.
    Restore {
        name: String,
        #[arg(long)]
        lab: Option<String>,
    },
    /// List the lab's snapshots.
    Snapshots {
        #[arg(long)]
        lab: Option<String>,
    },
    /// Wait in a node for a condition (bounded; a timeout prints the node's last serial lines).
    Wait {
        node: String,
        what: WaitFor,
        /// The port, pattern, path, process name or command the condition is about.
        arg: String,
        #[arg(long)]
        lab: Option<String>,
        /// Seconds to wait.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Power a node on again (e.g. after `fault NODE kill`), same disk, MACs and boot.
    Start {
        node: String,
        #[arg(long)]
        lab: Option<String>,
        /// Return once QEMU runs instead of when the node is ready.
        #[arg(long)]
        no_wait: bool,
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
        #[command(subcommand)]
        kind: Option<ImageKind>,
    },
}

#[derive(clap::Args, Clone)]
pub(crate) struct UpOpts {
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
    let res = rt.block_on(run(cli.cmd, root));
    // A read of the terminal (`shell`) may still be blocked in a worker: do not wait for it.
    rt.shutdown_background();
    match res {
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
        Cmd::Shell {
            node,
            lab,
            until,
            timeout,
        } => {
            shell(
                &root,
                lab.as_deref(),
                &node,
                until.as_deref(),
                Duration::from_secs(timeout),
            )
            .await
        }
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
        Cmd::Wait {
            node,
            what,
            arg,
            lab,
            timeout,
        } => {
            wait(
                &root,
                lab.as_deref(),
                &node,
                what,
                &arg,
                Duration::from_secs(timeout),
            )
            .await
        }
        Cmd::Clock { node, offset, lab } => {
            clock(&root, lab.as_deref(), node.as_deref(), offset.as_deref()).await
        }
        Cmd::Snapshot { name, lab } => snapshot(&root, lab.as_deref(), &name).await,
        Cmd::Restore { name, lab } => restore(&root, lab.as_deref(), &name).await,
        Cmd::Snapshots { lab } => snapshots(&root, lab.as_deref()),
        Cmd::Net { cmd, lab } => net(&root, lab.as_deref(), cmd).await,
        Cmd::Start { node, lab, no_wait } => start(&root, lab.as_deref(), &node, !no_wait).await,
        Cmd::Down { lab } => down(&root, lab.as_deref()),
        Cmd::Prune => prune(&root),
        Cmd::Image {
            kind:
                Some(ImageKind::Cloud {
                    out,
                    disk_mib,
                    generic_kernel,
                    packages,
                }),
            ..
        } => cloud::cloud_image(out.as_deref(), disk_mib, generic_kernel, packages).await,
        Cmd::Image {
            kind: Some(ImageKind::CtTemplate { out, packages }),
            ..
        } => cloud::ct_template(out.as_deref(), packages).await,
        Cmd::Image { spec, kind: None } => image(spec.as_deref()).await,
    }
}

pub(crate) fn lab_options(opts: &UpOpts, root: &Path) -> Result<LabOptions> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from([
            "vm-lab", "exec", "node01", "--lab", "x", "--", "ping", "-c1", "node02",
        ])
        .expect("parse");
        match cli.cmd {
            Cmd::Exec {
                node, lab, command, ..
            } => {
                assert_eq!(node, "node01");
                assert_eq!(lab.as_deref(), Some("x"));
                assert_eq!(command, ["ping", "-c1", "node02"]);
            }
            _ => panic!("not exec"),
        }
    }

    #[test]
    fn net_partition_takes_both_sides_as_words() {
        let cli = Cli::try_parse_from([
            "vm-lab",
            "net",
            "partition",
            "node01",
            "|",
            "node02,node03",
            "--lab",
            "x",
        ])
        .expect("parse");
        match cli.cmd {
            Cmd::Net {
                cmd: NetCmd::Partition { sides },
                lab,
            } => {
                assert_eq!(sides, ["node01", "|", "node02,node03"]);
                assert_eq!(lab.as_deref(), Some("x"));
            }
            _ => panic!("not net partition"),
        }
        let cli = Cli::try_parse_from(["vm-lab", "net", "delay", "node01", "node02", "100ms"])
            .expect("parse");
        assert!(matches!(
            cli.cmd,
            Cmd::Net {
                cmd: NetCmd::Delay { .. },
                ..
            }
        ));
        let cli = Cli::try_parse_from(["vm-lab", "wait", "node01", "closed-port", "2379"])
            .expect("parse");
        assert!(matches!(
            cli.cmd,
            Cmd::Wait {
                what: WaitFor::ClosedPort,
                ..
            }
        ));
    }

    #[test]
    fn bad_accel_is_a_clear_error() {
        let opts = UpOpts {
            accel: Some("fast".into()),
            keep_on_failure: false,
            cache: None,
        };
        let e = lab_options(&opts, Path::new("/tmp"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto, kvm or tcg"), "{e}");
    }
}
