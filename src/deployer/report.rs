//! Terminal rendering of plans and rollouts (the `--json` output is the structs themselves).

use std::fmt::Write;

use crate::deployer::deploy::{Outcome, RolloutResult};
use crate::deployer::plan::{PlanReport, Severity};

/// Left-aligned columns sized to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$}  ");
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    out.push('\n');
    out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.clone()));
        out.push('\n');
    }
    out
}

fn ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "-".into())
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn render_plan(p: &PlanReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PLAN: {} manifests ({} readable, {} unreadable)\n",
        p.manifests,
        p.vms.len(),
        p.unreadable.len()
    );
    let rows: Vec<Vec<String>> = p
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.site.clone(),
                n.node.clone(),
                if n.online { "online" } else { "DOWN" }.into(),
                n.new_vms.to_string(),
                format!("{} + {}", n.requested_cores, n.existing_cores),
                opt(n.cpu_threads),
                ratio(n.cpu_ratio),
                format!(
                    "{} + {}",
                    n.requested_memory_mib / 1024,
                    n.existing_memory_mib / 1024
                ),
                opt(n.memory_total_mib.map(|m| m / 1024)),
                n.memory_ratio
                    .map(|r| format!("{:.0}%", r * 100.0))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "SITE",
            "NODE",
            "STATUS",
            "NEW VMS",
            "vCPU new+old",
            "THREADS",
            "CPU",
            "MEM GiB new+old",
            "MEM GiB",
            "MEM",
        ],
        &rows,
    ));
    out.push('\n');
    let rows: Vec<Vec<String>> = p
        .storages
        .iter()
        .map(|s| {
            vec![
                s.node.clone(),
                s.storage.clone(),
                opt(s.kind.clone()),
                if s.holds_vm_disks { "yes" } else { "NO" }.into(),
                if !s.holds_vm_disks {
                    "-"
                } else if s.thin {
                    "thin"
                } else {
                    "thick"
                }
                .into(),
                s.new_vms.to_string(),
                s.requested_gib.to_string(),
                opt(s.avail_gib),
                opt(s.total_gib),
                ratio(s.ratio),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "NODE",
            "STORAGE",
            "TYPE",
            "VM DISKS",
            "ALLOC",
            "NEW VMS",
            "REQ GiB",
            "FREE GiB",
            "TOTAL GiB",
            "REQ/FREE",
        ],
        &rows,
    ));
    if !p.findings.is_empty() {
        out.push('\n');
        for f in &p.findings {
            let tag = match f.severity {
                Severity::Error => "ERROR",
                Severity::Warning => "WARN ",
                Severity::Info => "INFO ",
            };
            let _ = writeln!(out, "{tag} {}: {}", f.subject, f.message);
        }
    }
    let _ = writeln!(
        out,
        "\nverdict: {} ({} errors, {} warnings)",
        p.verdict.text().to_uppercase(),
        p.errors(),
        p.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count()
    );
    out
}

/// Condition reasons summarised once under the table instead of per row.
const NOTED: &[&str] = &[];

pub fn render_rollout(title: &str, r: &RolloutResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}\n");
    let rows: Vec<Vec<String>> = r
        .vms
        .iter()
        .map(|v| {
            let detail = match (&v.error, v.outcome) {
                (Some(e), Outcome::Failed | Outcome::Skipped) => {
                    format!("{}: {}", e.reason, e.message)
                }
                _ => v
                    .conditions
                    .iter()
                    .filter(|c| c.status == "False" && !NOTED.contains(&c.reason.as_str()))
                    .map(|c| format!("{}: {}", c.reason, c.message))
                    .collect::<Vec<_>>()
                    .join("; "),
            };
            vec![
                v.wave.clone(),
                v.name.clone(),
                v.node.clone(),
                format!("{:?}", v.outcome).to_lowercase(),
                opt(v.vmid),
                opt(v.state.clone()),
                opt(v.ip.clone()),
                v.attempts.to_string(),
                detail,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "WAVE", "VM", "NODE", "OUTCOME", "VMID", "STATE", "IP", "TRIES", "DETAIL",
        ],
        &rows,
    ));
    for u in &r.unreadable {
        let _ = writeln!(
            out,
            "unreadable {}{}: {}",
            u.path,
            u.line.map(|l| format!(":{l}")).unwrap_or_default(),
            u.error
        );
    }
    // Conditions every VM shares are said once, under the table.
    for reason in NOTED {
        let with: Vec<&str> = r
            .vms
            .iter()
            .filter(|v| {
                v.conditions
                    .iter()
                    .any(|c| c.status == "False" && c.reason == *reason)
            })
            .map(|v| v.name.as_str())
            .collect();
        if let Some(example) = r
            .vms
            .iter()
            .flat_map(|v| &v.conditions)
            .find(|c| c.status == "False" && c.reason == *reason)
        {
            let _ = writeln!(
                out,
                "note: {} VMs — {}: {}",
                with.len(),
                reason,
                example.message
            );
        }
    }
    let s = &r.summary;
    let _ = writeln!(
        out,
        "\n{} VMs: {} ready, {} failed, {} skipped, {} unreadable ({} ms)",
        s.total, s.ready, s.failed, s.skipped, s.unreadable, r.elapsed_ms
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(
            &["A", "BB"],
            &[vec!["xxx".into(), "y".into()], vec!["z".into(), "w".into()]],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "A    BB");
        assert_eq!(lines[2], "xxx  y");
        assert_eq!(lines[3], "z    w");
    }
}
