//! The lab's private namespaces, without root: a holder process made by
//! `unshare --user --map-root-user --net --pid --fork --kill-child` whose PID-1 child brings `lo`
//! up and then waits on a pipe from the driver. Every QEMU of the lab is started inside with
//! `nsenter`, so it shares the lab's network (the multicast L2 never reaches the host's) and its
//! PID namespace.
//!
//! Run as root, the holder's user namespace maps host IDs 0–65535 onto themselves, written from
//! outside before its init goes on, instead of `--map-root-user`'s single ID with `setgroups`
//! denied: so `setgroups` works inside (an SSH server in a container calls `initgroups` at
//! every login, and fails without it). Rootless, `--map-root-user` it is.
//!
//! Why nothing outlives the lab, even on SIGKILL of the driver: the kernel closes the driver's
//! end of the pipe, the PID-1 child reads EOF and exits, and when a PID namespace's init exits
//! the kernel SIGKILLs every process left in it — all the lab's QEMUs.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};

const HOLDER_SCRIPT: &str = "ip link set lo up || exit 1; echo ready; exec cat >/dev/null";
/// As root: the init waits for the driver's `go` (sent once the ID maps are written).
const HOLDER_SCRIPT_MAPPED: &str =
    "read go || exit 1; ip link set lo up || exit 1; echo ready; exec cat >/dev/null";
/// How many host IDs (from 0) the namespace maps onto themselves when made by root.
const MAPPED_IDS: u32 = 65536;

/// The lab's user + network + PID namespaces, held open by an `unshare` child. Dropping it
/// tears them down, and the kernel kills every process left inside.
#[derive(Debug)]
pub struct Namespace {
    holder: Child,
    pipe: Option<ChildStdin>,
    init_pid: u32,
}

impl Namespace {
    /// Create the namespaces and wait until `lo` is up.
    pub fn create() -> Result<Namespace> {
        let as_root = nix::unistd::geteuid().is_root();
        let argv = if as_root {
            holder_argv_mapped()
        } else {
            holder_argv()
        };
        let mut holder = Command::new("unshare")
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::tool("unshare", format!("cannot run (util-linux): {e}")))?;
        if as_root && let Err(e) = map_ids(&mut holder) {
            let _ = holder.kill();
            let _ = holder.wait();
            return Err(e);
        }
        let stdout = holder
            .stdout
            .take()
            .ok_or_else(|| Error::tool("unshare", "no stdout pipe"))?;
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        if line.trim() != "ready" {
            let _ = holder.kill();
            let out = holder.wait_with_output().ok();
            let stderr = out
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            return Err(Error::tool(
                "unshare",
                format!(
                    "could not create the lab's user+network namespace (are unprivileged user namespaces allowed?): {}",
                    stderr.trim()
                ),
            ));
        }
        let pipe = holder.stdin.take();
        let init_pid = first_child(holder.id(), Duration::from_secs(5))
            .ok_or_else(|| Error::tool("unshare", "namespace init process not found"))?;
        Ok(Namespace {
            holder,
            pipe,
            init_pid,
        })
    }

    /// Host PID of the namespace's init; `nsenter --target` takes it.
    pub fn init_pid(&self) -> u32 {
        self.init_pid
    }

    /// Host PID of the `unshare` process that holds the namespaces.
    pub fn holder_pid(&self) -> u32 {
        self.holder.id()
    }

    /// A command that runs `program` inside the lab's user, network and PID namespaces.
    pub fn command(&self, program: &str) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("nsenter");
        c.args(nsenter_argv(self.init_pid, true, program));
        c
    }

    /// Tear down: close the pipe (init exits, the kernel kills the rest), then reap the holder.
    pub fn shutdown(&mut self) {
        self.pipe.take();
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The `unshare` arguments that create the lab's namespaces (`--kill-child`: the init dies with
/// the holder) and run the holder script in them.
pub fn holder_argv() -> Vec<String> {
    [
        "--user",
        "--map-root-user",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
        HOLDER_SCRIPT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The holder's `unshare` arguments when run as root: no ID map of unshare's own (the driver
/// writes a wider one, with `setgroups` allowed); the init waits for it.
pub fn holder_argv_mapped() -> Vec<String> {
    [
        "--user",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
        HOLDER_SCRIPT_MAPPED,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Once the holder is in its new user namespace, map host IDs `0..MAPPED_IDS` onto
/// themselves (`setgroups` stays allowed) and tell its init to go on.
fn map_ids(holder: &mut Child) -> Result<()> {
    let pid = holder.id();
    let ours =
        std::fs::read_link("/proc/self/ns/user").map_err(|e| Error::io("/proc/self/ns/user", e))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match std::fs::read_link(format!("/proc/{pid}/ns/user")) {
            Ok(theirs) if theirs != ours => break,
            _ => {}
        }
        if let Ok(Some(status)) = holder.try_wait() {
            return Err(Error::tool("unshare", format!("exited at once ({status})")));
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::tool("unshare", "no new user namespace within 5 s"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let line = format!("0 0 {MAPPED_IDS}\n");
    for map in ["uid_map", "gid_map"] {
        let path = format!("/proc/{pid}/{map}");
        std::fs::write(&path, &line).map_err(|e| Error::io(&path, e))?;
    }
    let stdin = holder
        .stdin
        .as_mut()
        .ok_or_else(|| Error::tool("unshare", "no stdin pipe"))?;
    stdin
        .write_all(b"go\n")
        .map_err(|e| Error::tool("unshare", format!("telling the init to go on: {e}")))
}

/// `nsenter` arguments entering a lab (user + net, and PID when `pid` is set) to run `program`.
pub fn nsenter_argv(init_pid: u32, pid: bool, program: &str) -> Vec<String> {
    let mut v = vec![
        "--target".to_string(),
        init_pid.to_string(),
        "--user".into(),
        "--net".into(),
    ];
    if pid {
        v.push("--pid".into());
    }
    v.push("--preserve-credentials".into());
    v.push("--".into());
    v.push(program.into());
    v
}

/// The first child of `pid` (from /proc), waiting up to `wait` for it to appear.
pub fn first_child(pid: u32, wait: Duration) -> Option<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Some(first) = text.split_whitespace().next().and_then(|s| s.parse().ok())
        {
            return Some(first);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True when a process with this host PID exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// PIDs of processes whose command line mentions `needle` (used to prove nothing leaked).
pub fn pids_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(&needle)
                })
                .unwrap_or(false)
        })
        .filter(|pid| alive(*pid))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn holder_makes_user_net_and_pid_namespaces() {
        let v = holder_argv().join(" ");
        for flag in [
            "--user",
            "--map-root-user",
            "--net",
            "--pid",
            "--fork",
            "--kill-child",
        ] {
            assert!(v.contains(flag), "{flag}");
        }
        assert!(v.contains("ip link set lo up"));
    }

    #[test]
    fn as_root_the_maps_come_from_the_driver() {
        let v = holder_argv_mapped().join(" ");
        assert!(!v.contains("--map-root-user"), "{v}");
        assert!(v.contains("--user") && v.contains("--kill-child"));
        assert!(v.contains("read go || exit 1; ip link set lo up"), "{v}");
    }

    #[test]
    fn nsenter_targets_the_init() {
        let v = nsenter_argv(42, true, "qemu-system-x86_64");
        assert_eq!(&v[..2], ["--target", "42"]);
        assert!(v.contains(&"--pid".to_string()));
        assert_eq!(v.last().unwrap(), "qemu-system-x86_64");
        assert!(!nsenter_argv(42, false, "ssh").contains(&"--pid".to_string()));
    }

    #[test]
    fn namespace_is_private_and_dies_with_its_holder() {
        let mut ns = Namespace::create().unwrap();
        let init = ns.init_pid();
        assert!(alive(init));
        let here = std::fs::read_link("/proc/self/ns/net").unwrap();
        let there = std::fs::read_link(format!("/proc/{init}/ns/net")).unwrap();
        assert_ne!(here, there, "the lab must have its own network namespace");
        ns.shutdown();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(init) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(init));
    }
}
