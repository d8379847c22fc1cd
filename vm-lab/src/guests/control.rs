//! QMP and the guest agent as blocking exchanges over `std::os::unix::net::UnixStream`, every
//! read bounded by a deadline: the callers (a hypervisor model under its lock) are synchronous
//! and must not wait long.
//!
//! QMP: one connection per command (greeting, `qmp_capabilities`, the command; events on the
//! way are skipped). The guest agent: one connection kept per guest, synchronised with the
//! `0xFF` + `guest-sync-delimited` handshake (see [`crate::qga`] for why); a connection whose
//! exchange timed out is dropped, never reused. While the guest has not opened its port a
//! connection succeeds but nothing ever answers, so every attempt has its own short bound.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::qga::{sync_reply_matches, sync_request};

/// Run one QMP command on a fresh connection: its `return` value, or the error's `desc`.
pub fn qmp(
    sock: &Path,
    command: &str,
    args: Option<Value>,
    timeout: Duration,
) -> Result<Value, String> {
    let deadline = Instant::now() + timeout;
    let stream =
        UnixStream::connect(sock).map_err(|e| format!("connect {}: {e}", sock.display()))?;
    let mut conn = Lines::new(stream)?;
    let greeting = conn.read_json(deadline)?;
    if greeting.get("QMP").is_none() {
        return Err(format!("not a QMP greeting: {greeting}"));
    }
    conn.send(&json!({"execute": "qmp_capabilities"}))?;
    reply(&mut conn, deadline)?;
    let mut req = json!({ "execute": command });
    if let Some(a) = args {
        req["arguments"] = a;
    }
    conn.send(&req)?;
    reply(&mut conn, deadline)
}

/// The next `return` or `error` on a QMP connection, skipping events.
fn reply(conn: &mut Lines, deadline: Instant) -> Result<Value, String> {
    loop {
        let v = conn.read_json(deadline)?;
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
        if let Some(e) = v.get("error") {
            return Err(error_text(e));
        }
    }
}

fn error_text(e: &Value) -> String {
    e.get("desc")
        .and_then(Value::as_str)
        .map_or_else(|| e.to_string(), str::to_string)
}

/// A synchronised guest agent connection.
#[derive(Debug)]
pub struct Agent {
    conn: Lines,
}

impl Agent {
    /// Connect and synchronise within `timeout`.
    pub fn connect(sock: &Path, timeout: Duration) -> Result<Agent, String> {
        let deadline = Instant::now() + timeout;
        let stream =
            UnixStream::connect(sock).map_err(|e| format!("connect {}: {e}", sock.display()))?;
        let mut conn = Lines::new(stream)?;
        let id = i64::from(rand::random::<u32>());
        conn.stream
            .get_mut()
            .write_all(&[0xFF])
            .and_then(|()| conn.stream.get_mut().write_all(sync_request(id).as_bytes()))
            .map_err(|e| format!("write: {e}"))?;
        // Discard everything until the 0xFF sentinel, then the line must carry our id.
        let mut armed = false;
        let mut line = Vec::new();
        loop {
            let b = conn.read_byte(deadline)?;
            match b {
                0xFF => {
                    armed = true;
                    line.clear();
                }
                b'\n' if armed => {
                    if sync_reply_matches(&line, id) {
                        return Ok(Agent { conn });
                    }
                    armed = false;
                    line.clear();
                }
                c if armed => line.push(c),
                _ => {}
            }
        }
    }

    /// One command: its `return` value, or the agent's error text.
    pub fn call(
        &mut self,
        command: &str,
        args: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        let mut req = json!({ "execute": command });
        if let Some(a) = args {
            req["arguments"] = a;
        }
        self.conn.send(&req)?;
        let v = self.conn.read_json(deadline)?;
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
        match v.get("error") {
            Some(e) => Err(error_text(e)),
            None => Err(format!("unexpected agent reply: {v}")),
        }
    }
}

/// Line-oriented JSON over a unix stream with deadlines.
#[derive(Debug)]
struct Lines {
    stream: BufReader<UnixStream>,
}

impl Lines {
    fn new(stream: UnixStream) -> Result<Lines, String> {
        Ok(Lines {
            stream: BufReader::new(stream),
        })
    }

    fn send(&mut self, v: &Value) -> Result<(), String> {
        let mut text = v.to_string();
        text.push('\n');
        self.stream
            .get_mut()
            .write_all(text.as_bytes())
            .map_err(|e| format!("write: {e}"))
    }

    fn arm(&mut self, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timeout_text());
        }
        self.stream
            .get_ref()
            .set_read_timeout(Some(left))
            .map_err(|e| format!("socket: {e}"))
    }

    fn read_byte(&mut self, deadline: Instant) -> Result<u8, String> {
        self.arm(deadline)?;
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => Err("the other side closed the connection".into()),
            Ok(_) => Ok(b[0]),
            Err(e) => Err(io_text(&e)),
        }
    }

    /// The next non-empty line, parsed.
    fn read_json(&mut self, deadline: Instant) -> Result<Value, String> {
        let mut line = Vec::new();
        loop {
            self.arm(deadline)?;
            match self.stream.read_until(b'\n', &mut line) {
                Ok(0) => return Err("the other side closed the connection".into()),
                Ok(_) if line.ends_with(b"\n") => {
                    // A stray 0xFF (a sync sentinel) is not part of the JSON.
                    let text: Vec<u8> = line.iter().copied().filter(|b| *b != 0xFF).collect();
                    if text.iter().all(u8::is_ascii_whitespace) {
                        line.clear();
                        continue;
                    }
                    return serde_json::from_slice(&text).map_err(|e| {
                        format!("bad JSON {:?}: {e}", String::from_utf8_lossy(&text))
                    });
                }
                Ok(_) => {}
                Err(e) => return Err(io_text(&e)),
            }
        }
    }
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => timeout_text(),
        _ => format!("read: {e}"),
    }
}

/// The text every timed-out exchange carries (PVE's clients look for "got timeout").
fn timeout_text() -> String {
    "got timeout".into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn qmp_negotiates_skips_events_and_returns_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("q.sock");
        let l = UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(b"{\"QMP\":{\"version\":{}}}\n").unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.contains("qmp_capabilities"));
            s.write_all(b"{\"return\":{}}\n").unwrap();
            line.clear();
            r.read_line(&mut line).unwrap();
            assert!(line.contains("\"query-status\""));
            s.write_all(
                b"{\"event\":\"STOP\"}\n{\"return\":{\"status\":\"paused\",\"running\":false}}\n",
            )
            .unwrap();
        });
        let r = qmp(&sock, "query-status", None, Duration::from_secs(5)).unwrap();
        assert_eq!(r["status"], "paused");
        server.join().unwrap();
    }

    #[test]
    fn a_silent_agent_times_out_and_an_error_reply_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("a.sock");
        let l = UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            // First client: never answers (the guest has not opened its port).
            let (_silent, _) = l.accept().unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut buf = Vec::new();
            r.read_until(b'\n', &mut buf).unwrap();
            let id: i64 = String::from_utf8_lossy(&buf)
                .split("\"id\":")
                .nth(1)
                .unwrap()
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .unwrap();
            s.write_all(b"{\"error\":{\"class\":\"GenericError\",\"desc\":\"stray\"}}\n")
                .unwrap();
            let mut reply = vec![0xFF];
            reply.extend_from_slice(format!("{{\"return\": {id}}}\n").as_bytes());
            s.write_all(&reply).unwrap();
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            s.write_all(
                b"{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"no such command\"}}\n",
            )
            .unwrap();
            line.clear();
            r.read_line(&mut line).unwrap();
            s.write_all(b"{\"return\":{}}\n").unwrap();
            std::thread::sleep(Duration::from_millis(100));
        });
        let e = Agent::connect(&sock, Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("timeout"), "{e}");
        let mut a = Agent::connect(&sock, Duration::from_secs(5)).unwrap();
        let e = a
            .call("guest-nope", None, Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(e, "no such command");
        assert_eq!(
            a.call("guest-ping", None, Duration::from_secs(5)).unwrap(),
            json!({})
        );
        server.join().unwrap();
    }
}
