//! Tasks: UPIDs, the running → stopped state machine on the simulated clock, task logs.
//!
//! A task is laid out when it starts: a timeline of log lines and progress bars with their
//! simulated times, and an end time. Its effect on the world is applied when the clock
//! passes the end time (observed lazily on the next request), and its exit status follows.

use serde::Serialize;
use serde_json::{Value, json};

/// What a disk copy that really ran printed (qemu-img's progress as PVE logs it, its
/// errors), and whether it failed: it replaces the transfer laid out for it in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyLog {
    /// The lines printed.
    pub lines: Vec<String>,
    /// Whether the copy failed (the task log ends after its lines).
    pub failed: bool,
}

/// A piece of a task log placed on the simulated timeline.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub enum Chunk {
    /// One log line.
    Line(String),
    /// A transfer from `at` to `until`, logged once per percent as qemu-img does.
    Transfer {
        /// Bytes transferred in all.
        total: u64,
        /// When the transfer ends: seconds after the task start in a plan, site time in a task.
        until: f64,
        /// How the progress lines look.
        style: TransferStyle,
    },
}

/// How a transfer's progress lines look in the task log.
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub enum TransferStyle {
    /// qemu-img's `transferred X of Y (N.00%)`.
    QemuImg,
    /// wget's dotted progress (`NNNK ........ NN%`), for downloads.
    Download,
}

/// Put the copies that really ran in place of the task's laid-out `qemu-img` transfers, in
/// order, their lines spread over the transfer's time; after a failed copy the rest of the
/// laid-out log never happened.
pub(crate) fn splice_copies(timeline: &mut Vec<(f64, Chunk)>, copies: Vec<CopyLog>) {
    let mut copies = copies.into_iter();
    let mut out = Vec::with_capacity(timeline.len());
    for (at, chunk) in std::mem::take(timeline) {
        let Chunk::Transfer {
            until,
            style: TransferStyle::QemuImg,
            ..
        } = &chunk
        else {
            out.push((at, chunk));
            continue;
        };
        let Some(copy) = copies.next() else {
            out.push((at, chunk));
            continue;
        };
        let step = (until - at).max(0.0) / copy.lines.len().max(1) as f64;
        for (i, l) in copy.lines.into_iter().enumerate() {
            out.push((at + step * i as f64, Chunk::Line(l)));
        }
        if copy.failed {
            break;
        }
    }
    *timeline = out;
}

/// A task; `W` is the work it does when it completes, given by the caller (the world's
/// `Work`): tasks never look into it.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Task<W> {
    /// The task's UPID.
    pub upid: String,
    /// The node it runs on.
    pub node: String,
    /// Process id in the UPID.
    pub pid: u32,
    /// Process start time in the UPID (clock ticks since boot, as in `/proc/PID/stat`).
    pub pstart: u64,
    /// Start time, seconds since the epoch (whole).
    pub starttime: u64,
    /// Task type (`qmstart`, `vzcreate`, `imgcopy`, ...).
    pub ttype: String,
    /// The object it works on (usually the VMID); may be empty.
    pub id: String,
    /// Who started it (`user@realm` or `user@realm!token`).
    pub user: String,
    /// Site time (seconds) it started.
    pub start: f64,
    /// Site time (seconds) it ends.
    pub end: f64,
    /// Log pieces at their site times.
    pub timeline: Vec<(f64, Chunk)>,
    /// Lines appended on completion.
    pub tail: Vec<String>,
    /// What happens to the world when it completes.
    pub work: W,
    /// An error decided when the task started (or armed by the control plane).
    pub planned_error: Option<String>,
    /// `OK` or the error text once stopped; `None` while running.
    pub exitstatus: Option<String>,
    /// End time, seconds since the epoch, once stopped.
    pub endtime: Option<u64>,
}

/// Human-readable bytes as PVE's `render_bytes` prints them (`2.2 GiB`).
pub fn render_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

impl<W> Task<W> {
    /// Whether it has not stopped yet (no exit status).
    pub fn running(&self) -> bool {
        self.exitstatus.is_none()
    }

    /// The task log as of `now`.
    pub fn log_lines(&self, now: f64) -> Vec<String> {
        // A task that stopped early (e.g. storage full mid-transfer) logs nothing after its end.
        let now = now.min(self.end);
        let mut out = Vec::new();
        for (at, chunk) in &self.timeline {
            if *at > now {
                break;
            }
            match chunk {
                Chunk::Line(l) => out.push(l.clone()),
                Chunk::Transfer {
                    total,
                    until,
                    style,
                } => {
                    let span = (until - at).max(1e-9);
                    let frac = ((now - at) / span).clamp(0.0, 1.0);
                    let steps = (frac * 100.0).floor() as u64;
                    for p in 0..=steps {
                        let done = (u128::from(*total) * u128::from(p) / 100) as u64;
                        out.push(match style {
                            TransferStyle::QemuImg => format!(
                                "transferred {} of {} ({}.00%)",
                                render_bytes(done),
                                render_bytes(*total),
                                p
                            ),
                            TransferStyle::Download => {
                                format!("{:>10}K ........ ........ ........ {p:>3}%", done / 1024)
                            }
                        });
                    }
                }
            }
        }
        if !self.running() {
            out.extend(self.tail.iter().cloned());
        }
        out
    }

    /// `GET .../tasks/{upid}/status` data.
    pub fn status_json(&self) -> Value {
        let (user, tokenid) = match self.user.split_once('!') {
            Some((u, t)) => (u.to_string(), Some(t.to_string())),
            None => (self.user.clone(), None),
        };
        let mut v = json!({
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.ttype,
            "id": self.id,
            "user": user,
            "status": if self.running() { "running" } else { "stopped" },
        });
        if let Some(t) = tokenid {
            v["tokenid"] = json!(t);
        }
        if let Some(e) = &self.exitstatus {
            v["exitstatus"] = json!(e);
        }
        v
    }

    /// An entry of `/nodes/{node}/tasks` and `/cluster/tasks`.
    pub fn list_json(&self) -> Value {
        let mut v = json!({
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.ttype,
            "id": self.id,
            "user": self.user,
        });
        if let Some(e) = &self.exitstatus {
            v["status"] = json!(e);
        }
        if let Some(e) = self.endtime {
            v["endtime"] = json!(e);
        }
        v
    }
}

/// How a task is to be laid out when it starts.
pub struct TaskPlan<W> {
    /// Task type (`qmstart`, `vzcreate`, ...).
    pub ttype: &'static str,
    /// The object it works on (usually the VMID).
    pub id: String,
    /// Who starts it.
    pub user: String,
    /// The node it runs on.
    pub node: String,
    /// Log pieces at their offsets (seconds) from the start.
    pub timeline: Vec<(f64, Chunk)>,
    /// Seconds from start to end.
    pub duration: f64,
    /// What happens to the world when it completes.
    pub work: W,
    /// The error it will end with, if decided in advance.
    pub planned_error: Option<String>,
}

impl<W> TaskPlan<W> {
    /// A plan of type `ttype` on `id`, run on `node` by `user`, doing `work`: no log, half a second
    /// long.
    pub fn new(
        ttype: &'static str,
        id: impl Into<String>,
        node: &str,
        user: &str,
        work: W,
    ) -> Self {
        TaskPlan {
            ttype,
            id: id.into(),
            user: user.to_string(),
            node: node.to_string(),
            timeline: Vec::new(),
            duration: 0.5,
            work,
            planned_error: None,
        }
    }

    /// Append a log line at `offset` seconds into the task.
    pub fn line(&mut self, offset: f64, l: impl Into<String>) {
        self.timeline.push((offset, Chunk::Line(l.into())));
    }

    /// A transfer of `total` bytes from `offset` for `secs` seconds, logged in `style`.
    pub fn transfer(&mut self, offset: f64, secs: f64, total: u64, style: TransferStyle) {
        let until = offset + secs;
        self.timeline.push((
            offset,
            Chunk::Transfer {
                total,
                until,
                style,
            },
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(at: f64, until: f64) -> (f64, Chunk) {
        let style = TransferStyle::QemuImg;
        (
            at,
            Chunk::Transfer {
                total: 1,
                until,
                style,
            },
        )
    }

    fn texts(t: &[(f64, Chunk)]) -> Vec<String> {
        t.iter()
            .map(|(_, c)| match c {
                Chunk::Line(l) => l.clone(),
                Chunk::Transfer { .. } => "<transfer>".into(),
            })
            .collect()
    }

    #[test]
    fn real_copies_replace_the_laid_out_transfers_in_order() {
        let line = |at: f64, l: &str| (at, Chunk::Line(l.into()));
        let mut t = vec![
            line(0.0, "create full clone of drive scsi0"),
            transfer(0.1, 2.1),
            line(2.1, "scsi0: successfully created disk"),
            transfer(2.2, 3.2),
            line(3.2, "scsi1: successfully created disk"),
        ];
        let copy = |lines: &[&str], failed| CopyLog {
            lines: lines.iter().map(|l| l.to_string()).collect(),
            failed,
        };
        splice_copies(&mut t, vec![copy(&["a 0%", "a 100%"], false)]);
        assert_eq!(
            texts(&t),
            [
                "create full clone of drive scsi0",
                "a 0%",
                "a 100%",
                "scsi0: successfully created disk",
                "<transfer>",
                "scsi1: successfully created disk"
            ]
        );
        assert_eq!((t[1].0, t[2].0), (0.1, 1.1));
        splice_copies(&mut t, vec![copy(&["qemu-img: Could not open"], true)]);
        assert_eq!(texts(&t)[4..], ["qemu-img: Could not open"]);
    }

    #[test]
    fn bytes_render_like_pve() {
        assert_eq!(render_bytes(0), "0.0 B");
        assert_eq!(render_bytes(2361393152), "2.2 GiB");
        assert_eq!(render_bytes(23613931), "22.5 MiB");
    }
}
