//! What a container reports: its `vmstatus` row (`src/PVE/LXC.pm` `vmstatus`), the
//! `status/current` answer, and `interfaces` (`get_interfaces`: `ip --json a` inside the
//! container's network namespace).

use serde_json::{Value, json};

use super::model::{Ct, NetConf, is_net_key};
use crate::exec::CtIface;
use crate::wire::PveError;
use crate::world::Site;

/// Memory a running container's processes use: a steady share of its limit.
pub(crate) fn used_memory(ct: &Ct) -> u64 {
    (ct.memory_bytes() / 8).max(24 << 20)
}

/// What a running container's root filesystem holds: a tenth of it, at most 600 MiB.
pub(crate) fn disk_used(ct: &Ct) -> u64 {
    (ct.rootfs_size() / 10).min(600 << 20)
}

/// The share of a CPU a running container's processes use.
pub(crate) const RUNNING_CPU: f64 = 0.002;
/// Bytes per second a running container's NICs receive and send, all together.
pub(crate) const NET_IN_PER_S: u64 = 180;
pub(crate) const NET_OUT_PER_S: u64 = 60;
/// Bytes per second a running container writes; it reads 48 MiB as it starts.
pub(crate) const DISK_WRITE_PER_S: u64 = 4096;
const DISK_READ_AT_START: u64 = 48 << 20;

impl Ct {
    /// The `vmstatus` row: what `GET /nodes/{node}/lxc` lists and `status/current` extends.
    pub fn vmstatus(&self, now: f64, node_cpus: u32) -> Value {
        let running = self.is_running();
        let cpus: f64 = self
            .config
            .get("cores")
            .and_then(|c| c.parse().ok())
            .or_else(|| self.config.get("cpulimit").and_then(|c| c.parse().ok()))
            .filter(|c: &f64| *c > 0.0)
            .unwrap_or(f64::from(node_cpus));
        let uptime = self.uptime(now);
        let mut d = json!({
            "vmid": self.vmid,
            "type": "lxc",
            "status": if running { "running" } else { "stopped" },
            "name": self.hostname().replace(char::is_whitespace, ""),
            "cpus": if cpus.fract() == 0.0 { json!(cpus as u64) } else { json!(cpus) },
            "cpu": if running { json!(RUNNING_CPU) } else { json!(0) },
            "maxmem": self.memory_bytes(),
            "mem": if running { self.mem_used.unwrap_or_else(|| used_memory(self)) } else { 0 },
            "maxswap": self.swap_bytes(),
            "swap": 0,
            "maxdisk": self.rootfs_size(),
            "disk": if running { disk_used(self) } else { 0 },
            "uptime": uptime,
            "netin": if running { uptime * NET_IN_PER_S } else { 0 },
            "netout": if running { uptime * NET_OUT_PER_S } else { 0 },
            "diskread": if running { DISK_READ_AT_START } else { 0 },
            "diskwrite": if running { uptime * DISK_WRITE_PER_S } else { 0 },
        });
        if let Some(p) = self.pid.filter(|_| running) {
            d["pid"] = json!(p);
        }
        if let Some(t) = self.config.get("tags") {
            d["tags"] = json!(t);
        }
        if self.is_template() {
            d["template"] = json!(1);
        }
        if let Some(l) = &self.lock {
            d["lock"] = json!(l);
        }
        d
    }

    /// `GET …/interfaces`: `null` while stopped; else `lo` and one entry per NIC with its
    /// static or leased address.
    pub fn interfaces(&self) -> Value {
        if !self.is_running() {
            return Value::Null;
        }
        let mut out = vec![json!({
            "name": "lo",
            "hardware-address": "00:00:00:00:00:00",
            "hwaddr": "00:00:00:00:00:00",
            "inet": "127.0.0.1/8",
            "inet6": "::1/128",
            "ip-addresses": [
                {"ip-address": "127.0.0.1", "ip-address-type": "inet", "prefix": 8},
                {"ip-address": "::1", "ip-address-type": "inet6", "prefix": 128},
            ],
        })];
        for (k, v) in self.config.iter().filter(|(k, _)| is_net_key(k)) {
            let net = NetConf::parse(v);
            if net.get("link_down") == Some("1") {
                continue;
            }
            let mac = net.get("hwaddr").unwrap_or_default().to_lowercase();
            let name = net.get("name").unwrap_or("eth0");
            let mut obj = json!({"name": name, "hardware-address": mac, "hwaddr": mac});
            let mut addrs = Vec::new();
            let v4 = match net.get("ip") {
                Some("dhcp") => self.leases.get(k).map(|ip| (ip.to_string(), 24)),
                Some(cidr) if cidr.contains('/') => cidr
                    .split_once('/')
                    .and_then(|(a, p)| Some((a.to_string(), p.parse::<u8>().ok()?))),
                _ => None,
            };
            if let Some((ip, prefix)) = v4 {
                obj["inet"] = json!(format!("{ip}/{prefix}"));
                addrs.push(json!({"ip-address": ip, "ip-address-type": "inet", "prefix": prefix}));
            }
            if let Some(ll) = link_local(&mac) {
                obj["inet6"] = json!(format!("{ll}/64"));
                addrs.push(json!({"ip-address": ll, "ip-address-type": "inet6", "prefix": 64}));
            }
            obj["ip-addresses"] = Value::Array(addrs);
            out.push(obj);
        }
        Value::Array(out)
    }
}

/// `get_interfaces`' answer for what `ip --json address` shows in the container: each
/// interface with its MAC, its addresses, and (kept for old clients) `inet`/`inet6` holding
/// the last address of that family.
pub fn interfaces_json(ifaces: &[CtIface]) -> Value {
    let rows = ifaces
        .iter()
        .map(|i| {
            let mut obj = json!({"name": i.name});
            let mut list = Vec::new();
            for (ip, prefix) in &i.addrs {
                let family = if ip.is_ipv4() { "inet" } else { "inet6" };
                obj[family] = json!(format!("{ip}/{prefix}"));
                list.push(json!({
                    "ip-address-type": family,
                    "ip-address": ip.to_string(),
                    "prefix": prefix,
                }));
            }
            obj["ip-addresses"] = Value::Array(list);
            obj["hardware-address"] = json!(i.mac);
            obj["hwaddr"] = json!(i.mac);
            obj
        })
        .collect();
    Value::Array(rows)
}

/// The EUI-64 link-local address the kernel gives a NIC with this MAC.
fn link_local(mac: &str) -> Option<String> {
    let b: Vec<u8> = mac
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    if b.len() != 6 {
        return None;
    }
    Some(format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        u16::from_be_bytes([b[0] ^ 2, b[1]]),
        u16::from_be_bytes([b[2], 0xff]),
        u16::from_be_bytes([0xfe, b[3]]),
        u16::from_be_bytes([b[4], b[5]])
    ))
}

impl Site {
    /// `GET …/interfaces`: what really runs the container reports, else the model's rows.
    pub fn ct_interfaces(&self, node: &str, vmid: u32) -> Result<Value, PveError> {
        let ct = self.ct_on(node, vmid)?;
        if !ct.is_running() {
            return Ok(Value::Null);
        }
        match self.exec_on(node).ct_interfaces(ct) {
            None => Ok(ct.interfaces()),
            Some(Ok(ifaces)) => Ok(interfaces_json(&ifaces)),
            Some(Err(e)) => Err(PveError::die(e)),
        }
    }

    /// The threads of the container's node (the `cpus` of a container without a limit).
    pub fn node_cpus(&self, node: &str) -> u32 {
        self.node(node).map_or(1, |n| n.threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_interfaces_read_as_get_interfaces_gives_them() {
        let ifaces = [
            CtIface {
                name: "lo".into(),
                mac: Some("00:00:00:00:00:00".into()),
                addrs: vec![("127.0.0.1".parse().expect("ip"), 8)],
            },
            CtIface {
                name: "eth0".into(),
                mac: Some("bc:24:11:aa:bb:cc".into()),
                addrs: vec![
                    ("192.168.11.60".parse().expect("ip"), 24),
                    ("fe80::be24:11ff:feaa:bbcc".parse().expect("ip"), 64),
                ],
            },
        ];
        let v = interfaces_json(&ifaces);
        assert_eq!(v[1]["name"], "eth0");
        assert_eq!(v[1]["hwaddr"], "bc:24:11:aa:bb:cc");
        assert_eq!(v[1]["hardware-address"], "bc:24:11:aa:bb:cc");
        assert_eq!(v[1]["inet"], "192.168.11.60/24");
        assert_eq!(v[1]["inet6"], "fe80::be24:11ff:feaa:bbcc/64");
        assert_eq!(
            v[1]["ip-addresses"][0],
            json!({"ip-address": "192.168.11.60", "ip-address-type": "inet", "prefix": 24})
        );
        assert_eq!(v[0]["inet"], "127.0.0.1/8");
    }

    #[test]
    fn link_local_addresses_follow_eui64() {
        assert_eq!(
            link_local("bc:24:11:aa:bb:cc").as_deref(),
            Some("fe80::be24:11ff:feaa:bbcc")
        );
    }
}
