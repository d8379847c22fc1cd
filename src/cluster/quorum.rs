//! S6: is the cluster what the seed's acceptance asks for? Members, one leader agreed by every
//! member that answers, health, CRUD, metrics. Each check runs `etcdctl`/`wget` on a node
//! through a [`NodeShell`] with the node's own client certificate.

use std::time::{Duration, Instant};

use super::config::NodeConfig;
use super::error::ClusterError;
use super::etcd::{self, sh_quote};
use super::topology::GuestLayout;
use super::transport::{NodeShell, last_lines};

const CMD_TIMEOUT: Duration = Duration::from_secs(40);
/// The port probe of [`Node::check_tls_only`] runs four clients one after another whose own
/// bounds add up to about 30 s when the ports stay silent (etcdctl's dial and command timeouts,
/// two `timeout 5 wget`), and each start of a Go binary on a slow guest adds seconds: under
/// load, two 3-node TCG labs on 2 cores, the probe missed [`CMD_TIMEOUT`] (twice in one test
/// run). The answer it waits for is the probe's own verdict, so it gets room for all of them.
const PORT_PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// What the members that answered agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// Names of the members in the member list (started members only).
    pub members: Vec<String>,
    /// The leader's member name.
    pub leader: String,
    pub leader_id: u64,
    pub raft_term: u64,
    /// Endpoints that answered the status request.
    pub answered: Vec<String>,
}

/// A node of the cluster and how to reach it.
pub struct Node<'a, S: NodeShell> {
    pub shell: &'a S,
    pub cfg: &'a NodeConfig,
}

impl<S: NodeShell> Clone for Node<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S: NodeShell> Copy for Node<'_, S> {}

impl<'a, S: NodeShell> Node<'a, S> {
    pub fn new(shell: &'a S, cfg: &'a NodeConfig) -> Self {
        Self { shell, cfg }
    }

    fn name(&self) -> &str {
        &self.cfg.node_id
    }

    async fn etcdctl(
        &self,
        layout: &GuestLayout,
        args: &str,
    ) -> Result<super::transport::CommandOutput, ClusterError> {
        self.shell
            .run(&etcd::etcdctl(self.cfg, layout, args), CMD_TIMEOUT)
            .await
    }

    /// Members and leader as seen through this node. Endpoints that do not answer are left out
    /// of `answered`; every endpoint that answers must name the same leader, which must be a
    /// started member.
    pub async fn quorum(&self, layout: &GuestLayout) -> Result<Quorum, ClusterError> {
        let out = self.etcdctl(layout, "member list -w json").await?;
        let out = out.check(self.name(), "etcdctl member list")?;
        let members = etcd::parse_member_list(&out.stdout)?;
        let started: Vec<_> = members.iter().filter(|m| !m.name.is_empty()).collect();
        let out = self
            .etcdctl(layout, "endpoint status --cluster -w json")
            .await?;
        // A dead member makes etcdctl exit non-zero after printing the others' status.
        let statuses = etcd::parse_endpoint_status(&out.stdout).map_err(|_| {
            ClusterError::Validation(format!(
                "{}: no member answered endpoint status: {}",
                self.name(),
                last_lines(&out.stderr, 3)
            ))
        })?;
        let leaders: Vec<u64> = statuses.iter().map(|s| s.status.leader).collect();
        let Some(&leader_id) = leaders.first() else {
            return Err(ClusterError::Validation(format!(
                "{}: no member answered endpoint status",
                self.name()
            )));
        };
        if leader_id == 0 || leaders.iter().any(|l| *l != leader_id) {
            let seen = statuses
                .iter()
                .map(|s| format!("{} says {:x}", s.endpoint, s.status.leader))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ClusterError::Validation(format!(
                "members do not agree on one leader: {seen}"
            )));
        }
        let leader = started
            .iter()
            .find(|m| m.id == leader_id)
            .map(|m| m.name.clone())
            .ok_or_else(|| {
                ClusterError::Validation(format!(
                    "leader {leader_id:x} is not a started member of the member list"
                ))
            })?;
        Ok(Quorum {
            members: started.iter().map(|m| m.name.clone()).collect(),
            leader,
            leader_id,
            raft_term: statuses
                .iter()
                .map(|s| s.status.raft_term)
                .max()
                .unwrap_or(0),
            answered: statuses.iter().map(|s| s.endpoint.clone()).collect(),
        })
    }

    /// `etcdctl endpoint health --cluster`: each member endpoint and whether it is healthy.
    pub async fn health(&self, layout: &GuestLayout) -> Result<Vec<(String, bool)>, ClusterError> {
        let out = self.etcdctl(layout, "endpoint health --cluster").await?;
        // etcdctl 3.4 prints health lines on stderr for unhealthy endpoints and stdout otherwise.
        let all = format!("{}\n{}", out.stdout, out.stderr);
        let h = etcd::parse_health(&all);
        if h.is_empty() {
            return Err(ClusterError::Validation(format!(
                "{}: endpoint health printed no endpoint: {}",
                self.name(),
                last_lines(&all, 3)
            )));
        }
        Ok(h)
    }

    pub async fn put(
        &self,
        layout: &GuestLayout,
        key: &str,
        value: &str,
    ) -> Result<(), ClusterError> {
        let out = self
            .etcdctl(
                layout,
                &format!("put {} {}", sh_quote(key), sh_quote(value)),
            )
            .await?
            .check(self.name(), &format!("etcdctl put {key}"))?;
        if out.stdout.trim() != "OK" {
            return Err(ClusterError::Validation(format!(
                "{}: put {key} answered {:?}, not OK",
                self.name(),
                out.stdout.trim()
            )));
        }
        Ok(())
    }

    /// The value of `key`, or `None` when it does not exist.
    pub async fn get(
        &self,
        layout: &GuestLayout,
        key: &str,
    ) -> Result<Option<String>, ClusterError> {
        let out = self
            .etcdctl(layout, &format!("get --print-value-only {}", sh_quote(key)))
            .await?
            .check(self.name(), &format!("etcdctl get {key}"))?;
        let v = out.stdout.strip_suffix('\n').unwrap_or(&out.stdout);
        Ok(if out.stdout.is_empty() {
            None
        } else {
            Some(v.to_owned())
        })
    }

    /// Deletes `key`; returns how many keys were deleted.
    pub async fn delete(&self, layout: &GuestLayout, key: &str) -> Result<u64, ClusterError> {
        let out = self
            .etcdctl(layout, &format!("del {}", sh_quote(key)))
            .await?
            .check(self.name(), &format!("etcdctl del {key}"))?;
        out.stdout.trim().parse().map_err(|_| {
            ClusterError::Validation(format!(
                "{}: del {key} answered {:?}, not a count",
                self.name(),
                out.stdout.trim()
            ))
        })
    }

    /// Checks that the member speaks only TLS on its client and peer ports and asks clients for
    /// a certificate: with the node's certificate it answers `endpoint status`; plain HTTP to
    /// either port (`/version`, which both serve) gets no answer, and a TLS client without a
    /// certificate is refused. Waits up to `timeout` for the member to serve (it does once the
    /// cluster has quorum); plain HTTP answered or a client without a certificate served fails
    /// at once, as no wait makes that right.
    pub async fn check_tls_only(
        &self,
        layout: &GuestLayout,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let p = self.cfg.ports;
        // The plain probes run after the member answered over TLS, so a port that is merely
        // not listening yet cannot pass for one that refuses plain HTTP.
        let script = format!(
            "{with_cert} >/dev/null 2>&1 && echo tls-answered\n\
             for p in {client} {peer}; do\n\
             timeout 5 wget -q -O - http://{addr}:$p/version >/dev/null 2>&1 && echo plain-answered $p\n\
             done\n\
             ETCDCTL_API=3 {bin}/etcdctl --endpoints=https://{host}:{client} --cacert={ca} \
             --dial-timeout=5s --command-timeout=10s endpoint status >/dev/null 2>&1 \
             && echo no-cert-answered\n\
             true",
            with_cert = etcd::etcdctl(self.cfg, layout, "endpoint status"),
            client = p.client,
            peer = p.peer,
            addr = self.cfg.address,
            bin = layout.bin_dir(),
            host = self.cfg.hostname,
            ca = sh_quote(&self.cfg.tls.ca_file),
        );
        let timeout = vm_lab::pace::scaled(timeout);
        let start = Instant::now();
        loop {
            let out = self
                .shell
                .run(&script, PORT_PROBE_TIMEOUT)
                .await?
                .check(self.name(), "probe the client and peer ports")?;
            let said = |w: &str| out.stdout.lines().find(|l| l.starts_with(w));
            if let Some(l) = said("plain-answered") {
                let port = l.rsplit(' ').next().unwrap_or("?");
                return Err(ClusterError::Validation(format!(
                    "{}: port {port} answers plain HTTP (GET /version): etcd runs without TLS there",
                    self.name()
                )));
            }
            if said("tls-answered").is_some() {
                if said("no-cert-answered").is_some() {
                    return Err(ClusterError::Validation(format!(
                        "{}: the client port {} serves a TLS client without a certificate",
                        self.name(),
                        p.client
                    )));
                }
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(ClusterError::Validation(format!(
                    "{}: no answer to endpoint status over TLS with the node's certificate within {} s",
                    self.name(),
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Scrapes the node's Prometheus endpoint and returns `etcd_server_has_leader`.
    pub async fn metrics_has_leader(&self) -> Result<f64, ClusterError> {
        let url = format!("http://127.0.0.1:{}/metrics", self.cfg.ports.metrics);
        let out = self
            .shell
            .run(&format!("wget -q -O - {url}"), CMD_TIMEOUT)
            .await?
            .check(self.name(), &format!("GET {url}"))?;
        parse_metric(&out.stdout, "etcd_server_has_leader").ok_or_else(|| {
            ClusterError::Validation(format!(
                "{}: {url} answered without etcd_server_has_leader",
                self.name()
            ))
        })
    }
}

/// The value of an unlabelled Prometheus sample.
pub fn parse_metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Polls `check` until it succeeds or `timeout` passes; the error names the last failure.
pub async fn wait_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    // At the host's pace: a cluster of TCG guests on a slow or shared machine forms later.
    let timeout = vm_lab::pace::scaled(timeout);
    let start = Instant::now();
    loop {
        match check().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() >= timeout => {
                return Err(ClusterError::Validation(format!(
                    "{what}: not reached within {} s; last: {e}",
                    timeout.as_secs()
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

/// The provisioned members: each shell whose node has a config, in the shells' order.
pub fn members<'a, S: NodeShell>(shells: &'a [S], configs: &'a [NodeConfig]) -> Vec<Node<'a, S>> {
    shells
        .iter()
        .filter_map(|s| {
            configs
                .iter()
                .find(|c| c.node_id == s.node())
                .map(|c| Node::new(s, c))
        })
        .collect()
}

/// The provisioned member named `node`.
pub fn member<'a, S: NodeShell>(
    shells: &'a [S],
    configs: &'a [NodeConfig],
    node: &str,
) -> Result<Node<'a, S>, ClusterError> {
    members(shells, configs)
        .into_iter()
        .find(|m| m.cfg.node_id == node)
        .ok_or_else(|| ClusterError::Spec(format!("{node} is not a provisioned member")))
}

/// Waits until, through any of `nodes`, `expected` members are started, at least `answering`
/// of them answer, and all answering members agree on one leader.
pub async fn wait_for_quorum<S: NodeShell>(
    nodes: &[Node<'_, S>],
    layout: &GuestLayout,
    expected: usize,
    answering: usize,
    timeout: Duration,
) -> Result<Quorum, ClusterError> {
    wait_until("quorum", timeout, || async {
        let mut last = ClusterError::Validation("no node to ask".into());
        for n in nodes {
            match n.quorum(layout).await {
                Ok(q) if q.members.len() == expected && q.answered.len() >= answering => {
                    return Ok(q);
                }
                Ok(q) => {
                    last = ClusterError::Validation(format!(
                        "{} started members ({}), {} answered, leader {}",
                        q.members.len(),
                        q.members.join(", "),
                        q.answered.len(),
                        q.leader
                    ));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    })
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use crate::cluster::config::node_config;
    use crate::cluster::topology::ClusterSpec;
    use crate::cluster::transport::CommandOutput;

    /// Answers etcdctl like a node of a 3-member cluster whose members see `leaders`.
    struct Scripted {
        leaders: Vec<u64>,
    }

    const MEMBERS: &str = r#"{"header":{"cluster_id":1,"member_id":11},"members":[
        {"ID":11,"name":"node01","peerURLs":["https://node01:2380"],"clientURLs":["https://node01:2379"]},
        {"ID":12,"name":"node02","peerURLs":["https://node02:2380"],"clientURLs":["https://node02:2379"]},
        {"ID":13,"name":"node03","peerURLs":["https://node03:2380"],"clientURLs":["https://node03:2379"]}]}"#;

    impl NodeShell for Scripted {
        fn node(&self) -> &str {
            "node01"
        }
        async fn run(&self, script: &str, _t: Duration) -> Result<CommandOutput, ClusterError> {
            let stdout = if script.contains("member list") {
                MEMBERS.to_owned()
            } else if script.contains("endpoint status") {
                let eps: Vec<String> = self
                    .leaders
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        format!(
                            r#"{{"Endpoint":"https://node0{n}:2379","Status":{{"header":{{"member_id":{id}}},"leader":{l},"raftTerm":4}}}}"#,
                            n = i + 1,
                            id = 11 + i
                        )
                    })
                    .collect();
                format!("[{}]", eps.join(","))
            } else {
                String::new()
            };
            // Like etcdctl: non-zero when an endpoint did not answer.
            let code = i32::from(script.contains("endpoint status") && self.leaders.len() < 3);
            Ok(CommandOutput {
                code,
                stdout,
                stderr: String::new(),
            })
        }
        async fn write_file(
            &self,
            _: &str,
            _: &[u8],
            _: u32,
            _: Duration,
        ) -> Result<(), ClusterError> {
            Ok(())
        }
    }

    fn cfg() -> NodeConfig {
        let spec = ClusterSpec::seed_t036();
        node_config(&spec, &GuestLayout::default(), &spec.nodes[0])
    }

    #[tokio::test]
    async fn quorum_names_the_leader_all_members_agree_on() {
        let c = cfg();
        let sh = Scripted {
            leaders: vec![12, 12, 12],
        };
        let q = Node::new(&sh, &c)
            .quorum(&GuestLayout::default())
            .await
            .unwrap();
        assert_eq!(q.leader, "node02");
        assert_eq!(q.members, ["node01", "node02", "node03"]);
        assert_eq!(q.answered.len(), 3);
        assert_eq!(q.raft_term, 4);
    }

    #[tokio::test]
    async fn quorum_with_a_member_down_still_reports_the_survivors() {
        let c = cfg();
        let sh = Scripted {
            leaders: vec![11, 11],
        };
        let q = Node::new(&sh, &c)
            .quorum(&GuestLayout::default())
            .await
            .unwrap();
        assert_eq!(q.leader, "node01");
        assert_eq!(q.answered.len(), 2);
    }

    #[tokio::test]
    async fn split_views_of_the_leader_are_an_error() {
        let c = cfg();
        let sh = Scripted {
            leaders: vec![11, 12, 12],
        };
        let e = Node::new(&sh, &c)
            .quorum(&GuestLayout::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not agree on one leader"), "{e}");
        let sh = Scripted {
            leaders: vec![0, 0, 0],
        };
        assert!(
            Node::new(&sh, &c)
                .quorum(&GuestLayout::default())
                .await
                .is_err()
        );
        let sh = Scripted {
            leaders: vec![99, 99, 99],
        };
        let e = Node::new(&sh, &c)
            .quorum(&GuestLayout::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a started member"), "{e}");
    }

    #[tokio::test]
    async fn wait_for_quorum_requires_enough_answers() {
        let c = cfg();
        let sh = Scripted {
            leaders: vec![11, 11],
        };
        let nodes = [Node::new(&sh, &c)];
        let e = wait_for_quorum(
            &nodes,
            &GuestLayout::default(),
            3,
            3,
            Duration::from_millis(1),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("2 answered"), "{e}");
        let q = wait_for_quorum(
            &nodes,
            &GuestLayout::default(),
            3,
            2,
            Duration::from_millis(1),
        )
        .await
        .unwrap();
        assert_eq!(q.leader, "node01");
    }

    #[test]
    fn metric_parser_reads_unlabelled_samples_only() {
        let t = "# HELP etcd_server_has_leader x\n# TYPE etcd_server_has_leader gauge\n\
                 etcd_server_has_leader 1\netcd_server_is_leader 0\n\
                 etcd_server_has_leader_x{a=\"b\"} 3\n";
        assert_eq!(parse_metric(t, "etcd_server_has_leader"), Some(1.0));
        assert_eq!(parse_metric(t, "etcd_server_is_leader"), Some(0.0));
        assert_eq!(parse_metric(t, "nope"), None);
    }

    #[tokio::test]
    async fn wait_until_reports_the_last_failure() {
        let mut n = 0;
        let e = wait_until("thing", Duration::from_millis(1), || {
            n += 1;
            let k = n;
            async move { Err::<(), _>(ClusterError::Validation(format!("try {k}"))) }
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("validation: thing: not reached within 0 s; last:"),
            "{e}"
        );
    }
}
