//! The cluster service: etcd (Debian's build, 3.4 on bookworm) with mutual TLS on the peer and
//! client ports and a plain-HTTP metrics listener. Builds etcd's argv from a node's
//! `cluster-config.json`, the `etcdctl` command lines the validation runs, and parses their output.

use serde::Deserialize;

use super::config::NodeConfig;
use super::error::ClusterError;
use super::topology::GuestLayout;
use crate::mutants::{self, Mutant};

/// Raft timing. etcd's defaults (100 ms / 1000 ms) assume a real machine; three TCG guests on two
/// host cores stall long enough to trigger needless elections, so the lab default is slower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    pub heartbeat_ms: u32,
    pub election_ms: u32,
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self {
            heartbeat_ms: 300,
            election_ms: 3000,
        }
    }
}

impl RaftTiming {
    /// The default at the host's pace ([`vm_lab::pace`]): a slower host stalls its TCG guests
    /// longer still, so the heartbeat and the election timeout grow by the same factor (etcd
    /// takes an election timeout of at most 50 s).
    pub fn for_host() -> Self {
        Self::default().scaled(vm_lab::pace::host_scale())
    }

    /// Both intervals × `factor` (at least 1), the election timeout capped at etcd's 50,000 ms
    /// and the heartbeat kept at a tenth of it.
    pub fn scaled(self, factor: f64) -> Self {
        let factor = factor.max(1.0);
        let election_ms = ((f64::from(self.election_ms) * factor) as u32).min(50_000);
        let heartbeat_ms = ((f64::from(self.heartbeat_ms) * factor) as u32).min(election_ms / 10);
        Self {
            heartbeat_ms,
            election_ms,
        }
    }
}

/// etcd's command line for one node, derived only from its config (so what runs on the node is
/// exactly what `cluster-config.json` says).
pub fn etcd_args(cfg: &NodeConfig, timing: RaftTiming) -> Vec<String> {
    let p = cfg.ports;
    let initial_cluster = cfg
        .peers
        .iter()
        .map(|peer| format!("{}=https://{}:{}", peer.id, peer.hostname, p.peer))
        .collect::<Vec<_>>()
        .join(",");
    let state = if cfg.bootstrap { "new" } else { "existing" };
    let args = vec![
        format!("--name={}", cfg.node_id),
        format!("--data-dir={}", cfg.data_dir),
        format!("--initial-cluster={initial_cluster}"),
        format!("--initial-cluster-state={state}"),
        format!("--initial-cluster-token={}", cfg.cluster_name),
        format!(
            "--initial-advertise-peer-urls=https://{}:{}",
            cfg.hostname, p.peer
        ),
        format!("--listen-peer-urls=https://{}:{}", cfg.address, p.peer),
        format!(
            "--listen-client-urls=https://{}:{},https://127.0.0.1:{}",
            cfg.address, p.client, p.client
        ),
        format!(
            "--advertise-client-urls=https://{}:{}",
            cfg.hostname, p.client
        ),
        format!(
            "--listen-metrics-urls=http://{}:{},http://127.0.0.1:{}",
            cfg.address, p.metrics, p.metrics
        ),
        "--client-cert-auth=true".into(),
        format!("--trusted-ca-file={}", cfg.tls.ca_file),
        format!("--cert-file={}", cfg.tls.cert_file),
        format!("--key-file={}", cfg.tls.key_file),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-trusted-ca-file={}", cfg.tls.ca_file),
        format!("--peer-cert-file={}", cfg.tls.cert_file),
        format!("--peer-key-file={}", cfg.tls.key_file),
        format!("--heartbeat-interval={}", timing.heartbeat_ms),
        format!("--election-timeout={}", timing.election_ms),
        "--logger=zap".into(),
    ];
    if mutants::active(Mutant::EtcdWithoutTls) {
        return without_tls(args);
    }
    if mutants::active(Mutant::ClientsWithoutCertificates) {
        return without_client_ca(args);
    }
    args
}

/// The command line with no client CA and no `--client-cert-auth` (the mutant
/// [`Mutant::ClientsWithoutCertificates`]). Both must go: etcd asks clients for a certificate
/// whenever it has a trusted CA file, whatever `--client-cert-auth` says.
fn without_client_ca(args: Vec<String>) -> Vec<String> {
    args.into_iter()
        .filter(|a| {
            let flag = a.split('=').next();
            flag != Some("--client-cert-auth") && flag != Some("--trusted-ca-file")
        })
        .collect()
}

/// The same command line over plain HTTP, every certificate flag dropped (the mutant
/// [`Mutant::EtcdWithoutTls`]): a cluster that forms and serves, unencrypted and open to anyone.
fn without_tls(args: Vec<String>) -> Vec<String> {
    const TLS_FLAGS: [&str; 8] = [
        "--client-cert-auth",
        "--trusted-ca-file",
        "--cert-file",
        "--key-file",
        "--peer-client-cert-auth",
        "--peer-trusted-ca-file",
        "--peer-cert-file",
        "--peer-key-file",
    ];
    args.into_iter()
        .filter(|a| !TLS_FLAGS.iter().any(|f| a.split('=').next() == Some(*f)))
        .map(|a| a.replace("https://", "http://"))
        .collect()
}

/// An `etcdctl` command line run on a node against its own member, over TLS with the node's
/// certificate (the client port refuses clients without one).
pub fn etcdctl(cfg: &NodeConfig, layout: &GuestLayout, args: &str) -> String {
    format!(
        "ETCDCTL_API=3 {bin}/etcdctl --endpoints=https://{host}:{port} --cacert={ca} --cert={cert} \
         --key={key} --dial-timeout=5s --command-timeout=15s {args}",
        bin = layout.bin_dir(),
        host = cfg.hostname,
        port = cfg.ports.client,
        ca = cfg.tls.ca_file,
        cert = cfg.tls.cert_file,
        key = cfg.tls.key_file,
    )
}

// Quoting is the shell transport's; commands built here use it too.
pub use super::transport::sh_quote;

/// One member in `etcdctl member list -w json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Member {
    #[serde(rename = "ID")]
    pub id: u64,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    #[serde(rename = "clientURLs", default)]
    pub client_urls: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct MemberList {
    #[serde(default)]
    members: Vec<Member>,
}

pub fn parse_member_list(json: &str) -> Result<Vec<Member>, ClusterError> {
    serde_json::from_str::<MemberList>(json.trim())
        .map(|m| m.members)
        .map_err(|e| ClusterError::Validation(format!("member list is not etcd JSON: {e}")))
}

/// One endpoint in `etcdctl endpoint status -w json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EndpointStatus {
    #[serde(rename = "Endpoint")]
    pub endpoint: String,
    #[serde(rename = "Status")]
    pub status: StatusBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StatusBody {
    pub header: StatusHeader,
    #[serde(default)]
    pub leader: u64,
    #[serde(rename = "raftTerm", default)]
    pub raft_term: u64,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StatusHeader {
    pub member_id: u64,
    #[serde(default)]
    pub cluster_id: u64,
}

pub fn parse_endpoint_status(json: &str) -> Result<Vec<EndpointStatus>, ClusterError> {
    serde_json::from_str(json.trim())
        .map_err(|e| ClusterError::Validation(format!("endpoint status is not etcd JSON: {e}")))
}

/// `etcdctl endpoint health` prints one line per endpoint:
/// `https://node01:2379 is healthy: successfully committed proposal: took = 9.1ms` or
/// `https://node02:2379 is unhealthy: failed to commit proposal: …`.
pub fn parse_health(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .filter_map(|l| {
            let (ep, rest) = l.trim().split_once(' ')?;
            if rest.starts_with("is healthy") {
                Some((ep.to_owned(), true))
            } else if rest.starts_with("is unhealthy") {
                Some((ep.to_owned(), false))
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cluster::config::node_config;
    use crate::cluster::topology::ClusterSpec;

    fn cfg() -> NodeConfig {
        let spec = ClusterSpec::seed_t036();
        node_config(&spec, &GuestLayout::default(), &spec.nodes[0])
    }

    #[test]
    fn args_use_hostnames_for_peers_and_mtls_everywhere() {
        let a = etcd_args(&cfg(), RaftTiming::default());
        let has = |s: &str| a.iter().any(|x| x == s);
        assert!(has(
            "--initial-cluster=node01=https://node01:2380,node02=https://node02:2380,node03=https://node03:2380"
        ));
        assert!(has("--initial-cluster-state=new"));
        assert!(has("--listen-peer-urls=https://192.168.100.11:2380"));
        assert!(has("--client-cert-auth=true"));
        assert!(has("--peer-client-cert-auth=true"));
        assert!(has("--peer-cert-file=/cluster/secrets/node01.crt"));
        assert!(has("--key-file=/cluster/secrets/node01.key"));
        assert!(has(
            "--listen-metrics-urls=http://192.168.100.11:2381,http://127.0.0.1:2381"
        ));
    }

    #[tokio::test]
    async fn the_tls_mutants_change_only_their_flags_and_only_in_their_run() {
        let plain = crate::mutants::run_as(Some(Mutant::EtcdWithoutTls), None, async {
            etcd_args(&cfg(), RaftTiming::default())
        })
        .await;
        assert!(plain.iter().all(|a| !a.contains("https://")), "{plain:?}");
        assert!(
            plain
                .iter()
                .all(|a| !a.contains("-file=") && !a.contains("cert-auth")),
            "{plain:?}"
        );
        assert!(plain.contains(&"--listen-peer-urls=http://192.168.100.11:2380".to_owned()));
        assert!(plain.contains(&"--name=node01".to_owned()));
        let real = etcd_args(&cfg(), RaftTiming::default());
        assert!(real.contains(&"--client-cert-auth=true".to_owned()));
        let open = crate::mutants::run_as(Some(Mutant::ClientsWithoutCertificates), None, async {
            etcd_args(&cfg(), RaftTiming::default())
        })
        .await;
        let dropped: Vec<&String> = real.iter().filter(|a| !open.contains(a)).collect();
        assert_eq!(
            dropped,
            [
                "--client-cert-auth=true",
                "--trusted-ca-file=/cluster/secrets/ca.crt"
            ],
            "{open:?}"
        );
    }

    #[test]
    fn etcdctl_talks_tls_to_its_own_member_by_hostname() {
        let c = etcdctl(&cfg(), &GuestLayout::default(), "endpoint health");
        assert!(c.contains("--endpoints=https://node01:2379"), "{c}");
        assert!(c.contains("--cert=/cluster/secrets/node01.crt"), "{c}");
        assert!(c.ends_with(" endpoint health"), "{c}");
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("--name=node01"), "--name=node01");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }

    // Shapes as printed by etcdctl 3.4.23.
    #[test]
    fn parses_member_list_and_status() {
        let ml = r#"{"header":{"cluster_id":17237436991929493444,"member_id":9372538179322589801,"raft_term":2},"members":[{"ID":9372538179322589801,"name":"node01","peerURLs":["https://node01:2380"],"clientURLs":["https://node01:2379"]},{"ID":10501334649042878790,"peerURLs":["https://node02:2380"]}]}"#;
        let m = parse_member_list(ml).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].name, "node01");
        assert!(m[1].name.is_empty() && m[1].client_urls.is_empty());
        let st = r#"[{"Endpoint":"https://node01:2379","Status":{"header":{"cluster_id":17237436991929493444,"member_id":9372538179322589801,"revision":1,"raft_term":2},"version":"3.4.23","dbSize":20480,"leader":9372538179322589801,"raftIndex":8,"raftTerm":2,"raftAppliedIndex":8,"dbSizeInUse":16384}}]"#;
        let s = parse_endpoint_status(st).unwrap();
        assert_eq!(s[0].status.leader, 9372538179322589801);
        assert_eq!(s[0].status.header.member_id, s[0].status.leader);
        assert!(parse_endpoint_status("Error: context deadline exceeded").is_err());
    }

    #[test]
    fn parses_health_lines() {
        let h = parse_health(
            "https://node01:2379 is healthy: successfully committed proposal: took = 9.1ms\n\
             https://node02:2379 is unhealthy: failed to commit proposal: context deadline exceeded\n\
             Error: unhealthy cluster\n",
        );
        assert_eq!(
            h,
            vec![
                ("https://node01:2379".to_owned(), true),
                ("https://node02:2379".to_owned(), false)
            ]
        );
    }

    #[test]
    fn raft_timing_grows_with_the_host_pace_within_etcds_bounds() {
        let t = RaftTiming::default().scaled(2.0);
        assert_eq!((t.heartbeat_ms, t.election_ms), (600, 6000));
        assert_eq!(RaftTiming::default().scaled(0.5), RaftTiming::default());
        let t = RaftTiming::default().scaled(20.0);
        assert_eq!((t.heartbeat_ms, t.election_ms), (5000, 50_000));
    }
}
