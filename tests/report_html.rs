//! The HTML rollout report: built from a real rollout (the seed's, against an in-process fake), one
//! bar per recorded step, self-contained; and it renders in headless Chromium — the screenshot has
//! the window's size and shows the outcome colours where the bars are. Screenshots stay under
//! target/ (cargo's CARGO_TARGET_TMPDIR) to look at. Needs Debian's `chromium` (or `$CHROMIUM`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use provision_harness::deploy::Outcome;
use provision_harness::rehearse::{RehearseOptions, run, seed_rollout};
use provision_harness::report_html::{self, Entry, Recorder, StepOutcome, Timeline};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Headless Chromium screenshot of `html` at WIDTH×HEIGHT; fails (not skips) without Chromium.
fn screenshot(html: &Path, png: &Path) {
    let browser = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let profile = tempfile::tempdir().unwrap();
    let _ = std::fs::remove_file(png);
    let mut child = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={WIDTH},{HEIGHT}"))
        .arg(format!("file://{}", html.canonicalize().unwrap().display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {browser} (install Debian's `chromium`, or set CHROMIUM): {e}")
        });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{browser} did not finish the screenshot within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{browser} failed: {status}");
    assert!(
        png.is_file(),
        "{browser} wrote no screenshot at {}",
        png.display()
    );
}

/// Width, height and RGB pixels of a PNG.
fn decode(png: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let bytes = std::fs::read(png).unwrap();
    let mut d = png::Decoder::new(std::io::Cursor::new(bytes));
    d.set_transformations(png::Transformations::normalize_to_color8());
    let mut r = d.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Indexed => panic!("palette output after normalize_to_color8"),
    };
    let mut px = Vec::with_capacity((info.width * info.height) as usize);
    for row in buf[..info.line_size * info.height as usize].chunks(info.line_size) {
        for p in row[..info.width as usize * channels].chunks(channels) {
            px.push(if channels >= 3 {
                [p[0], p[1], p[2]]
            } else {
                [p[0], p[0], p[0]]
            });
        }
    }
    (info.width, info.height, px)
}

fn rgb(hex: &str) -> [u8; 3] {
    let h = hex.trim_start_matches('#');
    let c = |i: usize| u8::from_str_radix(&h[i..i + 2], 16).unwrap();
    [c(0), c(2), c(4)]
}

/// Pixels within a small tolerance of `colour`.
fn count_near(px: &[[u8; 3]], colour: [u8; 3]) -> usize {
    px.iter()
        .filter(|p| p.iter().zip(colour).all(|(a, b)| a.abs_diff(b) <= 6))
        .count()
}

fn entry(vm: &str, step: &str, a: u64, b: u64, outcome: StepOutcome) -> Entry {
    Entry {
        vm: vm.into(),
        group: "site-1".into(),
        step: step.into(),
        start_ms: a,
        end_ms: b,
        outcome,
        detail: String::new(),
    }
}

#[test]
fn every_outcome_colour_shows_in_the_rendered_picture() {
    let mut entries = Vec::new();
    for (i, o) in StepOutcome::ALL.iter().enumerate() {
        let vm = format!("vm-{}", o.label());
        let t0 = i as u64 * 200;
        entries.push(entry(&vm, "node-health", t0, t0 + 300, StepOutcome::Ok));
        entries.push(entry(&vm, "create", t0 + 300, t0 + 1500, *o));
    }
    let t = Timeline {
        title: "every outcome".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        elapsed_ms: 3000,
        entries,
        notes: vec![],
    };
    let html = artifacts().join("outcomes.html");
    report_html::write(&html, &t).unwrap();
    let png = artifacts().join("outcomes.png");
    screenshot(&html, &png);
    let (w, h, px) = decode(&png);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    // Each bar is at least 100 px wide and 14 px high; allow for borders and the legend swatch.
    for o in StepOutcome::ALL {
        let n = count_near(&px, rgb(o.colour()));
        assert!(
            n > 1000,
            "{} ({}) covers only {n} px",
            o.label(),
            o.colour()
        );
    }
    let mut distinct: Vec<[u8; 3]> = px.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() > 20,
        "the screenshot is nearly blank ({} colours)",
        distinct.len()
    );
}

#[test]
fn seed_rollout_report_has_a_bar_per_step_and_renders() {
    let recorder = Arc::new(Recorder::new());
    let mut options = RehearseOptions::default();
    recorder.attach(&mut options.deploy);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt
        .block_on(run(seed_rollout(None).unwrap(), &options))
        .unwrap();
    let timeline = recorder.finish(&report.label, &report.deploy);

    // Every VM of the result has a row, and the row ends the way the result says.
    let rows = timeline.rows();
    for vm in &report.deploy.vms {
        let row = rows
            .iter()
            .find(|r| r.vm == vm.name)
            .unwrap_or_else(|| panic!("no row for {}", vm.name));
        assert_eq!(row.group, vm.site);
        let expected = match vm.outcome {
            Outcome::Ready => [StepOutcome::Ok, StepOutcome::Retried].as_slice(),
            Outcome::Failed => &[StepOutcome::Failed],
            _ => &[StepOutcome::Skipped],
        };
        assert!(
            expected.contains(&row.outcome()),
            "{}: {:?} vs {:?}",
            vm.name,
            row.outcome(),
            vm.outcome
        );
    }
    assert!(
        report.deploy.summary.failed > 0,
        "the seed rollout as written has failures to show"
    );
    assert!(
        report.deploy.unreadable.len() == timeline.notes.len() && !timeline.notes.is_empty(),
        "unreadable manifests become notes"
    );

    let html_text = report_html::render(&timeline);
    assert_eq!(
        html_text.matches("<rect class=\"bar ").count(),
        timeline.entries.len()
    );
    for needle in ["src=", "href=", "<script", "<link", "url("] {
        assert!(!html_text.contains(needle), "external reference {needle}");
    }
    let html = artifacts().join("seed-rollout.html");
    report_html::write(&html, &timeline).unwrap();
    let png = artifacts().join("seed-rollout.png");
    screenshot(&html, &png);
    let (w, h, px) = decode(&png);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    assert!(
        count_near(&px, rgb(StepOutcome::Ok.colour())) > 200,
        "no ok bars visible"
    );
    assert!(
        count_near(&px, rgb(StepOutcome::Failed.colour())) > 100,
        "no failed bars visible"
    );
}
