//! The interfaces inside a container, as `ip -j addr` (run in its network namespace) reports
//! them.

use std::net::IpAddr;

use serde_json::Value;

/// One interface inside a container, as `ip -j addr` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerIface {
    /// Its name, e.g. `eth0` or `lo`.
    pub name: String,
    /// Its MAC in lower case (`None` for the loopback).
    pub mac: Option<String>,
    /// Its addresses with their prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
}

/// `ip -j addr` output → each interface with its MAC and addresses.
pub(super) fn parse_ip_json(text: &str) -> Result<Vec<ContainerIface>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("ip -j addr: {e}"))?;
    let list = v
        .as_array()
        .ok_or_else(|| "ip -j addr: not a list".to_string())?;
    let mut out = Vec::new();
    for iface in list {
        let Some(name) = iface.get("ifname").and_then(Value::as_str) else {
            continue;
        };
        let mac = iface
            .get("address")
            .and_then(Value::as_str)
            .filter(|_| iface.get("link_type").and_then(Value::as_str) != Some("loopback"))
            .map(str::to_ascii_lowercase);
        let addrs = iface
            .get("addr_info")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|ai| {
                        let ip: IpAddr = ai.get("local")?.as_str()?.parse().ok()?;
                        let prefix = u8::try_from(ai.get("prefixlen")?.as_u64()?).ok()?;
                        Some((ip, prefix))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ContainerIface {
            name: name.to_string(),
            mac,
            addrs,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ip_json_gives_names_macs_and_addresses() {
        let text = r#"[{"ifindex":1,"ifname":"lo","link_type":"loopback","address":"00:00:00:00:00:00",
            "addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifindex":2,"ifname":"eth0","link_type":"ether","address":"BC:24:11:00:00:01",
            "addr_info":[{"family":"inet","local":"10.9.0.5","prefixlen":24},
                         {"family":"inet6","local":"fe80::1","prefixlen":64}]}]"#;
        let v = parse_ip_json(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].mac, None);
        assert_eq!(v[1].mac.as_deref(), Some("bc:24:11:00:00:01"));
        assert_eq!(
            v[1].addrs,
            [
                ("10.9.0.5".parse().unwrap(), 24),
                ("fe80::1".parse().unwrap(), 64)
            ]
        );
        assert!(parse_ip_json("not json").is_err());
    }
}
