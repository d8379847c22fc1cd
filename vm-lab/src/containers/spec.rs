//! What a container is made of: the description a hypervisor's container config carries
//! (PVE's `rootfs`, `hostname`, `netN`, `mpN`, `memory`, `swap`), in the lab's terms.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// One container to start on a `GuestHost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// Unique per host, e.g. `pve1-ct105`; names its run directory.
    pub name: String,
    /// A directory holding the unpacked root file system (it must have `/sbin/init`).
    pub rootfs: PathBuf,
    /// Set in the container's UTS namespace before init runs.
    pub hostname: String,
    /// Its network interfaces, each a veth pair onto a segment.
    pub nics: Vec<ContainerNic>,
    /// Host directories bind-mounted into the container (PVE's `mpN`).
    pub mounts: Vec<BindMount>,
    /// Memory limit in MiB: the cgroup's `memory.max` where cgroups can be written, else
    /// only counted against the host's budget.
    pub memory_mib: u64,
    /// Swap in MiB (`memory.swap.max` where the limit is enforced).
    pub swap_mib: u64,
    /// Where init's stdout and stderr go; default `<run_dir>/<name>/console.log`.
    pub console_log: Option<PathBuf>,
}

impl ContainerSpec {
    /// A container named `name` on `rootfs`: hostname = name, no NICs, no mounts, 512 MiB of
    /// memory and 512 MiB of swap (PVE's defaults), the console log in the run directory.
    pub fn new(name: &str, rootfs: impl Into<PathBuf>) -> ContainerSpec {
        ContainerSpec {
            name: name.to_string(),
            rootfs: rootfs.into(),
            hostname: name.to_string(),
            nics: Vec::new(),
            mounts: Vec::new(),
            memory_mib: 512,
            swap_mib: 512,
            console_log: None,
        }
    }
}

/// One network interface of a container: a veth pair whose host end is enslaved to `bridge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerNic {
    /// The interface name inside the container, e.g. `eth0` (PVE's `name=`).
    pub name: String,
    /// The segment; created when new, as `GuestHost::launch` does for guests.
    pub bridge: String,
    /// The MAC inside the container (PVE's `hwaddr`, e.g. `BC:24:11:00:00:01`); random when
    /// `None`.
    pub mac: Option<String>,
    /// The MTU of both ends; the kernel's default (1500) when `None`.
    pub mtu: Option<u16>,
    /// False for PVE's `link_down=1`: the host end stays down, so no frame passes.
    pub link_up: bool,
}

impl ContainerNic {
    /// NIC `name` on `bridge`, link up, random MAC, default MTU.
    pub fn new(name: &str, bridge: &str) -> ContainerNic {
        ContainerNic {
            name: name.to_string(),
            bridge: bridge.to_string(),
            mac: None,
            mtu: None,
            link_up: true,
        }
    }
}

/// A host directory bind-mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    /// The host directory (it must exist).
    pub source: PathBuf,
    /// An absolute path inside the container; made when missing.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Longest container name (it names a directory and appears in messages).
const MAX_NAME: usize = 64;

impl ContainerSpec {
    /// Check everything that can be checked without starting it: the name, the host name,
    /// the rootfs and its `/sbin/init`, each NIC's name, bridge and MAC, each mount's source
    /// and target. Errors are [`Error::Spec`] and name the container and the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Spec(format!("container {:?}: {what}", self.name)));
        if self.name.is_empty()
            || self.name.len() > MAX_NAME
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || self.name.starts_with('.')
        {
            return bad(format!(
                "the name must be 1-{MAX_NAME} letters, digits, '-', '_' or '.'"
            ));
        }
        if !valid_hostname(&self.hostname) {
            return bad(format!("{:?} is not a host name", self.hostname));
        }
        if !self.rootfs.is_dir() {
            return bad(format!(
                "rootfs {} is not a directory",
                self.rootfs.display()
            ));
        }
        let init = self.rootfs.join("sbin/init");
        if std::fs::symlink_metadata(&init).is_err() {
            return bad(format!(
                "rootfs {} has no /sbin/init",
                self.rootfs.display()
            ));
        }
        if self.memory_mib == 0 {
            return bad("memory must be at least 1 MiB".into());
        }
        let mut names: Vec<&str> = Vec::new();
        for nic in &self.nics {
            if !valid_ifname(&nic.name) || nic.name == "lo" {
                return bad(format!(
                    "NIC name {:?} is not a usable interface name",
                    nic.name
                ));
            }
            if names.contains(&nic.name.as_str()) {
                return bad(format!("two NICs are named {}", nic.name));
            }
            names.push(&nic.name);
            if !valid_ifname(&nic.bridge) {
                return bad(format!("bridge {:?} is not an interface name", nic.bridge));
            }
            if let Some(mac) = &nic.mac
                && !valid_unicast_mac(mac)
            {
                return bad(format!("{mac:?} is not a unicast MAC address"));
            }
            if let Some(mtu) = nic.mtu
                && !(68..=65520).contains(&mtu)
            {
                return bad(format!("NIC {}: MTU {mtu} is out of 68-65520", nic.name));
            }
        }
        for m in &self.mounts {
            if !m.source.exists() {
                return bad(format!(
                    "mount source {} does not exist",
                    m.source.display()
                ));
            }
            if !valid_target(&m.target) {
                return bad(format!(
                    "mount target {:?} must be an absolute path without '..', whitespace or control characters, and not /",
                    m.target
                ));
            }
        }
        Ok(())
    }
}

/// A host name as `hostname` and PVE accept: labels of letters, digits and '-', dot-separated.
pub(super) fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 64
        && h.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn valid_ifname(name: &str) -> bool {
    crate::guests::net::valid_ifname(name)
}

/// Six hex pairs separated by ':', the first octet's multicast bit clear.
pub(super) fn valid_unicast_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
        && u8::from_str_radix(parts[0], 16).is_ok_and(|b| b & 1 == 0)
}

fn valid_target(t: &str) -> bool {
    t.starts_with('/')
        && t.len() > 1
        && !t.chars().any(|c| c.is_whitespace() || c.is_control())
        && !t.split('/').any(|c| c == "..")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rootfs() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("sbin")).unwrap();
        std::fs::write(d.path().join("sbin/init"), "#!/bin/sh\n").unwrap();
        d
    }

    #[test]
    fn a_plain_spec_is_valid() {
        let r = rootfs();
        let mut s = ContainerSpec::new("pve1-ct105", r.path());
        s.nics.push(ContainerNic::new("eth0", "vmbr0"));
        s.nics[0].mac = Some("BC:24:11:00:00:01".into());
        s.mounts.push(BindMount {
            source: r.path().to_path_buf(),
            target: "/mnt/data".into(),
            read_only: true,
        });
        s.validate().unwrap();
        assert_eq!(s.hostname, "pve1-ct105");
    }

    #[test]
    fn what_cannot_work_is_refused_with_the_field_named() {
        let r = rootfs();
        let base = ContainerSpec::new("ct1", r.path());
        let err = |f: &dyn Fn(&mut ContainerSpec)| {
            let mut s = base.clone();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert!(err(&|s| s.name = "a/b".into()).contains("name"));
        assert!(err(&|s| s.hostname = "bad_host".into()).contains("host name"));
        assert!(err(&|s| s.rootfs = "/nonexistent/rootfs".into()).contains("not a directory"));
        let empty = tempfile::tempdir().unwrap();
        assert!(err(&|s| s.rootfs = empty.path().into()).contains("/sbin/init"));
        assert!(
            err(&|s| s.nics = vec![ContainerNic::new("eth0", "vmbr0"); 2]).contains("two NICs")
        );
        assert!(
            err(&|s| {
                s.nics = vec![ContainerNic::new("eth0", "vmbr0")];
                s.nics[0].mac = Some("01:00:5e:00:00:01".into());
            })
            .contains("unicast")
        );
        assert!(
            err(&|s| s.mounts = vec![BindMount {
                source: "/nonexistent/src".into(),
                target: "/mnt".into(),
                read_only: false
            }])
            .contains("does not exist")
        );
        assert!(
            err(&|s| s.mounts = vec![BindMount {
                source: r.path().into(),
                target: "/mnt/../etc".into(),
                read_only: false
            }])
            .contains("mount target")
        );
    }

    #[test]
    fn host_names_and_macs() {
        assert!(valid_hostname("ct105.lab.example"));
        assert!(!valid_hostname("-x") && !valid_hostname("a..b") && !valid_hostname(""));
        assert!(valid_unicast_mac("bc:24:11:aa:bb:cc"));
        assert!(!valid_unicast_mac("bc:24:11:aa:bb") && !valid_unicast_mac("zz:24:11:aa:bb:cc"));
    }
}
