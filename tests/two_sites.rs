//! Two sites as two containers on a private Docker network made by this test, each at its own
//! address; the deployer's rollout reaches both. Mid-rollout, site-2's container is frozen
//! (`docker pause`: a real fault — its TCP stack still accepts, nothing answers) for a few seconds;
//! the deployer's timeouts, retry and backoff carry its VMs through once it thaws, and every VM
//! exists exactly once on its site. Needs Docker: fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod container_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use container_support::{artifacts, docker};
use fake_proxmox::ControlClient;
use provision_harness::config::{Provider, Site};
use provision_harness::deploy::{DeployOptions, Deployer, Outcome};
use provision_harness::manifest::load_texts;
use provision_harness::pipeline::PipelineOptions;
use provision_harness::pve::tasks::TaskWait;
use provision_harness::pve::tls::parse_fingerprint;
use provision_harness::pve::{Credentials, TlsMode};
use provision_harness::report_html::{self, Recorder, StepOutcome};
use provision_harness::retry::Backoff;

const PAUSE: Duration = Duration::from_secs(4);

/// Removes the test's containers and network however the test ends.
struct Cleanup {
    network: String,
    containers: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", c]);
        }
        let _ = docker(&["network", "rm", &self.network]);
    }
}

struct SiteContainer {
    name: String,
    url: String,
    fingerprint: String,
}

/// Starts one container serving `site` of the fixed scenario on port 8006 of its own address.
fn start_site(cleanup: &mut Cleanup, image: &str, site: &str, scenario: &str) -> SiteContainer {
    let name = format!("{}-{site}", cleanup.network);
    cleanup.containers.push(name.clone());
    let mount = format!("{scenario}:/etc/fake-proxmox/scenario.yaml:ro");
    let listen = format!("{site}=0.0.0.0:8006");
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        &cleanup.network,
        "--label",
        "provision-harness.test=two-sites",
        "-v",
        &mount,
        image,
        "--listen",
        &listen,
        "--scenario",
        "/etc/fake-proxmox/scenario.yaml",
        "--clock",
        "scaled:1000",
        "--no-auth-delay",
    ])
    .unwrap_or_else(|e| panic!("Docker is required for this test: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let logs = docker(&["logs", &name]).unwrap_or_default();
        if let Some(line) = logs
            .lines()
            .find(|l| l.starts_with(&format!("ready site={site} ")))
        {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became ready; logs:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let fingerprint = ready
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("fingerprint="))
        .expect("fingerprint in the readiness line")
        .to_string();
    let format = format!(
        "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
        cleanup.network
    );
    let ip = docker(&["inspect", "-f", &format, &name])
        .unwrap()
        .trim()
        .to_string();
    assert!(
        ip.parse::<std::net::Ipv4Addr>().is_ok(),
        "container address '{ip}'"
    );
    SiteContainer {
        name,
        url: format!("https://{ip}:8006"),
        fingerprint,
    }
}

fn manifest(name: &str, site: &str, node: &str) -> String {
    format!(
        "apiVersion: proxmox.sankofa.nexus/v1alpha1
kind: ProxmoxVM
metadata:
  name: {name}
spec:
  forProvider:
    node: {node}
    name: {name}
    cpu: 1
    memory: 2Gi
    disk: 10Gi
    storage: local-lvm
    network: vmbr0
    image: local:import/ubuntu-22.04-cloud.qcow2
    site: {site}
  providerConfigRef:
    name: proxmox-provider-config
"
    )
}

/// VM names on `site` in the fake's state, with how many VMs carry each.
async fn vms_on(ctl: &ControlClient, site: &str) -> BTreeMap<String, usize> {
    let state = ctl.state().await.expect("control state");
    let mut names = BTreeMap::new();
    for s in state["sites"].as_array().unwrap() {
        if s["name"] != site {
            continue;
        }
        for vm in s["vms"].as_array().unwrap() {
            let n = vm["config"]["name"].as_str().unwrap_or("?").to_string();
            *names.entry(n).or_insert(0) += 1;
        }
    }
    names
}

#[test]
fn rollout_over_two_containers_survives_a_frozen_site() {
    let (image_name, tag) = container_support::image();
    let image = format!("{image_name}:{tag}");
    let unique = format!(
        "ph-two-sites-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 1_000_000
    );
    let mut cleanup = Cleanup {
        network: unique.clone(),
        containers: Vec::new(),
    };
    docker(&[
        "network",
        "create",
        "--driver",
        "bridge",
        "--label",
        "provision-harness.test=two-sites",
        &unique,
    ])
    .unwrap_or_else(|e| panic!("Docker is required for this test: {e}"));
    let scenario = artifacts().join("two-sites-scenario.yaml");
    std::fs::write(
        &scenario,
        provision_harness::examples::SANKOFA_FIXED_SCENARIO,
    )
    .unwrap();
    let scenario = scenario.canonicalize().unwrap();
    let scenario = scenario.to_str().unwrap();
    let s1 = start_site(&mut cleanup, &image, "site-1", scenario);
    let s2 = start_site(&mut cleanup, &image, "site-2", scenario);
    assert_ne!(s1.url, s2.url, "each site at its own address");

    let site = |name: &str, c: &SiteContainer, node: &str| Site {
        name: name.into(),
        endpoint: c.url.clone(),
        node: Some(node.into()),
        tls: TlsMode::Pinned(parse_fingerprint(&c.fingerprint).unwrap()),
        snippets: None,
    };
    let provider = Provider {
        sites: vec![
            site("site-1", &s1, "ml110-01"),
            site("site-2", &s2, "r630-01"),
        ],
        credentials: Credentials::Token {
            token_id: "root@pam!harness".into(),
            secret: "3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a".into(),
        },
    };
    let names = [
        ("s1-web", "site-1", "ml110-01"),
        ("s1-db", "site-1", "ml110-01"),
        ("s2-web", "site-2", "r630-01"),
        ("s2-db", "site-2", "r630-01"),
    ];
    let texts: Vec<(String, String)> = names
        .iter()
        .map(|(n, s, node)| (format!("production/{n}.yaml"), manifest(n, s, node)))
        .collect();
    let set = load_texts(texts.iter().map(|(p, t)| (p.as_str(), t.as_str())));
    assert_eq!(set.vms.len(), 4, "unreadable: {:?}", set.unreadable);

    // The fault: when the first site-2 VM reaches its create step, freeze site-2's container
    // (before the pipeline goes on, so the create call meets the frozen site) and thaw it later.
    let paused = Arc::new(AtomicBool::new(false));
    let fault_log: Arc<Mutex<Vec<String>>> = Arc::default();
    let started = Instant::now();
    let on_step = {
        let paused = Arc::clone(&paused);
        let log = Arc::clone(&fault_log);
        let container = s2.name.clone();
        Arc::new(move |vm: &str, step: &str| {
            if vm.starts_with("s2-") && step == "create" && !paused.swap(true, Ordering::SeqCst) {
                docker(&["pause", &container]).expect("docker pause");
                log.lock()
                    .unwrap()
                    .push(format!("paused at {:?}", started.elapsed()));
                let container = container.clone();
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    std::thread::sleep(PAUSE);
                    let r = docker(&["unpause", &container]);
                    log.lock()
                        .unwrap()
                        .push(format!("unpaused at {:?}: {r:?}", started.elapsed()));
                });
            }
        }) as Arc<dyn Fn(&str, &str) + Send + Sync>
    };
    let mut options = DeployOptions {
        concurrency: 4,
        backoff: Backoff {
            base: Duration::from_millis(250),
            cap: Duration::from_secs(2),
            max_attempts: 12,
        },
        pipeline: PipelineOptions {
            task_wait: TaskWait {
                poll: Duration::from_millis(20),
                timeout: Duration::from_secs(60),
            },
            ip_wait: Duration::from_secs(20),
            ip_poll: Duration::from_millis(50),
            ..PipelineOptions::default()
        },
        // A frozen site answers nothing: each call gives up after this and the VM is retried.
        http_timeout: Duration::from_secs(2),
        on_step: Some(on_step),
        ..DeployOptions::default()
    };
    let recorder = Arc::new(Recorder::new());
    recorder.attach(&mut options);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let deployer = Deployer::new(provider, options).unwrap();
        let result = deployer.deploy(&set).await.unwrap();
        let timeline = recorder.finish("two sites, site-2 frozen mid-rollout", &result);
        let report = artifacts().join("two-sites-report.html");
        report_html::write(&report, &timeline).unwrap();
        eprintln!(
            "fault: {:?}; report: {}",
            fault_log.lock().unwrap(),
            report.display()
        );

        assert!(
            paused.load(Ordering::SeqCst),
            "the fault was never injected"
        );
        for vm in &result.vms {
            assert_eq!(
                vm.outcome,
                Outcome::Ready,
                "{} did not finish: {:?}",
                vm.name,
                vm.error
            );
            assert!(vm.vmid.is_some(), "{} has no vmid", vm.name);
        }
        // site-1 never noticed; site-2's VMs needed more than one attempt, through the fault.
        let attempts: BTreeMap<&str, u32> = result
            .vms
            .iter()
            .map(|v| (v.name.as_str(), v.attempts))
            .collect();
        assert_eq!(attempts["s1-web"], 1, "{attempts:?}");
        assert_eq!(attempts["s1-db"], 1, "{attempts:?}");
        assert!(
            attempts["s2-web"] > 1 || attempts["s2-db"] > 1,
            "no site-2 retry: {attempts:?}"
        );
        assert!(
            timeline
                .entries
                .iter()
                .any(|e| e.vm.starts_with("s2-") && e.outcome == StepOutcome::Retried),
            "the timeline shows no retried step"
        );
        assert!(
            result.elapsed_ms >= PAUSE.as_millis(),
            "the rollout cannot have finished while site-2 was frozen ({} ms)",
            result.elapsed_ms
        );

        // Exactly once, as the fakes see it: one VM per name, one successful create per name.
        for (c, site, expect) in [
            (&s1, "site-1", ["s1-db", "s1-web"]),
            (&s2, "site-2", ["s2-db", "s2-web"]),
        ] {
            let ctl = ControlClient::new(&c.url, None);
            let vms = vms_on(&ctl, site).await;
            let want: BTreeMap<String, usize> = expect.iter().map(|n| (n.to_string(), 1)).collect();
            assert_eq!(vms, want, "VMs on {site}");
            let journal = ctl.journal().await.unwrap();
            for n in expect {
                let creates = journal
                    .iter()
                    .filter(|e| {
                        e.method == "POST"
                            && e.path.ends_with("/qemu")
                            && e.status == 200
                            && e.params.get("name").map(String::as_str) == Some(n)
                    })
                    .count();
                assert_eq!(creates, 1, "successful creates of {n} on {site}");
            }
        }
    });
    drop(cleanup);
    let left = docker(&["ps", "-aq", "--filter", &format!("name={unique}")]).unwrap();
    assert!(left.trim().is_empty(), "containers left behind: {left}");
}
