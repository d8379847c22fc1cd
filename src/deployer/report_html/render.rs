//! Timeline → one self-contained HTML page: inline CSS, inline SVG, no script, no external asset,
//! so the file can be mailed, attached to a CI run, or opened offline.

use std::fmt::Write as _;

use super::model::{Row, StepOutcome, Timeline};

/// Geometry of the picture, in CSS pixels.
const LABEL_W: u64 = 300;
const CHART_W: u64 = 880;
const RIGHT_PAD: u64 = 24;
const LEGEND_H: u64 = 28;
const AXIS_H: u64 = 26;
const ROW_H: u64 = 22;
const BAR_H: u64 = 14;
const MIN_BAR_W: f64 = 2.0;

/// Renders the whole report page for one rollout.
pub fn render(t: &Timeline) -> String {
    render_page(&t.title, std::slice::from_ref(t))
}

/// Renders one page holding several rollouts (e.g. `rehearse`: the seed's, then the fixed one),
/// each with its own heading, picture and table.
pub fn render_page(title: &str, timelines: &[Timeline]) -> String {
    let mut out = String::with_capacity(8 * 1024 + timelines.len() * 32 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n",
        esc(title),
        CSS
    );
    let _ = writeln!(out, "<h1>{}</h1>", esc(title));
    for t in timelines {
        if timelines.len() > 1 {
            let _ = writeln!(out, "<h2>{}</h2>", esc(&t.title));
        }
        section(&mut out, t);
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn section(out: &mut String, t: &Timeline) {
    let rows = t.rows();
    let _ = write!(
        out,
        "<p class=\"meta\">started {} · {} VMs · wall time {}",
        esc(&t.started_at),
        t.vm_rows().len(),
        esc(&fmt_ms(t.span_ms()))
    );
    for (o, n) in t.vm_counts() {
        let _ = write!(
            out,
            " · <span class=\"chip\" style=\"background:{}\">{} {}</span>",
            o.colour(),
            n,
            vm_word(o)
        );
    }
    out.push_str("</p>\n");
    if !t.notes.is_empty() {
        out.push_str("<ul class=\"notes\">\n");
        for n in &t.notes {
            let _ = writeln!(out, "<li>{}</li>", esc(n));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("<figure>\n");
    out.push_str(&svg(t, &rows));
    out.push_str("<figcaption>One row per VM, one bar per step, coloured by outcome; hover a bar for its step, duration and detail.</figcaption>\n</figure>\n");
    out.push_str(&table(&rows));
}

fn vm_word(o: StepOutcome) -> &'static str {
    match o {
        StepOutcome::Ok => "ready",
        StepOutcome::Retried => "ready after retries",
        StepOutcome::Backoff => "waiting",
        StepOutcome::Failed => "failed",
        StepOutcome::Skipped => "skipped",
    }
}

/// The timeline picture alone (legend, time axis, one row per VM).
pub fn svg(t: &Timeline, rows: &[Row<'_>]) -> String {
    let span = t.span_ms().max(1);
    let width = LABEL_W + CHART_W + RIGHT_PAD;
    let top = LEGEND_H + AXIS_H;
    let height = top + ROW_H * rows.len().max(1) as u64 + 8;
    let x_of = |ms: u64| LABEL_W as f64 + ms as f64 * CHART_W as f64 / span as f64;
    let mut s = String::with_capacity(4096 + rows.len() * 768);
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"rollout timeline\">"
    );

    // Legend.
    let mut lx = LABEL_W as f64;
    for o in StepOutcome::ALL {
        let _ = writeln!(
            s,
            "<rect class=\"swatch\" x=\"{lx:.1}\" y=\"6\" width=\"14\" height=\"14\" rx=\"2\" fill=\"{}\"/><text class=\"legend\" x=\"{:.1}\" y=\"17\">{}</text>",
            o.colour(),
            lx + 19.0,
            o.label()
        );
        lx += 19.0 + 7.5 * o.label().len() as f64 + 22.0;
    }

    // Time axis with grid lines.
    let step = tick_step(span);
    let mut tick = 0;
    while tick <= span {
        let x = x_of(tick);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{}\">{}</text>",
            top - 4,
            height - 4,
            top - 9,
            esc(&fmt_ms(tick))
        );
        tick += step;
    }

    if rows.is_empty() {
        let _ = writeln!(
            s,
            "<text class=\"empty\" x=\"{}\" y=\"{}\">no steps were recorded</text>",
            LABEL_W + 8,
            top + 15
        );
    }
    for (i, row) in rows.iter().enumerate() {
        let y = top + ROW_H * i as u64;
        if i % 2 == 1 {
            let _ = writeln!(
                s,
                "<rect class=\"band\" x=\"0\" y=\"{y}\" width=\"{width}\" height=\"{ROW_H}\"/>"
            );
        }
        let label = if row.group.is_empty() {
            row.vm.to_string()
        } else {
            format!("{} · {}", row.vm, row.group)
        };
        let _ = writeln!(
            s,
            "<text class=\"vm\" x=\"{}\" y=\"{}\"><title>{}</title>{}</text>",
            LABEL_W - 8,
            y + 15,
            esc(&label),
            esc(&truncate(&label, 40))
        );
        let bar_y = y + (ROW_H - BAR_H) / 2;
        for e in &row.entries {
            let x = x_of(e.start_ms);
            let w = (x_of(e.end_ms) - x).max(MIN_BAR_W);
            let mut tip = format!(
                "{} · {} · {} · {}",
                e.vm,
                e.step,
                fmt_ms(e.duration_ms()),
                e.outcome.label()
            );
            if !e.detail.is_empty() {
                tip.push('\n');
                tip.push_str(&e.detail);
            }
            let _ = writeln!(
                s,
                "<rect class=\"bar {}\" x=\"{x:.1}\" y=\"{bar_y}\" width=\"{w:.1}\" height=\"{BAR_H}\" fill=\"{}\"><title>{}</title></rect>",
                e.outcome.label(),
                e.outcome.colour(),
                esc(&tip)
            );
            // Name the step inside its bar when it fits (about 5.6 px per character at 10 px).
            if w >= 5.6 * e.step.len() as f64 + 6.0 {
                let _ = writeln!(
                    s,
                    "<text class=\"step\" x=\"{:.1}\" y=\"{}\">{}</text>",
                    x + 3.0,
                    bar_y + 11,
                    esc(&e.step)
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

fn table(rows: &[Row<'_>]) -> String {
    let mut s = String::from(
        "<table>\n<thead><tr><th>VM</th><th>site</th><th>outcome</th><th>attempts</th><th>steps</th><th>time</th><th>detail</th></tr></thead>\n<tbody>\n",
    );
    for r in rows {
        let o = r.outcome();
        let attempts = 1 + r
            .entries
            .iter()
            .filter(|e| e.outcome == StepOutcome::Retried)
            .count();
        let steps = r
            .entries
            .iter()
            .filter(|e| e.outcome != StepOutcome::Backoff)
            .count();
        let first = r.entries.iter().map(|e| e.start_ms).min().unwrap_or(0);
        let last = r.entries.iter().map(|e| e.end_ms).max().unwrap_or(0);
        let detail = r
            .entries
            .iter()
            .rev()
            .find(|e| !e.detail.is_empty())
            .map(|e| format!("{}: {}", e.step, e.detail))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td><span class=\"chip\" style=\"background:{}\">{}</span></td><td>{attempts}</td><td>{steps}</td><td>{}</td><td class=\"detail\">{}</td></tr>",
            esc(r.vm),
            esc(r.group),
            o.colour(),
            vm_word(o),
            esc(&fmt_ms(last.saturating_sub(first))),
            esc(&detail)
        );
    }
    s.push_str("</tbody>\n</table>\n");
    s
}

/// A round tick interval (1, 2 or 5 × 10ⁿ ms) giving at most about ten ticks over `span`.
pub fn tick_step(span_ms: u64) -> u64 {
    let mut unit = 1u64;
    loop {
        for m in [1, 2, 5] {
            let step = unit.saturating_mul(m);
            if span_ms / step <= 10 {
                return step;
            }
        }
        unit = unit.saturating_mul(10);
    }
}

/// Milliseconds as people read them: `850 ms`, `1.5 s`, `2 min 5 s`.
pub fn fmt_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let s = ms as f64 / 1000.0;
        if ms.is_multiple_of(1000) {
            format!("{} s", ms / 1000)
        } else {
            format!("{s:.1} s")
        }
    } else {
        let secs = ms / 1000;
        if secs.is_multiple_of(60) {
            format!("{} min", secs / 60)
        } else {
            format!("{} min {} s", secs / 60, secs % 60)
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Escapes text for HTML and SVG content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const CSS: &str = "
body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:20px;margin:0 0 6px}
h2{font-size:16px;margin:22px 0 4px}
.meta{font-size:13px;color:#444;margin:0 0 10px}
.chip{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:12px;text-shadow:0 0 2px #0006}
.notes{font-size:13px;color:#7a3b00;margin:4px 0 10px}
figure{margin:0 0 18px}
figcaption{font-size:12px;color:#555;margin-top:4px}
svg.timeline{display:block;font-family:'DejaVu Sans',Verdana,sans-serif}
svg .legend{font-size:12px;fill:#222}
svg .tick{font-size:10px;fill:#555;text-anchor:middle}
svg .grid{stroke:#d8dce0;stroke-width:1}
svg .band{fill:#f3f5f7}
svg .vm{font-size:12px;fill:#222;text-anchor:end}
svg .bar{stroke:#fff;stroke-width:1}
svg .step{font-size:10px;fill:#fff;pointer-events:none}
svg .empty{font-size:13px;fill:#777}
table{border-collapse:collapse;font-size:12px}
th,td{border-bottom:1px solid #e1e4e8;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7}
td.detail{max-width:560px;word-break:break-word}
";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::deployer::report_html::model::Entry;

    fn entry(vm: &str, step: &str, a: u64, b: u64, o: StepOutcome, detail: &str) -> Entry {
        Entry {
            vm: vm.into(),
            group: "site-1".into(),
            step: step.into(),
            start_ms: a,
            end_ms: b,
            outcome: o,
            detail: detail.into(),
        }
    }

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(tick_step(0), 1);
        assert_eq!(tick_step(9), 1);
        assert_eq!(tick_step(95), 10);
        assert_eq!(tick_step(1_500), 200);
        assert_eq!(tick_step(42_000), 5_000);
        for span in [1, 7, 33, 999, 12_345, 600_000, u64::MAX / 4] {
            let s = tick_step(span);
            assert!(span / s <= 10, "{span} -> {s}");
        }
    }

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(fmt_ms(850), "850 ms");
        assert_eq!(fmt_ms(2000), "2 s");
        assert_eq!(fmt_ms(1500), "1.5 s");
        assert_eq!(fmt_ms(125_000), "2 min 5 s");
        assert_eq!(fmt_ms(120_000), "2 min");
    }

    #[test]
    fn hostile_text_is_escaped_everywhere() {
        let t = Timeline {
            title: "<script>alert(1)</script>".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            elapsed_ms: 10,
            entries: vec![entry(
                "vm\"><img src=x>",
                "create",
                0,
                5,
                StepOutcome::Failed,
                "a & b <c>",
            )],
            notes: vec!["<b>".into()],
        };
        let html = render(&t);
        assert!(!html.contains("<script>"));
        assert!(!html.contains("<img"));
        assert!(!html.contains("<b>"));
        assert!(html.contains("a &amp; b &lt;c&gt;"));
    }

    #[test]
    fn one_bar_per_entry_coloured_by_outcome_and_no_external_asset() {
        let t = Timeline {
            title: "rollout".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            elapsed_ms: 3000,
            entries: vec![
                entry("a", "create", 0, 1000, StepOutcome::Ok, ""),
                entry("a", "start", 1000, 2000, StepOutcome::Retried, "node down"),
                entry("a", "backoff", 2000, 2500, StepOutcome::Backoff, ""),
                entry("a", "start", 2500, 3000, StepOutcome::Ok, ""),
                entry("b", "create", 100, 900, StepOutcome::Failed, "storage full"),
            ],
            notes: vec![],
        };
        let html = render(&t);
        assert_eq!(html.matches("<rect class=\"bar ").count(), 5);
        assert_eq!(html.matches("class=\"bar failed\"").count(), 1);
        assert!(html.contains(StepOutcome::Retried.colour()));
        for needle in ["src=", "href=", "<script", "<link", "url("] {
            assert!(!html.contains(needle), "external reference {needle}");
        }
        // a ended ready after a retry, b failed.
        let rows = t.rows();
        assert_eq!(rows[0].vm, "a");
        assert_eq!(rows[0].outcome(), StepOutcome::Retried);
        assert_eq!(rows[1].outcome(), StepOutcome::Failed);
        assert!(html.contains("storage full"));
    }

    #[test]
    fn empty_timeline_renders_a_message() {
        let t = Timeline {
            title: "nothing".into(),
            started_at: String::new(),
            elapsed_ms: 0,
            entries: vec![],
            notes: vec![],
        };
        assert!(render(&t).contains("no steps were recorded"));
    }
}
