//! The simulated guest behind the agent: what `qemu-ga` in an Ubuntu cloud image holds between
//! calls. Files and directories (kept across reboots, as a disk keeps them), open file handles,
//! processes started by `guest-exec` (gone when the guest stops), the fsfreeze state, the
//! passwords set, and the command results a scenario or the control API scripted.
//!
//! The texts of QGA's errors are qemu-ga's (`qga/commands*.c`), as PVE forwards them.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The largest file the guest's disk takes.
pub(super) const FILE_CAP: usize = 64 * 1024 * 1024;

/// qemu-ga keeps at most this much of a process's stdout and of its stderr
/// (`GUEST_EXEC_MAX_OUTPUT`); the rest is dropped and `out-truncated`/`err-truncated` set.
pub const EXEC_MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// qemu-ga refuses a `guest-file-read` of more than this (`GUEST_FILE_READ_COUNT_MAX`).
pub const FILE_READ_COUNT_MAX: i64 = 48 * 1024 * 1024;
/// The first file handle qemu-ga hands out.
const FIRST_HANDLE: i64 = 1000;
/// The first pid a simulated `guest-exec` gets (a booted cloud image is past its daemons).
const FIRST_PID: i64 = 1400;

/// What a scripted command does when the guest runs it: matched on its argv (the program by
/// full path or by name), directly or inside `sh -c`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCommand {
    /// The argv it matches, the program by full path or by name.
    pub command: Vec<String>,
    /// Exit code reported.
    #[serde(default)]
    pub exitcode: i64,
    /// Killed by this signal instead of exiting (`exitcode` is then not reported).
    #[serde(default)]
    pub signal: Option<i64>,
    /// Standard output it prints.
    #[serde(default)]
    pub out: String,
    /// Standard error it prints.
    #[serde(default)]
    pub err: String,
    /// Simulated seconds until it exits (`exec-status` says `exited: 0` until then).
    #[serde(default)]
    pub secs: f64,
}

/// What a scenario or the control API sets up in a guest: scripted commands and files.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestSetup {
    /// Scripted commands; the last one matching an argv wins.
    #[serde(default)]
    pub commands: Vec<ScriptedCommand>,
    /// Path → content (text).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

impl GuestSetup {
    /// Whether it sets up nothing.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty() && self.files.is_empty()
    }
}

/// A password set through `guest-set-user-password`, as the guest's `chpasswd` got it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct PasswordSet {
    /// The password as given.
    pub password: String,
    /// Whether it was given already hashed (`crypted`), not in clear.
    pub crypted: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct OpenFile {
    path: String,
    read: bool,
    write: bool,
    append: bool,
    pos: usize,
}

/// A process `guest-exec` started: its result is known at start, revealed once it has run
/// for its time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Process {
    /// Site time (seconds) when it exits.
    pub ends_at: f64,
    /// Exit code, unless killed by a signal.
    pub exitcode: Option<i64>,
    /// The signal that killed it, if one did.
    pub signal: Option<i64>,
    /// Standard output.
    pub out: Vec<u8>,
    /// Standard error.
    pub err: Vec<u8>,
}

/// The inside of a simulated guest as the QEMU guest agent sees it: files, open handles,
/// processes `guest-exec` started, freeze state and scripted commands.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GuestOs {
    seeded: bool,
    /// File contents by absolute path.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Directories by absolute path.
    pub dirs: BTreeSet<String>,
    /// Files with the executable bit (`chmod +x`): files qemu-ga creates are not.
    pub executable: BTreeSet<String>,
    handles: BTreeMap<i64, OpenFile>,
    next_handle: i64,
    processes: BTreeMap<i64, Process>,
    next_pid: i64,
    /// Whether the file systems are frozen (`guest-fsfreeze-freeze`).
    pub frozen: bool,
    /// Scripted commands `guest-exec` matches argvs against.
    pub scripts: Vec<ScriptedCommand>,
    /// Passwords set through `guest-set-user-password`, by user name.
    pub passwords: BTreeMap<String, PasswordSet>,
    /// The cloud-init instance last applied at a boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<super::cloud_config::CloudInitRun>,
}

/// QGA's answer to a failed command, as PVE's `mon_cmd` returns it.
pub fn qga_error(desc: impl Into<String>) -> Value {
    json!({"error": {"class": "GenericError", "desc": desc.into()}})
}

/// qemu's `qbase64_decode`: only the alphabet, `=` and newlines are allowed; GLib then decodes
/// leniently (padding is not checked, a lone trailing character is dropped).
pub fn qbase64_decode(text: &str) -> Result<Vec<u8>, Value> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if text.contains('\0') {
        return Err(qga_error("Base64 data contains embedded NUL characters"));
    }
    let mut sextets = Vec::with_capacity(text.len());
    for b in text.bytes() {
        match ALPHABET.iter().position(|&a| a == b) {
            Some(v) => sextets.push(v as u32),
            None if b == b'=' || b == b'\n' => {}
            None => return Err(qga_error("Base64 data contains invalid characters")),
        }
    }
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for group in sextets.chunks(4) {
        let v = group
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, s)| acc | (s << (18 - 6 * i)));
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        let n = match group.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&bytes[..n]);
    }
    Ok(out)
}

/// `path` made absolute and normal (qemu-ga's working directory is `/`).
pub fn normal_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The directory containing `path` (`/` for a top-level entry).
pub fn parent(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".into(),
        Some(i) => path[..i].to_string(),
    }
}

impl GuestOs {
    /// The image's own files, laid down on first use: the hostname from the VM's name, then
    /// the site's scripted commands and files.
    pub fn seed(&mut self, hostname: &str, site: &GuestSetup) {
        if self.seeded {
            return;
        }
        self.seeded = true;
        self.next_handle = FIRST_HANDLE;
        self.next_pid = FIRST_PID;
        for d in [
            "/",
            "/bin",
            "/boot",
            "/dev",
            "/etc",
            "/home",
            "/home/ubuntu",
            "/opt",
            "/root",
            "/run",
            "/sbin",
            "/srv",
            "/tmp",
            "/usr",
            "/usr/bin",
            "/usr/local",
            "/usr/local/bin",
            "/usr/sbin",
            "/var",
            "/var/lib",
            "/var/log",
            "/var/tmp",
        ] {
            self.dirs.insert(d.into());
        }
        let defaults = [
            ("/etc/hostname", format!("{hostname}\n")),
            (
                "/etc/os-release",
                "PRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\n\
                 VERSION=\"22.04.5 LTS (Jammy Jellyfish)\"\nID=ubuntu\nID_LIKE=debian\n"
                    .into(),
            ),
            (
                "/etc/passwd",
                "root:x:0:0:root:/root:/bin/bash\n\
                 ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n"
                    .into(),
            ),
            (
                "/etc/hosts",
                format!("127.0.0.1 localhost\n127.0.1.1 {hostname}\n"),
            ),
        ];
        for (p, c) in defaults {
            self.files.entry(p.into()).or_insert_with(|| c.into_bytes());
        }
        self.apply(site);
    }

    /// The guest stops (or restarts): its processes, open files and freeze are gone; its
    /// files stay.
    pub fn power_cycle(&mut self) {
        self.handles.clear();
        self.processes.clear();
        self.frozen = false;
    }

    /// Scripted commands and files from a scenario or the control API: a later script for
    /// the same argv replaces the earlier one.
    pub fn apply(&mut self, setup: &GuestSetup) {
        for c in &setup.commands {
            self.scripts.retain(|s| s.command != c.command);
            self.scripts.push(c.clone());
        }
        for (p, content) in &setup.files {
            let p = normal_path(p);
            self.mkdir_all(&parent(&p));
            self.files.insert(p, content.clone().into_bytes());
        }
    }

    /// Create `dir` and every missing directory above it.
    pub fn mkdir_all(&mut self, dir: &str) {
        let mut cur = String::new();
        self.dirs.insert("/".into());
        for seg in dir.split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(seg);
            self.dirs.insert(cur.clone());
        }
    }

    /// Whether `p` is a directory.
    pub fn is_dir(&self, p: &str) -> bool {
        self.dirs.contains(p)
    }

    /// The scripted result for `argv`, matching the program by full path or by name.
    pub fn script_for(&self, argv: &[String]) -> Option<&ScriptedCommand> {
        let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
        self.scripts.iter().rev().find(|s| {
            s.command.len() == argv.len()
                && !argv.is_empty()
                && (s.command[0] == argv[0] || base(&s.command[0]) == base(&argv[0]))
                && s.command[1..] == argv[1..]
        })
    }

    // ---- guest-file-* ----

    /// `guest-file-open`: a new handle for `path` in `mode` (fopen modes, `r` by default), or the
    /// agent's error (no such file, a directory, a bad mode).
    pub fn file_open(&mut self, path: &str, mode: Option<&str>) -> Value {
        let mode = mode.unwrap_or("r");
        let p = if path.is_empty() {
            String::new()
        } else {
            normal_path(path)
        };
        let fail = |why: &str| {
            qga_error(format!(
                "failed to open file '{path}' (mode: '{mode}'): {why}"
            ))
        };
        if p.is_empty() {
            return fail("No such file or directory");
        }
        let m = mode.replace('b', "");
        let (read, write, create, truncate, append) = match m.as_str() {
            "r" => (true, false, false, false, false),
            "r+" => (true, true, false, false, false),
            "w" => (false, true, true, true, false),
            "w+" => (true, true, true, true, false),
            "a" => (false, true, true, false, true),
            "a+" => (true, true, true, false, true),
            _ => return qga_error(format!("invalid file open mode '{mode}'")),
        };
        if self.is_dir(&p) {
            if write {
                return fail("Is a directory");
            }
        } else if !self.files.contains_key(&p) {
            if !create {
                return fail("No such file or directory");
            }
            if !self.is_dir(&parent(&p)) {
                return fail("No such file or directory");
            }
            self.files.insert(p.clone(), Vec::new());
        }
        if truncate && let Some(f) = self.files.get_mut(&p) {
            f.clear();
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(
            handle,
            OpenFile {
                path: p,
                read,
                write,
                append,
                pos: 0,
            },
        );
        json!(handle)
    }

    fn no_handle(handle: i64) -> Value {
        qga_error(format!("handle '{handle}' has not been found"))
    }

    /// `guest-file-seek` to an absolute `offset`: the new position, or the agent's error.
    pub fn file_seek(&mut self, handle: i64, offset: i64) -> Value {
        let Some(h) = self.handles.get_mut(&handle) else {
            return Self::no_handle(handle);
        };
        if offset < 0 {
            return qga_error("failed to seek file: Invalid argument");
        }
        h.pos = usize::try_from(offset).unwrap_or(usize::MAX);
        json!({"position": offset, "eof": false})
    }

    /// `guest-file-read` of up to `count` bytes: base64 data, byte count and `eof`, or the
    /// agent's error (unknown handle, `count` out of range, not open for reading).
    pub fn file_read(&mut self, handle: i64, count: i64) -> Value {
        if !(0..=FILE_READ_COUNT_MAX).contains(&count) {
            return qga_error(format!("value '{count}' is invalid for argument count"));
        }
        let Some(h) = self.handles.get_mut(&handle) else {
            return Self::no_handle(handle);
        };
        if self.dirs.contains(&h.path) {
            return qga_error("failed to read file: Is a directory");
        }
        if !h.read {
            return qga_error("failed to read file: Bad file descriptor");
        }
        let data = self
            .files
            .get(&h.path)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let want = usize::try_from(count).unwrap_or(0);
        let start = h.pos.min(data.len());
        let end = start.saturating_add(want).min(data.len());
        let chunk = &data[start..end];
        h.pos = end;
        // fread(): end of file is noticed only by a read that came up short.
        let eof = chunk.len() < want;
        json!({"count": chunk.len(), "buf-b64": B64.encode(chunk), "eof": eof})
    }

    /// `guest-file-write` of base64 `buf_b64`: the bytes written, or the agent's error.
    pub fn file_write(&mut self, handle: i64, buf_b64: &str) -> Value {
        let buf = match qbase64_decode(buf_b64) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let Some(h) = self.handles.get_mut(&handle) else {
            return Self::no_handle(handle);
        };
        if !h.write {
            return qga_error("failed to write to file: Bad file descriptor");
        }
        let f = self.files.entry(h.path.clone()).or_default();
        if h.append {
            h.pos = f.len();
        }
        if h.pos.saturating_add(buf.len()) > FILE_CAP {
            return qga_error("failed to write to file: No space left on device");
        }
        if f.len() < h.pos {
            f.resize(h.pos, 0);
        }
        let end = h.pos + buf.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[h.pos..end].copy_from_slice(&buf);
        h.pos = end;
        json!({"count": buf.len(), "eof": false})
    }

    /// `guest-file-close`: `{}`, or the agent's error for an unknown handle.
    pub fn file_close(&mut self, handle: i64) -> Value {
        match self.handles.remove(&handle) {
            Some(_) => json!({}),
            None => Self::no_handle(handle),
        }
    }

    // ---- guest-exec ----

    /// A process that has started with a known outcome; its pid.
    pub fn add_process(&mut self, mut p: Process) -> i64 {
        if self.next_pid == 0 {
            self.next_pid = FIRST_PID;
        }
        let pid = self.next_pid;
        // Each `sh -c` forks its commands: pids move on by more than one.
        self.next_pid += 3;
        p.out.truncate(EXEC_MAX_OUTPUT + 1);
        p.err.truncate(EXEC_MAX_OUTPUT + 1);
        self.processes.insert(pid, p);
        pid
    }

    /// `guest-exec-status`: `exited` false while it runs; once it has exited, the answer with
    /// its outcome, after which qemu-ga forgets the pid.
    pub fn exec_status(&mut self, pid: i64, now: f64) -> Value {
        let Some(p) = self.processes.get(&pid) else {
            return qga_error("Invalid parameter 'pid'");
        };
        if now < p.ends_at {
            return json!({"exited": false});
        }
        let Some(p) = self.processes.remove(&pid) else {
            return qga_error("Invalid parameter 'pid'");
        };
        let mut v = json!({"exited": true});
        match (p.signal, p.exitcode) {
            (Some(s), _) => v["signal"] = json!(s),
            (None, c) => v["exitcode"] = json!(c.unwrap_or(0)),
        }
        for (data, key) in [(&p.out, "out"), (&p.err, "err")] {
            if data.is_empty() {
                continue;
            }
            let kept = &data[..data.len().min(EXEC_MAX_OUTPUT)];
            v[format!("{key}-data")] = json!(B64.encode(kept));
            if data.len() > EXEC_MAX_OUTPUT {
                v[format!("{key}-truncated")] = json!(true);
            }
        }
        v
    }

    // ---- guest-set-user-password ----

    /// `guest-set-user-password`: record the (base64) password for `username`; the agent's
    /// error for bad base64 or characters `chpasswd` refuses.
    pub fn set_user_password(
        &mut self,
        username: &str,
        password_b64: &str,
        crypted: bool,
    ) -> Value {
        let raw = match qbase64_decode(password_b64) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let password = String::from_utf8_lossy(&raw).into_owned();
        if password.contains('\n') {
            return qga_error("forbidden characters in raw password");
        }
        if username.contains('\n') || username.contains(':') {
            return qga_error("forbidden characters in username");
        }
        let known = self.files.get("/etc/passwd").is_some_and(|f| {
            String::from_utf8_lossy(f)
                .lines()
                .any(|l| l.split(':').next() == Some(username))
        });
        if !known {
            // chpasswd refuses an unknown user.
            return qga_error("child process has failed to set user password");
        }
        self.passwords
            .insert(username.into(), PasswordSet { password, crypted });
        json!({})
    }

    /// What the control API shows of the guest.
    pub fn view(&self) -> Value {
        let files: BTreeMap<&String, String> = self
            .files
            .iter()
            .map(|(p, c)| (p, String::from_utf8_lossy(c).into_owned()))
            .collect();
        json!({
            "files": files,
            "frozen": self.frozen,
            "passwords": self.passwords,
            "commands": self.scripts,
            "processes": self.processes.keys().collect::<Vec<_>>(),
            "cloud_init": self.cloud_init,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn os() -> GuestOs {
        let mut g = GuestOs::default();
        g.seed("vm1", &GuestSetup::default());
        g
    }

    #[test]
    fn a_read_of_exactly_the_rest_does_not_see_the_end() {
        let mut g = os();
        let h = g.file_open("/etc/hostname", None).as_i64().unwrap();
        let r = g.file_read(h, 4);
        assert_eq!(
            (r["count"].as_i64(), r["eof"].as_bool()),
            (Some(4), Some(false))
        );
        let r = g.file_read(h, 4);
        assert_eq!(
            (r["count"].as_i64(), r["eof"].as_bool()),
            (Some(0), Some(true))
        );
        assert_eq!(g.file_close(h), json!({}));
        assert_eq!(
            g.file_close(h)["error"]["desc"],
            format!("handle '{h}' has not been found")
        );
    }

    #[test]
    fn writing_needs_the_directory_and_a_write_mode() {
        let mut g = os();
        let e = g.file_open("/nope/x", Some("wb"));
        assert_eq!(
            e["error"]["desc"],
            "failed to open file '/nope/x' (mode: 'wb'): No such file or directory"
        );
        let h = g.file_open("/etc/hostname", None).as_i64().unwrap();
        assert_eq!(
            g.file_write(h, "eA==")["error"]["desc"],
            "failed to write to file: Bad file descriptor"
        );
        let h = g.file_open("/tmp/x", Some("wb")).as_i64().unwrap();
        assert_eq!(g.file_write(h, "aGk=")["count"], 2);
        assert_eq!(g.files["/tmp/x"], b"hi");
    }

    #[test]
    fn base64_is_checked_for_its_alphabet_only() {
        assert_eq!(qbase64_decode("aGk=\n"), Ok(b"hi".to_vec()));
        assert_eq!(qbase64_decode("aGk"), Ok(b"hi".to_vec()));
        assert_eq!(
            qbase64_decode("a b")
                .unwrap_err()
                .pointer("/error/desc")
                .cloned(),
            Some(json!("Base64 data contains invalid characters"))
        );
    }

    #[test]
    fn output_past_the_limit_is_cut_and_flagged() {
        let mut g = os();
        let pid = g.add_process(Process {
            ends_at: 1.0,
            exitcode: Some(0),
            signal: None,
            out: vec![b'a'; EXEC_MAX_OUTPUT + 10],
            err: Vec::new(),
        });
        assert_eq!(g.exec_status(pid, 0.5), json!({"exited": false}));
        let st = g.exec_status(pid, 1.0);
        assert_eq!(st["out-truncated"], true);
        assert!(st.get("err-data").is_none());
        assert_eq!(
            B64.decode(st["out-data"].as_str().unwrap()).unwrap().len(),
            EXEC_MAX_OUTPUT
        );
        assert_eq!(
            g.exec_status(pid, 2.0)["error"]["desc"],
            "Invalid parameter 'pid'"
        );
    }
}
