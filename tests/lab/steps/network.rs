//! Per-link network faults (vm-lab's netfault) on the cluster, each proven by a measurement
//! inside the guests.

use std::time::Duration;

use cucumber::{then, when};
use provision_harness::cluster::ClusterError;
use vm_lab::Node;

use crate::params::LabNode;
use crate::steps::faults::{lab, others};
use crate::world::LabWorld;

fn fail(msg: String) -> ClusterError {
    ClusterError::Validation(msg)
}

fn node<'a>(w: &'a LabWorld, name: &str) -> Result<&'a Node, ClusterError> {
    w.b()?.lab.node(name).map_err(lab)
}

fn names(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Each side is a comma-separated list of nodes (`node03 | node01,node02`).
#[when(expr = "the lab network is partitioned: {word} | {word}")]
async fn partition(w: &mut LabWorld, a: String, b: String) -> Result<(), ClusterError> {
    w.b()?
        .lab
        .net_partition(&names(&a), &names(&b))
        .await
        .map_err(lab)
        .map(|_| ())
}

#[when(expr = "every packet between {node} and {node} is delayed by {int} ms")]
async fn delay(w: &mut LabWorld, a: LabNode, b: LabNode, ms: u64) -> Result<(), ClusterError> {
    w.b()?
        .lab
        .net_delay(&a, &b, Duration::from_millis(ms), None)
        .await
        .map_err(lab)
        .map(|_| ())
}

#[when("the lab network heals")]
async fn heal(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.b()?.lab.net_heal().await.map_err(lab).map(|_| ())
}

/// The shortest round trip of three pings, in ms, as the guest's ping reports it.
fn min_rtt(out: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.split_once("min/avg/max = ").map(|(_, v)| v))
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
}

#[then(expr = "a ping from {node} to {node} takes at least {int} ms")]
async fn ping_at_least(
    w: &mut LabWorld,
    a: LabNode,
    b: LabNode,
    ms: u64,
) -> Result<(), ClusterError> {
    let to = node(w, &b)?.ip();
    let out = node(w, &a)?
        .succeed(&format!("ping -c3 -W5 {to}"))
        .await
        .map_err(lab)?;
    match min_rtt(&out) {
        Some(rtt) if rtt >= ms as f64 => Ok(()),
        _ => Err(fail(format!(
            "{a} -> {b}: round trips shorter than {ms} ms:\n{out}"
        ))),
    }
}

#[then(expr = "{node} cannot reach {node} over the lab network")]
async fn cannot_reach(w: &mut LabWorld, a: LabNode, b: LabNode) -> Result<(), ClusterError> {
    let to = node(w, &b)?.ip();
    node(w, &a)?
        .fail(&format!("ping -c2 -W1 {to}"))
        .await
        .map_err(lab)
        .map(|_| ())
}

#[then(expr = "{node}, cut off from the majority, cannot serve a read of {string}")]
async fn minority_read(w: &mut LabWorld, n: LabNode, key: String) -> Result<(), ClusterError> {
    let b = w.b()?;
    // A linearizable read needs the leader's read index: a member without quorum refuses.
    match b.member(&n)?.get(&b.layout, &key).await {
        Err(_) => Ok(()),
        Ok(v) => Err(fail(format!("{n} served {key} = {v:?} without a quorum"))),
    }
}

#[when("the leader's packets stop reaching the other nodes")]
async fn cut_leader(w: &mut LabWorld) -> Result<(), ClusterError> {
    let q = w
        .bm()?
        .wait_for_quorum(&[], 3, 3, crate::world::QUORUM_TIMEOUT)
        .await?;
    w.old_leader = Some(q.leader.clone());
    let rest = others(w)?;
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    w.b()?
        .lab
        .net_cut(&q.leader, &rest)
        .await
        .map_err(lab)
        .map(|_| ())
}

/// The guest kernel's count of ICMP echo requests received (`/proc/net/snmp`).
async fn in_echos(n: &Node) -> Result<u64, ClusterError> {
    let raw = n.read_file("/proc/net/snmp").await.map_err(lab)?;
    let text = String::from_utf8_lossy(&raw);
    let icmp: Vec<&str> = text.lines().filter(|l| l.starts_with("Icmp:")).collect();
    let (names, vals) = match icmp.as_slice() {
        [names, vals, ..] => (names, vals),
        _ => return Err(fail(format!("{}: no Icmp counters", n.name()))),
    };
    names
        .split_whitespace()
        .zip(vals.split_whitespace())
        .find(|(k, _)| *k == "InEchos")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| fail(format!("{}: no InEchos counter", n.name())))
}

#[then("the old leader still hears the other nodes, and they do not hear it")]
async fn one_way(w: &mut LabWorld) -> Result<(), ClusterError> {
    let old = w.resolve("the old leader")?;
    let leader = node(w, &old)?;
    for other in others(w)? {
        let o = node(w, &other)?;
        let (heard_by_leader, heard_by_other) = (in_echos(leader).await?, in_echos(o).await?);
        // Both pings fail: the leader's replies and requests never arrive.
        o.fail(&format!("ping -c3 -W1 {}", leader.ip()))
            .await
            .map_err(lab)?;
        leader
            .fail(&format!("ping -c3 -W1 {}", o.ip()))
            .await
            .map_err(lab)?;
        let (l2, o2) = (in_echos(leader).await?, in_echos(o).await?);
        if l2 < heard_by_leader + 3 {
            return Err(fail(format!(
                "{old} received {} of {other}'s 3 echo requests",
                l2 - heard_by_leader
            )));
        }
        if o2 != heard_by_other {
            return Err(fail(format!(
                "{other} received {} echo requests from {old}",
                o2 - heard_by_other
            )));
        }
    }
    Ok(())
}
