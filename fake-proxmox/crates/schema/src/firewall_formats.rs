//! The formats pve-firewall registers (`pve-fw-*-spec`, `IPorCIDR`, `IPorCIDRorAlias`) and
//! the tables behind them: service names (`/etc/services`), protocols (`/etc/protocols`),
//! ICMP and ICMPv6 type names. The schema check calls [`check`]; `verify_rule` reuses the
//! pieces. Errors are the `die` texts (the schema check prefixes `invalid format - `).

use std::collections::HashSet;
use std::sync::LazyLock;

use crate::firewall_addr as addr;

/// Service names of Debian's `/etc/services` with a tcp, udp or sctp port.
static SERVICES: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| include_str!("etc_services.txt").lines().collect());

/// `/etc/protocols`: names and numbers, plus the `icmpv6` PVE adds.
static PROTOCOLS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    let mut set: HashSet<&str> = include_str!("etc_protocols.txt")
        .lines()
        .flat_map(str::split_whitespace)
        .collect();
    set.insert("icmpv6");
    set
});

/// `iptables -p icmp -h`
pub const ICMP_TYPES: &[&str] = &[
    "any",
    "echo-reply",
    "destination-unreachable",
    "network-unreachable",
    "host-unreachable",
    "protocol-unreachable",
    "port-unreachable",
    "fragmentation-needed",
    "source-route-failed",
    "network-unknown",
    "host-unknown",
    "network-prohibited",
    "host-prohibited",
    "TOS-network-unreachable",
    "TOS-host-unreachable",
    "communication-prohibited",
    "host-precedence-violation",
    "precedence-cutoff",
    "source-quench",
    "redirect",
    "network-redirect",
    "host-redirect",
    "TOS-network-redirect",
    "TOS-host-redirect",
    "echo-request",
    "router-advertisement",
    "router-solicitation",
    "time-exceeded",
    "ttl-zero-during-transit",
    "ttl-zero-during-reassembly",
    "parameter-problem",
    "ip-header-bad",
    "required-option-missing",
    "timestamp-request",
    "timestamp-reply",
    "address-mask-request",
    "address-mask-reply",
];

/// `ip6tables -p icmpv6 -h`
pub const ICMPV6_TYPES: &[&str] = &[
    "destination-unreachable",
    "no-route",
    "communication-prohibited",
    "beyond-scope",
    "address-unreachable",
    "port-unreachable",
    "failed-policy",
    "reject-route",
    "packet-too-big",
    "time-exceeded",
    "ttl-zero-during-transit",
    "ttl-zero-during-reassembly",
    "parameter-problem",
    "bad-header",
    "unknown-header-type",
    "unknown-option",
    "echo-request",
    "echo-reply",
    "router-solicitation",
    "router-advertisement",
    "neighbor-solicitation",
    "neighbour-solicitation",
    "neighbor-advertisement",
    "neighbour-advertisement",
    "redirect",
];

/// Protocols whose rules may name ports.
pub fn has_ports(proto: &str) -> bool {
    matches!(
        proto,
        "udp" | "17" | "udplite" | "136" | "tcp" | "6" | "dccp" | "33" | "sctp" | "132"
    )
}

/// Whether `proto` names an ICMP protocol (`icmp`, `icmpv6`, `ipv6-icmp`; by name only, a
/// protocol number such as `1` is not matched): the rules that may carry an `icmp-type`, and
/// whose `dport` may hold an ICMP type instead of a port.
pub fn is_icmp(proto: &str) -> bool {
    matches!(proto, "icmp" | "icmpv6" | "ipv6-icmp")
}

/// `pve_fw_verify_protocol_spec`
pub fn verify_protocol(proto: &str) -> Result<(), String> {
    if proto.is_empty() || PROTOCOLS.contains(proto) {
        Ok(())
    } else {
        Err(format!("unknown protocol '{proto}'\n"))
    }
}

/// `pve_fw_verify_icmp_type_spec`
pub fn verify_icmp_type(t: &str) -> Result<(), String> {
    if t.is_empty() || ICMP_TYPES.contains(&t) || ICMPV6_TYPES.contains(&t) {
        Ok(())
    } else {
        Err(format!("invalid icmp-type value '{t}'\n"))
    }
}

/// `parse_port_name_number_or_range`: numbers, `a:b` ranges and service names, comma
/// separated, at most 15 "numbers" (a range counts two); with `dport` also ICMP type names
/// (alone: they used to be stored in `dport`).
pub fn parse_ports(s: &str, dport: bool) -> Result<(), String> {
    let mut elements: Vec<&str> = s.split(',').collect();
    while elements.last() == Some(&"") {
        elements.pop();
    }
    if elements.join(",") != s {
        return Err("extraneous commas in list\n".into());
    }
    let port = |p: &str| -> Result<u64, String> {
        p.parse::<u64>()
            .ok()
            .filter(|n| *n <= 65535)
            .ok_or_else(|| format!("invalid port '{p}'\n"))
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let (mut count, mut icmp) = (0, false);
    for item in elements {
        match item.split_once(':') {
            Some((a, b)) if digits(a) && digits(b) => {
                count += 2;
                let (a_n, b_n) = (port(a)?, port(b)?);
                if a_n > b_n {
                    return Err(format!(
                        "backwards range '{a}:{b}' not allowed, did you mean '{b}:{a}'?\n"
                    ));
                }
            }
            _ if digits(item) => {
                count += 1;
                port(item)?;
            }
            _ if dport && (ICMP_TYPES.contains(&item) || ICMPV6_TYPES.contains(&item)) => {
                icmp = true;
            }
            _ if SERVICES.contains(item) => {}
            _ => return Err(format!("invalid port '{item}'\n")),
        }
    }
    if icmp && count > 0 {
        return Err("ICMP ports not allowed in port range\n".into());
    }
    if count > 15 {
        return Err("too many entries in port list (> 15 numbers)\n".into());
    }
    Ok(())
}

/// The check of a firewall format the schema names, if `name` is one.
pub fn check(name: &str, v: &str) -> Option<Result<(), String>> {
    Some(match name {
        "IPorCIDR" => addr::verify_ip_or_cidr(v),
        "IPorCIDRorAlias" => addr::verify_ip_or_cidr_or_alias(v),
        "pve-fw-addr-spec" => addr::parse_address_list(v)
            .map(|_| ())
            .map_err(|e| format!("{e}\n")),
        "pve-fw-dport-spec" => parse_ports(v, true),
        "pve-fw-sport-spec" => parse_ports(v, false),
        "pve-fw-protocol-spec" => verify_protocol(v),
        "pve-fw-icmp-type-spec" => verify_icmp_type(v),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ports_follow_pve() {
        assert!(parse_ports("22,80:90,https", false).is_ok());
        assert_eq!(
            parse_ports("70000", false).unwrap_err(),
            "invalid port '70000'\n"
        );
        assert_eq!(
            parse_ports("90:80", false).unwrap_err(),
            "backwards range '90:80' not allowed, did you mean '80:90'?\n"
        );
        assert_eq!(
            parse_ports("nosuchservice", false).unwrap_err(),
            "invalid port 'nosuchservice'\n"
        );
        assert!(parse_ports("echo-request", true).is_ok());
        assert!(parse_ports("echo-request", false).is_err());
        assert_eq!(
            parse_ports("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", false).unwrap_err(),
            "too many entries in port list (> 15 numbers)\n"
        );
    }

    #[test]
    fn protocols_by_name_or_number() {
        assert!(verify_protocol("tcp").is_ok());
        assert!(verify_protocol("6").is_ok());
        assert!(verify_protocol("icmpv6").is_ok());
        assert_eq!(
            verify_protocol("TCP").unwrap_err(),
            "unknown protocol 'TCP'\n"
        );
    }
}
