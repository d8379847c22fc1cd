//! The seed's misconfigurations: set up in visible steps, expected to stop the bring-up early.

use cucumber::{given, then, when};
use provision_harness::cluster::ClusterError;
use provision_harness::cluster::config::HostsMapping;

use crate::params::LabNode;
use crate::world::LabWorld;

#[given(
    "the certificates will be written under the seed's original names ca-cert.pem, cert.pem and key.pem"
)]
async fn seed_names(w: &mut LabWorld) {
    w.stage.seed_original_cert_names = true;
}

#[given("the hosts mappings will list only localhost")]
async fn no_hosts(w: &mut LabWorld) {
    w.stage.hosts = HostsMapping::LocalhostOnly;
}

#[given(expr = "{node} holds no authorized SSH key")]
async fn no_key(w: &mut LabWorld, node: LabNode) -> Result<(), ClusterError> {
    // The image bakes the key in for every node; take it away on this one through the guest
    // agent (not SSH), as if the node had been booted from an image without it.
    let n = w
        .b()?
        .lab
        .node(&node)
        .map_err(|e| ClusterError::Lab(e.to_string()))?;
    n.succeed("rm -f /root/.ssh/authorized_keys")
        .await
        .map_err(|e| ClusterError::Lab(e.to_string()))?;
    Ok(())
}

#[when("the provisioner prepares every node's configuration")]
async fn prepare(w: &mut LabWorld) {
    let stage = w.stage;
    let r = match w.bm() {
        Ok(b) => b.stage_configs(stage),
        Err(e) => Err(e),
    };
    w.record(r);
}

#[when("the provisioner checks SSH access to every node")]
async fn check_ssh(w: &mut LabWorld) {
    let r = match w.bm() {
        Ok(b) => b.check_ssh().await,
        Err(e) => Err(e),
    };
    w.record(r);
}

#[then(expr = "bring-up stops with an error naming {string} and {string}")]
async fn error_names(w: &mut LabWorld, a: String, b: String) -> Result<(), ClusterError> {
    match &w.last_error {
        None => Err(ClusterError::Validation(
            "the step succeeded; an error was expected".into(),
        )),
        Some(e) if e.contains(&a) && e.contains(&b) => Ok(()),
        Some(e) => Err(ClusterError::Validation(format!(
            "the error does not name {a:?} and {b:?}: {e}"
        ))),
    }
}

#[then(expr = "the error lists the misnamed files {string}")]
async fn error_lists(w: &mut LabWorld, files: String) -> Result<(), ClusterError> {
    match &w.last_error {
        Some(e) if e.contains(&files) => Ok(()),
        other => Err(ClusterError::Validation(format!(
            "the error does not list {files:?}: {other:?}"
        ))),
    }
}

#[then("no node's disk was touched")]
async fn disks_untouched(w: &mut LabWorld) -> Result<(), ClusterError> {
    let b = w.b()?;
    for n in b.lab.nodes() {
        // Through the guest agent: SSH may be what is broken on this node.
        let out = n
            .exec(
                "findfs LABEL=cluster; \
                 [ \"$(dd if=/dev/vda bs=4096 count=1 2>/dev/null | tr -d '\\000' | wc -c)\" -eq 0 ] \
                 || echo 'first 4 KiB of /dev/vda are not blank'",
            )
            .await
            .map_err(|e| ClusterError::Lab(e.to_string()))?;
        if !out.stdout.trim().is_empty() {
            return Err(ClusterError::Validation(format!(
                "{}: the disk was written: {}",
                n.name(),
                out.stdout.trim()
            )));
        }
    }
    Ok(())
}
