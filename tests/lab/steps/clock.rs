//! Clock faults (vm-lab's clock offsets) against the cluster's mutual TLS.

use cucumber::{then, when};
use provision_harness::cluster::ClusterError;
use provision_harness::cluster::etcd;

use crate::params::LabNode;
use crate::steps::faults::lab;
use crate::world::LabWorld;

const DAY: i64 = 86_400;

fn fail(msg: String) -> ClusterError {
    ClusterError::Validation(msg)
}

#[when(expr = "{node}'s clock is set {int} days ahead")]
async fn ahead(w: &mut LabWorld, node: LabNode, days: i64) -> Result<(), ClusterError> {
    w.b()?
        .lab
        .set_clock_offset(&node, days * DAY)
        .await
        .map_err(lab)
}

#[when(expr = "{node}'s clock is set {int} days back")]
async fn back(w: &mut LabWorld, node: LabNode, days: i64) -> Result<(), ClusterError> {
    w.b()?
        .lab
        .set_clock_offset(&node, -days * DAY)
        .await
        .map_err(lab)
}

#[when("every node's clock is set back to the host's")]
async fn reset(w: &mut LabWorld) -> Result<(), ClusterError> {
    let l = &w.b()?.lab;
    for n in l.nodes() {
        l.set_clock_offset(n.name(), 0).await.map_err(lab)?;
    }
    Ok(())
}

#[then(expr = "{node}'s clock reads {int} days ahead of the host's")]
async fn reads_ahead(w: &mut LabWorld, node: LabNode, days: i64) -> Result<(), ClusterError> {
    let n = w.b()?.lab.node(&node).map_err(lab)?;
    let got = vm_lab::clock::measure_offset(n).await.map_err(lab)?;
    // Whole seconds and one agent round trip apart.
    if (got - days * DAY).abs() > 10 {
        return Err(fail(format!("{node}'s clock is {got} s off the host's")));
    }
    Ok(())
}

/// `etcdctl get` on `from`, with `from`'s own certificates, against `to`'s client
/// port: a new TLS session both ways checked against `from`'s and `to`'s clocks.
async fn tls_session(
    w: &LabWorld,
    from: &str,
    to: &str,
) -> Result<vm_lab::ExecOutput, ClusterError> {
    let b = w.b()?;
    let cfg = b.member(from)?.cfg;
    let target = b.member(to)?.cfg;
    // --debug: gRPC then logs why the handshake failed, which etcdctl's own error hides.
    let cmd = etcd::etcdctl(cfg, &b.layout, "--debug get clock/probe").replace(
        &format!("https://{}:", cfg.hostname),
        &format!("https://{}:", target.hostname),
    );
    b.lab.node(from).map_err(lab)?.exec(&cmd).await.map_err(lab)
}

#[then(expr = "a new TLS session from {node} to {node}'s etcd fails: the certificate {string}")]
async fn session_fails(
    w: &mut LabWorld,
    from: LabNode,
    to: LabNode,
    why: String,
) -> Result<(), ClusterError> {
    let out = tls_session(w, &from, &to).await?;
    let text = format!("{}\n{}", out.stdout, out.stderr);
    // Go's x509 says which side of the validity window the verifier's clock is on.
    let side = match why.as_str() {
        "is not yet valid" => "is before",
        "has expired" => "is after",
        other => return Err(fail(format!("unknown certificate state {other:?}"))),
    };
    if out.success()
        || !text.contains("certificate has expired or is not yet valid")
        || !text.contains(side)
    {
        return Err(fail(format!(
            "{from} -> {to}: expected a certificate that {why} (exit {}):\n{text}",
            out.code
        )));
    }
    Ok(())
}

#[then(expr = "a new TLS session from {node} to {node}'s etcd succeeds")]
async fn session_ok(w: &mut LabWorld, from: LabNode, to: LabNode) -> Result<(), ClusterError> {
    let out = tls_session(w, &from, &to).await?;
    if !out.success() {
        return Err(fail(format!(
            "{from} -> {to}: exit {}:\n{}{}",
            out.code, out.stdout, out.stderr
        )));
    }
    Ok(())
}
