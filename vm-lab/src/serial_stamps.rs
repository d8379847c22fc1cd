//! When each serial line arrived. QEMU's chardev log (`serial.log`) has the guest's bytes and
//! no times; while a node runs, the driver tails that file and appends one JSON line per
//! console line to `serial.times.jsonl`, stamped with the host's wall clock when the tail first
//! saw it, plus one record per power-on. A trace puts boot milestones on the host's time axis
//! from it.
//!
//! Tailing the log file (rather than reading the chardev's socket) leaves the guest and QEMU
//! exactly as they were: the socket stays free for `vm-lab shell`, and a slow reader can never
//! hold the guest's UART back. The price is resolution: a line is stamped within one poll
//! interval ([`POLL`]) of QEMU writing it.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How often the tail looks at the log.
pub const POLL: Duration = Duration::from_millis(25);

/// Longest line kept whole in a stamp (a guest printing without newlines is cut into pieces).
const MAX_LINE: usize = 4096;

/// One record of `serial.times.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialStamp {
    /// Host wall clock, UNIX microseconds.
    pub at_us: i64,
    /// Byte offset in `serial.log` where the line (or, for a power-on, the boot's console)
    /// begins.
    pub offset: u64,
    /// The line without its line ending; absent on a power-on record (QEMU started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

impl SerialStamp {
    /// True for the record QEMU's start leaves (no line): the boundary between two power-ons.
    pub fn is_power_on(&self) -> bool {
        self.line.is_none()
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Every record of a stamps file, in order (unreadable lines skipped; no file, none).
pub fn read(path: &Path) -> Vec<SerialStamp> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The incremental part of the tail: bytes read so far and the line being assembled.
#[derive(Debug)]
struct Tail {
    /// Next byte of the log to read.
    pos: u64,
    /// Where the pending line begins, and its bytes.
    start: u64,
    pending: Vec<u8>,
}

impl Tail {
    fn new(offset: u64) -> Tail {
        Tail {
            pos: offset,
            start: offset,
            pending: Vec::new(),
        }
    }

    /// Feeds newly read bytes; returns the lines they complete, as (offset, text).
    fn feed(&mut self, bytes: &[u8]) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                self.pos += 1;
                out.push(self.take());
                continue;
            }
            if self.pending.len() >= MAX_LINE {
                out.push(self.take());
            }
            self.pending.push(b);
            self.pos += 1;
        }
        out
    }

    /// The pending line, ended (at a newline, a cut or the end of the run).
    fn take(&mut self) -> (u64, String) {
        let text = String::from_utf8_lossy(&self.pending)
            .trim_end_matches('\r')
            .to_string();
        let line = (self.start, text);
        self.start = self.pos;
        self.pending.clear();
        line
    }

    /// Reads what the log gained since the last look. A log that shrank (made anew) is read
    /// from its start.
    fn poll(&mut self, log: &Path) -> Vec<(u64, String)> {
        let Ok(mut f) = std::fs::File::open(log) else {
            return Vec::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.pos {
            *self = Tail::new(0);
        }
        if len == self.pos || f.seek(SeekFrom::Start(self.pos)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if f.take(len - self.pos).read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.feed(&buf)
    }
}

fn record(s: &SerialStamp) -> String {
    let mut l = serde_json::to_string(s).unwrap_or_default();
    l.push('\n');
    l
}

/// Tails `log` from `offset` (where this power-on's console begins) into `out` on a thread of
/// its own until QEMU (`qemu_pid`) is gone, then reads once more and stamps a last unfinished
/// line. A plain thread: the lab's nodes run under tokio, the guest host's guests do not.
pub fn spawn(
    log: PathBuf,
    out: PathBuf,
    offset: u64,
    qemu_pid: u32,
) -> std::thread::JoinHandle<()> {
    let power_on = SerialStamp {
        at_us: now_us(),
        offset,
        line: None,
    };
    std::thread::spawn(move || {
        let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
        else {
            return;
        };
        if file.write_all(record(&power_on).as_bytes()).is_err() {
            return;
        }
        let mut tail = Tail::new(offset);
        loop {
            let running = crate::namespace::alive(qemu_pid);
            let mut lines = tail.poll(&log);
            let at_us = now_us();
            if !running && !tail.pending.is_empty() {
                lines.push(tail.take());
            }
            let mut text = String::new();
            for (offset, line) in lines {
                text.push_str(&record(&SerialStamp {
                    at_us,
                    offset,
                    line: Some(line),
                }));
            }
            if !text.is_empty() && file.write_all(text.as_bytes()).is_err() {
                return;
            }
            if !running {
                return;
            }
            std::thread::sleep(POLL);
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lines_are_cut_at_newlines_with_their_offsets() {
        let mut t = Tail::new(10);
        assert_eq!(t.feed(b"VMLAB-IN"), vec![]);
        assert_eq!(
            t.feed(b"IT\r\nVMLAB-NET-UP 1.2.3.4/24\npartial"),
            vec![
                (10, "VMLAB-INIT".to_string()),
                (22, "VMLAB-NET-UP 1.2.3.4/24".to_string())
            ]
        );
        assert_eq!(t.take(), (46, "partial".to_string()));
    }

    #[test]
    fn a_line_without_end_is_cut_into_pieces() {
        let mut t = Tail::new(0);
        let got = t.feed(&vec![b'x'; MAX_LINE * 2 + 1]);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].0, MAX_LINE as u64);
        assert_eq!(t.pending.len(), 1);
    }

    #[test]
    fn the_tail_reads_what_the_log_gained_and_restarts_on_a_new_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("serial.log");
        std::fs::write(&log, "old boot\n").unwrap();
        let mut t = Tail::new(9);
        assert!(t.poll(&log).is_empty());
        std::fs::write(&log, "old boot\nnew line\n").unwrap();
        assert_eq!(t.poll(&log), vec![(9, "new line".to_string())]);
        std::fs::write(&log, "a\n").unwrap();
        assert_eq!(t.poll(&log), vec![(0, "a".to_string())]);
    }

    #[test]
    fn a_run_is_stamped_until_its_process_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("serial.log");
        let out = dir.path().join("serial.times.jsonl");
        std::fs::write(&log, "before\n").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let h = spawn(log.clone(), out.clone(), 7, child.id());
        std::thread::sleep(Duration::from_millis(100));
        std::fs::write(&log, "before\nVMLAB-READY host=n\nno end").unwrap();
        let _ = child.wait();
        h.join().unwrap();
        let got = read(&out);
        assert!(got[0].is_power_on(), "{got:?}");
        assert_eq!(got[0].offset, 7);
        let lines: Vec<_> = got[1..]
            .iter()
            .map(|s| (s.offset, s.line.clone().unwrap()))
            .collect();
        assert_eq!(
            lines,
            [(7, "VMLAB-READY host=n".into()), (26, "no end".into())]
        );
        assert!(got.windows(2).all(|w| w[0].at_us <= w[1].at_us));
    }
}
