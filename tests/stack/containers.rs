//! The `@stack` steps of containers: a member of the rollout made a `kind: ProxmoxContainer`,
//! the container template uploaded through the PVE API, every guest checked through its own API
//! family (`qemu`: the guest agent; `lxc`: `interfaces`), and a container's restart.

use cucumber::{given, then, when};
use provision_harness::cluster::ClusterError;
use provision_harness::deployer::guest::GuestKind;
use provision_harness::deployer::pve::guests::ct_primary_ipv4;
use provision_harness::rehearse_stack::{SITE, containers};

use crate::params::LabNode;
use crate::world::StackWorld;

fn fail(msg: String) -> ClusterError {
    ClusterError::Validation(msg)
}

#[given(expr = "the PhotonCloud manifests for the lab-backed site, {node} as a container")]
async fn with_container(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    w.start_target_with(|rollout| {
        containers::with_container(rollout, &node).map_err(|e| ClusterError::Spec(e.to_string()))
    })
    .await
}

#[given("the team uploads the container template through the PVE API")]
async fn upload(w: &mut StackWorld) -> Result<(), ClusterError> {
    let volid = w.upload_container_template().await?;
    // What the deployer will look for: the volume is listed on the storage, as a template.
    let t = w.t()?;
    let node = &t.rollout.manifests.vms[0].vm.spec.for_provider.node;
    let listed: Vec<serde_json::Value> = w
        .pve()?
        .get(
            &format!(
                "/nodes/{node}/storage/{}/content",
                containers::TEMPLATE_STORAGE
            ),
            &[("content", "vztmpl".to_owned())],
        )
        .await
        .map_err(|e| fail(format!("the storage's content: {e}")))?;
    if !listed.iter().any(|v| v["volid"] == volid.as_str()) {
        return Err(fail(format!("{volid} is not listed: {listed:?}")));
    }
    Ok(())
}

#[then("every guest is running with the address its manifest asked for, as PVE reports it")]
async fn guests_at_asked(w: &mut StackWorld) -> Result<(), ClusterError> {
    let d = w.deployed()?;
    if !d.all_ready() {
        return Err(fail(format!("not every guest is ready: {d:#?}")));
    }
    let pve = w.pve()?;
    for m in &w.t()?.rollout.manifests.vms {
        let fp = &m.vm.spec.for_provider;
        let kind = GuestKind::of_manifest(&m.vm.kind)
            .ok_or_else(|| fail(format!("{}: no guest kind {}", fp.name, m.vm.kind)))?;
        let v = d
            .vms
            .iter()
            .find(|v| v.name == fp.name)
            .ok_or_else(|| fail(format!("the deployer reports no {}", fp.name)))?;
        let vmid = v
            .vmid
            .ok_or_else(|| fail(format!("{} has no VMID", v.name)))?;
        let api = |e: provision_harness::pve::PveError| fail(format!("{}: {e}", v.name));
        let cur = pve.guest_current(kind, &v.node, vmid).await.map_err(api)?;
        if cur.status != "running" {
            return Err(fail(format!("{} is {}, not running", v.name, cur.status)));
        }
        let reported = match kind {
            GuestKind::Vm => pve
                .agent_interfaces(&v.node, vmid)
                .await
                .map_err(api)?
                .primary_ipv4(),
            GuestKind::Container => {
                ct_primary_ipv4(&pve.ct_interfaces(&v.node, vmid).await.map_err(api)?)
            }
        };
        let asked = fp
            .ip_address
            .as_deref()
            .map(|a| a.split('/').next().unwrap_or(a).to_owned());
        if reported.is_none() || reported != asked || v.ip != reported {
            return Err(fail(format!(
                "{} ({}): asked for {asked:?}, PVE reports {reported:?}, the deployer {:?}",
                v.name,
                kind.family(),
                v.ip
            )));
        }
    }
    Ok(())
}

#[then(expr = "{node} runs as a container")]
async fn runs_as_container(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    let v = w
        .deployed()?
        .vms
        .iter()
        .find(|v| v.name == node.0)
        .ok_or_else(|| fail(format!("the deployer reports no {node}")))?;
    let vmid = v.vmid.ok_or_else(|| fail(format!("{node} has no VMID")))?;
    let pve = w.pve()?;
    // PVE lists it among the node's containers, not its VMs.
    let cts = pve
        .node_guests(GuestKind::Container, &v.node)
        .await
        .map_err(|e| fail(format!("{node}: {e}")))?;
    let vms = pve
        .node_guests(GuestKind::Vm, &v.node)
        .await
        .map_err(|e| fail(format!("{node}: {e}")))?;
    if !cts.iter().any(|g| g.vmid == Some(u64::from(vmid)))
        || vms.iter().any(|g| g.vmid == Some(u64::from(vmid)))
    {
        return Err(fail(format!(
            "{node} (VMID {vmid}) is not one of {}'s containers: CTs {cts:?}, VMs {vms:?}",
            v.node
        )));
    }
    Ok(())
}

#[when(expr = "{node}'s container is rebooted through the PVE API")]
async fn reboot_ct(w: &mut StackWorld, node: LabNode) -> Result<(), ClusterError> {
    if !w.is_container(&node)? {
        return Err(fail(format!("{node} is not a container")));
    }
    w.c()?.reboot(&node).await
}

#[then(expr = "the PVE API restarted {node} with {int} container reboot(s)")]
async fn rebooted_through_api(
    w: &mut StackWorld,
    node: LabNode,
    times: usize,
) -> Result<(), ClusterError> {
    let vm = w.c()?.vm(&node)?;
    let path = format!("/nodes/{}/lxc/{}/status/reboot", vm.node, vm.vmid);
    let journal = w
        .t()?
        .fake
        .site(SITE)
        .ok_or_else(|| fail(format!("the fake has no site {SITE}")))?
        .control()
        .journal()
        .await
        .map_err(|e| fail(format!("the fake's journal: {e}")))?;
    let reboots = journal
        .iter()
        .filter(|e| e.method == "POST" && e.path == path && e.status == 200)
        .count();
    if reboots != times {
        return Err(fail(format!(
            "{reboots} answered POST {path} in the journal, not {times}"
        )));
    }
    Ok(())
}
