//! Step 1 of the pipeline: the seed's ranges, plus what real PVE requires on top (the VM name is
//! a `dns-name`, so underscores the seed allows are refused here rather than by PVE's 400).

use serde::Serialize;

use crate::deployer::guest::GuestKind;
use crate::deployer::manifest::ForProvider;

pub const MIN_MEMORY_MIB: u64 = 128;
pub const MAX_MEMORY_MIB: u64 = 2 * 1024 * 1024;
pub const MIN_DISK_GIB: u64 = 1;
pub const MAX_DISK_GIB: u64 = 100 * 1024;

/// A spec that passed validation, with sizes in PVE's units.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ValidSpec {
    /// A VM or a container (`kind: ProxmoxContainer`).
    pub kind: GuestKind,
    pub name: String,
    pub site: String,
    pub node: String,
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gib: u64,
    pub storage: String,
    pub bridge: String,
    pub image: ImageSpec,
    pub user_data: Option<String>,
    /// The first NIC's static address; `None`: DHCP.
    pub ip: Option<StaticIp>,
    pub ssh_keys: Vec<String>,
}

/// A static IPv4 address with its prefix length and, optionally, the default gateway.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StaticIp {
    pub address: std::net::Ipv4Addr,
    pub prefix: u8,
    pub gateway: Option<std::net::Ipv4Addr>,
}

impl StaticIp {
    /// PVE's `ipconfig0` value: `ip=ADDR/PREFIX[,gw=GW]`.
    pub fn ipconfig(&self) -> String {
        match self.gateway {
            Some(gw) => format!("ip={}/{},gw={gw}", self.address, self.prefix),
            None => format!("ip={}/{}", self.address, self.prefix),
        }
    }
}

/// The manifest's `image`: either a volid (`storage:volname`) or a bare file name to search for.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ImageSpec {
    Volid { storage: String, volname: String },
    Name { name: String },
}

impl ImageSpec {
    /// The file name part (`ubuntu-22.04-cloud.img`).
    pub fn file_name(&self) -> &str {
        match self {
            ImageSpec::Volid { volname, .. } => volname.rsplit('/').next().unwrap_or(volname),
            ImageSpec::Name { name } => name,
        }
    }
}

impl std::fmt::Display for ImageSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageSpec::Volid { storage, volname } => write!(f, "{storage}:{volname}"),
            ImageSpec::Name { name } => f.write_str(name),
        }
    }
}

/// All problems of one spec (not just the first), each naming its field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid spec: {}", .problems.join("; "))]
pub struct InvalidSpec {
    pub problems: Vec<String>,
}

/// A VM's spec (see [`validate_guest`]).
pub fn validate(fp: &ForProvider) -> Result<ValidSpec, InvalidSpec> {
    validate_guest(fp, GuestKind::Vm)
}

/// The spec of a guest of `kind`. A container's `image` is its OS template; it has no
/// cloud-init, so `userData` is refused rather than dropped.
pub fn validate_guest(fp: &ForProvider, kind: GuestKind) -> Result<ValidSpec, InvalidSpec> {
    let mut problems = Vec::new();
    if let Err(e) = validate_name(&fp.name) {
        problems.push(format!("name: {e}"));
    }
    if let Err(e) = validate_node(&fp.node) {
        problems.push(format!("node: {e}"));
    }
    if fp.site.trim().is_empty() {
        problems.push("site: must not be empty".to_string());
    }
    let cores = match u32::try_from(fp.cpu) {
        Ok(c) if (1..=1024).contains(&c) => c,
        _ => {
            problems.push(format!("cpu: {} is outside 1–1024", fp.cpu));
            0
        }
    };
    let memory_mib = parse_memory_mib(&fp.memory).unwrap_or_else(|e| {
        problems.push(format!("memory: {e}"));
        0
    });
    let disk_gib = parse_disk_gib(&fp.disk).unwrap_or_else(|e| {
        problems.push(format!("disk: {e}"));
        0
    });
    if let Err(e) = validate_storage_id(&fp.storage) {
        problems.push(format!("storage: {e}"));
    }
    if let Err(e) = validate_bridge(&fp.network) {
        problems.push(format!("network: {e}"));
    }
    let image = parse_image(&fp.image).unwrap_or_else(|e| {
        problems.push(format!("image: {e}"));
        ImageSpec::Name {
            name: String::new(),
        }
    });
    if kind == GuestKind::Container {
        if fp
            .user_data
            .as_deref()
            .is_some_and(|u| !u.trim().is_empty())
        {
            problems.push(
                "userData: a container has no cloud-init (PVE writes its hostname, address and keys itself); use sshKeys and ipAddress"
                    .to_string(),
            );
        }
        let file = image.file_name();
        let is_template = matches!(&image, ImageSpec::Volid { volname, .. } if volname.starts_with("vztmpl/"))
            || [".tar.gz", ".tar.xz", ".tar.zst", ".tgz"]
                .iter()
                .any(|ext| file.ends_with(ext));
        if !file.is_empty() && !is_template {
            problems.push(format!(
                "image: '{}' is not a container template (a vztmpl volume or a .tar.gz/.tar.xz/.tar.zst file)",
                fp.image
            ));
        }
    }
    let ip = match parse_static_ip(fp.ip_address.as_deref(), fp.gateway.as_deref()) {
        Ok(ip) => ip,
        Err(e) => {
            problems.push(e);
            None
        }
    };
    for (i, k) in fp.ssh_keys.iter().enumerate() {
        if let Err(e) = validate_ssh_key(k) {
            problems.push(format!("sshKeys[{i}]: {e}"));
        }
    }
    if !problems.is_empty() {
        return Err(InvalidSpec { problems });
    }
    Ok(ValidSpec {
        kind,
        name: fp.name.clone(),
        site: fp.site.clone(),
        node: fp.node.clone(),
        cores,
        memory_mib,
        disk_gib,
        storage: fp.storage.clone(),
        bridge: fp.network.clone(),
        image,
        user_data: fp.user_data.clone().filter(|u| !u.trim().is_empty()),
        ip,
        ssh_keys: fp.ssh_keys.iter().map(|k| k.trim().to_string()).collect(),
    })
}

/// `ipAddress` (`A.B.C.D/N`) and `gateway` (`A.B.C.D`, only with an address). A gateway
/// outside the address's subnet is accepted, as PVE accepts it: a guest that cannot reach it
/// is the kind of mistake the harness shows from the guest's side.
fn parse_static_ip(
    address: Option<&str>,
    gateway: Option<&str>,
) -> Result<Option<StaticIp>, String> {
    let Some(address) = address else {
        return match gateway {
            Some(_) => Err("gateway: needs ipAddress (without one the NIC uses DHCP)".into()),
            None => Ok(None),
        };
    };
    let (ip, prefix) = address
        .split_once('/')
        .ok_or_else(|| format!("ipAddress: '{address}' needs a prefix length (A.B.C.D/N)"))?;
    let ip: std::net::Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("ipAddress: '{address}' is not an IPv4 address"))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| (1..=32).contains(p))
        .ok_or_else(|| format!("ipAddress: '{address}' has no prefix length in 1–32"))?;
    let gateway = gateway
        .map(|g| {
            g.parse::<std::net::Ipv4Addr>()
                .map_err(|_| format!("gateway: '{g}' is not an IPv4 address"))
        })
        .transpose()?;
    Ok(Some(StaticIp {
        address: ip,
        prefix,
        gateway,
    }))
}

/// One OpenSSH public key line: a key type, base64 data, an optional comment.
fn validate_ssh_key(key: &str) -> Result<(), String> {
    let mut parts = key.split_whitespace();
    let kind = parts.next().unwrap_or("");
    let data = parts.next().unwrap_or("");
    let known = kind.starts_with("ssh-") || kind.starts_with("ecdsa-") || kind.starts_with("sk-");
    if !known || data.is_empty() || key.contains('\n') {
        return Err("not one OpenSSH public key line (TYPE BASE64 [COMMENT])".into());
    }
    Ok(())
}

/// 1–100 characters of `[A-Za-z0-9_-]` (the seed's rule), and a PVE `dns-name`: dot-free labels of
/// alphanumerics and inner hyphens (no underscores, no leading or trailing hyphen).
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > 100 {
        return Err(format!("'{name}' must be 1–100 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "'{name}' contains '{c}' (allowed: A–Z a–z 0–9 - _)"
        ));
    }
    if name.contains('_') {
        return Err(format!(
            "'{name}' contains '_', which PVE's dns-name format refuses"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(format!(
            "'{name}' starts or ends with '-', which PVE's dns-name format refuses"
        ));
    }
    Ok(())
}

/// PVE's `pve-node` format.
pub fn validate_node(node: &str) -> Result<(), String> {
    let ok = !node.is_empty()
        && node.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !node.starts_with('-')
        && !node.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("'{node}' is not a valid PVE node name"))
    }
}

/// PVE's `pve-storage-id`: a letter, then letters, digits, `-`, `_`, `.`.
pub fn validate_storage_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!("'{id}' is not a valid storage id"))
    }
}

/// PVE's `pve-bridge-id`: a letter, then up to 9 more of letters, digits, `-`, `_`, `.`.
pub fn validate_bridge(bridge: &str) -> Result<(), String> {
    let mut chars = bridge.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && bridge.len() <= 10
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{bridge}' is not a valid bridge name (a letter, then up to 9 of A–Z a–z 0–9 - _ .)"
        ))
    }
}

/// `storage:volname` or a bare file name; no spaces, no absolute paths (PVE refuses arbitrary
/// paths to API tokens, even root's).
pub fn parse_image(image: &str) -> Result<ImageSpec, String> {
    if image.is_empty() {
        return Err("must not be empty".to_string());
    }
    if image.chars().any(char::is_whitespace) {
        return Err(format!("'{image}' contains whitespace"));
    }
    if image.starts_with('/') {
        return Err(format!(
            "'{image}' is a filesystem path; PVE accepts those only from root@pam with a password ticket — use a storage volume (storage:import/NAME.qcow2)"
        ));
    }
    match image.split_once(':') {
        Some((storage, volname)) => {
            validate_storage_id(storage)?;
            if volname.is_empty() || volname.contains("..") {
                return Err(format!("'{image}' has an invalid volume name"));
            }
            Ok(ImageSpec::Volid {
                storage: storage.to_string(),
                volname: volname.to_string(),
            })
        }
        None => {
            if image.contains('/') {
                return Err(format!(
                    "'{image}' is neither a volid (storage:path) nor a file name"
                ));
            }
            Ok(ImageSpec::Name {
                name: image.to_string(),
            })
        }
    }
}

fn split_number(s: &str) -> Result<(u64, &str), String> {
    let s = s.trim();
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("'{s}' does not start with a number"));
    }
    let n = s[..digits]
        .parse::<u64>()
        .map_err(|_| format!("'{s}' is too large"))?;
    Ok((n, &s[digits..]))
}

/// Memory with `Ti`/`Gi`/`Mi`/`Ki` (a bare number is MiB, PVE's unit), into MiB, 128 MiB–2 TiB.
pub fn parse_memory_mib(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s)?;
    let kib = match unit {
        "Ti" => n.checked_mul(1024 * 1024 * 1024),
        "Gi" => n.checked_mul(1024 * 1024),
        "Mi" | "" => n.checked_mul(1024),
        "Ki" => Some(n),
        other => return Err(format!("'{s}': unknown unit '{other}' (use Gi, Mi or Ki)")),
    }
    .ok_or_else(|| format!("'{s}' is too large"))?;
    if kib % 1024 != 0 {
        return Err(format!("'{s}' is not a whole number of MiB"));
    }
    let mib = kib / 1024;
    if !(MIN_MEMORY_MIB..=MAX_MEMORY_MIB).contains(&mib) {
        return Err(format!("'{s}' is outside 128Mi–2Ti"));
    }
    Ok(mib)
}

/// Disk with `Ti`/`Gi`/`Mi` (a bare number is GiB, PVE's unit), into whole GiB, 1 GiB–100 TiB.
pub fn parse_disk_gib(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s)?;
    let mib = match unit {
        "Ti" => n.checked_mul(1024 * 1024),
        "Gi" | "" => n.checked_mul(1024),
        "Mi" => Some(n),
        other => return Err(format!("'{s}': unknown unit '{other}' (use Ti, Gi or Mi)")),
    }
    .ok_or_else(|| format!("'{s}' is too large"))?;
    if mib % 1024 != 0 {
        return Err(format!("'{s}' is not a whole number of GiB"));
    }
    let gib = mib / 1024;
    if !(MIN_DISK_GIB..=MAX_DISK_GIB).contains(&gib) {
        return Err(format!("'{s}' is outside 1Gi–100Ti"));
    }
    Ok(gib)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ForProvider {
        ForProvider {
            node: "ml110-01".into(),
            name: "nginx-proxy-vm".into(),
            cpu: 2,
            memory: "4Gi".into(),
            disk: "20Gi".into(),
            storage: "local-lvm".into(),
            network: "vmbr0".into(),
            image: "local:iso/ubuntu-22.04-cloud.img".into(),
            site: "site-1".into(),
            user_data: None,
            ip_address: None,
            gateway: None,
            ssh_keys: Vec::new(),
        }
    }

    #[test]
    fn static_addresses_and_keys_are_checked() {
        let mut s = spec();
        s.ip_address = Some("192.168.100.11/24".into());
        s.gateway = Some("192.168.100.1".into());
        s.ssh_keys = vec!["ssh-ed25519 AAAAC3Nza harness@lab".into()];
        let v = validate(&s).expect("valid");
        assert_eq!(
            v.ip.as_ref().map(StaticIp::ipconfig).as_deref(),
            Some("ip=192.168.100.11/24,gw=192.168.100.1")
        );
        assert_eq!(v.ssh_keys.len(), 1);
        s.ip_address = Some("192.168.100.11".into());
        s.ssh_keys = vec!["not a key".into()];
        let e = validate(&s).expect_err("invalid");
        assert!(
            e.problems.iter().any(|p| p.starts_with("ipAddress:")),
            "{e}"
        );
        assert!(
            e.problems.iter().any(|p| p.starts_with("sshKeys[0]:")),
            "{e}"
        );
        let mut g = spec();
        g.gateway = Some("192.168.100.1".into());
        assert!(validate(&g).is_err(), "a gateway without an address");
    }

    #[test]
    fn the_seed_vm_is_valid() {
        let p = validate(&spec()).expect("valid");
        assert_eq!((p.cores, p.memory_mib, p.disk_gib), (2, 4096, 20));
        assert_eq!(p.image.file_name(), "ubuntu-22.04-cloud.img");
    }

    #[test]
    fn ranges_are_the_seeds() {
        assert_eq!(parse_memory_mib("128Mi"), Ok(128));
        assert!(parse_memory_mib("127Mi").is_err());
        assert_eq!(parse_memory_mib("2Ti"), Ok(2 * 1024 * 1024));
        assert!(parse_memory_mib("2049Gi").is_err());
        assert_eq!(parse_memory_mib("262144Ki"), Ok(256));
        assert!(parse_memory_mib("4GB").is_err());
        assert_eq!(parse_disk_gib("1Gi"), Ok(1));
        assert!(parse_disk_gib("1023Mi").is_err());
        assert_eq!(parse_disk_gib("100Ti"), Ok(100 * 1024));
        assert!(parse_disk_gib("101Ti").is_err());
        assert_eq!(parse_disk_gib("2048Mi"), Ok(2));
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let mut s = spec();
        s.cpu = 0;
        s.memory = "64Mi".into();
        s.network = "1bad".into();
        s.name = "bad_name".into();
        let e = validate(&s).expect_err("invalid");
        assert_eq!(e.problems.len(), 4, "{e}");
        assert!(e.to_string().contains("dns-name"));
    }

    #[test]
    fn names_follow_pve_dns_name() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"a".repeat(100)).is_ok());
        assert!(validate_name(&"a".repeat(101)).is_err());
        assert!(validate_name("-x").is_err());
        assert!(validate_name("x.y").is_err());
    }

    #[test]
    fn images() {
        assert!(matches!(
            parse_image("ubuntu.img"),
            Ok(ImageSpec::Name { .. })
        ));
        assert!(parse_image("/var/lib/vz/x.img").is_err());
        assert!(parse_image("local:").is_err());
        assert!(parse_image("a b").is_err());
    }
}
