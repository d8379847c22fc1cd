//! The segments inside the host's namespace: one Linux bridge per bridge name, one tap per
//! NIC enslaved to it (both made by `ip` run inside the namespace: no root needed, only the
//! user namespace's capabilities), the namespace's own addresses on the bridge, and a real DHCP
//! server (busybox `udhcpd`) where the bridge has a pool. Processes started here join the
//! namespace's PID namespace, so they die with it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::spec::{BridgeSpec, DhcpPool};
use crate::error::{Error, Result};
use crate::namespace;

/// A process started inside the namespace through `nsenter` (which stays as its parent).
#[derive(Debug)]
pub struct NsProcess {
    nsenter: Child,
    /// Host PID of the program itself (nsenter's child).
    pub pid: u32,
    exit: Option<String>,
}

impl NsProcess {
    /// Start `program args` in the namespace (user, net and PID), stderr to `stderr`.
    pub fn spawn(
        init_pid: u32,
        program: &str,
        args: &[String],
        stderr: Stdio,
    ) -> Result<NsProcess> {
        let mut nsenter = Command::new("nsenter")
            .args(namespace::nsenter_argv(init_pid, true, program))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| Error::tool("nsenter", format!("cannot start {program}: {e}")))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = namespace::first_child(nsenter.id(), Duration::ZERO) {
                return Ok(NsProcess {
                    nsenter,
                    pid,
                    exit: None,
                });
            }
            if let Ok(Some(status)) = nsenter.try_wait() {
                return Err(Error::tool(program, format!("exited at once ({status})")));
            }
            if Instant::now() > deadline {
                let _ = nsenter.kill();
                let _ = nsenter.wait();
                return Err(Error::tool(program, "did not start within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `None` while it runs; its exit status once it has ended.
    pub fn exit_status(&mut self) -> Option<String> {
        if self.exit.is_none() {
            match self.nsenter.try_wait() {
                Ok(Some(s)) => self.exit = Some(s.to_string()),
                Ok(None) if !namespace::alive(self.pid) => {
                    // The program is gone; nsenter follows within moments.
                    if let Ok(s) = self.nsenter.wait() {
                        self.exit = Some(s.to_string());
                    }
                }
                Ok(None) => {}
                Err(e) => self.exit = Some(format!("unknown ({e})")),
            }
        }
        self.exit.clone()
    }

    /// True until the program has exited (checked without blocking).
    pub fn running(&mut self) -> bool {
        self.exit_status().is_none()
    }

    /// SIGKILL the program and reap nsenter.
    pub fn kill(&mut self) {
        if self.running() {
            if let Ok(pid) = i32::try_from(self.pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = self.nsenter.wait().map(|s| self.exit = Some(s.to_string()));
        }
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Run `ip -batch -` inside the namespace (network only).
pub fn run_ip(init_pid: u32, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut child = Command::new("nsenter")
        .args(namespace::nsenter_argv(init_pid, false, "ip"))
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::tool("ip", format!("cannot run (iproute2): {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let text = lines.join("\n") + "\n";
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| Error::tool("ip", e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::tool("ip", e.to_string()))?;
    if !out.status.success() {
        return Err(Error::tool(
            "ip",
            format!(
                "{} (commands: {}): {}",
                out.status,
                lines.join("; "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(())
}

/// A Linux interface name: 1–15 bytes, no `/`, whitespace or `:`.
pub fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= super::argv::MAX_IFNAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `ip` commands creating a bridge (when `new`) and adding the addresses it lacks.
pub fn bridge_commands(name: &str, new: bool, add: &[(Ipv4Addr, u8)]) -> Vec<String> {
    let mut v = Vec::new();
    if new {
        v.push(format!("link add {name} type bridge"));
        // Forward at once: no STP listening delay before a guest's first frame.
        v.push(format!(
            "link set {name} type bridge forward_delay 0 stp_state 0"
        ));
        v.push(format!("link set {name} up"));
    }
    for (ip, prefix) in add {
        v.push(format!("addr add {ip}/{prefix} dev {name}"));
    }
    v
}

/// `ip` commands creating a tap enslaved to `bridge`.
pub fn tap_commands(tap: &str, bridge: &str) -> Vec<String> {
    vec![
        format!("tuntap add {tap} mode tap"),
        format!("link set {tap} master {bridge}"),
        format!("link set {tap} up"),
    ]
}

/// The tap of NIC `nic` of the guest numbered `seq` on this host (`tap{seq}i{nic}`, PVE's shape).
pub fn tap_name(seq: u32, nic: u32) -> String {
    format!("tap{seq}i{nic}")
}

/// Merge a request for a bridge into what it has: addresses are added, a pool replaces a
/// pool only by covering both (one DHCP server per segment).
pub fn merge_bridge(have: &BridgeSpec, want: &BridgeSpec) -> BridgeSpec {
    let mut out = have.clone();
    for a in &want.addresses {
        if !out.addresses.contains(a) {
            out.addresses.push(*a);
        }
    }
    out.dhcp = match (have.dhcp, want.dhcp) {
        (None, w) => w,
        (h, None) => h,
        (Some(h), Some(w)) => Some(DhcpPool {
            start: h.start.min(w.start),
            end: h.end.max(w.end),
            router: h.router.or(w.router),
        }),
    };
    out
}

/// The prefix of the bridge address whose subnet holds `ip` (24 when none does).
pub fn prefix_for(addresses: &[(Ipv4Addr, u8)], ip: Ipv4Addr) -> u8 {
    addresses
        .iter()
        .find(|(a, p)| same_subnet(*a, ip, *p))
        .map_or(24, |(_, p)| *p)
}

fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

/// Whether `a` and `b` lie in the same IPv4 subnet of `prefix` bits.
pub fn same_subnet(a: Ipv4Addr, b: Ipv4Addr, prefix: u8) -> bool {
    u32::from(a) & mask(prefix) == u32::from(b) & mask(prefix)
}

/// busybox `udhcpd`'s configuration for a pool on `bridge`.
pub fn udhcpd_conf(bridge: &str, pool: &DhcpPool, prefix: u8, dir: &Path) -> String {
    let count = u32::from(pool.end).saturating_sub(u32::from(pool.start)) + 1;
    let mut s = format!(
        "interface {bridge}\nstart {}\nend {}\nmax_leases {count}\nlease_file {}\npidfile {}\n\
         auto_time 0\noption subnet {}\noption lease 86400\n",
        pool.start,
        pool.end,
        dir.join(format!("{bridge}.leases")).display(),
        dir.join(format!("{bridge}.udhcpd.pid")).display(),
        Ipv4Addr::from(mask(prefix)),
    );
    if let Some(r) = pool.router {
        s.push_str(&format!("option router {r}\n"));
    }
    s
}

/// The static busybox (for `udhcpd`): given, or from vm-lab's package cache, fetched with
/// `apt-get download busybox-static` when the cache does not have it yet.
pub fn busybox(cache: &Path) -> Result<PathBuf> {
    let unpacked = cache.join("unpacked");
    if let Some(p) = cached_busybox(&unpacked) {
        return Ok(p);
    }
    let names: BTreeSet<String> = ["busybox-static".to_string()].into();
    let versions: BTreeMap<String, String> = crate::image::debs::candidate_versions(&names)?;
    let debs = crate::image::debs::fetch(&versions, &cache.join("debs"))?;
    for deb in debs.values() {
        crate::image::debs::unpack(deb, &unpacked)?;
    }
    cached_busybox(&unpacked)
        .ok_or_else(|| Error::tool("busybox-static", "the package holds no bin/busybox"))
}

fn cached_busybox(unpacked: &Path) -> Option<PathBuf> {
    std::fs::read_dir(unpacked)
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("busybox-static_")
        })
        .map(|e| e.path().join("bin/busybox"))
        .find(|p| p.is_file())
}

/// The SSH client run inside the namespace (network only) against `user@addr`, with `key` and
/// no host-key bookkeeping. `remote` becomes the remote command.
pub fn ssh_argv(
    init_pid: u32,
    key: &Path,
    user: &str,
    addr: Ipv4Addr,
    remote: &[&str],
) -> Vec<String> {
    let mut v = namespace::nsenter_argv(init_pid, false, "ssh");
    let key = key.display().to_string();
    let dest = format!("{user}@{addr}");
    v.extend(
        [
            "-F",
            "/dev/null",
            "-i",
            &key,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            &dest,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v.extend(remote.iter().map(|s| s.to_string()));
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_bridge_is_made_once_and_gains_addresses() {
        let v = bridge_commands("vmbr0", true, &[(ip("192.168.11.10"), 24)]);
        assert_eq!(v[0], "link add vmbr0 type bridge");
        assert_eq!(v.last().unwrap(), "addr add 192.168.11.10/24 dev vmbr0");
        let v = bridge_commands("vmbr0", false, &[(ip("192.168.11.1"), 24)]);
        assert_eq!(v, ["addr add 192.168.11.1/24 dev vmbr0"]);
        assert_eq!(
            tap_commands("tap3i0", "vmbr0"),
            [
                "tuntap add tap3i0 mode tap",
                "link set tap3i0 master vmbr0",
                "link set tap3i0 up"
            ]
        );
        assert_eq!(tap_name(3, 1), "tap3i1");
        assert!(
            valid_ifname("vmbr0") && !valid_ifname("a-name-longer-than-15") && !valid_ifname("a b")
        );
    }

    #[test]
    fn two_nodes_pools_on_one_segment_become_one_pool() {
        let mut a = BridgeSpec::new("vmbr0");
        a.addresses.push((ip("192.168.11.10"), 24));
        a.dhcp = Some(DhcpPool {
            start: ip("192.168.11.100"),
            end: ip("192.168.11.199"),
            router: Some(ip("192.168.11.1")),
        });
        let mut b = BridgeSpec::new("vmbr0");
        b.addresses.push((ip("192.168.11.11"), 24));
        b.dhcp = Some(DhcpPool {
            start: ip("192.168.11.200"),
            end: ip("192.168.11.250"),
            router: None,
        });
        let m = merge_bridge(&a, &b);
        assert_eq!(m.addresses.len(), 2);
        let pool = m.dhcp.unwrap();
        assert_eq!(
            (pool.start, pool.end),
            (ip("192.168.11.100"), ip("192.168.11.250"))
        );
        assert_eq!(pool.router, Some(ip("192.168.11.1")));
        assert_eq!(merge_bridge(&m, &m), m);
    }

    #[test]
    fn udhcpd_gets_the_pool_mask_and_router() {
        let pool = DhcpPool {
            start: ip("10.10.0.100"),
            end: ip("10.10.0.149"),
            router: Some(ip("10.10.0.1")),
        };
        let prefix = prefix_for(&[(ip("10.10.0.1"), 16)], pool.start);
        assert_eq!(prefix, 16);
        let c = udhcpd_conf("vmbr0", &pool, prefix, Path::new("/r"));
        for want in [
            "interface vmbr0\n",
            "start 10.10.0.100\n",
            "end 10.10.0.149\n",
            "max_leases 50\n",
            "lease_file /r/vmbr0.leases\n",
            "option subnet 255.255.0.0\n",
            "option router 10.10.0.1\n",
        ] {
            assert!(c.contains(want), "{want} in {c}");
        }
        assert_eq!(prefix_for(&[], pool.start), 24);
    }

    #[test]
    fn ssh_goes_to_the_guest_address_from_inside_the_namespace() {
        let v = ssh_argv(
            9,
            Path::new("/k"),
            "ubuntu",
            ip("10.10.0.11"),
            &["hostname"],
        );
        let j = v.join(" ");
        assert!(
            j.starts_with("--target 9 --user --net --preserve-credentials -- ssh"),
            "{j}"
        );
        assert!(
            j.ends_with("-o ConnectTimeout=10 ubuntu@10.10.0.11 hostname"),
            "{j}"
        );
    }
}
