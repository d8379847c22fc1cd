//! S3–S6: certificates, node configs, provisioning, validation; reads and writes.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use cucumber::{given, then, when};
use provision_harness::cluster::ClusterError;
use provision_harness::cluster::config::{HOSTS_FILE, SECRETS_DIR, parse_hosts};
use provision_harness::cluster::provision::BOOT_MARKER;
use provision_harness::cluster::tls::{self, TlsFileNames};

use crate::params::LabNode;
use crate::world::{LabWorld, QUORUM_TIMEOUT};

fn fail(msg: String) -> ClusterError {
    ClusterError::Validation(msg)
}

#[when("the provisioner generates the cluster CA and the node certificates")]
async fn gen_tls(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.bm()?.make_certificates()
}

#[when("the provisioner writes every node's cluster-config.json and hosts mapping")]
async fn write_configs(w: &mut LabWorld) -> Result<(), ClusterError> {
    let stage = w.stage;
    w.bm()?.stage_configs(stage)
}

#[then(
    "every node's secrets are ca.crt and nodeNN.crt with mode 0644 and nodeNN.key with mode 0400"
)]
async fn secrets_named(w: &mut LabWorld) -> Result<(), ClusterError> {
    // S3's output as it will be installed; S4 stages it, so stage now if not yet done.
    let stage = w.stage;
    let b = w.bm()?;
    if b.staged.is_none() {
        b.stage_configs(stage)?;
    }
    let staged = b.staged()?;
    for n in &staged.spec.nodes {
        let dir = staged.node_dir(&n.name).join(SECRETS_DIR);
        let names = TlsFileNames::for_node(&n.name);
        for (f, mode) in [
            (&names.ca, 0o644),
            (&names.cert, 0o644),
            (&names.key, 0o400),
        ] {
            let p = dir.join(f);
            let m = std::fs::metadata(&p)
                .map_err(|e| fail(format!("{}: {e}", p.display())))?
                .permissions()
                .mode()
                & 0o777;
            if m != mode {
                return Err(fail(format!(
                    "{} has mode {m:o}, not {mode:o}",
                    p.display()
                )));
            }
        }
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|e| fail(format!("{}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        found.sort();
        let mut want = vec![names.ca, names.cert, names.key];
        want.sort();
        if found != want {
            return Err(fail(format!(
                "{}: secrets are {found:?}, expected {want:?}",
                n.name
            )));
        }
    }
    Ok(())
}

#[then(
    "every node certificate is signed by the cluster CA and names the node's hostname and address"
)]
async fn certs_verify(w: &mut LabWorld) -> Result<(), ClusterError> {
    let staged = w.b()?.staged()?;
    for n in &staged.spec.nodes {
        tls::verify_node_secrets(
            &staged.node_dir(&n.name).join(SECRETS_DIR),
            n,
            &TlsFileNames::for_node(&n.name),
        )?;
    }
    Ok(())
}

#[then("every node's cluster-config.json names its peers by hostname with bootstrap on")]
async fn configs_peers(w: &mut LabWorld) -> Result<(), ClusterError> {
    let b = w.b()?;
    let hostnames: Vec<&str> = b
        .cluster
        .nodes
        .iter()
        .map(|n| n.hostname.as_str())
        .collect();
    if b.configs.len() != b.cluster.nodes.len() {
        return Err(fail(format!(
            "{} configs checked, not {}",
            b.configs.len(),
            hostnames.len()
        )));
    }
    for c in &b.configs {
        let peers: Vec<&str> = c.peers.iter().map(|p| p.hostname.as_str()).collect();
        if peers != hostnames || !c.bootstrap {
            return Err(fail(format!(
                "{}: peers {peers:?}, bootstrap {}; expected {hostnames:?} and true",
                c.node_id, c.bootstrap
            )));
        }
    }
    Ok(())
}

#[then(expr = "every node's hosts mapping resolves all {int} hostnames")]
async fn hosts_resolve(w: &mut LabWorld, count: usize) -> Result<(), ClusterError> {
    let b = w.b()?;
    let staged = b.staged()?;
    for n in &b.cluster.nodes {
        let p = staged.node_dir(&n.name).join(HOSTS_FILE);
        let map = parse_hosts(
            &std::fs::read_to_string(&p).map_err(|e| fail(format!("{}: {e}", p.display())))?,
        );
        let resolved = b
            .cluster
            .nodes
            .iter()
            .filter(|peer| map.get(&peer.hostname) == Some(&peer.address))
            .count();
        if resolved != count {
            return Err(fail(format!(
                "{}: {resolved} of {count} hostnames resolve",
                n.name
            )));
        }
    }
    Ok(())
}

#[given(expr = "the user's provisioning command is {string}")]
async fn user_cmd(w: &mut LabWorld, cmd: String) {
    w.external_cmd = Some(cmd);
}

#[when("the nodes are provisioned over SSH and restarted from netboot with their disks")]
async fn provision(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.provision().await
}

#[when("the provisioning is attempted")]
async fn provision_attempt(w: &mut LabWorld) {
    let r = w.provision().await;
    w.record(r);
}

async fn first_boot_says(
    w: &LabWorld,
    node: Option<&str>,
    needle: &str,
) -> Result<(), ClusterError> {
    let b = w.b()?;
    for n in b.lab.nodes() {
        if node.is_some_and(|x| x != n.name()) {
            continue;
        }
        b.wait_service_started(n.name()).await?;
        let log = n.serial_log();
        let this_boot = log.rsplit("VMLAB-INIT").next().unwrap_or("");
        if !this_boot.contains(needle) || !this_boot.contains(BOOT_MARKER) {
            return Err(fail(format!(
                "{}: this boot's console lacks {needle:?}: {}",
                n.name(),
                n.serial_tail(8)
            )));
        }
    }
    Ok(())
}

#[then("every node's first boot started etcd from its disk")]
async fn first_boot(w: &mut LabWorld) -> Result<(), ClusterError> {
    first_boot_says(w, None, "first boot, bootstrapping cluster").await
}

#[then("every node's first boot rejoined with the data on its disk")]
async fn rejoined_all(w: &mut LabWorld) -> Result<(), ClusterError> {
    first_boot_says(w, None, "rejoins with the data on its disk").await
}

#[then(expr = "{node}'s first boot rejoined with the data on its disk")]
async fn rejoined_one(w: &mut LabWorld, node: LabNode) -> Result<(), ClusterError> {
    first_boot_says(w, Some(&node), "rejoins with the data on its disk").await
}

#[then(expr = "the cluster has {int} started members and one leader")]
async fn quorum(w: &mut LabWorld, n: usize) -> Result<(), ClusterError> {
    // Every member must answer and agree, not only a majority.
    let q = w.bm()?.wait_for_quorum(&[], n, n, QUORUM_TIMEOUT).await?;
    w.quorum = Some(q);
    Ok(())
}

#[then(
    "every member speaks only TLS on its client and peer ports and asks clients for a certificate"
)]
async fn tls_only(w: &mut LabWorld) -> Result<(), ClusterError> {
    let b = w.b()?;
    let checks = b
        .members()
        .into_iter()
        .map(|m| async move { m.check_tls_only(&b.layout, QUORUM_TIMEOUT).await });
    for r in futures::future::join_all(checks).await {
        r?;
    }
    if b.members().len() != b.cluster.nodes.len() {
        return Err(fail(format!(
            "{} provisioned members, not {}",
            b.members().len(),
            b.cluster.nodes.len()
        )));
    }
    Ok(())
}

#[then("every member reports healthy")]
async fn healthy(w: &mut LabWorld) -> Result<(), ClusterError> {
    let b = w.b()?;
    for m in b.members() {
        let h = m.health(&b.layout).await?;
        let healthy = h.iter().filter(|(_, ok)| *ok).count();
        if h.len() != b.cluster.nodes.len() || healthy != h.len() {
            return Err(fail(format!("{}: health {h:?}", m.cfg.node_id)));
        }
    }
    Ok(())
}

#[then("every node's Prometheus metrics endpoint reports a leader")]
async fn metrics(w: &mut LabWorld) -> Result<(), ClusterError> {
    let b = w.b()?;
    for m in b.members() {
        let v = m.metrics_has_leader().await?;
        if v != 1.0 {
            return Err(fail(format!(
                "{}: etcd_server_has_leader {v}",
                m.cfg.node_id
            )));
        }
    }
    Ok(())
}

#[when(expr = "{node} writes {string} = {string}")]
async fn write(
    w: &mut LabWorld,
    node: LabNode,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    put(w, &node, &key, &value).await
}

/// Writes like a real etcd client does: a put that lands while the survivors are still electing a
/// leader (the one just killed or cut off may have been it) times out and is retried. A put of the
/// same value is idempotent, so retrying it is safe; a cluster without quorum still fails the step.
pub async fn put(w: &LabWorld, node: &str, key: &str, value: &str) -> Result<(), ClusterError> {
    let b = w.b()?;
    provision_harness::cluster::quorum::wait_until(
        &format!("{node} writing {key}"),
        Duration::from_secs(60),
        || async { b.member(node)?.put(&b.layout, key, value).await },
    )
    .await
}

#[then(expr = "{node} reads {string} = {string}")]
async fn read(
    w: &mut LabWorld,
    node: LabNode,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    get_eq(w, &node, &key, &value).await
}

#[then(expr = "the old leader reads {string} = {string}")]
async fn old_leader_reads(
    w: &mut LabWorld,
    key: String,
    value: String,
) -> Result<(), ClusterError> {
    let node = w.resolve("the old leader")?;
    get_eq(w, &node, &key, &value).await
}

pub async fn get_eq(w: &LabWorld, node: &str, key: &str, value: &str) -> Result<(), ClusterError> {
    let b = w.b()?;
    // A member that just rejoined may still be catching up: give it a little time.
    provision_harness::cluster::quorum::wait_until(
        &format!("{node} reading {key}"),
        Duration::from_secs(60),
        || async {
            match b.member(node)?.get(&b.layout, key).await? {
                Some(v) if v == value => Ok(()),
                other => Err(fail(format!("{node} reads {key} = {other:?}"))),
            }
        },
    )
    .await
}

#[when(expr = "{node} deletes {string}")]
async fn delete(w: &mut LabWorld, node: LabNode, key: String) -> Result<(), ClusterError> {
    let b = w.b()?;
    let n = b.member(&node)?.delete(&b.layout, &key).await?;
    if n != 1 {
        return Err(fail(format!("{node}: del {key} deleted {n} keys, not 1")));
    }
    Ok(())
}

#[then(expr = "{node} finds no {string}")]
async fn absent(w: &mut LabWorld, node: LabNode, key: String) -> Result<(), ClusterError> {
    let b = w.b()?;
    match b.member(&node)?.get(&b.layout, &key).await? {
        None => Ok(()),
        Some(v) => Err(fail(format!("{node} still reads {key} = {v:?}"))),
    }
}

#[when("all three nodes are restarted from netboot with their disks")]
async fn restart_all(w: &mut LabWorld) -> Result<(), ClusterError> {
    w.b()?.restart_all().await
}
