//! `vm-lab net`: per-link network faults on a running lab (see `vm_lab::netfault`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use vm_lab::Node;
use vm_lab::netfault::{self, LinkFault, NetFaults, parse_duration, parse_percent, parse_sides};

use super::inspect::find_lab;

#[derive(clap::Subcommand, Clone, Debug)]
pub(crate) enum NetCmd {
    /// No packet crosses between two sets of nodes: `node01 '|' node02,node03` (quote the bar).
    Partition {
        #[arg(required = true, num_args = 1..)]
        sides: Vec<String>,
    },
    /// One way: packets from FROM no longer reach TO (FROM still hears them).
    Cut { from: String, to: String },
    /// Delay every packet between A and B by DELAY in each direction (e.g. 100ms).
    Delay {
        a: String,
        b: String,
        delay: String,
        #[arg(long)]
        jitter: Option<String>,
    },
    /// Lose PERCENT of the packets between A and B, each direction.
    Loss {
        a: String,
        b: String,
        percent: String,
    },
    /// Any mix of delay, jitter, loss, duplication and rate between A and B.
    Shape {
        a: String,
        b: String,
        #[arg(long)]
        delay: Option<String>,
        #[arg(long)]
        jitter: Option<String>,
        #[arg(long)]
        loss: Option<String>,
        #[arg(long)]
        duplicate: Option<String>,
        /// kbit/s
        #[arg(long)]
        rate_kbit: Option<u64>,
    },
    /// Clear every fault.
    Heal,
    /// Print the faults in force.
    Show,
}

/// One edit of the lab's faults.
type Change = Box<dyn FnOnce(&mut NetFaults) -> vm_lab::Result<()>>;

pub(super) async fn net(root: &Path, which: Option<&str>, cmd: NetCmd) -> Result<ExitCode> {
    let s = find_lab(root, which)?;
    let nodes: Vec<Node> = s
        .nodes
        .iter()
        .map(|n| s.attach(n))
        .collect::<vm_lab::Result<_>>()?;
    let refs: Vec<&Node> = nodes.iter().collect();
    let opt_ms = |v: &Option<String>| v.as_deref().map(parse_duration).transpose();
    let opt_pct = |v: &Option<String>| v.as_deref().map(parse_percent).transpose();
    let change: Change = match cmd {
        NetCmd::Show => {
            print(&NetFaults::load(&s.run_dir)?);
            return Ok(ExitCode::SUCCESS);
        }
        NetCmd::Partition { sides } => {
            let (a, b) = parse_sides(&sides)?;
            Box::new(move |f| {
                f.partition(&strs(&a), &strs(&b));
                Ok(())
            })
        }
        NetCmd::Cut { from, to } => {
            let to: Vec<String> = to.split(',').map(str::to_string).collect();
            Box::new(move |f| {
                f.cut(&from, &strs(&to));
                Ok(())
            })
        }
        NetCmd::Delay {
            a,
            b,
            delay,
            jitter,
        } => {
            let shape = LinkFault {
                delay: Some(parse_duration(&delay)?),
                jitter: opt_ms(&jitter)?,
                ..LinkFault::default()
            };
            Box::new(move |f| f.shape(&a, &b, shape))
        }
        NetCmd::Loss { a, b, percent } => {
            let shape = LinkFault {
                loss_pct: Some(parse_percent(&percent)?),
                ..LinkFault::default()
            };
            Box::new(move |f| f.shape(&a, &b, shape))
        }
        NetCmd::Shape {
            a,
            b,
            delay,
            jitter,
            loss,
            duplicate,
            rate_kbit,
        } => {
            let shape = LinkFault {
                drop: false,
                delay: opt_ms(&delay)?,
                jitter: opt_ms(&jitter)?,
                loss_pct: opt_pct(&loss)?,
                duplicate_pct: opt_pct(&duplicate)?,
                rate_kbit,
            };
            if shape.is_clear() {
                bail!("shape: give at least one of --delay, --loss, --duplicate, --rate-kbit");
            }
            Box::new(move |f| f.shape(&a, &b, shape))
        }
        NetCmd::Heal => Box::new(|f| {
            f.heal();
            Ok(())
        }),
    };
    let now = netfault::update(&s.run_dir, &refs, change).await?;
    print(&now);
    Ok(ExitCode::SUCCESS)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn print(f: &NetFaults) {
    let list = f.list();
    if list.is_empty() {
        println!("no network faults");
    }
    for d in list {
        println!("{} -> {}: {}", d.from, d.to, d.fault.netem_args());
    }
}
