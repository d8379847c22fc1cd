//! The `@stack` steps: the deployer's rollout against a lab-backed fake, the cluster on the VMs it
//! made, day-2 operations through the PVE API, and the mistakes only a real guest shows.

use std::time::Duration;

use cucumber::{given, then, when};
use provision_harness::cluster::ClusterError;
use provision_harness::cluster::quorum::wait_until;

use crate::params::LabNode;
use crate::world::{QUORUM_TIMEOUT, StackWorld};

fn fail(msg: String) -> ClusterError {
    ClusterError::Validation(msg)
}

#[given("the PhotonCloud manifests for the lab-backed site")]
async fn manifests(w: &mut StackWorld) -> Result<(), ClusterError> {
    w.start_target().await
}

#[given(expr = "{node}'s manifest carries no SSH keys")]
async fn no_keys(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    let m = manifest_of(w, &node)?;
    m.ssh_keys.clear();
    Ok(())
}

#[given(expr = "{node}'s manifest asks for the address {string} with the gateway {string}")]
async fn other_address(
    w: &mut StackWorld,
    node: LabNode,
    address: String,
    gateway: String,
) -> Result<(), ClusterError> {
    let m = manifest_of(w, &node)?;
    m.ip_address = Some(address);
    m.gateway = Some(gateway);
    Ok(())
}

fn manifest_of<'a>(
    w: &'a mut StackWorld,
    node: &str,
) -> Result<&'a mut provision_harness::manifest::ForProvider, ClusterError> {
    w.tm()?
        .rollout
        .manifests
        .vms
        .iter_mut()
        .map(|m| &mut m.vm.spec.for_provider)
        .find(|fp| fp.name == node)
        .ok_or_else(|| fail(format!("no manifest for {node}")))
}

#[when("the deployer rolls them out")]
async fn roll_out(w: &mut StackWorld) -> Result<(), ClusterError> {
    w.roll_out().await
}

#[then(
    "every VM is running with the address its manifest asked for, as its guest agent reports it"
)]
async fn running_at_asked(w: &mut StackWorld) -> Result<(), ClusterError> {
    let d = w.deployed()?;
    if !d.all_ready() {
        return Err(fail(format!("not every VM is ready: {d:#?}")));
    }
    let pve = w.pve()?;
    let t = w.t()?;
    for m in &t.rollout.manifests.vms {
        let fp = &m.vm.spec.for_provider;
        let v = d
            .vms
            .iter()
            .find(|v| v.name == fp.name)
            .ok_or_else(|| fail(format!("the deployer reports no {}", fp.name)))?;
        let vmid = v
            .vmid
            .ok_or_else(|| fail(format!("{} has no VMID", v.name)))?;
        let cur = pve
            .vm_current(&v.node, vmid)
            .await
            .map_err(|e| fail(format!("{}: status/current: {e}", v.name)))?;
        if cur.status != "running" {
            return Err(fail(format!("{} is {}, not running", v.name, cur.status)));
        }
        let agent = pve
            .agent_interfaces(&v.node, vmid)
            .await
            .map_err(|e| fail(format!("{}: agent: {e}", v.name)))?
            .primary_ipv4();
        let asked = fp
            .ip_address
            .as_deref()
            .map(|a| a.split('/').next().unwrap_or(a).to_owned());
        if agent.is_none() || agent != asked || v.ip != agent {
            return Err(fail(format!(
                "{}: asked for {asked:?}, the guest agent reports {agent:?}, the deployer {:?}",
                v.name, v.ip
            )));
        }
    }
    Ok(())
}

#[when("the cluster provisioner takes over on the deployer's VMs")]
async fn provisioner(w: &mut StackWorld) -> Result<(), ClusterError> {
    w.stage_cluster().await?;
    w.cm()?.provision_over_ssh().await
}

#[when("the cluster provisioner is attempted on the deployer's VMs")]
async fn provisioner_attempt(w: &mut StackWorld) {
    let r = match w.stage_cluster().await {
        Ok(()) => match w.cm() {
            Ok(c) => c.provision_over_ssh().await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    w.last_error = r.err().map(|e| e.to_string());
}

#[then(expr = "the cluster step fails naming {node} and {string}")]
async fn step_fails(w: &mut StackWorld, node: LabNode, cause: String) -> Result<(), ClusterError> {
    let e = w
        .last_error
        .as_deref()
        .ok_or_else(|| fail("the cluster step succeeded".into()))?;
    if !(e.contains(&node.0) && e.contains(&cause)) {
        return Err(fail(format!(
            "the error names not {node} and {cause:?}: {e}"
        )));
    }
    Ok(())
}

#[given("the cluster formed on the deployer's VMs")]
async fn formed(w: &mut StackWorld) -> Result<(), ClusterError> {
    w.formed_cluster().await
}

#[then(expr = "the cluster has {int} started members and one leader")]
async fn quorum(w: &mut StackWorld, n: usize) -> Result<(), ClusterError> {
    // Every member must answer and agree, not only a majority.
    let q = w.cm()?.wait_for_quorum(&[], n, n, QUORUM_TIMEOUT).await?;
    w.quorum = Some(q);
    Ok(())
}

#[then(
    "every member speaks only TLS on its client and peer ports and asks clients for a certificate"
)]
async fn tls_only(w: &mut StackWorld) -> Result<(), ClusterError> {
    let c = w.c()?;
    let members = c.members();
    if members.len() != c.cluster.nodes.len() {
        return Err(fail(format!(
            "{} provisioned members, not {}",
            members.len(),
            c.cluster.nodes.len()
        )));
    }
    let checks = members
        .into_iter()
        .map(|m| async move { m.check_tls_only(&c.layout, QUORUM_TIMEOUT).await });
    for r in futures::future::join_all(checks).await {
        r?;
    }
    Ok(())
}

#[then("every member reports healthy")]
async fn healthy(w: &mut StackWorld) -> Result<(), ClusterError> {
    let c = w.c()?;
    for m in c.members() {
        let h = m.health(&c.layout).await?;
        let ok = h.iter().filter(|(_, ok)| *ok).count();
        if h.len() != c.cluster.nodes.len() || ok != h.len() {
            return Err(fail(format!("{}: health {h:?}", m.cfg.node_id)));
        }
    }
    Ok(())
}

#[when(expr = "{node} writes {string} = {string}")]
async fn write(
    w: &mut StackWorld,
    node: LabNode,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    let c = w.c()?;
    // A put that lands mid-election times out and is retried, as a real client does; a put of
    // the same value is idempotent.
    wait_until(
        &format!("{node} writing {key}"),
        Duration::from_secs(60),
        || async { c.member(&node)?.put(&c.layout, &key, &value).await },
    )
    .await
}

#[when(expr = "a running member writes {string} = {string}")]
async fn survivor_writes(
    w: &mut StackWorld,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    let old = w.resolve("the old leader")?;
    let node = w
        .c()?
        .vms
        .iter()
        .map(|v| v.name.clone())
        .find(|n| *n != old)
        .ok_or_else(|| fail("no running member".into()))?;
    write(w, LabNode(node), key, value).await
}

async fn reads(w: &StackWorld, node: &str, key: &str, value: &str) -> Result<(), ClusterError> {
    let c = w.c()?;
    wait_until(
        &format!("{node} reading {key}"),
        Duration::from_secs(60),
        || async {
            let got = c.member(node)?.get(&c.layout, key).await?;
            if got.as_deref() == Some(value) {
                Ok(())
            } else {
                Err(fail(format!("{node} reads {key} = {got:?}, not {value:?}")))
            }
        },
    )
    .await
}

#[then(expr = "{node} reads {string} = {string}")]
async fn read(
    w: &mut StackWorld,
    node: LabNode,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    reads(w, &node, &key, &value).await
}

#[then(expr = "the old leader reads {string} = {string}")]
async fn old_leader_reads(
    w: &mut StackWorld,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    let node = w.resolve("the old leader")?;
    reads(w, &node, &key, &value).await
}

#[when("every VM is rebooted through the PVE API")]
async fn reboot_all(w: &mut StackWorld) -> Result<(), ClusterError> {
    w.c()?.reboot_all().await
}

#[when("the leader's VM is stopped through the PVE API")]
async fn stop_leader(w: &mut StackWorld) -> Result<(), ClusterError> {
    let leader = w
        .quorum
        .as_ref()
        .map(|q| q.leader.clone())
        .ok_or_else(|| fail("no leader was recorded".into()))?;
    w.c()?.stop(&leader).await?;
    w.old_leader = Some(leader);
    Ok(())
}

#[then("the other two elect a new leader")]
async fn new_leader(w: &mut StackWorld) -> Result<(), ClusterError> {
    let old = w.resolve("the old leader")?;
    let via: Vec<String> = w
        .c()?
        .vms
        .iter()
        .map(|v| v.name.clone())
        .filter(|n| *n != old)
        .collect();
    let via: Vec<&str> = via.iter().map(String::as_str).collect();
    // Right after the stop the survivors still name the old leader until their election
    // timeout passes: wait for the election, not the first answer.
    let c = w.c()?;
    let members: Vec<_> = c
        .members()
        .into_iter()
        .filter(|m| via.contains(&m.cfg.node_id.as_str()))
        .collect();
    let q = wait_until("a new leader", QUORUM_TIMEOUT, || async {
        let q = provision_harness::cluster::quorum::wait_for_quorum(
            &members,
            &c.layout,
            3,
            2,
            QUORUM_TIMEOUT,
        )
        .await?;
        if q.leader == old {
            return Err(fail(format!("{old} is still the leader: {q:?}")));
        }
        Ok(q)
    })
    .await?;
    w.quorum = Some(q);
    Ok(())
}

#[when("the old leader's VM is started through the PVE API")]
async fn start_old_leader(w: &mut StackWorld) -> Result<(), ClusterError> {
    let old = w.resolve("the old leader")?;
    w.c()?.start(&old).await
}

#[when(expr = "{node}'s VM is destroyed through the PVE API")]
async fn destroy(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    let pve = w.pve()?;
    let vm = w.c()?.vm(&node)?.clone();
    let wait = provision_harness::pve::tasks::TaskWait {
        poll: Duration::from_millis(200),
        timeout: vm_lab::pace::scaled(Duration::from_secs(120)),
    };
    let api = |e: provision_harness::pve::PveError| fail(format!("{node}: {e}"));
    let upid = pve.stop_vm(&vm.node, vm.vmid).await.map_err(api)?;
    pve.await_task(&upid, wait).await.map_err(api)?;
    let upid = pve.destroy_vm(&vm.node, vm.vmid).await.map_err(api)?;
    pve.await_task(&upid, wait).await.map_err(api)?;
    w.old_leader = None;
    Ok(())
}

#[then(expr = "the other two keep a leader without {node}")]
async fn others_keep_leader(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    let via: Vec<String> = w
        .c()?
        .vms
        .iter()
        .map(|v| v.name.clone())
        .filter(|n| *n != node.0)
        .collect();
    let via: Vec<&str> = via.iter().map(String::as_str).collect();
    let q = w.cm()?.wait_for_quorum(&via, 3, 2, QUORUM_TIMEOUT).await?;
    if q.leader == node.0 {
        return Err(fail(format!("{node} is still the leader: {q:?}")));
    }
    Ok(())
}

#[when("the deployer rolls them out again")]
async fn roll_out_again(w: &mut StackWorld) -> Result<(), ClusterError> {
    w.roll_out().await
}

#[then(expr = "{node} is a new VM with an empty disk, reached at its old address")]
async fn new_vm(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    use provision_harness::cluster::transport::NodeShell as _;
    let vm = w
        .stack_vms()
        .await?
        .into_iter()
        .find(|v| v.name == node.0)
        .ok_or_else(|| fail(format!("the deployer reports no {node}")))?;
    // PVE hands out the lowest free VMID, so the new VM may well have the old one's number:
    // what tells it is new is its disk, which the provisioner's files are not on.
    let c = w.cm()?;
    c.replace_vm(vm)?;
    c.check_ssh().await?;
    let out = c
        .shell(&node)?
        .run(
            "if [ -e /data/cluster ]; then echo provisioned; else echo empty; fi",
            Duration::from_secs(60),
        )
        .await?
        .check(&node, "look at the disk")?;
    if out.stdout.trim() != "empty" {
        return Err(fail(format!(
            "{node}'s disk still holds the cluster's files: not a new VM"
        )));
    }
    Ok(())
}

#[when(expr = "the cluster provisioner replaces {node}'s member")]
async fn replace_member(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    w.cm()?.replace_member(&node).await
}

#[given("every manifest asks for an address from DHCP")]
async fn dhcp(w: &mut StackWorld) -> Result<(), ClusterError> {
    for m in &mut w.tm()?.rollout.manifests.vms {
        m.vm.spec.for_provider.ip_address = None;
        m.vm.spec.for_provider.gateway = None;
    }
    Ok(())
}

#[then(
    expr = "every VM is running with a distinct address from {word}'s DHCP pool, as its guest agent reports it"
)]
async fn running_with_lease(w: &mut StackWorld, bridge: String) -> Result<(), ClusterError> {
    let d = w.deployed()?;
    if !d.all_ready() {
        return Err(fail(format!("not every VM is ready: {d:#?}")));
    }
    let t = w.t()?;
    let b = t
        .rollout
        .scenario
        .sites
        .iter()
        .flat_map(|s| &s.nodes)
        .flat_map(|n| &n.bridges)
        .find(|b| b.name == bridge)
        .ok_or_else(|| fail(format!("the scenario has no bridge {bridge}")))?;
    let pool = |a: &Option<String>| {
        a.as_deref()
            .and_then(|s| s.parse::<std::net::Ipv4Addr>().ok())
    };
    let (Some(lo), Some(hi)) = (pool(&b.dhcp_start), pool(&b.dhcp_end)) else {
        return Err(fail(format!("{bridge} has no DHCP pool")));
    };
    let pve = w.pve()?;
    let mut seen = std::collections::BTreeSet::new();
    for v in &d.vms {
        let vmid = v
            .vmid
            .ok_or_else(|| fail(format!("{} has no VMID", v.name)))?;
        let agent = pve
            .agent_interfaces(&v.node, vmid)
            .await
            .map_err(|e| fail(format!("{}: agent: {e}", v.name)))?
            .primary_ipv4();
        let ip: std::net::Ipv4Addr = agent
            .as_deref()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| fail(format!("{}: the agent reports no IPv4 address", v.name)))?;
        if !(lo..=hi).contains(&ip) || v.ip != agent || !seen.insert(ip) {
            return Err(fail(format!(
                "{}: the agent reports {ip}, the deployer {:?}; pool {lo}–{hi}, seen {seen:?}",
                v.name, v.ip
            )));
        }
    }
    Ok(())
}

#[given(expr = "only {node}'s manifest")]
async fn only(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    let vms = &mut w.tm()?.rollout.manifests.vms;
    vms.retain(|m| m.vm.spec.for_provider.name == node.0);
    if vms.len() != 1 {
        return Err(fail(format!("no manifest for {node}")));
    }
    Ok(())
}

#[given(expr = "the deployer has the bug {string}")]
async fn bug(w: &mut StackWorld, name: String) -> Result<(), ClusterError> {
    let m = provision_harness::mutants::Mutant::by_name(&name)
        .ok_or_else(|| fail(format!("no deployer bug named {name:?}")))?;
    w.mutant = Some(m);
    Ok(())
}

#[given(expr = "the deployer waits at most {int} s for a VM's address")]
async fn ip_wait(w: &mut StackWorld, secs: u64) -> Result<(), ClusterError> {
    // A scenario's seconds are the tuned machine's: at the host's pace, so a guest whose agent
    // starts late on a slow machine is not read as a guest without an address.
    w.tm()?.options.deploy.pipeline.ip_wait = vm_lab::pace::scaled(Duration::from_secs(secs));
    Ok(())
}

#[then(expr = "the deployer reports {node} running without an address, because {string}")]
async fn no_address(
    w: &mut StackWorld,
    node: LabNode,
    because: String,
) -> Result<(), ClusterError> {
    let v = w
        .deployed()?
        .vms
        .iter()
        .find(|v| v.name == node.0)
        .ok_or_else(|| fail(format!("the deployer reports no {node}")))?;
    let cond = v
        .conditions
        .iter()
        .find(|c| c.kind == "IPAssigned")
        .ok_or_else(|| fail(format!("{node} has no IPAssigned condition: {v:?}")))?;
    if v.state.as_deref() != Some("running") || v.ip.is_some() || cond.status != "False" {
        return Err(fail(format!(
            "{node}: expected running without an address: {v:?}"
        )));
    }
    if !cond.message.contains(&because) {
        return Err(fail(format!(
            "{node}'s IPAssigned says {:?}, not {because:?}",
            cond.message
        )));
    }
    Ok(())
}

/// How long a guest's console may take to say what a scenario expects of it.
const CONSOLE_WAIT: std::time::Duration = std::time::Duration::from_secs(90);

#[then(expr = "{node}'s console says {string}")]
async fn console_says(w: &mut StackWorld, node: LabNode, text: String) -> Result<(), ClusterError> {
    let log = w.console_of(&node).await?;
    // The guest may still be on its way to the line when the deployer gave up waiting for its
    // address (a loaded machine boots slowly under TCG): what it says within a while counts.
    let deadline = std::time::Instant::now() + vm_lab::pace::scaled(CONSOLE_WAIT);
    let mut body;
    loop {
        body = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        if body.contains(&text) || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    if !body.contains(&text) {
        return Err(fail(format!(
            "{node}'s console does not say {text:?} within {} s; it ends:\n{}",
            CONSOLE_WAIT.as_secs(),
            body.lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )));
    }
    Ok(())
}

#[when(expr = "{node} deletes {string}")]
async fn delete(w: &mut StackWorld, node: LabNode, key: String) -> Result<(), ClusterError> {
    let c = w.c()?;
    let n = c.member(&node)?.delete(&c.layout, &key).await?;
    if n != 1 {
        return Err(fail(format!("{node} deleted {n} keys named {key}, not 1")));
    }
    Ok(())
}

#[then(expr = "{node} finds no {string}")]
async fn absent(w: &mut StackWorld, node: LabNode, key: String) -> Result<(), ClusterError> {
    let c = w.c()?;
    wait_until(
        &format!("{node} not finding {key}"),
        Duration::from_secs(60),
        || async {
            match c.member(&node)?.get(&c.layout, &key).await? {
                None => Ok(()),
                Some(v) => Err(fail(format!("{node} still reads {key} = {v:?}"))),
            }
        },
    )
    .await
}

#[when(expr = "the deployer rolls out only {node}, then all of them")]
async fn roll_out_one_then_all(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    let all = w.tm()?.rollout.manifests.vms.clone();
    w.tm()?
        .rollout
        .manifests
        .vms
        .retain(|m| m.vm.spec.for_provider.name == node.0);
    let first = w.roll_out().await;
    w.tm()?.rollout.manifests.vms = all;
    first?;
    w.roll_out().await
}
