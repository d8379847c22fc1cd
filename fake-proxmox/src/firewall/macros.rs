//! pve-firewall's standard macros (imported from shorewall): what each one expands to.
//! A rule naming a macro may not set a `proto`, `dport` or `sport` the macro sets
//! otherwise; the name is matched case-insensitively and stored as PVE spells it.

/// One rule a macro expands to (its action is the rule's).
#[derive(Clone, Copy, Debug)]
pub struct T {
    pub proto: Option<&'static str>,
    pub dport: Option<&'static str>,
    pub sport: Option<&'static str>,
}

/// `$pve_fw_macros`
pub const MACROS: &[(&str, &[T])] = &[
    (
        "Amanda",
        &[
            T {
                proto: Some("udp"),
                dport: Some("10080"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("10080"),
                sport: None,
            },
        ],
    ),
    (
        "Auth",
        &[T {
            proto: Some("tcp"),
            dport: Some("113"),
            sport: None,
        }],
    ),
    (
        "BGP",
        &[T {
            proto: Some("tcp"),
            dport: Some("179"),
            sport: None,
        }],
    ),
    (
        "BitTorrent",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("6881:6889"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("6881"),
                sport: None,
            },
        ],
    ),
    (
        "BitTorrent32",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("6881:6999"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("6881"),
                sport: None,
            },
        ],
    ),
    (
        "CVS",
        &[T {
            proto: Some("tcp"),
            dport: Some("2401"),
            sport: None,
        }],
    ),
    (
        "Ceph",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("6789"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("3300"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("6800:7300"),
                sport: None,
            },
        ],
    ),
    (
        "Citrix",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("1494"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("1604"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("2598"),
                sport: None,
            },
        ],
    ),
    (
        "DAAP",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("3689"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("3689"),
                sport: None,
            },
        ],
    ),
    (
        "DCC",
        &[T {
            proto: Some("tcp"),
            dport: Some("6277"),
            sport: None,
        }],
    ),
    (
        "DHCPfwd",
        &[T {
            proto: Some("udp"),
            dport: Some("67:68"),
            sport: Some("67:68"),
        }],
    ),
    (
        "DNS",
        &[
            T {
                proto: Some("udp"),
                dport: Some("53"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("53"),
                sport: None,
            },
        ],
    ),
    (
        "Distcc",
        &[T {
            proto: Some("tcp"),
            dport: Some("3632"),
            sport: None,
        }],
    ),
    (
        "FTP",
        &[T {
            proto: Some("tcp"),
            dport: Some("21"),
            sport: None,
        }],
    ),
    (
        "Finger",
        &[T {
            proto: Some("tcp"),
            dport: Some("79"),
            sport: None,
        }],
    ),
    (
        "GNUnet",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("2086"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("2086"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("1080"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("1080"),
                sport: None,
            },
        ],
    ),
    (
        "GRE",
        &[T {
            proto: Some("47"),
            dport: None,
            sport: None,
        }],
    ),
    (
        "Git",
        &[T {
            proto: Some("tcp"),
            dport: Some("9418"),
            sport: None,
        }],
    ),
    (
        "HKP",
        &[T {
            proto: Some("tcp"),
            dport: Some("11371"),
            sport: None,
        }],
    ),
    (
        "HTTP",
        &[T {
            proto: Some("tcp"),
            dport: Some("80"),
            sport: None,
        }],
    ),
    (
        "HTTPS",
        &[T {
            proto: Some("tcp"),
            dport: Some("443"),
            sport: None,
        }],
    ),
    (
        "ICPV2",
        &[T {
            proto: Some("udp"),
            dport: Some("3130"),
            sport: None,
        }],
    ),
    (
        "ICQ",
        &[T {
            proto: Some("tcp"),
            dport: Some("5190"),
            sport: None,
        }],
    ),
    (
        "IMAP",
        &[T {
            proto: Some("tcp"),
            dport: Some("143"),
            sport: None,
        }],
    ),
    (
        "IMAPS",
        &[T {
            proto: Some("tcp"),
            dport: Some("993"),
            sport: None,
        }],
    ),
    (
        "IPIP",
        &[T {
            proto: Some("94"),
            dport: None,
            sport: None,
        }],
    ),
    (
        "IPsec",
        &[
            T {
                proto: Some("udp"),
                dport: Some("500"),
                sport: Some("500"),
            },
            T {
                proto: Some("50"),
                dport: None,
                sport: None,
            },
        ],
    ),
    (
        "IPsecah",
        &[
            T {
                proto: Some("udp"),
                dport: Some("500"),
                sport: Some("500"),
            },
            T {
                proto: Some("51"),
                dport: None,
                sport: None,
            },
        ],
    ),
    (
        "IPsecnat",
        &[
            T {
                proto: Some("udp"),
                dport: Some("500"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("4500"),
                sport: None,
            },
            T {
                proto: Some("50"),
                dport: None,
                sport: None,
            },
        ],
    ),
    (
        "IRC",
        &[T {
            proto: Some("tcp"),
            dport: Some("6667"),
            sport: None,
        }],
    ),
    (
        "Jetdirect",
        &[T {
            proto: Some("tcp"),
            dport: Some("9100"),
            sport: None,
        }],
    ),
    (
        "L2TP",
        &[T {
            proto: Some("udp"),
            dport: Some("1701"),
            sport: None,
        }],
    ),
    (
        "LDAP",
        &[T {
            proto: Some("tcp"),
            dport: Some("389"),
            sport: None,
        }],
    ),
    (
        "LDAPS",
        &[T {
            proto: Some("tcp"),
            dport: Some("636"),
            sport: None,
        }],
    ),
    (
        "MDNS",
        &[T {
            proto: Some("udp"),
            dport: Some("5353"),
            sport: None,
        }],
    ),
    (
        "MSNP",
        &[T {
            proto: Some("tcp"),
            dport: Some("1863"),
            sport: None,
        }],
    ),
    (
        "MSSQL",
        &[T {
            proto: Some("tcp"),
            dport: Some("1433"),
            sport: None,
        }],
    ),
    (
        "Mail",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("25"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("465"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("587"),
                sport: None,
            },
        ],
    ),
    (
        "Munin",
        &[T {
            proto: Some("tcp"),
            dport: Some("4949"),
            sport: None,
        }],
    ),
    (
        "MySQL",
        &[T {
            proto: Some("tcp"),
            dport: Some("3306"),
            sport: None,
        }],
    ),
    (
        "NNTP",
        &[T {
            proto: Some("tcp"),
            dport: Some("119"),
            sport: None,
        }],
    ),
    (
        "NNTPS",
        &[T {
            proto: Some("tcp"),
            dport: Some("563"),
            sport: None,
        }],
    ),
    (
        "NTP",
        &[T {
            proto: Some("udp"),
            dport: Some("123"),
            sport: None,
        }],
    ),
    (
        "OSPF",
        &[T {
            proto: Some("89"),
            dport: None,
            sport: None,
        }],
    ),
    (
        "OpenVPN",
        &[T {
            proto: Some("udp"),
            dport: Some("1194"),
            sport: None,
        }],
    ),
    (
        "PCA",
        &[
            T {
                proto: Some("udp"),
                dport: Some("5632"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("5631"),
                sport: None,
            },
        ],
    ),
    (
        "PMG",
        &[T {
            proto: Some("tcp"),
            dport: Some("8006"),
            sport: None,
        }],
    ),
    (
        "POP3",
        &[T {
            proto: Some("tcp"),
            dport: Some("110"),
            sport: None,
        }],
    ),
    (
        "POP3S",
        &[T {
            proto: Some("tcp"),
            dport: Some("995"),
            sport: None,
        }],
    ),
    (
        "PPtP",
        &[
            T {
                proto: Some("47"),
                dport: None,
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("1723"),
                sport: None,
            },
        ],
    ),
    (
        "Ping",
        &[T {
            proto: Some("icmp"),
            dport: Some("echo-request"),
            sport: None,
        }],
    ),
    (
        "PostgreSQL",
        &[T {
            proto: Some("tcp"),
            dport: Some("5432"),
            sport: None,
        }],
    ),
    (
        "Printer",
        &[T {
            proto: Some("tcp"),
            dport: Some("515"),
            sport: None,
        }],
    ),
    (
        "RDP",
        &[T {
            proto: Some("tcp"),
            dport: Some("3389"),
            sport: None,
        }],
    ),
    (
        "RIP",
        &[T {
            proto: Some("udp"),
            dport: Some("520"),
            sport: None,
        }],
    ),
    (
        "RNDC",
        &[T {
            proto: Some("tcp"),
            dport: Some("953"),
            sport: None,
        }],
    ),
    (
        "Razor",
        &[T {
            proto: Some("tcp"),
            dport: Some("2703"),
            sport: None,
        }],
    ),
    (
        "Rdate",
        &[T {
            proto: Some("tcp"),
            dport: Some("37"),
            sport: None,
        }],
    ),
    (
        "Rsync",
        &[T {
            proto: Some("tcp"),
            dport: Some("873"),
            sport: None,
        }],
    ),
    (
        "SANE",
        &[T {
            proto: Some("tcp"),
            dport: Some("6566"),
            sport: None,
        }],
    ),
    (
        "SMB",
        &[
            T {
                proto: Some("udp"),
                dport: Some("135,445"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("137:139"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("1024:65535"),
                sport: Some("137"),
            },
            T {
                proto: Some("tcp"),
                dport: Some("135,139,445"),
                sport: None,
            },
        ],
    ),
    (
        "SMBswat",
        &[T {
            proto: Some("tcp"),
            dport: Some("901"),
            sport: None,
        }],
    ),
    (
        "SMTP",
        &[T {
            proto: Some("tcp"),
            dport: Some("25"),
            sport: None,
        }],
    ),
    (
        "SMTPS",
        &[T {
            proto: Some("tcp"),
            dport: Some("465"),
            sport: None,
        }],
    ),
    (
        "SNMP",
        &[
            T {
                proto: Some("udp"),
                dport: Some("161:162"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("161"),
                sport: None,
            },
        ],
    ),
    (
        "SPAMD",
        &[T {
            proto: Some("tcp"),
            dport: Some("783"),
            sport: None,
        }],
    ),
    (
        "SPICEproxy",
        &[T {
            proto: Some("tcp"),
            dport: Some("3128"),
            sport: None,
        }],
    ),
    (
        "SSH",
        &[T {
            proto: Some("tcp"),
            dport: Some("22"),
            sport: None,
        }],
    ),
    (
        "SVN",
        &[T {
            proto: Some("tcp"),
            dport: Some("3690"),
            sport: None,
        }],
    ),
    (
        "SixXS",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("3874"),
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("3740"),
                sport: None,
            },
            T {
                proto: Some("41"),
                dport: None,
                sport: None,
            },
            T {
                proto: Some("udp"),
                dport: Some("5072,8374"),
                sport: None,
            },
        ],
    ),
    (
        "Squid",
        &[T {
            proto: Some("tcp"),
            dport: Some("3128"),
            sport: None,
        }],
    ),
    (
        "Submission",
        &[T {
            proto: Some("tcp"),
            dport: Some("587"),
            sport: None,
        }],
    ),
    (
        "Syslog",
        &[
            T {
                proto: Some("udp"),
                dport: Some("514"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("514"),
                sport: None,
            },
        ],
    ),
    (
        "TFTP",
        &[T {
            proto: Some("udp"),
            dport: Some("69"),
            sport: None,
        }],
    ),
    (
        "Telnet",
        &[T {
            proto: Some("tcp"),
            dport: Some("23"),
            sport: None,
        }],
    ),
    (
        "Telnets",
        &[T {
            proto: Some("tcp"),
            dport: Some("992"),
            sport: None,
        }],
    ),
    (
        "Time",
        &[T {
            proto: Some("tcp"),
            dport: Some("37"),
            sport: None,
        }],
    ),
    (
        "Trcrt",
        &[
            T {
                proto: Some("udp"),
                dport: Some("33434:33524"),
                sport: None,
            },
            T {
                proto: Some("icmp"),
                dport: Some("echo-request"),
                sport: None,
            },
        ],
    ),
    (
        "VNC",
        &[T {
            proto: Some("tcp"),
            dport: Some("5900:5999"),
            sport: None,
        }],
    ),
    (
        "VNCL",
        &[T {
            proto: Some("tcp"),
            dport: Some("5500"),
            sport: None,
        }],
    ),
    (
        "Web",
        &[
            T {
                proto: Some("tcp"),
                dport: Some("80"),
                sport: None,
            },
            T {
                proto: Some("tcp"),
                dport: Some("443"),
                sport: None,
            },
        ],
    ),
    (
        "Webcache",
        &[T {
            proto: Some("tcp"),
            dport: Some("8080"),
            sport: None,
        }],
    ),
    (
        "Webmin",
        &[T {
            proto: Some("tcp"),
            dport: Some("10000"),
            sport: None,
        }],
    ),
    (
        "Whois",
        &[T {
            proto: Some("tcp"),
            dport: Some("43"),
            sport: None,
        }],
    ),
];

/// `$pve_ipv6fw_macros`: what these macros expand to for IPv6 rules; the ones missing
/// from `MACROS` are IPv6-only.
pub const IPV6_MACROS: &[(&str, &[T])] = &[
    (
        "DHCPv6",
        &[T {
            proto: Some("udp"),
            dport: Some("546:547"),
            sport: Some("546:547"),
        }],
    ),
    (
        "NeighborDiscovery",
        &[
            T {
                proto: Some("icmpv6"),
                dport: Some("router-solicitation"),
                sport: None,
            },
            T {
                proto: Some("icmpv6"),
                dport: Some("router-advertisement"),
                sport: None,
            },
            T {
                proto: Some("icmpv6"),
                dport: Some("neighbor-solicitation"),
                sport: None,
            },
            T {
                proto: Some("icmpv6"),
                dport: Some("neighbor-advertisement"),
                sport: None,
            },
        ],
    ),
    (
        "Ping",
        &[T {
            proto: Some("icmpv6"),
            dport: Some("echo-request"),
            sport: None,
        }],
    ),
    (
        "Trcrt",
        &[
            T {
                proto: Some("udp"),
                dport: Some("33434:33524"),
                sport: None,
            },
            T {
                proto: Some("icmpv6"),
                dport: Some("echo-request"),
                sport: None,
            },
        ],
    ),
];

/// The macro's name as PVE spells it (`ssh` → `SSH`).
pub fn preferred_name(name: &str) -> Option<&'static str> {
    MACROS
        .iter()
        .chain(IPV6_MACROS)
        .map(|(n, _)| *n)
        .find(|n| n.eq_ignore_ascii_case(name))
}

/// The templates `verify_rule` checks a rule against for its address family, or none when
/// the macro is only for the other family.
pub fn templates(name: &str, ipversion: Option<u8>) -> &'static [T] {
    let find = |table: &'static [(&str, &'static [T])]| {
        table.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    };
    let v6_only = find(MACROS).is_none();
    if v6_only && ipversion == Some(4) {
        return &[];
    }
    match (ipversion, find(IPV6_MACROS)) {
        (Some(6), Some(t)) => t,
        _ => find(MACROS).or(find(IPV6_MACROS)).unwrap_or(&[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_case_insensitively_and_families_pick_templates() {
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
        assert_eq!(templates("DNS", None).len(), 2);
    }
}
