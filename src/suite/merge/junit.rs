//! JUnit XML as cucumber-rs writes it (`<testsuites>` → `<testsuite>` per feature →
//! `<testcase>` per scenario): read, joined by suite name, written back. Test cases are kept
//! byte for byte (their failure, output and all); only the suites' counts are recomputed.

use std::fmt::Write as _;

use quick_xml::escape::escape;
use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JunitError {
    #[error("empty file (did the run end before writing its report?)")]
    Empty,
    #[error("no <testsuites> or <testsuite> element")]
    NoSuites,
    #[error("XML error at byte {at}: {msg}")]
    Xml { at: u64, msg: String },
    #[error("the document ends inside a {0} element (truncated?)")]
    Truncated(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Skipped,
    Failed,
    Errored,
}

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub name: String,
    pub seconds: f64,
    pub outcome: Outcome,
    /// The failure's or error's message (or type when it has none).
    pub message: Option<String>,
    /// The element exactly as the shard wrote it.
    pub raw: String,
    /// Which shard's report it came from.
    pub shard: String,
}

/// One `<testsuite>` (a feature).
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    pub name: String,
    pub timestamp: Option<String>,
    pub cases: Vec<Case>,
}

impl Suite {
    fn count(&self, o: Outcome) -> usize {
        self.cases.iter().filter(|c| c.outcome == o).count()
    }

    fn seconds(&self) -> f64 {
        self.cases.iter().map(|c| c.seconds).sum()
    }
}

fn attr(e: &BytesStart<'_>, name: &str) -> Option<String> {
    e.try_get_attribute(name)
        .ok()
        .flatten()
        .and_then(|a| a.normalized_value(XmlVersion::Implicit1_0).ok())
        .map(|v| v.into_owned())
}

fn xml_err(at: u64, e: impl std::fmt::Display) -> JunitError {
    JunitError::Xml {
        at,
        msg: e.to_string(),
    }
}

/// Reads one JUnit report; every case is labelled with `shard`.
pub fn parse(xml: &str, shard: &str) -> Result<Vec<Suite>, JunitError> {
    if xml.trim().is_empty() {
        return Err(JunitError::Empty);
    }
    let mut reader = Reader::from_str(xml);
    let mut suites = Vec::new();
    let mut suite: Option<Suite> = None;
    let mut case: Option<(usize, Case)> = None;
    let mut seen_root = false;
    loop {
        let at = reader.buffer_position();
        let ev = reader.read_event().map_err(|e| xml_err(at, e))?;
        match ev {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == b"testsuites" => {
                seen_root = true;
            }
            Event::Start(e) if e.name().as_ref() == b"testsuite" => {
                seen_root = true;
                suite = Some(Suite {
                    name: attr(&e, "name").unwrap_or_default(),
                    timestamp: attr(&e, "timestamp"),
                    cases: Vec::new(),
                });
            }
            Event::End(e) if e.name().as_ref() == b"testsuite" => {
                suites.extend(suite.take());
            }
            Event::Start(e) if e.name().as_ref() == b"testcase" => {
                case = Some((at as usize, new_case(&e, shard)));
            }
            Event::Empty(e) if e.name().as_ref() == b"testcase" => {
                let mut c = new_case(&e, shard);
                c.raw = slice(xml, at as usize, reader.buffer_position() as usize);
                if let Some(s) = suite.as_mut() {
                    s.cases.push(c);
                }
            }
            Event::Start(e) | Event::Empty(e) => {
                if let Some((_, c)) = case.as_mut() {
                    mark(c, &e);
                }
            }
            Event::End(e) if e.name().as_ref() == b"testcase" => {
                if let Some((start, mut c)) = case.take() {
                    c.raw = slice(xml, start, reader.buffer_position() as usize);
                    if let Some(s) = suite.as_mut() {
                        s.cases.push(c);
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if case.is_some() {
        return Err(JunitError::Truncated("testcase"));
    }
    if suite.is_some() {
        return Err(JunitError::Truncated("testsuite"));
    }
    if !seen_root {
        return Err(JunitError::NoSuites);
    }
    Ok(suites)
}

fn slice(xml: &str, from: usize, to: usize) -> String {
    xml.get(from..to).unwrap_or_default().trim().to_owned()
}

fn new_case(e: &BytesStart<'_>, shard: &str) -> Case {
    Case {
        name: attr(e, "name").unwrap_or_default(),
        seconds: attr(e, "time").and_then(|t| t.parse().ok()).unwrap_or(0.0),
        outcome: Outcome::Passed,
        message: None,
        raw: String::new(),
        shard: shard.to_owned(),
    }
}

/// A `<failure>`, `<error>` or `<skipped>` child sets the case's outcome.
fn mark(c: &mut Case, e: &BytesStart<'_>) {
    let outcome = match e.name().as_ref() {
        b"failure" => Outcome::Failed,
        b"error" => Outcome::Errored,
        b"skipped" => Outcome::Skipped,
        _ => return,
    };
    c.outcome = outcome;
    if outcome != Outcome::Skipped {
        c.message = attr(e, "message").or_else(|| attr(e, "type"));
    }
}

/// A suite holding one failed case that says a shard's report is missing or unreadable, so the
/// merged report fails where that shard's scenarios would have been.
pub fn missing(shard: &str, file: &str, why: &str) -> Suite {
    let name = format!("{shard}: {file}");
    let message = format!("the shard's report {file} is missing or unreadable: {why}");
    let raw = format!(
        "<testcase name=\"{}\" time=\"0\">\n<failure type=\"Shard report missing\" message=\"{}\"/>\n</testcase>",
        escape(name.as_str()),
        escape(message.as_str())
    );
    Suite {
        name: "Shard reports".into(),
        timestamp: None,
        cases: vec![Case {
            name,
            seconds: 0.0,
            outcome: Outcome::Failed,
            message: Some(message),
            raw,
            shard: shard.to_owned(),
        }],
    }
}

/// Joins suites of the same name (a feature split over shards), in order of first appearance;
/// cases in a suite ordered by their line in the feature file when the name tells it.
pub fn join(parts: Vec<Vec<Suite>>) -> Vec<Suite> {
    let mut out: Vec<Suite> = Vec::new();
    for s in parts.into_iter().flatten() {
        match out.iter_mut().find(|o| o.name == s.name) {
            Some(o) => {
                o.cases.extend(s.cases);
                if o.timestamp.is_none() || (s.timestamp.is_some() && s.timestamp < o.timestamp) {
                    o.timestamp = s.timestamp;
                }
            }
            None => out.push(s),
        }
    }
    for s in &mut out {
        s.cases.sort_by_key(|c| line_of(&c.name));
    }
    out
}

/// cucumber-rs names a case `Scenario: NAME: path:LINE:COL`.
fn line_of(case_name: &str) -> usize {
    let mut parts = case_name.rsplit(':');
    let _col = parts.next();
    parts
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(usize::MAX)
}

/// The joined report as one JUnit document.
pub fn render(suites: &[Suite]) -> String {
    let total = |o| suites.iter().map(|s| s.count(o)).sum::<usize>();
    let tests: usize = suites.iter().map(|s| s.cases.len()).sum();
    let secs: f64 = suites.iter().map(Suite::seconds).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites tests=\"{tests}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{secs:.3}\">",
        total(Outcome::Failed),
        total(Outcome::Errored),
        total(Outcome::Skipped)
    );
    for (id, s) in suites.iter().enumerate() {
        let _ = write!(
            out,
            "<testsuite id=\"{id}\" name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\"",
            escape(s.name.as_str()),
            s.cases.len(),
            s.count(Outcome::Failed),
            s.count(Outcome::Errored),
            s.count(Outcome::Skipped),
            s.seconds()
        );
        if let Some(t) = &s.timestamp {
            let _ = write!(out, " timestamp=\"{}\"", escape(t.as_str()));
        }
        out.push_str(">\n");
        for c in &s.cases {
            out.push_str(&c.raw);
            out.push('\n');
        }
        out.push_str("</testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const DOC: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites>
<testsuite id="0" name="Feature: Auth: features/rollout/auth.feature" tests="2" failures="1" timestamp="2026-01-01T00:00:00Z">
<testcase name="Scenario: b &amp; c: features/rollout/auth.feature:20:3" time="2.5"><failure type="Step Panicked" message="401 &lt;Authentication failed!&gt;"/><system-out>out</system-out></testcase>
<testcase name="Scenario: a: features/rollout/auth.feature:8:3" time="1.25"/>
</testsuite>
</testsuites>"#;

    #[test]
    fn reads_cases_outcomes_messages_and_keeps_them_verbatim() {
        let s = parse(DOC, "shard-1-of-2").unwrap();
        assert_eq!(s.len(), 1);
        let c = &s[0].cases;
        assert_eq!(
            c[0].name,
            "Scenario: b & c: features/rollout/auth.feature:20:3"
        );
        assert_eq!(c[0].outcome, Outcome::Failed);
        assert_eq!(
            c[0].message.as_deref(),
            Some("401 <Authentication failed!>")
        );
        assert!(c[0].raw.starts_with("<testcase") && c[0].raw.ends_with("</testcase>"));
        assert!(c[0].raw.contains("<system-out>out</system-out>"));
        assert_eq!((c[1].outcome, c[1].seconds), (Outcome::Passed, 1.25));
        assert_eq!(
            c[1].raw,
            r#"<testcase name="Scenario: a: features/rollout/auth.feature:8:3" time="1.25"/>"#
        );
    }

    #[test]
    fn a_feature_split_over_shards_joins_in_file_order_and_renders_back() {
        let one = parse(DOC, "s1").unwrap();
        let mut other = one.clone();
        other[0].cases.truncate(0);
        let two = parse(
            &DOC.replace(":20:3", ":14:3").replace(":8:3", ":30:3"),
            "s2",
        )
        .unwrap();
        let joined = join(vec![one, two, other]);
        assert_eq!(joined.len(), 1);
        let lines: Vec<usize> = joined[0].cases.iter().map(|c| line_of(&c.name)).collect();
        assert_eq!(lines, [8, 14, 20, 30]);
        let xml = render(&joined);
        let again = parse(&xml, "m").unwrap();
        assert_eq!(again[0].cases.len(), 4);
        assert!(
            xml.contains("tests=\"4\" failures=\"2\" errors=\"0\" skipped=\"0\" time=\"7.500\""),
            "{xml}"
        );
    }

    #[test]
    fn empty_truncated_and_foreign_documents_are_errors() {
        assert_eq!(parse("  \n", "s"), Err(JunitError::Empty));
        let cut = &DOC[..DOC.find("<testcase name=\"Scenario: a").unwrap() + 20];
        assert!(parse(cut, "s").is_err());
        assert_eq!(parse("<html></html>", "s"), Err(JunitError::NoSuites));
    }

    #[test]
    fn a_missing_report_is_a_failed_case_that_survives_escaping() {
        let s = missing(
            "shard-2-of-3",
            "lab-junit.xml",
            "XML error at byte 3: <bad> & \"quoted\"",
        );
        let xml = render(&[s]);
        let back = parse(&xml, "m").unwrap();
        let c = &back[0].cases[0];
        assert_eq!(c.outcome, Outcome::Failed);
        assert!(c.message.as_deref().unwrap().contains("<bad> & \"quoted\""));
    }
}
