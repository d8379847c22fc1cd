//! Addresses as pve-firewall checks them. Rule sources and destinations go through Perl's
//! `Net::IP->new` (so its error texts reach the API: `invalid IP address: Invalid quad in
//! IP address 10.0.0.300 - 300`, and a CIDR with host bits set is refused); aliases and
//! ipset entries through PVE's own IP/CIDR regexes (`pve_verify_ip_or_cidr`,
//! `parse_ip_or_cidr`, `clean_cidr`).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use regex::Regex;

/// `$ip_alias_pattern` (also the ipset and security group name pattern).
pub const NAME_PATTERN: &str = r"[A-Za-z][A-Za-z0-9\-_]+";

static ALIAS_REF: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(&format!(r"^(dc/|guest/)?({NAME_PATTERN})$")).ok());

/// An alias reference (`name`, `dc/name`, `guest/name`): `(scope, name)`.
pub fn alias_ref(s: &str) -> Option<(&str, &str)> {
    let caps = ALIAS_REF.as_ref()?.captures(s)?;
    let scope = caps.get(1).map_or("", |m| m.as_str());
    Some((scope, caps.get(2)?.as_str()))
}

/// A name of PVE's name pattern (alias, ipset, security group).
pub fn is_name(s: &str) -> bool {
    alias_ref(s).is_some_and(|(scope, _)| scope.is_empty())
}

/// `Net::IP->new($s)`: the address family of the (first) address, or `Net::IP::Error()`.
pub fn net_ip_new(s: &str) -> Result<u8, String> {
    if let Some(slash) = s.find('/')
        && !s.contains(char::is_whitespace)
        && slash > 0
        && slash + 1 < s.len()
    {
        let (ip, lens) = s.split_at(slash);
        let version = ip_get_version(ip)?;
        let bits = expand(ip, version)?;
        // `/24` (or `/24,…`): only the first prefix matters here; a non-numeric one is
        // skipped by Net::IP's loop, as it is there.
        let digits: String = lens[1..].chars().take_while(char::is_ascii_digit).collect();
        if let Ok(len) = digits.parse::<u32>() {
            check_prefix(bits, len, version)?;
        }
        return Ok(version);
    }
    if let Some((a, b)) = split_range(s) {
        let version = ip_get_version(a)?;
        let begin = expand(a, version)?;
        let end_version = ip_get_version(b)?;
        let end = expand(b, end_version)?;
        let (ea, eb) = (show_expanded(a, version), show_expanded(b, end_version));
        if end_version != version {
            return Err(format!(
                "Begin and End addresses have different IP versions - {ea} - {eb}"
            ));
        }
        if begin > end {
            return Err(format!(
                "Begin address is greater than End address {ea} - {eb}"
            ));
        }
        return Ok(version);
    }
    // `address+count`: Net::IP's "IP + number" range form.
    if let Some((a, _)) = s
        .split_once('+')
        .filter(|(a, n)| !a.is_empty() && !n.is_empty())
    {
        let version = ip_get_version(a)?;
        expand(a, version)?;
        return Ok(version);
    }
    let version = ip_get_version(s)?;
    expand(s, version)?;
    Ok(version)
}

/// `^(.+?)\s*\-\s*(.+)$`
fn split_range(s: &str) -> Option<(&str, &str)> {
    let dash = s.char_indices().skip(1).find(|(_, c)| *c == '-')?.0;
    let (a, b) = (s[..dash].trim_end(), s[dash + 1..].trim_start());
    (!a.is_empty() && !b.is_empty()).then_some((a, b))
}

/// `ip_get_version`: 4 or 6, or the last error Net::IP recorded.
fn ip_get_version(ip: &str) -> Result<u8, String> {
    let v4 = if ip.contains(':') {
        None
    } else {
        Some(ip_is_ipv4(ip))
    };
    if let Some(Ok(())) = v4 {
        return Ok(4);
    }
    match ip_is_ipv6(ip) {
        Ok(true) => Ok(6),
        Err(e) => Err(e),
        // Net::IP leaves `$ERROR` as it was: the IPv4 check's, if it ran.
        Ok(false) => Err(match v4 {
            Some(Err(e)) => e,
            _ => format!("Invalid IP address {ip}"),
        }),
    }
}

fn ip_is_ipv4(ip: &str) -> Result<(), String> {
    if ip.is_empty() || !ip.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("Invalid chars in IP {ip}"));
    }
    if ip.starts_with('.') {
        return Err(format!("Invalid IP {ip} - starts with a dot"));
    }
    if ip.ends_with('.') {
        return Err(format!("Invalid IP {ip} - ends with a dot"));
    }
    if !ip.contains('.') && ip.parse::<u64>().is_ok_and(|n| n < 256) {
        return Ok(());
    }
    if ip.matches('.').count() >= 4 {
        return Err(format!("Invalid IP address {ip}"));
    }
    if ip.contains("..") {
        return Err(format!("Empty quad in IP address {ip}"));
    }
    for quad in ip.split('.') {
        if quad.parse::<u64>().map_or(true, |n| n >= 256) {
            return Err(format!("Invalid quad in IP address {ip} - {quad}"));
        }
    }
    Ok(())
}

/// `Ok(false)`: not IPv6, and Net::IP recorded no error of its own.
fn ip_is_ipv6(ip: &str) -> Result<bool, String> {
    let mut n = ip.matches(':').count();
    if n == 0 || n >= 8 {
        return Ok(false);
    }
    // Perl's split drops trailing empty fields.
    let mut parts: Vec<&str> = ip.split(':').collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    for (i, part) in parts.iter().enumerate() {
        let k = i + 1;
        if part.is_empty() || (part.len() <= 4 && part.bytes().all(|b| b.is_ascii_hexdigit())) {
            continue;
        }
        if k == n + 1 && ip_is_ipv4(part).is_ok() {
            n += 1;
            continue;
        }
        return Err(format!("Invalid IP address {ip}"));
    }
    let b = ip.as_bytes();
    if b.len() > 1 && b[0] == b':' && b[1] != b':' {
        return Err(format!("Invalid address {ip} (starts with :)"));
    }
    if b.len() > 1 && b[b.len() - 1] == b':' && b[b.len() - 2] != b':' {
        return Err(format!("Invalid address {ip} (ends with :)"));
    }
    if b.windows(2).filter(|w| w == b"::").count() > 1 {
        return Err(format!("Invalid address {ip} (More than one :: pattern)"));
    }
    if n != 7 && !ip.contains("::") {
        return Err(format!("Invalid number of octets {ip}"));
    }
    Ok(true)
}

/// `ip_expand_address` + `ip_iptobin`: the address as a number (short IPv4 forms such as
/// `10.1` fill with zeros, as Net::IP does).
fn expand(ip: &str, version: u8) -> Result<u128, String> {
    if version == 4 {
        let quads: Vec<&str> = ip.split('.').collect();
        if quads.len() > 4 {
            return Err(format!("Not a valid IPv address {ip}"));
        }
        let mut n: u128 = 0;
        for i in 0..4 {
            let q = quads.get(i).copied().unwrap_or("0");
            if q.is_empty() || q.len() > 3 || !q.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("Not a valid IPv4 address {ip}"));
            }
            n = (n << 8) | u128::from(q.parse::<u8>().unwrap_or(0));
        }
        return Ok(n);
    }
    Ok(ip.parse::<Ipv6Addr>().map_or(0, u128::from))
}

/// How Net::IP prints an expanded address in its range errors.
fn show_expanded(ip: &str, version: u8) -> String {
    match expand(ip, version) {
        Ok(n) if version == 4 => Ipv4Addr::from(n as u32).to_string(),
        Ok(n) => Ipv6Addr::from(n)
            .segments()
            .iter()
            .map(|s| format!("{s:04x}"))
            .collect::<Vec<_>>()
            .join(":"),
        Err(_) => ip.to_string(),
    }
}

/// `ip_check_prefix`: the length fits and the host bits are zero.
fn check_prefix(bits: u128, len: u32, version: u8) -> Result<(), String> {
    let width = if version == 4 { 32 } else { 128 };
    if len > width {
        return Err(format!(
            "Prefix length {len} is longer than IP address ({width})"
        ));
    }
    let host_mask = if len == width {
        0
    } else {
        u128::MAX >> (128 - width + len)
    };
    if bits & host_mask != 0 {
        let bin = format!("{bits:0w$b}", w = width as usize);
        return Err(format!("Invalid prefix {bin}/{len}"));
    }
    Ok(())
}

/// An address PVE's `$IPV4RE`/`$IPV6RE` accept, with an optional `/digits`: its family.
fn ip_with_prefix(s: &str) -> Option<(&str, Option<&str>, u8)> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) => {
            (ip, Some(len))
        }
        Some(_) => return None,
        None => (s, None),
    };
    if ip.parse::<Ipv4Addr>().is_ok() {
        Some((ip, len, 4))
    } else if ip.parse::<Ipv6Addr>().is_ok() {
        Some((ip, len, 6))
    } else {
        None
    }
}

const NOT_IP_OR_CIDR: &str = "value does not look like a valid IP address or CIDR network\n";

/// The `IPorCIDR` format (`pve_verify_ip_or_cidr`): host bits are allowed (cleared before
/// Net::IP sees the value), a prefix longer than the address is not.
pub fn verify_ip_or_cidr(s: &str) -> Result<(), String> {
    if ip_with_prefix(s).is_none() {
        return Err(NOT_IP_OR_CIDR.to_string());
    }
    net_ip_new(&clean_cidr(s))
        .map(|_| ())
        .map_err(|e| format!("{e}\n"))
}

/// The `IPorCIDRorAlias` format.
pub fn verify_ip_or_cidr_or_alias(s: &str) -> Result<(), String> {
    if alias_ref(s).is_some() {
        return Ok(());
    }
    verify_ip_or_cidr(s)
}

/// `clean_cidr`: the network of a CIDR (host bits cleared), IPv6 compressed as Net::IP
/// compresses it; an address without a (non-zero) prefix unchanged.
pub fn clean_cidr(s: &str) -> String {
    let Some((ip, Some(len), version)) = ip_with_prefix(s) else {
        return s.to_string();
    };
    let Ok(len) = len.parse::<u32>() else {
        return s.to_string();
    };
    if len == 0 {
        return s.to_string();
    }
    if version == 4 {
        let Ok(addr) = ip.parse::<Ipv4Addr>() else {
            return s.to_string();
        };
        let mask = u32::MAX.checked_shl(32 - len.min(32)).unwrap_or(0);
        return format!("{}/{len}", Ipv4Addr::from(u32::from(addr) & mask));
    }
    let Ok(addr) = ip.parse::<Ipv6Addr>() else {
        return s.to_string();
    };
    let mask = u128::MAX.checked_shl(128 - len.min(128)).unwrap_or(0);
    format!("{}/{len}", compress_v6(u128::from(addr) & mask))
}

/// `ip_compress_address`: leading zeros dropped, the first longest run of two or more zero
/// groups as `::` (never the dotted IPv4 tail Rust's `Display` may print).
fn compress_v6(n: u128) -> String {
    let groups = Ipv6Addr::from(n).segments();
    let mut best: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < 8 {
        if groups[i] == 0 {
            let start = i;
            while i < 8 && groups[i] == 0 {
                i += 1;
            }
            let run = i - start;
            if run >= 2 && best.is_none_or(|(_, l)| run > l) {
                best = Some((start, run));
            }
        } else {
            i += 1;
        }
    }
    let hex = |g: &[u16]| {
        g.iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    match best {
        Some((start, run)) => format!("{}::{}", hex(&groups[..start]), hex(&groups[start + run..])),
        None => hex(&groups),
    }
}

/// `parse_ip_or_cidr`: the address (a `/32` or `/128` dropped) and its family.
pub fn parse_ip_or_cidr(s: &str) -> Result<(String, u8), String> {
    let Some((_, len, version)) = ip_with_prefix(s) else {
        return Err(NOT_IP_OR_CIDR.to_string());
    };
    let full = if version == 4 { "32" } else { "128" };
    let cidr = match len {
        Some(l) if l == full => s.rsplit_once('/').map_or(s, |(ip, _)| ip),
        _ => s,
    };
    Ok((cidr.to_string(), version))
}

/// `parse_address_list`: a rule's `source`/`dest`. An ipset or alias reference is checked
/// for length only; a list of addresses, networks or one range for Net::IP's opinion and
/// one address family. The family, if the value names addresses.
pub fn parse_address_list(s: &str) -> Result<Option<u8>, String> {
    if let Some(name) = s.strip_prefix('+')
        && !name.is_empty()
        && !name.contains(char::is_whitespace)
    {
        if s.len() > 65 {
            return Err("ipset name too long".into());
        }
        return Ok(None);
    }
    if alias_ref(s).is_some() {
        if s.len() > 64 {
            return Err("alias name too long".into());
        }
        return Ok(None);
    }
    // Perl's split drops trailing empty fields: a trailing comma is "extraneous".
    let mut elements: Vec<&str> = s.split(',').collect();
    while elements.last() == Some(&"") {
        elements.pop();
    }
    if elements.join(",") != s {
        return Err("extraneous commas in list".into());
    }
    let mut version = None;
    let mut range = false;
    for elem in &elements {
        let v = net_ip_new(elem).map_err(|e| format!("invalid IP address: {e}"))?;
        range |= elem.contains('-');
        if version.is_some_and(|old| old != v) {
            return Err(format!(
                "detected mixed ipv4/ipv6 addresses in address list '{s}'"
            ));
        }
        version = Some(v);
    }
    if range && elements.len() > 1 {
        return Err("you can't use a range in a list".into());
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn net_ip_error_texts_reach_the_caller() {
        assert_eq!(
            parse_address_list("10.0.0.300").unwrap_err(),
            "invalid IP address: Invalid quad in IP address 10.0.0.300 - 300"
        );
        assert_eq!(
            parse_address_list("10.0.0.1/33").unwrap_err(),
            "invalid IP address: Prefix length 33 is longer than IP address (32)"
        );
        // Host bits set: Net::IP refuses what `ip addr` would accept.
        assert_eq!(
            parse_address_list("10.0.0.1/24").unwrap_err(),
            "invalid IP address: Invalid prefix 00001010000000000000000000000001/24"
        );
        assert_eq!(
            parse_address_list("10.0.0.9-10.0.0.1").unwrap_err(),
            "invalid IP address: Begin address is greater than End address 10.0.0.9 - 10.0.0.1"
        );
    }

    #[test]
    fn address_lists_keep_one_family_and_no_ranges() {
        assert_eq!(parse_address_list("10.0.0.0/8,192.168.1.1"), Ok(Some(4)));
        assert_eq!(parse_address_list("fd00::/8"), Ok(Some(6)));
        assert_eq!(parse_address_list("+web"), Ok(None));
        assert_eq!(parse_address_list("dc/office"), Ok(None));
        assert_eq!(parse_address_list("10.0.0.1+15"), Ok(Some(4)));
        assert_eq!(
            parse_address_list("10.0.0.1,fd00::1").unwrap_err(),
            "detected mixed ipv4/ipv6 addresses in address list '10.0.0.1,fd00::1'"
        );
        assert_eq!(
            parse_address_list("10.0.0.1-10.0.0.5,10.0.1.1").unwrap_err(),
            "you can't use a range in a list"
        );
        assert_eq!(
            parse_address_list("10.0.0.1,").unwrap_err(),
            "extraneous commas in list"
        );
    }

    #[test]
    fn ip_or_cidr_clears_host_bits_and_refuses_long_prefixes() {
        assert!(verify_ip_or_cidr("10.0.0.5/24").is_ok());
        assert_eq!(
            verify_ip_or_cidr("10.0.0.0/33").unwrap_err(),
            "Prefix length 33 is longer than IP address (32)\n"
        );
        assert_eq!(verify_ip_or_cidr("nope").unwrap_err(), NOT_IP_OR_CIDR);
        assert_eq!(clean_cidr("10.0.0.5/24"), "10.0.0.0/24");
        assert_eq!(clean_cidr("2001:db8::1/64"), "2001:db8::/64");
        assert_eq!(clean_cidr("10.0.0.5"), "10.0.0.5");
        assert_eq!(parse_ip_or_cidr("10.0.0.5/32").unwrap().0, "10.0.0.5");
        assert_eq!(
            parse_ip_or_cidr("fd00::1/128").unwrap(),
            ("fd00::1".into(), 6)
        );
    }
}
