//! The host's L2 segments, one per bridge name. Preferred: a Linux bridge in the namespace
//! with one tap per NIC, the namespace's addresses on it and a DHCP server. Where taps cannot
//! be made (no `/dev/net/tun` in a container, say), each segment is a multicast socket on the
//! namespace's loopback instead: guests still share their L2, but nothing of the namespace is
//! on it (no DHCP server, no SSH from the namespace to a guest's address).

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

use super::argv::NicBackend;
use super::net::{self, NsProcess};
use super::spec::{BridgeSpec, DhcpPool, GuestSpec};
use super::{Bridge, GuestHost};
use crate::error::{Error, Result};

/// What a segment is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// A Linux bridge with taps (DHCP and the namespace's addresses possible).
    Bridge,
    /// A multicast socket per segment on the namespace's loopback (`localaddr=127.0.0.1`).
    Multicast,
}

/// First port of the multicast segments; segment `i` uses `MCAST_PORT + i`.
const MCAST_PORT: u16 = 5600;

/// The multicast group and port of the `i`-th segment (private to the host's namespace).
pub fn mcast_address(i: u16) -> (Ipv4Addr, u16) {
    let [a, b] = i.to_be_bytes();
    (Ipv4Addr::new(239, 255, a, b), MCAST_PORT.saturating_add(i))
}

/// Whether taps can be made in the namespace (`ip tuntap` needs `/dev/net/tun`).
pub(super) fn taps_work(init_pid: u32) -> std::result::Result<(), String> {
    let probe = [
        "tuntap add vmlabprobe0 mode tap".to_string(),
        "link del vmlabprobe0".to_string(),
    ];
    net::run_ip(init_pid, &probe).map_err(|e| e.to_string())
}

impl GuestHost {
    /// Make the segment if it is new, add the addresses it lacks, and run (or widen) its DHCP
    /// server. Asking again with what it has changes nothing.
    pub fn ensure_bridge(&self, want: &BridgeSpec) -> Result<()> {
        if !net::valid_ifname(&want.name) {
            return Err(Error::Spec(format!(
                "bridge {:?}: not a valid interface name (1-15 letters, digits, '-', '_', '.')",
                want.name
            )));
        }
        let mut st = self.lock_state()?;
        let count = u16::try_from(st.bridges.len()).unwrap_or(u16::MAX);
        let (new, have) = match st.bridges.get(&want.name) {
            Some(b) => (false, b.spec.clone()),
            None => (true, BridgeSpec::new(&want.name)),
        };
        let merged = net::merge_bridge(&have, want);
        if self.segment_kind == SegmentKind::Multicast {
            if merged.dhcp.is_some() || !merged.addresses.is_empty() {
                tracing::warn!(
                    "segment {} is a multicast socket (no taps here): no DHCP server and no namespace address on it",
                    want.name
                );
            }
            let entry = st.bridges.entry(want.name.clone()).or_insert(Bridge {
                spec: have,
                dhcp: None,
                mcast: Some(mcast_address(count)),
            });
            entry.spec = merged;
            return Ok(());
        }
        let add: Vec<(Ipv4Addr, u8)> = merged
            .addresses
            .iter()
            .filter(|a| !have.addresses.contains(a))
            .copied()
            .collect();
        net::run_ip(self.init_pid, &net::bridge_commands(&want.name, new, &add))?;
        let entry = st.bridges.entry(want.name.clone()).or_insert(Bridge {
            spec: have,
            dhcp: None,
            mcast: None,
        });
        let pool_changed = merged.dhcp != entry.spec.dhcp;
        entry.spec = merged;
        if let (true, Some(pool)) = (pool_changed, entry.spec.dhcp) {
            if let Some(mut old) = entry.dhcp.take() {
                old.kill();
            }
            entry.dhcp = Some(self.start_dhcp(&want.name, &pool, &entry.spec.addresses)?);
        }
        Ok(())
    }

    /// The segments and what they hold.
    pub fn bridges(&self) -> Vec<BridgeSpec> {
        self.state
            .lock()
            .map(|s| s.bridges.values().map(|b| b.spec.clone()).collect())
            .unwrap_or_default()
    }

    /// What the segments are made of on this host.
    pub fn segment_kind(&self) -> SegmentKind {
        self.segment_kind
    }

    fn start_dhcp(
        &self,
        bridge: &str,
        pool: &DhcpPool,
        addrs: &[(Ipv4Addr, u8)],
    ) -> Result<NsProcess> {
        let busybox = self.busybox()?;
        let dir = self.run_dir.join("dhcp");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let conf = dir.join(format!("{bridge}.conf"));
        let prefix = net::prefix_for(addrs, pool.start);
        std::fs::write(&conf, net::udhcpd_conf(bridge, pool, prefix, &dir))
            .map_err(|e| Error::io(&conf, e))?;
        let _ = std::fs::write(dir.join(format!("{bridge}.leases")), b"");
        let log = dir.join(format!("{bridge}.log"));
        let log_file = std::fs::File::create(&log).map_err(|e| Error::io(&log, e))?;
        let mut p = NsProcess::spawn(
            self.init_pid,
            &busybox.display().to_string(),
            &["udhcpd".into(), "-f".into(), conf.display().to_string()],
            Stdio::from(log_file),
        )?;
        // udhcpd refuses a bad config or interface at once.
        std::thread::sleep(Duration::from_millis(150));
        if let Some(status) = p.exit_status() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(Error::tool(
                "udhcpd",
                format!("on {bridge} exited ({status}): {}", text.trim()),
            ));
        }
        tracing::info!("dhcp on {bridge}: {}-{}", pool.start, pool.end);
        Ok(p)
    }

    /// Each NIC's way onto its segment (and the taps made for it; empty names for none).
    pub(super) fn nic_backends(
        &self,
        seq: u32,
        spec: &GuestSpec,
    ) -> Result<(Vec<String>, Vec<NicBackend>)> {
        let mut taps = Vec::new();
        let mut backends = Vec::new();
        let mut cmds = Vec::new();
        for nic in &spec.nics {
            let Some(b) = &nic.bridge else {
                taps.push(String::new());
                backends.push(NicBackend::User);
                continue;
            };
            if self.segment_kind == SegmentKind::Multicast {
                let (group, port) = self
                    .lock_state()?
                    .bridges
                    .get(b)
                    .and_then(|s| s.mcast)
                    .ok_or_else(|| Error::Lab(format!("segment {b} has no multicast group")))?;
                taps.push(String::new());
                backends.push(NicBackend::Mcast { group, port });
                continue;
            }
            let tap = net::tap_name(seq, nic.index);
            cmds.extend(net::tap_commands(&tap, b));
            taps.push(tap.clone());
            backends.push(NicBackend::Tap { ifname: tap });
        }
        net::run_ip(self.init_pid, &cmds)
            .map_err(|e| Error::Lab(format!("guest {}: cannot make its taps: {e}", spec.name)))?;
        Ok((taps, backends))
    }

    pub(super) fn delete_taps(&self, taps: &[String]) {
        let cmds: Vec<String> = taps
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| format!("link del {t}"))
            .collect();
        if let Err(e) = net::run_ip(self.init_pid, &cmds) {
            tracing::debug!("deleting taps: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_segments_get_distinct_groups_and_ports() {
        assert_eq!(mcast_address(0), (Ipv4Addr::new(239, 255, 0, 0), 5600));
        assert_eq!(mcast_address(1), (Ipv4Addr::new(239, 255, 0, 1), 5601));
        assert_eq!(mcast_address(300).0, Ipv4Addr::new(239, 255, 1, 44));
        assert!((0..1000).all(|i| mcast_address(i).0.is_multicast()));
    }
}
