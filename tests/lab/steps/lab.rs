//! S1 and S2: the lab's VMs, their L2, SSH with the baked-in key.

use std::time::Duration;

use cucumber::{given, then};
use provision_harness::cluster::ClusterError;
use vm_lab::BootMode;

use crate::world::LabWorld;

#[given("the seed's lab of 3 nodes booted by direct kernel netboot")]
async fn lab_direct(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.lab_up(BootMode::Direct).await?;
    let n = w.b()?.lab.nodes().len();
    if n != 3 {
        return Err(ClusterError::Lab(format!("the lab has {n} nodes, not 3")));
    }
    Ok(())
}

#[given("the seed's lab of 3 nodes booted through PXE")]
async fn lab_pxe(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.lab_up(BootMode::Pxe).await
}

#[given("a provisioned 3-node cluster on the seed's lab")]
async fn provisioned(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.provisioned_cluster().await
}

#[then("every node reaches every other node over the lab network")]
async fn full_mesh(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.b()?
        .lab
        .wait_full_mesh(vm_lab::pace::scaled(Duration::from_secs(60)))
        .await
        .map_err(|e| ClusterError::Lab(e.to_string()))
}

#[then("every node booted through iPXE")]
async fn booted_ipxe(w: &mut LabWorld) -> Result<(), ClusterError> {
    for n in w.b()?.lab.nodes() {
        if n.spec().boot != BootMode::Pxe || !n.argv().iter().any(|a| a.contains("bootfile=")) {
            return Err(ClusterError::Lab(format!(
                "{} was not started for PXE",
                n.name()
            )));
        }
        // iPXE hands the kernel `initrd=<file>` from its script; a direct boot does not.
        let cmdline = n
            .succeed("cat /proc/cmdline")
            .await
            .map_err(|e| ClusterError::Lab(e.to_string()))?;
        if !cmdline.contains("initrd=initrd.img") {
            return Err(ClusterError::Lab(format!(
                "{}: the kernel was not started by iPXE: /proc/cmdline is {}",
                n.name(),
                cmdline.trim()
            )));
        }
    }
    Ok(())
}

#[then("every node answers over SSH as itself with the lab's baked-in key")]
async fn ssh_ok(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.bm()?.check_ssh().await
}
