//! Finding labs by their `lab.json`, `status`, `logs`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use vm_lab::lab::LabState;
use vm_lab::namespace::alive;

/// Labs under the run root, newest first.
pub(super) fn labs(root: &Path) -> Vec<LabState> {
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

pub(super) fn find_lab(root: &Path, which: Option<&str>) -> Result<LabState> {
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

pub(super) async fn status(root: &Path, which: Option<&str>) -> Result<ExitCode> {
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

pub(super) fn logs(
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
