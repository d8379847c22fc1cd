//! Faults injected through the lab: power loss, partition (link down/up), power on again.

use cucumber::{then, when};
use provision_harness::cluster::ClusterError;
use provision_harness::cluster::quorum::wait_until;

use crate::params::LabNode;
use crate::steps::cluster::put;
use crate::world::{LabWorld, QUORUM_TIMEOUT};

pub fn lab(e: vm_lab::Error) -> ClusterError {
    ClusterError::Lab(e.to_string())
}

#[when(expr = "{node} loses power")]
async fn power_loss(w: &mut LabWorld, node: LabNode) -> Result<(), ClusterError> {
    w.b()?
        .lab
        .node(&node)
        .map_err(lab)?
        .kill()
        .await
        .map_err(lab)
}

#[when(expr = "{node} is powered on again from netboot with its disk")]
async fn power_on(w: &mut LabWorld, node: LabNode) -> Result<(), ClusterError> {
    let b = w.b()?;
    let n = b.lab.node(&node).map_err(lab)?;
    n.start().await.map_err(lab)?;
    n.wait_ready().await.map_err(lab)?;
    b.wait_service_started(&node).await
}

#[then(expr = "{node} and {node} still agree on one leader")]
async fn two_agree(w: &mut LabWorld, a: LabNode, b: LabNode) -> Result<(), ClusterError> {
    // Three members in the list, the two survivors answering and agreeing.
    let q = w
        .bm()?
        .wait_for_quorum(&[&a, &b], 3, 2, QUORUM_TIMEOUT)
        .await?;
    if q.leader != a && q.leader != b {
        return Err(ClusterError::Validation(format!(
            "the survivors follow {}, which is down",
            q.leader
        )));
    }
    w.quorum = Some(q);
    Ok(())
}

#[when("the leader's lab network link goes down")]
async fn leader_link_down(w: &mut LabWorld) -> Result<(), ClusterError> {
    let q = w.bm()?.wait_for_quorum(&[], 3, 3, QUORUM_TIMEOUT).await?;
    let leader = q.leader.clone();
    w.b()?
        .lab
        .node(&leader)
        .map_err(lab)?
        .link_down()
        .await
        .map_err(lab)?;
    w.old_leader = Some(leader);
    Ok(())
}

pub fn others(w: &LabWorld) -> Result<Vec<String>, ClusterError> {
    let old = w.resolve("the old leader")?;
    Ok(w.b()?
        .cluster
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .filter(|n| *n != old)
        .collect())
}

#[then("the other two nodes elect a new leader")]
async fn new_leader(w: &mut LabWorld) -> Result<(), ClusterError> {
    let old = w.resolve("the old leader")?;
    let rest = others(w)?;
    let b = w.b()?;
    let members: Vec<_> = b
        .members()
        .into_iter()
        .filter(|m| rest.contains(&m.cfg.node_id))
        .collect();
    let q = wait_until("a new leader", QUORUM_TIMEOUT, || async {
        let mut last = ClusterError::Validation("no answer".into());
        for m in &members {
            match m.quorum(&b.layout).await {
                Ok(q) if q.leader != old && q.answered.len() >= 2 => return Ok(q),
                Ok(q) => {
                    last = ClusterError::Validation(format!(
                        "leader still {} ({} answered)",
                        q.leader,
                        q.answered.len()
                    ))
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    })
    .await?;
    w.quorum = Some(q);
    Ok(())
}

#[when(expr = "a node that is not the old leader writes {string} = {string}")]
async fn other_writes(w: &mut LabWorld, key: String, value: String) -> Result<(), ClusterError> {
    let node = others(w)?
        .into_iter()
        .next()
        .ok_or_else(|| ClusterError::Validation("no other node".into()))?;
    put(w, &node, &key, &value).await
}

#[when("the old leader's lab network link comes back up")]
async fn old_leader_link_up(w: &mut LabWorld) -> Result<(), ClusterError> {
    let old = w.resolve("the old leader")?;
    w.b()?
        .lab
        .node(&old)
        .map_err(lab)?
        .link_up()
        .await
        .map_err(lab)
}
