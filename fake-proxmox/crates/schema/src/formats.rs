//! The named formats PVE registers in code (`register_format`), with their `die` texts.
//!
//! Sources: `pve-common src/PVE/JSONSchema.pm` (ids, node, vmid, MAC, IPs, CIDRs, DNS names,
//! disk sizes, tags, startup order, `-list`/`-opt` handling), `pve-storage src/PVE/Storage.pm`
//! (`pve-volume-id`, `pve-storage-content`), `qemu-server src/PVE/QemuServer.pm`
//! (`pve-volume-id-or-qm-path`, `pve-volume-id-or-absolute-path`, `pve-qm-bootdisk`,
//! `pve-qm-bootdev`, `pve-hotplug-features`, `pve-cpuset`) and `pve-access-control`
//! (`pve-userid`, `pve-realm`).
//!
//! The firewall's formats (`pve-fw-*-spec`, `IPorCIDR`, …) are `firewall::formats`'.
//! Formats not listed in `check_named` (`pve-qm-hostpci`, `pve-priv`, `pve-poolid`, …)
//! are accepted unchecked — a deliberate leniency: real PVE checks them.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use regex::Regex;

use super::facts::{Prop, PropFormat};
use super::{ApiSchema, PveVersion};

/// `PVE::Tools::split_list`: NUL-separated if it has a NUL, else on `,`, `;` and whitespace.
pub fn split_list(value: &str) -> Box<dyn Iterator<Item = &str> + '_> {
    if value.contains('\0') {
        Box::new(value.split('\0'))
    } else {
        Box::new(
            value
                .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
                .filter(|s| !s.is_empty()),
        )
    }
}

static NAMED_HASHES: LazyLock<BTreeMap<String, BTreeMap<String, Prop>>> = LazyLock::new(|| {
    let raw: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(include_str!("../data/formats.json"))
            .expect("committed formats.json is valid JSON");
    raw.into_iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .map(|(k, v)| {
            let hash: BTreeMap<String, Prop> =
                serde_json::from_value(v).expect("committed formats.json has valid formats");
            (k, hash)
        })
        .collect()
});

/// The sub-properties of a named property-string format.
pub fn named_hash(name: &str) -> Option<&'static BTreeMap<String, Prop>> {
    if name == "pve-qm-ide" {
        // `cdrom` uses the IDE drive format registered under this name.
        let m =
            ApiSchema::get(PveVersion::V9_1).method("PUT", "/nodes/{node}/qemu/{vmid}/config")?;
        return match m.param("ide0")?.format.as_ref()? {
            PropFormat::Hash(h) => Some(h),
            PropFormat::Named(_) => None,
        };
    }
    NAMED_HASHES.get(name)
}

macro_rules! re {
    ($name:ident, $pat:expr) => {
        static $name: LazyLock<Regex> =
            LazyLock::new(|| Regex::new($pat).expect("built-in format regex compiles"));
    };
}

re!(CONFIGID, r"^(?i)[a-z][a-z0-9_-]+\n?\z");
re!(STORAGE_ID, r"^(?i)[a-z][a-z0-9\-_.]*[a-z0-9]\n?\z");
re!(BRIDGE_ID, r"^[-_.\w\d]+\n?\z");
re!(VMID, r"^[1-9][0-9]{2,8}\n?\z");
re!(NODE, r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?\n?\z");
re!(MAC, r"^(?i)[a-f0-9][02468ace](?::[a-f0-9]{2}){5}\n?\z");
re!(
    DNS_NAME,
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?\.)*[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?\n?\z"
);
re!(IFACE, r"^(?i)[a-z][a-z0-9_]{1,20}([:.]\d+)?\n?\z");
re!(URLENCODED, r"^[-%a-zA-Z0-9_.!~*'()]*\n?\z");
re!(TAG, r"^(?i)[a-z0-9_][a-z0-9_\-+.]*\n?\z");
re!(VOLUME_ID, r"^(?i)([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)\n?\z");
re!(
    EMAIL,
    r"^[\w+\-~]+(\.[\w+\-~]+)*@[a-zA-Z0-9\-]+(\.[a-zA-Z0-9\-]+)*\n?\z"
);
re!(REALM, r"^[A-Za-z][A-Za-z0-9.\-_]+\n?\z");
re!(USERID, r"^([^\s:/]+)@([A-Za-z][A-Za-z0-9.\-_]+)\n?\z");
re!(CPUSET, r"^\s*\d+(?:-\d+)?\s*(?:,\s*\d+(?:-\d+)?\s*)*\n?\z");

fn ipv4(s: &str) -> bool {
    s.parse::<Ipv4Addr>().is_ok()
}

fn ipv6(s: &str) -> bool {
    s.parse::<Ipv6Addr>().is_ok()
}

fn cidr(s: &str, v6: bool) -> bool {
    let Some((addr, bits)) = s.split_once('/') else {
        return false;
    };
    if bits.is_empty() || !bits.chars().all(|c| c.is_ascii_digit()) {
        return false;
    }
    let Ok(bits) = bits.parse::<u32>() else {
        return false;
    };
    if v6 {
        ipv6(addr) && bits > 7 && bits <= 128
    } else {
        ipv4(addr) && bits > 7 && bits <= 32
    }
}

const NETMASKS: [&str; 33] = [
    "0.0.0.0",
    "128.0.0.0",
    "192.0.0.0",
    "224.0.0.0",
    "240.0.0.0",
    "248.0.0.0",
    "252.0.0.0",
    "254.0.0.0",
    "255.0.0.0",
    "255.128.0.0",
    "255.192.0.0",
    "255.224.0.0",
    "255.240.0.0",
    "255.248.0.0",
    "255.252.0.0",
    "255.254.0.0",
    "255.255.0.0",
    "255.255.128.0",
    "255.255.192.0",
    "255.255.224.0",
    "255.255.240.0",
    "255.255.248.0",
    "255.255.252.0",
    "255.255.254.0",
    "255.255.255.0",
    "255.255.255.128",
    "255.255.255.192",
    "255.255.255.224",
    "255.255.255.240",
    "255.255.255.248",
    "255.255.255.252",
    "255.255.255.254",
    "255.255.255.255",
];

/// Drive names qemu-server accepts (`PVE::QemuServer::Drive::is_valid_drivename`).
pub fn is_valid_drivename(name: &str) -> bool {
    if name == "efidisk0" || name == "tpmstate0" {
        return true;
    }
    let Some((prefix, index)) = super::facts::split_index(name) else {
        return false;
    };
    matches!(prefix, "ide" | "sata" | "scsi" | "virtio")
        && super::facts::max_index(prefix).is_some_and(|max| index <= max)
}

fn ok_if(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}

/// One value against a code-registered format.
pub(crate) fn check_named(name: &str, v: &str) -> Result<(), String> {
    id_format(name, v)
        .or_else(|| network_format(name, v))
        .or_else(|| vm_format(name, v))
        .or_else(|| crate::firewall_formats::check(name, v))
        // Accepted unchecked: see the module docs.
        .unwrap_or(Ok(()))
}

/// Names and identifiers: config keys, storages, bridges, VMIDs, nodes, users, tags.
fn id_format(name: &str, v: &str) -> Option<Result<(), String>> {
    match name {
        "string" => Some(Ok(())),
        "urlencoded" => Some(ok_if(URLENCODED.is_match(v), || {
            format!("invalid urlencoded string: {v}\n")
        })),
        "pve-configid" => Some(ok_if(CONFIGID.is_match(v), || {
            format!("invalid configuration ID '{v}'\n")
        })),
        "pve-storage-id" => Some(ok_if(STORAGE_ID.is_match(v), || {
            format!("storage ID '{v}' contains illegal characters\n")
        })),
        "pve-bridge-id" => Some(ok_if(BRIDGE_ID.is_match(v), || {
            format!("invalid bridge ID '{v}'\n")
        })),
        "pve-vmid" => Some(ok_if(VMID.is_match(v), || {
            "value does not look like a valid VM ID\n".to_string()
        })),
        "pve-node" => Some(ok_if(NODE.is_match(v), || {
            "value does not look like a valid node name\n".to_string()
        })),
        "pve-iface" => Some(ok_if(IFACE.is_match(v), || {
            format!("invalid network interface name '{v}'\n")
        })),
        "pve-tag" => Some(ok_if(TAG.is_match(v), || {
            "invalid characters in tag\n".to_string()
        })),
        "pve-task-status-type" => Some(ok_if(
            matches!(
                v.to_ascii_lowercase().as_str(),
                "ok" | "error" | "warning" | "unknown"
            ),
            || format!("invalid status '{v}'\n"),
        )),
        "pve-storage-content" => Some(ok_if(
            matches!(
                v,
                "images" | "rootdir" | "vztmpl" | "iso" | "backup" | "snippets" | "import" | "none"
            ),
            || format!("invalid content type '{v}'\n"),
        )),
        "pve-realm" => Some(ok_if(REALM.is_match(v), || {
            format!("value '{v}' does not look like a valid realm\n")
        })),
        "pve-userid" => Some(check_userid(v)),
        "storage-pair" => Some(check_idpair(v, "pve-storage-id")),
        "bridge-pair" => Some(check_idpair(v, "pve-bridge-id")),
        _ => None,
    }
}

/// Addresses, networks and names on the network.
fn network_format(name: &str, v: &str) -> Option<Result<(), String>> {
    match name {
        "mac-addr" => Some(ok_if(MAC.is_match(v), || {
            "value does not look like a valid unicast MAC address\n".to_string()
        })),
        "ipv4" => Some(ok_if(ipv4(v), || {
            "value does not look like a valid IPv4 address\n".to_string()
        })),
        "ipv6" => Some(ok_if(ipv6(v), || {
            "value does not look like a valid IPv6 address\n".to_string()
        })),
        "ip" => Some(ok_if(ipv4(v) || ipv6(v), || {
            "value does not look like a valid IP address\n".to_string()
        })),
        "ipv4mask" => Some(ok_if(NETMASKS.contains(&v), || {
            "value does not look like a valid IP netmask\n".to_string()
        })),
        "CIDRv4" => Some(ok_if(cidr(v, false), || {
            "value does not look like a valid IPv4 CIDR network\n".to_string()
        })),
        "CIDRv6" => Some(ok_if(cidr(v, true), || {
            "value does not look like a valid IPv6 CIDR network\n".to_string()
        })),
        "CIDR" => Some(ok_if(cidr(v, false) || cidr(v, true), || {
            "value does not look like a valid CIDR network\n".to_string()
        })),
        "pve-ipv4-config" => Some(ok_if(
            v == "dhcp" || v == "manual" || cidr(v, false),
            || "value does not look like a valid ipv4 network configuration\n".to_string(),
        )),
        "pve-ipv6-config" => Some(ok_if(
            v == "auto" || v == "dhcp" || v == "manual" || cidr(v, true),
            || "value does not look like a valid ipv6 network configuration\n".to_string(),
        )),
        "email" => Some(ok_if(EMAIL.is_match(v), || {
            "value does not look like a valid email address\n".to_string()
        })),
        "dns-name" => Some(ok_if(DNS_NAME.is_match(v), || {
            "value does not look like a valid DNS name\n".to_string()
        })),
        "address" => Some(ok_if(ipv4(v) || ipv6(v) || DNS_NAME.is_match(v), || {
            format!("value does not look like a valid address: {v}\n")
        })),
        "pve-vlan-id-or-range" => Some(check_vlan_range(v)),
        _ => None,
    }
}

/// Volumes, sizes, boot devices and the other VM-config formats.
fn vm_format(name: &str, v: &str) -> Option<Result<(), String>> {
    match name {
        "disk-size" => Some(ok_if(is_disk_size(v), || {
            format!("value does not look like a valid disk size: {v}\n")
        })),
        "pve-startup-order" => Some(ok_if(startup_order(v), || {
            "unable to parse startup options\n".to_string()
        })),
        "pve-volume-id" => Some(ok_if(VOLUME_ID.is_match(v), || {
            format!("unable to parse volume ID '{v}'\n")
        })),
        "pve-volume-id-or-qm-path" => Some({
            if v == "none" || v == "cdrom" {
                Ok(())
            } else {
                check_named("pve-volume-id-or-absolute-path", v)
            }
        }),
        "pve-volume-id-or-absolute-path" => Some({
            if v.starts_with('/') {
                Ok(())
            } else {
                check_named("pve-volume-id", v)
            }
        }),
        "pve-qm-bootdisk" => Some(ok_if(is_valid_drivename(v), || {
            format!("invalid boot disk '{v}'\n")
        })),
        "pve-qm-bootdev" => Some(ok_if(is_valid_bootdev(v), || {
            format!("invalid boot device '{v}'\n")
        })),
        "pve-hotplug-features" => Some(ok_if(hotplug_features(v), || {
            "unable to parse hotplug option\n".to_string()
        })),
        "pve-cpuset" => Some(ok_if(CPUSET.is_match(v), || {
            "unable to parse cpuset option\n".to_string()
        })),
        "pve-phys-bits" => Some(ok_if(
            v == "host" || v.parse::<u32>().is_ok_and(|b| (8..=64).contains(&b)),
            || format!("invalid phys-bits '{v}'\n"),
        )),
        _ => None,
    }
}

/// `PVE::JSONSchema::parse_size` accepts `^(\d+(\.\d+)?)([KMGT])?$` (bytes without a unit).
fn is_disk_size(v: &str) -> bool {
    let v = v.strip_suffix('\n').unwrap_or(v);
    let num = v.strip_suffix(['K', 'M', 'G', 'T']).unwrap_or(v);
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    match num.split_once('.') {
        Some((a, b)) => digits(a) && digits(b),
        None => digits(num),
    }
}

fn check_vlan_range(v: &str) -> Result<(), String> {
    let (start, end) = match v.split_once('-') {
        Some((a, b)) => (a, Some(b)),
        None => (v, None),
    };
    let num = |s: &str| {
        (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
            .then(|| s.parse::<u64>().unwrap_or(u64::MAX))
    };
    let (Some(s), e) = (num(start), end.map(num)) else {
        return Err(format!("invalid VLAN configuration '{v}'\n"));
    };
    if e == Some(None) {
        return Err(format!("invalid VLAN configuration '{v}'\n"));
    }
    let valid = |tag: u64, text: &str| {
        ok_if((2..=4094).contains(&tag), || {
            format!("invalid VLAN tag '{text}'\n")
        })
    };
    valid(s, start)?;
    if let (Some(Some(e)), Some(etext)) = (e, end)
        && e != 0
    {
        valid(e, etext)?;
        if s >= e {
            return Err(format!(
                "VLAN range must go from lower to higher tag '{v}'\n"
            ));
        }
    }
    Ok(())
}

fn startup_order(v: &str) -> bool {
    if v.is_empty() || v == "0" {
        return false;
    }
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    v.split(',').all(|p| {
        p.trim().is_empty()
            || digits(p.strip_prefix("order=").unwrap_or(p))
            || p.strip_prefix("up=").is_some_and(digits)
            || p.strip_prefix("down=").is_some_and(digits)
    })
}

fn is_valid_bootdev(v: &str) -> bool {
    if is_valid_drivename(v) && !v.starts_with("efidisk") && !v.starts_with("tpmstate") {
        return true;
    }
    match super::facts::split_index(v) {
        Some((p @ ("net" | "hostpci" | "usb"), i)) => {
            super::facts::max_index(p).is_some_and(|max| i <= max)
        }
        _ => false,
    }
}

fn hotplug_features(v: &str) -> bool {
    if v == "0" || v == "1" {
        return true;
    }
    v.split(',').all(|f| {
        matches!(
            f.trim(),
            "network" | "disk" | "cpu" | "memory" | "usb" | "cloudinit"
        )
    })
}

fn check_userid(v: &str) -> Result<(), String> {
    let len = v.chars().count();
    if len < 3 {
        return Err(format!("user name '{v}' is too short\n"));
    }
    if len > 64 {
        return Err(format!("user name '{v}' is too long ({len} > 64)\n"));
    }
    ok_if(USERID.is_match(v), || {
        format!("value '{v}' does not look like a valid user name\n")
    })
}

/// `parse_idmap` for one list entry: `1`, `source:target`, or a default target.
fn check_idpair(v: &str, idformat: &str) -> Result<(), String> {
    if v == "1" {
        return Ok(());
    }
    let check = |id: &str| check_named(idformat, id);
    let result = match v.split_once(':') {
        Some((s, t)) if !s.is_empty() && !t.is_empty() && !t.contains(':') => {
            check(s).and_then(|()| check(t))
        }
        _ => check(v),
    };
    result.map_err(|e| format!("entry '{v}' contains invalid ID - {e}\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn node_and_vmid_formats_match_pve() {
        assert!(check_named("pve-node", "r630-01").is_ok());
        assert_eq!(
            check_named("pve-node", "-bad").unwrap_err(),
            "value does not look like a valid node name\n"
        );
        assert!(check_named("pve-vmid", "100").is_ok());
        assert!(check_named("pve-vmid", "099").is_err());
    }

    #[test]
    fn mac_rejects_multicast_bit() {
        assert!(check_named("mac-addr", "BC:24:11:00:00:01").is_ok());
        assert!(check_named("mac-addr", "01:00:5e:00:00:01").is_err());
    }

    #[test]
    fn volume_formats() {
        assert!(check_named("pve-volume-id-or-qm-path", "local-lvm:32").is_ok());
        assert!(check_named("pve-volume-id-or-qm-path", "none").is_ok());
        assert!(check_named("pve-volume-id-or-qm-path", "/dev/sdb").is_ok());
        assert_eq!(
            check_named("pve-volume-id-or-qm-path", "nocolon").unwrap_err(),
            "unable to parse volume ID 'nocolon'\n"
        );
    }

    #[test]
    fn vlan_ranges() {
        assert!(check_named("pve-vlan-id-or-range", "10-20").is_ok());
        assert_eq!(
            check_named("pve-vlan-id-or-range", "20-10").unwrap_err(),
            "VLAN range must go from lower to higher tag '20-10'\n"
        );
        assert_eq!(
            check_named("pve-vlan-id-or-range", "1").unwrap_err(),
            "invalid VLAN tag '1'\n"
        );
    }

    #[test]
    fn cidr_prefix_bounds() {
        assert!(check_named("CIDRv4", "10.0.0.5/24").is_ok());
        assert!(check_named("CIDRv4", "10.0.0.5/7").is_err());
        assert!(check_named("CIDRv4", "10.0.0.5").is_err());
        assert!(check_named("CIDRv6", "fd00::1/64").is_ok());
    }
}
