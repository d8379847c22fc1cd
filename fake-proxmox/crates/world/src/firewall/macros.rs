//! pve-firewall's standard macros (imported from shorewall): what each one expands to.
//! A rule naming a macro may not set a `proto`, `dport` or `sport` the macro sets
//! otherwise; the name is matched case-insensitively and stored as PVE spells it.
//!
//! The tables are data files, one expanded rule a line: `Name proto dport sport` (`-` for
//! none), in PVE's order: `$pve_fw_macros` (`macros.txt`) and `$pve_ipv6fw_macros`
//! (`macros_ipv6.txt`, what these expand to for IPv6 rules; the ones missing from the first
//! table are IPv6-only).

use std::sync::LazyLock;

/// One rule a macro expands to (its action is the rule's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct T {
    /// Protocol (`tcp`, `udp`, ...); any when `None`.
    pub proto: Option<&'static str>,
    /// Destination ports (`22`, `137:139`); any when `None`.
    pub dport: Option<&'static str>,
    /// Source ports; any when `None`.
    pub sport: Option<&'static str>,
}

type Table = Vec<(&'static str, Vec<T>)>;

fn load(text: &'static str) -> Table {
    let mut table: Table = Vec::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let Some(name) = w.next() else { continue };
        let mut field = || w.next().filter(|v| *v != "-");
        let t = T {
            proto: field(),
            dport: field(),
            sport: field(),
        };
        match table.last_mut() {
            Some((n, ts)) if *n == name => ts.push(t),
            _ => table.push((name, vec![t])),
        }
    }
    table
}

static MACROS: LazyLock<Table> = LazyLock::new(|| load(include_str!("macros.txt")));
static IPV6_MACROS: LazyLock<Table> = LazyLock::new(|| load(include_str!("macros_ipv6.txt")));

fn find(table: &'static Table, name: &str) -> Option<&'static [T]> {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| t.as_slice())
}

/// The macro's name as PVE spells it (`ssh` → `SSH`).
pub fn preferred_name(name: &str) -> Option<&'static str> {
    MACROS
        .iter()
        .chain(IPV6_MACROS.iter())
        .map(|(n, _)| *n)
        .find(|n| n.eq_ignore_ascii_case(name))
}

/// The templates `verify_rule` checks a rule against for its address family, or none when
/// the macro is only for the other family.
pub fn templates(name: &str, ipversion: Option<u8>) -> &'static [T] {
    let v4 = find(&MACROS, name);
    let v6 = find(&IPV6_MACROS, name);
    if v4.is_none() && ipversion == Some(4) {
        return &[];
    }
    match (ipversion, v6) {
        (Some(6), Some(t)) => t,
        _ => v4.or(v6).unwrap_or(&[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_case_insensitively_and_families_pick_templates() {
        assert_eq!(MACROS.len(), 84);
        assert_eq!(preferred_name("https"), Some("HTTPS"));
        assert_eq!(
            preferred_name("neighbordiscovery"),
            Some("NeighborDiscovery")
        );
        assert_eq!(preferred_name("nope"), None);
        assert_eq!(templates("Ping", Some(6))[0].proto, Some("icmpv6"));
        assert_eq!(templates("Ping", None)[0].proto, Some("icmp"));
        // IPv6-only macros check nothing on an IPv4 rule.
        assert!(templates("DHCPv6", Some(4)).is_empty());
        assert_eq!(
            templates("DHCPfwd", None),
            [T {
                proto: Some("udp"),
                dport: Some("67:68"),
                sport: Some("67:68"),
            }]
        );
        assert_eq!(templates("DNS", None).len(), 2);
    }
}
