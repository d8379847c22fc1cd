//! The merged run as one self-contained HTML page: totals, one row per shard (the longest
//! marked), the failures first with their messages and shards, then every report's features
//! and scenarios. Inline CSS, no script, no external asset.

use std::fmt::Write as _;

use super::junit::{Case, Outcome, Suite};
use super::{Merged, ShardStat};
use crate::deployer::report_html::esc;

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0);
    if s >= 60.0 {
        format!(
            "{} min {:02} s",
            (s / 60.0).floor() as u64,
            (s % 60.0).floor() as u64
        )
    } else {
        format!("{s:.1} s")
    }
}

fn outcome_chip(o: Outcome) -> &'static str {
    match o {
        Outcome::Passed => "<span class=\"chip ok\">passed</span>",
        Outcome::Skipped => "<span class=\"chip skip\">skipped</span>",
        Outcome::Failed => "<span class=\"chip bad\">failed</span>",
        Outcome::Errored => "<span class=\"chip bad\">error</span>",
    }
}

/// The page for `merged`, with the joined JUnit reports (file name, suites).
pub fn render(merged: &Merged, files: &[(String, Vec<Suite>)]) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let verdict = if merged.failed > 0 {
        "FAILED"
    } else {
        "passed"
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Merged test report: {verdict}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>Merged test report: {verdict}</h1>\n"
    );
    let _ = writeln!(
        out,
        "<p class=\"meta\">{} shards · {} scenarios · {} passed · {} failed · {} skipped</p>",
        merged.shards.len(),
        merged.scenarios,
        merged.scenarios - merged.failed - merged.skipped,
        merged.failed,
        merged.skipped
    );
    shards(&mut out, &merged.shards);
    if !merged.problems.is_empty() {
        out.push_str("<h2>Shard problems</h2>\n<ul class=\"notes\">\n");
        for p in &merged.problems {
            let _ = writeln!(out, "<li>{}</li>", esc(p));
        }
        out.push_str("</ul>\n");
    }
    failures(&mut out, files);
    for (file, suites) in files {
        let _ = writeln!(out, "<h2>{}</h2>", esc(file));
        for s in suites {
            suite(&mut out, s);
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn shards(out: &mut String, shards: &[ShardStat]) {
    let longest = shards.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let total: f64 = shards.iter().map(|s| s.seconds).sum();
    let ideal = total / shards.len().max(1) as f64;
    let _ = writeln!(
        out,
        "<h2>Shards</h2>\n<p class=\"meta\">longest shard {} · ideal (total / shards) {} · total {}</p>",
        fmt_secs(longest),
        fmt_secs(ideal),
        fmt_secs(total)
    );
    out.push_str("<table>\n<tr><th>shard</th><th>scenarios</th><th>failed</th><th>time (sum of its scenarios)</th></tr>\n");
    for s in shards {
        let mark = if s.seconds == longest && shards.len() > 1 {
            " class=\"longest\""
        } else {
            ""
        };
        let failed = if s.failed > 0 {
            format!("<span class=\"chip bad\">{}</span>", s.failed)
        } else {
            "0".into()
        };
        let _ = writeln!(
            out,
            "<tr{mark}><td>{}</td><td>{}</td><td>{failed}</td><td>{}</td></tr>",
            esc(&s.label),
            s.scenarios,
            fmt_secs(s.seconds)
        );
    }
    out.push_str("</table>\n");
}

fn is_failure(c: &Case) -> bool {
    matches!(c.outcome, Outcome::Failed | Outcome::Errored)
}

fn failures(out: &mut String, files: &[(String, Vec<Suite>)]) {
    let failed: Vec<(&str, &Suite, &Case)> = files
        .iter()
        .flat_map(|(f, suites)| suites.iter().map(move |s| (f.as_str(), s)))
        .flat_map(|(f, s)| {
            s.cases
                .iter()
                .filter(|c| is_failure(c))
                .map(move |c| (f, s, c))
        })
        .collect();
    if failed.is_empty() {
        return;
    }
    let _ = writeln!(out, "<h2>Failures ({})</h2>", failed.len());
    out.push_str("<table>\n<tr><th>report</th><th>feature</th><th>scenario</th><th>shard</th><th>message</th></tr>\n");
    for (file, s, c) in failed {
        let _ = writeln!(
            out,
            "<tr class=\"failed\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"detail\">{}</td></tr>",
            esc(file),
            esc(&s.name),
            esc(&c.name),
            esc(&c.shard),
            esc(c.message.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>\n");
}

fn suite(out: &mut String, s: &Suite) {
    let _ = writeln!(out, "<h3>{}</h3>", esc(&s.name));
    out.push_str(
        "<table>\n<tr><th>scenario</th><th>outcome</th><th>time</th><th>shard</th></tr>\n",
    );
    for c in &s.cases {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.name),
            outcome_chip(c.outcome),
            fmt_secs(c.seconds),
            esc(&c.shard)
        );
    }
    out.push_str("</table>\n");
}

const CSS: &str = "
body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:20px;margin:0 0 6px}
h2{font-size:16px;margin:22px 0 4px}
h3{font-size:14px;margin:14px 0 4px}
.meta{font-size:13px;color:#444;margin:0 0 10px}
.chip{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:12px}
.ok{background:#2da44e}.skip{background:#8c959f}.bad{background:#cf222e}
.notes{font-size:13px;color:#7a3b00;margin:4px 0 10px}
table{border-collapse:collapse;font-size:12px}
th,td{border-bottom:1px solid #e1e4e8;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7}
tr.longest td{font-weight:bold}
tr.failed td{background:#fff5f5}
td.detail{max-width:640px;word-break:break-word;white-space:pre-wrap}
";
