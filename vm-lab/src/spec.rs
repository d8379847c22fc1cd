//! The lab spec: a YAML file naming the nodes, the L2 network, the boot mode and the image.
//! Parsing validates everything up front; errors name the node or field at fault.

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Default vCPUs per node: one, so three nodes fit a 2-core CI machine under TCG.
pub const DEFAULT_VCPUS: u32 = 1;
/// Default memory per node in MiB.
pub const DEFAULT_MEMORY_MIB: u32 = 384;

/// A whole lab: its name, accelerator, L2 network, guest image and nodes. Build one with
/// [`LabSpec::from_file`] or [`LabSpec::from_yaml`], which both validate it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LabSpec {
    /// Lab name: names the run directory and seeds the multicast group/port.
    pub name: String,
    /// Which accelerator the nodes run under; `auto` when absent.
    #[serde(default)]
    pub accel: AccelChoice,
    /// The lab's L2 segment; a missing group or port is derived from the name and a per-run
    /// nonce (see [`LabSpec::mcast_link`]).
    #[serde(default)]
    pub network: NetworkSpec,
    /// What goes into the netboot image beyond the base system.
    #[serde(default)]
    pub image: ImageSpec,
    /// The nodes, 1 to 200; names, MACs and addresses must be unique.
    pub nodes: Vec<NodeSpec>,
    /// Directory that relative paths in the spec (extra image files) are resolved against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// The accelerator a lab asks for (`accel:` in the spec, `--accel` on the command line).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// KVM if a probe boot proves it works, otherwise TCG.
    #[default]
    Auto,
    /// KVM, or fail: the lab refuses to start when the KVM probe boot does not succeed.
    Kvm,
    /// QEMU's software emulator; slow (waits get four times longer) but works everywhere.
    Tcg,
}

impl FromStr for AccelChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            other => Err(Error::Spec(format!(
                "accel {other:?}: expected auto, kvm or tcg"
            ))),
        }
    }
}

/// The `network:` section of a spec: where the lab's multicast L2 lives.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Multicast group of the lab's L2; derived from the lab name and a per-run nonce when absent.
    #[serde(default)]
    pub mcast_group: Option<Ipv4Addr>,
    /// UDP port of the multicast group (1024 or above); derived like the group when absent.
    #[serde(default)]
    pub mcast_port: Option<u16>,
    /// The address QEMU binds its multicast socket to. Only loopback is accepted: anything else
    /// would send the lab's frames out of a real network card.
    #[serde(default = "loopback")]
    pub localaddr: Ipv4Addr,
}

fn loopback() -> Ipv4Addr {
    Ipv4Addr::LOCALHOST
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            mcast_group: None,
            mcast_port: None,
            localaddr: loopback(),
        }
    }
}

/// The `image:` section of a spec: extra Debian packages and host files baked into the
/// netboot image. Changing it changes the image's cache key.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// Extra Debian packages whose programs (bin/sbin) are copied into the image with their
    /// shared libraries, e.g. `etcd-server`, `etcd-client`.
    #[serde(default)]
    pub packages: Vec<String>,
    /// Extra host files copied into the image.
    #[serde(default)]
    pub files: Vec<ExtraFile>,
}

/// A host file copied into the netboot image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtraFile {
    /// Host path; relative paths resolve against the spec file's directory
    /// ([`LabSpec::from_file`]) or the current directory ([`LabSpec::from_yaml`]).
    pub src: PathBuf,
    /// Absolute path in the guest.
    pub dst: String,
    /// Octal permission bits, e.g. 0o755; defaults to the host file's.
    #[serde(default)]
    pub mode: Option<u32>,
}

/// How a node's netboot image reaches it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BootMode {
    /// QEMU loads the netboot kernel and initrd itself (`-kernel/-initrd`).
    #[default]
    Direct,
    /// The node's firmware PXE-boots through iPXE from QEMU's built-in TFTP server.
    Pxe,
}

/// One node of a lab.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Host name in the guest and in every node's `/etc/hosts`: 1–40 characters of a–z, 0–9 and
    /// `-`, not starting or ending with `-`.
    pub name: String,
    /// Virtual CPUs, 1–16; [`DEFAULT_VCPUS`] when absent.
    #[serde(default = "default_vcpus")]
    pub vcpus: u32,
    /// Guest memory in MiB, 128–65536; [`DEFAULT_MEMORY_MIB`] when absent.
    #[serde(default = "default_memory")]
    pub memory_mib: u32,
    /// Size of the node's sparse qcow2 disk (`/dev/vda` in the guest); 0 = no disk.
    #[serde(default)]
    pub disk_gib: u64,
    /// MAC of the node's lab NIC (`eth0`); unicast, unique in the lab.
    pub mac: Mac,
    /// Address and prefix of `eth0` on the lab L2; unique in the lab.
    pub address: Cidr,
    /// Direct kernel boot (the default) or PXE.
    #[serde(default)]
    pub boot: BootMode,
    /// Extra kernel command-line arguments.
    #[serde(default)]
    pub kernel_args: Vec<String>,
    /// Seconds the guest's wall clock runs ahead of the host's from boot (negative: behind).
    #[serde(default)]
    pub clock_offset_s: i64,
}

fn default_vcpus() -> u32 {
    DEFAULT_VCPUS
}
fn default_memory() -> u32 {
    DEFAULT_MEMORY_MIB
}

/// An Ethernet MAC address, unicast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Mac(pub [u8; 6]);

impl FromStr for Mac {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return Err(Error::Spec(format!(
                "MAC {s:?}: expected six hex octets separated by ':'"
            )));
        }
        let mut out = [0u8; 6];
        for (slot, part) in out.iter_mut().zip(&parts) {
            if part.len() != 2 {
                return Err(Error::Spec(format!(
                    "MAC {s:?}: octet {part:?} is not two hex digits"
                )));
            }
            *slot = u8::from_str_radix(part, 16)
                .map_err(|_| Error::Spec(format!("MAC {s:?}: octet {part:?} is not hex")))?;
        }
        if out[0] & 1 == 1 {
            return Err(Error::Spec(format!("MAC {s:?} is a multicast address")));
        }
        Ok(Mac(out))
    }
}

impl TryFrom<String> for Mac {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Mac> for String {
    fn from(m: Mac) -> String {
        m.to_string()
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// An IPv4 address with its prefix length, e.g. `192.168.100.11/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cidr {
    /// The address.
    pub ip: Ipv4Addr,
    /// Prefix length, 8–30.
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let (ip, prefix) = s.split_once('/').ok_or_else(|| {
            Error::Spec(format!(
                "address {s:?}: expected IP/prefix, e.g. 192.168.100.11/24"
            ))
        })?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| Error::Spec(format!("address {s:?}: {ip:?} is not an IPv4 address")))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=30).contains(p))
            .ok_or_else(|| Error::Spec(format!("address {s:?}: prefix must be 8..=30")))?;
        if ip.is_loopback() || ip.is_multicast() || ip.is_unspecified() || ip.is_broadcast() {
            return Err(Error::Spec(format!(
                "address {s:?} is not a unicast host address"
            )));
        }
        Ok(Cidr { ip, prefix })
    }
}

impl TryFrom<String> for Cidr {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> String {
        c.to_string()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

/// The lab's L2 link: a multicast group joined through a loopback local address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct McastLink {
    /// Multicast group address (224.0.0.0/4).
    pub group: Ipv4Addr,
    /// UDP port of the group.
    pub port: u16,
    /// The loopback address QEMU's socket binds to, so frames never leave the host.
    pub localaddr: Ipv4Addr,
}

impl LabSpec {
    /// Parse and validate a spec from YAML text.
    pub fn from_yaml(text: &str) -> Result<LabSpec> {
        let spec: LabSpec = serde_norway::from_str(text).map_err(|e| Error::Spec(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Read, parse and validate a spec file; relative paths resolve against its directory.
    pub fn from_file(path: &Path) -> Result<LabSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut spec = LabSpec::from_yaml(&text)
            .map_err(|e| Error::Spec(format!("{}: {e}", path.display())))?;
        spec.base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Ok(spec)
    }

    /// Check names, addresses, MACs and sizes; the first problem found is reported.
    pub fn validate(&self) -> Result<()> {
        check_name("lab name", &self.name)?;
        if self.nodes.is_empty() {
            return Err(Error::Spec("a lab needs at least one node".into()));
        }
        if self.nodes.len() > 200 {
            return Err(Error::Spec("a lab holds at most 200 nodes".into()));
        }
        if !self.network.localaddr.is_loopback() {
            return Err(Error::Spec(format!(
                "network.localaddr {} is not a loopback address: multicast frames would leave the host",
                self.network.localaddr
            )));
        }
        if let Some(g) = self.network.mcast_group
            && !g.is_multicast()
        {
            return Err(Error::Spec(format!(
                "network.mcast_group {g} is not a multicast address"
            )));
        }
        if let Some(p) = self.network.mcast_port
            && p < 1024
        {
            return Err(Error::Spec(format!(
                "network.mcast_port {p} must be >= 1024"
            )));
        }
        let mut names = HashSet::new();
        let mut macs = HashSet::new();
        let mut ips = HashSet::new();
        for n in &self.nodes {
            check_name("node name", &n.name)?;
            let who = &n.name;
            if !names.insert(n.name.as_str()) {
                return Err(Error::Spec(format!("node {who}: the name is used twice")));
            }
            if !macs.insert(n.mac) {
                return Err(Error::Spec(format!(
                    "node {who}: MAC {} is used twice",
                    n.mac
                )));
            }
            if !ips.insert(n.address.ip) {
                return Err(Error::Spec(format!(
                    "node {who}: address {} is used twice",
                    n.address.ip
                )));
            }
            if !(1..=16).contains(&n.vcpus) {
                return Err(Error::Spec(format!(
                    "node {who}: vcpus must be 1..=16, got {}",
                    n.vcpus
                )));
            }
            if !(128..=65536).contains(&n.memory_mib) {
                return Err(Error::Spec(format!(
                    "node {who}: memory_mib must be 128..=65536, got {}",
                    n.memory_mib
                )));
            }
            if n.disk_gib > 16 * 1024 {
                return Err(Error::Spec(format!(
                    "node {who}: disk_gib {} is over 16 TiB",
                    n.disk_gib
                )));
            }
            for arg in &n.kernel_args {
                if arg.chars().any(|c| c.is_whitespace() || c == '"') {
                    return Err(Error::Spec(format!(
                        "node {who}: kernel argument {arg:?} must not contain spaces or quotes"
                    )));
                }
            }
        }
        for f in &self.image.files {
            if !f.dst.starts_with('/') || f.dst.contains("..") {
                return Err(Error::Spec(format!(
                    "image.files: destination {:?} must be an absolute path without '..'",
                    f.dst
                )));
            }
        }
        for p in &self.image.packages {
            if p.is_empty()
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            {
                return Err(Error::Spec(format!(
                    "image.packages: {p:?} is not a Debian package name"
                )));
            }
        }
        Ok(())
    }

    /// The node named `name`, if the spec has one.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The lab's multicast link. Missing group/port are derived from the lab name and `nonce`,
    /// so two labs started at once do not share a segment even in one network namespace.
    pub fn mcast_link(&self, nonce: &str) -> McastLink {
        let digest = Sha256::digest(format!("{}\0{nonce}", self.name).as_bytes());
        let group = self.network.mcast_group.unwrap_or(Ipv4Addr::new(
            239,
            digest[0],
            digest[1],
            digest[2].max(1),
        ));
        let port = self
            .network
            .mcast_port
            .unwrap_or(20000 + (u16::from_be_bytes([digest[3], digest[4]]) % 40000));
        McastLink {
            group,
            port,
            localaddr: self.network.localaddr,
        }
    }

    /// `name:ip` pairs of every node, for the guests' /etc/hosts.
    pub fn hosts(&self) -> Vec<(String, Ipv4Addr)> {
        self.nodes
            .iter()
            .map(|n| (n.name.clone(), n.address.ip))
            .collect()
    }
}

fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::Spec(format!(
            "{what} {name:?}: use 1-40 characters a-z, 0-9 and '-', not starting or ending with '-'"
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MINIMAL: &str = r#"
name: t
nodes:
  - name: node01
    mac: "52:54:00:00:01:01"
    address: 192.168.100.11/24
  - name: node02
    mac: "52:54:00:00:01:02"
    address: 192.168.100.12/24
    boot: pxe
"#;

    #[test]
    fn parses_minimal_spec_with_defaults() {
        let s = LabSpec::from_yaml(MINIMAL).unwrap();
        assert_eq!(s.nodes.len(), 2);
        assert_eq!(s.nodes[0].vcpus, DEFAULT_VCPUS);
        assert_eq!(s.nodes[0].memory_mib, DEFAULT_MEMORY_MIB);
        assert_eq!(s.nodes[1].boot, BootMode::Pxe);
        assert_eq!(s.accel, AccelChoice::Auto);
        assert_eq!(s.network.localaddr, Ipv4Addr::LOCALHOST);
        assert_eq!(s.nodes[0].address.to_string(), "192.168.100.11/24");
    }

    #[test]
    fn duplicate_mac_names_the_node() {
        let y = MINIMAL.replace("52:54:00:00:01:02", "52:54:00:00:01:01");
        let e = LabSpec::from_yaml(&y).unwrap_err().to_string();
        assert!(e.contains("node02") && e.contains("MAC"), "{e}");
    }

    #[test]
    fn duplicate_address_and_name_are_rejected() {
        let y = MINIMAL.replace("192.168.100.12", "192.168.100.11");
        assert!(
            LabSpec::from_yaml(&y)
                .unwrap_err()
                .to_string()
                .contains("node02")
        );
        let y = MINIMAL.replace("name: node02", "name: node01");
        assert!(
            LabSpec::from_yaml(&y)
                .unwrap_err()
                .to_string()
                .contains("used twice")
        );
    }

    #[test]
    fn bad_values_are_rejected_with_context() {
        for (from, to, needle) in [
            ("192.168.100.11/24", "192.168.100.11", "prefix"),
            ("192.168.100.11/24", "300.1.1.1/24", "not an IPv4"),
            ("52:54:00:00:01:01", "53:54:00:00:01:01", "multicast"),
            ("52:54:00:00:01:01", "52:54:00:00:01", "six hex"),
            ("name: node01", "name: Node_01", "node name"),
        ] {
            let e = LabSpec::from_yaml(&MINIMAL.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{to}: {e}");
        }
    }

    #[test]
    fn non_loopback_localaddr_is_refused() {
        let y = format!("{MINIMAL}network:\n  localaddr: 10.1.2.3\n");
        let e = LabSpec::from_yaml(&y).unwrap_err().to_string();
        assert!(e.contains("loopback"), "{e}");
    }

    #[test]
    fn unknown_fields_are_errors() {
        let y = format!("{MINIMAL}bogus: 1\n");
        assert!(LabSpec::from_yaml(&y).is_err());
    }

    #[test]
    fn mcast_link_is_derived_per_nonce_and_respects_overrides() {
        let s = LabSpec::from_yaml(MINIMAL).unwrap();
        let a = s.mcast_link("a");
        let b = s.mcast_link("b");
        assert!(a.group.is_multicast() && a.port >= 20000);
        assert_ne!((a.group, a.port), (b.group, b.port));
        assert_eq!(a.localaddr, Ipv4Addr::LOCALHOST);
        let y = format!("{MINIMAL}network:\n  mcast_group: 230.0.0.1\n  mcast_port: 1234\n");
        let s = LabSpec::from_yaml(&y).unwrap();
        let l = s.mcast_link("x");
        assert_eq!((l.group, l.port), (Ipv4Addr::new(230, 0, 0, 1), 1234));
    }

    #[test]
    fn non_multicast_group_is_refused() {
        let y = format!("{MINIMAL}network:\n  mcast_group: 10.0.0.1\n");
        assert!(
            LabSpec::from_yaml(&y)
                .unwrap_err()
                .to_string()
                .contains("multicast")
        );
    }
}
