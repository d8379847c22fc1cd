//! The lab's side of a trace, read from what a lab keeps per guest: each boot as a span (QEMU
//! started → the image's ready line), the console lines that mark a boot's progress as
//! instants, and QMP events as instants — all on the guest's lane of the `lab` process. The
//! same files go into a failure bundle.
//!
//! Times: power-ons and console lines from vm-lab's `serial.times.jsonl` (stamped by the host
//! when its tail of `serial.log` saw them, within [`vm_lab::serial_stamps::POLL`]); QMP events
//! with QEMU's own timestamps.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use vm_lab::qemu_args::SERIAL_TIMES;
use vm_lab::serial_stamps::{self, SerialStamp};

use super::chrome::{Lane, Mark, Span, Trace, args};
use crate::cluster::provision::{BOOT_FAILED_MARKER, BOOT_MARKER, HEALTHY_MARKER};

/// The process every lab event is drawn in.
pub const LAB: &str = "lab";

/// The files a lab keeps per guest that a trace reads and a failure bundle copies.
pub const FILES: &[&str] = &[
    "serial.log",
    SERIAL_TIMES,
    "qemu.stderr",
    "qmp-events.jsonl",
];

/// What a console line means for its boot, when it means something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Milestone {
    /// A step on the way; the name says which.
    Step(&'static str),
    /// The image's ready line: the boot span ends here.
    Ready(&'static str),
}

impl Milestone {
    pub fn name(self) -> &'static str {
        match self {
            Milestone::Step(n) | Milestone::Ready(n) => n,
        }
    }
}

/// The lines the project's guests really print (vm-lab's netboot `init.sh`, the cloud image's
/// `init.sh`, the cluster's first-boot script) and the kernel's own, in the order looked for.
/// The kernels boot with `quiet`, so their banner shows only where a spec drops it. No image
/// prints a DHCP lease (the cloud image's udhcpc is silent; its ready line lists the
/// addresses), and neither image runs a login prompt (a root shell holds the console).
const MILESTONES: &[(&str, Milestone)] = &[
    ("Linux version ", Milestone::Step("kernel starts")),
    ("Kernel panic", Milestone::Step("kernel panic")),
    ("VMLAB-INIT", Milestone::Step("init runs")),
    ("CLOUDIMG-INIT", Milestone::Step("init runs")),
    ("VMLAB-NET-UP", Milestone::Step("network up")),
    (
        "CLOUDIMG-UNSUPPORTED:",
        Milestone::Step("unsupported device"),
    ),
    ("CLOUDINIT-ERROR:", Milestone::Step("cloud-init error")),
    (BOOT_MARKER, Milestone::Step("etcd started")),
    (BOOT_FAILED_MARKER, Milestone::Step("first boot failed")),
    (HEALTHY_MARKER, Milestone::Step("etcd healthy")),
    (vm_lab::qemu_args::READY_MARKER, Milestone::Ready("ready")),
    (
        vm_lab::image::cloud::READY_MARKER,
        Milestone::Ready("ready"),
    ),
];

/// What `line` marks, if anything.
pub fn milestone(line: &str) -> Option<Milestone> {
    if line.trim_end().ends_with("login:") {
        return Some(Milestone::Step("login prompt"));
    }
    MILESTONES
        .iter()
        .find(|(needle, _)| line.contains(needle))
        .map(|(_, m)| *m)
}

/// Under `root` (a lab's run dir, or a lab-backed fake's state dir; three levels at most):
/// every guest's [`FILES`], named `<guest>.<file>`, and the guest's boots, milestones and QMP
/// events on its lane of the [`LAB`] process.
pub fn collect(root: &Path) -> (Vec<(PathBuf, String)>, Trace) {
    let mut files = Vec::new();
    let mut trace = Trace::default();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                if depth < 3 {
                    dirs.push((path, depth + 1));
                }
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if !FILES.contains(&name.as_str()) {
                continue;
            }
            let guest = dir
                .file_name()
                .map_or("guest".into(), |g| g.to_string_lossy().into_owned());
            if name == "qmp-events.jsonl" {
                qmp_marks(&mut trace, &guest, &path);
            }
            if name == SERIAL_TIMES {
                serial_events(&mut trace, &guest, &serial_stamps::read(&path));
            }
            files.push((path, format!("{guest}.{name}")));
        }
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    (files, trace)
}

/// QMP events (QEMU stamps each with its own wall-clock time) as instants.
pub fn qmp_marks(trace: &mut Trace, guest: &str, log: &Path) {
    let Ok(text) = std::fs::read_to_string(log) else {
        return;
    };
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let ts = &v["timestamp"];
        let (Some(s), Some(us)) = (ts["seconds"].as_i64(), ts["microseconds"].as_i64()) else {
            continue;
        };
        let name = v["event"].as_str().unwrap_or("QMP event").to_string();
        let mut a = Map::new();
        a.insert("data".into(), v["data"].clone());
        trace.mark(Mark {
            lane: Lane::new(LAB, guest),
            name,
            cat: "qmp".into(),
            at_us: s * 1_000_000 + us,
            args: a,
        });
    }
}

/// One guest's boots (a span each, power-on → ready line, or → its last milestone when it
/// never got ready) and console milestones (instants), from its serial stamps.
pub fn serial_events(trace: &mut Trace, guest: &str, stamps: &[SerialStamp]) {
    let lane = Lane::new(LAB, guest);
    // Split at power-ons; lines before the first power-on form a boot of their own.
    let mut boots: Vec<(Option<&SerialStamp>, Vec<&SerialStamp>)> = Vec::new();
    for s in stamps {
        if s.is_power_on() {
            boots.push((Some(s), Vec::new()));
        } else {
            match boots.last_mut() {
                Some((_, lines)) => lines.push(s),
                None => boots.push((None, vec![s])),
            }
        }
    }
    let count = boots.len();
    for (n, (power_on, lines)) in boots.into_iter().enumerate() {
        let mut ready_at = None;
        let mut last_milestone = None;
        for s in &lines {
            let Some(text) = s.line.as_deref() else {
                continue;
            };
            let Some(m) = milestone(text) else { continue };
            trace.mark(Mark {
                lane: lane.clone(),
                name: m.name().to_string(),
                cat: "serial".into(),
                at_us: s.at_us,
                args: args([
                    ("line", Value::String(text.to_string())),
                    ("offset", Value::from(s.offset)),
                ]),
            });
            last_milestone = Some(s.at_us);
            if matches!(m, Milestone::Ready(_)) && ready_at.is_none() {
                ready_at = Some(s.at_us);
            }
        }
        let start = power_on
            .map(|p| p.at_us)
            .or_else(|| lines.first().map(|s| s.at_us));
        let Some(start) = start else { continue };
        let end = ready_at.or(last_milestone).unwrap_or(start);
        let name = if count > 1 {
            format!("boot {}", n + 1)
        } else {
            "boot".to_string()
        };
        trace.span(Span {
            lane: lane.clone(),
            name,
            cat: "boot".into(),
            start_us: start,
            dur_us: (end - start).max(0),
            args: args([
                ("ready", Value::from(ready_at.is_some())),
                ("power_on", Value::from(power_on.is_some())),
                ("console_lines", Value::from(lines.len())),
            ]),
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn line(at_us: i64, text: &str) -> SerialStamp {
        SerialStamp {
            at_us,
            offset: 0,
            line: Some(text.into()),
        }
    }

    fn power_on(at_us: i64) -> SerialStamp {
        SerialStamp {
            at_us,
            offset: 0,
            line: None,
        }
    }

    #[test]
    fn the_images_lines_are_milestones_and_others_are_not() {
        assert_eq!(milestone("VMLAB-INIT"), Some(Milestone::Step("init runs")));
        assert_eq!(
            milestone("VMLAB-NET-UP 192.168.100.23/24"),
            Some(Milestone::Step("network up"))
        );
        assert_eq!(
            milestone("CLOUDIMG-READY host=a fqdn=a"),
            Some(Milestone::Ready("ready"))
        );
        assert_eq!(
            milestone("nbr01 login: "),
            Some(Milestone::Step("login prompt"))
        );
        assert_eq!(milestone("vmlab: insmod virtio_net failed"), None);
    }

    #[test]
    fn each_power_on_is_a_boot_that_ends_at_its_ready_line() {
        let stamps = [
            power_on(1_000),
            line(1_500, "random noise"),
            line(2_000, "VMLAB-INIT"),
            line(3_000, "VMLAB-READY host=n"),
            line(3_500, "later"),
            power_on(10_000),
            line(11_000, "VMLAB-INIT"),
        ];
        let mut t = Trace::default();
        serial_events(&mut t, "n", &stamps);
        let spans: Vec<(&str, i64, i64, bool)> = t
            .spans
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.start_us,
                    s.dur_us,
                    s.args["ready"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            spans,
            [
                ("boot 1", 1_000, 2_000, true),
                ("boot 2", 10_000, 1_000, false)
            ]
        );
        let marks: Vec<(&str, i64)> = t.marks.iter().map(|m| (m.name.as_str(), m.at_us)).collect();
        assert_eq!(
            marks,
            [
                ("init runs", 2_000),
                ("ready", 3_000),
                ("init runs", 11_000)
            ]
        );
        assert!(t.marks.iter().all(|m| m.lane == Lane::new(LAB, "n")));
    }
}
