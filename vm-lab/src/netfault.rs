//! Per-link network faults on the multicast L2, without root on the host: each node shapes
//! its own outgoing lab traffic with the guest kernel's traffic control (a `prio` qdisc on
//! `eth0`, one band per faulted peer selected by a `u32` match on the peer's address, a
//! `netem` qdisc in that band). A fault is directed — it applies to packets *from* one node
//! *to* another — so an asymmetric partition (A hears B, B does not hear A) is simply a drop
//! on A→B alone. Non-IP frames (ARP) are never shaped.
//!
//! The desired faults live in `net.json` in the lab's run directory, so the library and the
//! CLI (another process) change the same state; every change rewrites the qdiscs of every
//! running node from that state. A node powered off and on again comes back without its
//! qdiscs until the next change (or [`NetFaults::heal`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::machine::Node;

/// The guest interface on the lab network (the image's init names it).
pub const LAB_DEV: &str = "eth0";
/// `prio` has at most 16 bands; band 0 carries unshaped traffic.
const MAX_FAULTED_PEERS: usize = 15;
const STATE_FILE: &str = "net.json";
/// iproute2's `tc`, by path: busybox installs its own `tc` (no netem) earlier on the guest's PATH.
pub const TC: &str = "/sbin/tc";

/// What happens to packets from one node to another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkFault {
    /// Every packet is lost (a partition in this direction).
    #[serde(default)]
    pub drop: bool,
    /// Added one-way latency (`netem delay`); written in milliseconds in `net.json`.
    #[serde(default, with = "opt_ms")]
    pub delay: Option<Duration>,
    /// Uniform variation around `delay`.
    #[serde(default, with = "opt_ms")]
    pub jitter: Option<Duration>,
    /// Percent of packets lost.
    #[serde(default)]
    pub loss_pct: Option<f64>,
    /// Percent of packets sent twice.
    #[serde(default)]
    pub duplicate_pct: Option<f64>,
    /// Bandwidth limit in kbit/s.
    #[serde(default)]
    pub rate_kbit: Option<u64>,
}

impl LinkFault {
    /// True when the fault changes nothing (every field at its default).
    pub fn is_clear(&self) -> bool {
        *self == LinkFault::default()
    }

    /// `netem` parameters for this fault.
    pub fn netem_args(&self) -> String {
        if self.drop {
            return "loss 100%".into();
        }
        let mut v = Vec::new();
        if let Some(d) = self.delay {
            let mut s = format!("delay {}ms", d.as_millis());
            if let Some(j) = self.jitter {
                s.push_str(&format!(" {}ms", j.as_millis()));
            }
            v.push(s);
        }
        if let Some(l) = self.loss_pct {
            v.push(format!("loss {l}%"));
        }
        if let Some(d) = self.duplicate_pct {
            v.push(format!("duplicate {d}%"));
        }
        if let Some(r) = self.rate_kbit {
            v.push(format!("rate {r}kbit"));
        }
        v.join(" ")
    }

    fn validate(&self) -> Result<()> {
        for (what, p) in [("loss", self.loss_pct), ("duplicate", self.duplicate_pct)] {
            if let Some(p) = p
                && !(0.0..=100.0).contains(&p)
            {
                return Err(Error::Lab(format!("{what} {p}% is not a percentage")));
            }
        }
        if self.jitter.is_some() && self.delay.is_none() {
            return Err(Error::Lab("jitter needs a delay".into()));
        }
        if self.rate_kbit == Some(0) {
            return Err(Error::Lab("a rate of 0 kbit/s: use a partition".into()));
        }
        Ok(())
    }
}

/// A fault on the packets from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectedFault {
    /// The sending node's name.
    pub from: String,
    /// The receiving node's name.
    pub to: String,
    /// What happens to the packets.
    pub fault: LinkFault,
}

/// Every fault in force in a lab.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetFaults {
    links: BTreeMap<String, BTreeMap<String, LinkFault>>,
}

impl NetFaults {
    /// The fault on packets from `from` to `to`; a clear one when none is set.
    pub fn get(&self, from: &str, to: &str) -> LinkFault {
        self.links
            .get(from)
            .and_then(|m| m.get(to))
            .copied()
            .unwrap_or_default()
    }

    /// Change the fault on `from` → `to`.
    pub fn update(&mut self, from: &str, to: &str, change: impl FnOnce(&mut LinkFault)) {
        let m = self.links.entry(from.to_string()).or_default();
        let f = m.entry(to.to_string()).or_default();
        change(f);
        if f.is_clear() {
            m.remove(to);
        }
        if m.is_empty() {
            self.links.remove(from);
        }
    }

    /// No packet crosses between the two sets, in either direction.
    pub fn partition(&mut self, a: &[&str], b: &[&str]) {
        for x in a {
            for y in b {
                self.update(x, y, |f| f.drop = true);
                self.update(y, x, |f| f.drop = true);
            }
        }
    }

    /// Packets from `from` no longer reach any of `to`; theirs still reach `from`.
    pub fn cut(&mut self, from: &str, to: &[&str]) {
        for y in to {
            self.update(from, y, |f| f.drop = true);
        }
    }

    /// Set delay/jitter/loss/duplication/rate between `a` and `b`, both directions (each
    /// direction gets the whole delay: a ping's round trip grows by twice `delay`). Fields
    /// left `None` in `shape` are kept as they were; a partition stays.
    pub fn shape(&mut self, a: &str, b: &str, shape: LinkFault) -> Result<()> {
        shape.validate()?;
        for (x, y) in [(a, b), (b, a)] {
            self.update(x, y, |f| {
                f.delay = shape.delay.or(f.delay);
                f.jitter = shape.jitter.or(f.jitter);
                f.loss_pct = shape.loss_pct.or(f.loss_pct);
                f.duplicate_pct = shape.duplicate_pct.or(f.duplicate_pct);
                f.rate_kbit = shape.rate_kbit.or(f.rate_kbit);
            });
        }
        Ok(())
    }

    /// Clear every fault.
    pub fn heal(&mut self) {
        self.links.clear();
    }

    /// Every fault, sorted.
    pub fn list(&self) -> Vec<DirectedFault> {
        self.links
            .iter()
            .flat_map(|(from, m)| {
                m.iter().map(move |(to, f)| DirectedFault {
                    from: from.clone(),
                    to: to.clone(),
                    fault: *f,
                })
            })
            .collect()
    }

    /// The faults on packets leaving `from`, by the peer's address.
    fn egress(
        &self,
        from: &str,
        addr: &dyn Fn(&str) -> Option<Ipv4Addr>,
    ) -> Result<Vec<(Ipv4Addr, LinkFault)>> {
        let mut out = Vec::new();
        for (to, f) in self.links.get(from).into_iter().flatten() {
            let ip = addr(to).ok_or_else(|| Error::NoSuchNode(to.clone()))?;
            out.push((ip, *f));
        }
        Ok(out)
    }

    /// Read the faults in force from `net.json` in `run_dir`; none when the file does not exist yet.
    pub fn load(run_dir: &Path) -> Result<NetFaults> {
        let p = state_path(run_dir);
        match std::fs::read_to_string(&p) {
            Ok(t) => {
                serde_json::from_str(&t).map_err(|e| Error::Lab(format!("{}: {e}", p.display())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(NetFaults::default()),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// Write the faults to `net.json` in `run_dir`, replacing what was there.
    pub fn save(&self, run_dir: &Path) -> Result<()> {
        let p = state_path(run_dir);
        let t = serde_json::to_string_pretty(self).map_err(|e| Error::Lab(e.to_string()))?;
        std::fs::write(&p, t).map_err(|e| Error::io(&p, e))
    }
}

/// Where a lab's faults are kept: `net.json` in its run directory, shared by the library and
/// the CLI.
pub fn state_path(run_dir: &Path) -> PathBuf {
    run_dir.join(STATE_FILE)
}

/// The shell script that makes `dev`'s egress match `rules` (replacing whatever was there).
pub fn tc_script(dev: &str, rules: &[(Ipv4Addr, LinkFault)]) -> Result<String> {
    if rules.len() > MAX_FAULTED_PEERS {
        return Err(Error::Lab(format!(
            "faults towards {} peers of one node; at most {MAX_FAULTED_PEERS}",
            rules.len()
        )));
    }
    let mut s = format!("{TC} qdisc del dev {dev} root 2>/dev/null; ");
    if rules.is_empty() {
        s.push_str("true");
        return Ok(s);
    }
    let bands = (rules.len() + 1).max(2);
    s.push_str(&format!(
        "set -e; {TC} qdisc add dev {dev} root handle 1: prio bands {bands} priomap{}",
        " 0".repeat(16)
    ));
    for (i, (ip, f)) in rules.iter().enumerate() {
        let class = i + 2;
        s.push_str(&format!(
            "; {TC} qdisc add dev {dev} parent 1:{class} handle {class}0: netem {}",
            f.netem_args()
        ));
        s.push_str(&format!(
            "; {TC} filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dst {ip}/32 flowid 1:{class}"
        ));
    }
    Ok(s)
}

/// Change the lab's faults with `change`, push the result to every running node, and record
/// it in the run directory. Returns the faults now in force.
pub async fn update(
    run_dir: &Path,
    nodes: &[&Node],
    change: impl FnOnce(&mut NetFaults) -> Result<()>,
) -> Result<NetFaults> {
    let mut faults = NetFaults::load(run_dir)?;
    change(&mut faults)?;
    let addr = |name: &str| nodes.iter().find(|n| n.name() == name).map(|n| n.ip());
    for f in faults.list() {
        for n in [&f.from, &f.to] {
            if addr(n).is_none() {
                return Err(Error::NoSuchNode(n.clone()));
            }
        }
    }
    faults.save(run_dir)?;
    let jobs = nodes.iter().map(|n| {
        let script = faults
            .egress(n.name(), &addr)
            .and_then(|rules| tc_script(LAB_DEV, &rules));
        async move {
            if !n.is_running().await {
                return Ok(());
            }
            n.succeed(&script?).await.map(|_| ())
        }
    });
    for r in futures::future::join_all(jobs).await {
        r?;
    }
    Ok(faults)
}

impl crate::Lab {
    fn node_refs(&self) -> Vec<&Node> {
        self.nodes().iter().collect()
    }

    /// Partition the lab network between two sets of nodes (both directions).
    pub async fn net_partition(&self, a: &[&str], b: &[&str]) -> Result<NetFaults> {
        update(self.run_dir(), &self.node_refs(), |f| {
            f.partition(a, b);
            Ok(())
        })
        .await
    }

    /// One-way partition: packets from `from` no longer reach `to`; `to`'s still reach `from`.
    pub async fn net_cut(&self, from: &str, to: &[&str]) -> Result<NetFaults> {
        update(self.run_dir(), &self.node_refs(), |f| {
            f.cut(from, to);
            Ok(())
        })
        .await
    }

    /// Delay (and jitter) every packet between `a` and `b`, each direction.
    pub async fn net_delay(
        &self,
        a: &str,
        b: &str,
        delay: Duration,
        jitter: Option<Duration>,
    ) -> Result<NetFaults> {
        let shape = LinkFault {
            delay: Some(delay),
            jitter,
            ..LinkFault::default()
        };
        self.net_shape(a, b, shape).await
    }

    /// Any mix of delay, jitter, loss, duplication and rate between `a` and `b`.
    pub async fn net_shape(&self, a: &str, b: &str, shape: LinkFault) -> Result<NetFaults> {
        update(self.run_dir(), &self.node_refs(), |f| f.shape(a, b, shape)).await
    }

    /// Clear every network fault.
    pub async fn net_heal(&self) -> Result<NetFaults> {
        update(self.run_dir(), &self.node_refs(), |f| {
            f.heal();
            Ok(())
        })
        .await
    }

    /// The faults in force.
    pub fn net_faults(&self) -> Result<NetFaults> {
        NetFaults::load(self.run_dir())
    }
}

/// Parse `100ms`, `1.5s`, `250us` or a bare number of milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "ms"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| Error::Lab(format!("{s:?} is not a duration (e.g. 100ms)")))?;
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        _ => return Err(Error::Lab(format!("{s:?}: unit must be us, ms or s"))),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(Error::Lab(format!("{s:?} is not a duration")));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse `20%` or `20` as a percentage.
pub fn parse_percent(s: &str) -> Result<f64> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| Error::Lab(format!("{s:?} is not a percentage")))?;
    if !(0.0..=100.0).contains(&v) {
        return Err(Error::Lab(format!("{s:?} is not between 0 and 100%")));
    }
    Ok(v)
}

/// Split `node01 | node02,node03` (as one or several words) into the two sides.
pub fn parse_sides(words: &[String]) -> Result<(Vec<String>, Vec<String>)> {
    let joined = words.join(" ");
    let (a, b) = joined
        .split_once('|')
        .ok_or_else(|| Error::Lab(format!("{joined:?}: expected `A[,B…] | C[,D…]`")))?;
    let side = |s: &str| -> Vec<String> {
        s.split([',', ' '])
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (side(a), side(b));
    if a.is_empty() || b.is_empty() {
        return Err(Error::Lab(format!("{joined:?}: both sides need a node")));
    }
    if let Some(n) = a.iter().find(|n| b.contains(n)) {
        return Err(Error::Lab(format!("{n} is on both sides")));
    }
    Ok((a, b))
}

mod opt_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_micros() as f64 / 1000.0)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let v = Option::<f64>::deserialize(d)?;
        Ok(v.filter(|x| x.is_finite() && *x >= 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 100, n)
    }

    #[test]
    fn partition_drops_both_ways_and_cut_one_way() {
        let mut f = NetFaults::default();
        f.partition(&["node01"], &["node02", "node03"]);
        assert!(f.get("node01", "node02").drop && f.get("node02", "node01").drop);
        assert!(f.get("node03", "node01").drop);
        assert!(!f.get("node02", "node03").drop);
        f.heal();
        f.cut("node01", &["node02"]);
        assert!(f.get("node01", "node02").drop);
        assert!(!f.get("node02", "node01").drop);
        assert_eq!(f.list().len(), 1);
    }

    #[test]
    fn shape_keeps_other_fields_and_applies_both_ways() {
        let mut f = NetFaults::default();
        let d = LinkFault {
            delay: Some(Duration::from_millis(100)),
            ..Default::default()
        };
        f.shape("a", "b", d).unwrap();
        let l = LinkFault {
            loss_pct: Some(20.0),
            ..Default::default()
        };
        f.shape("b", "a", l).unwrap();
        for (x, y) in [("a", "b"), ("b", "a")] {
            assert_eq!(f.get(x, y).netem_args(), "delay 100ms loss 20%");
        }
        assert!(
            f.shape(
                "a",
                "b",
                LinkFault {
                    loss_pct: Some(120.0),
                    ..Default::default()
                }
            )
            .is_err()
        );
        assert!(
            f.shape(
                "a",
                "b",
                LinkFault {
                    jitter: Some(Duration::from_millis(5)),
                    ..Default::default()
                }
            )
            .is_err()
        );
    }

    #[test]
    fn netem_args_cover_every_knob() {
        let f = LinkFault {
            drop: false,
            delay: Some(Duration::from_millis(100)),
            jitter: Some(Duration::from_millis(10)),
            loss_pct: Some(1.5),
            duplicate_pct: Some(2.0),
            rate_kbit: Some(512),
        };
        assert_eq!(
            f.netem_args(),
            "delay 100ms 10ms loss 1.5% duplicate 2% rate 512kbit"
        );
        let p = LinkFault { drop: true, ..f };
        assert_eq!(p.netem_args(), "loss 100%");
    }

    #[test]
    fn tc_script_one_band_per_peer() {
        let drop = LinkFault {
            drop: true,
            ..Default::default()
        };
        let s = tc_script("eth0", &[(ip(12), drop), (ip(13), drop)]).unwrap();
        assert!(s.starts_with("/sbin/tc qdisc del dev eth0 root 2>/dev/null; set -e; /sbin/tc qdisc add dev eth0 root handle 1: prio bands 3 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0;"), "{s}");
        assert!(s.contains("parent 1:2 handle 20: netem loss 100%"));
        assert!(s.contains("match ip dst 192.168.100.12/32 flowid 1:2"));
        assert!(s.contains("match ip dst 192.168.100.13/32 flowid 1:3"));
        assert_eq!(
            tc_script("eth0", &[]).unwrap(),
            "/sbin/tc qdisc del dev eth0 root 2>/dev/null; true"
        );
        let many: Vec<_> = (0..16).map(|i| (ip(i), drop)).collect();
        assert!(tc_script("eth0", &many).is_err());
    }

    #[test]
    fn parses_durations_percents_and_sides() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3h").is_err());
        assert_eq!(parse_percent("20%").unwrap(), 20.0);
        assert!(parse_percent("101").is_err());
        let w = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let (a, b) = parse_sides(&w("node01 | node02,node03")).unwrap();
        assert_eq!(
            (a, b),
            (
                vec!["node01".to_string()],
                vec!["node02".to_string(), "node03".into()]
            )
        );
        let (a, b) = parse_sides(&["node01|node02".to_string()]).unwrap();
        assert_eq!((a.len(), b.len()), (1, 1));
        assert!(parse_sides(&w("node01 node02")).is_err());
        assert!(parse_sides(&w("node01 | node01")).is_err());
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut f = NetFaults::default();
        f.shape(
            "a",
            "b",
            LinkFault {
                delay: Some(Duration::from_millis(100)),
                jitter: Some(Duration::from_millis(7)),
                ..Default::default()
            },
        )
        .unwrap();
        f.cut("c", &["a"]);
        let t = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<NetFaults>(&t).unwrap(), f);
    }
}
