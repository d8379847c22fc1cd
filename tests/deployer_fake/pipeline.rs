//! The whole pipeline, what it sends, plan and rehearse.

use fake_proxmox::{AuthKind, Scenario};
use provision_harness::deploy::{Deployer, Outcome};
use provision_harness::examples;
use provision_harness::manifest::load_texts;
use provision_harness::plan::{PlanOptions, Severity, Verdict, plan};
use provision_harness::pve::Credentials;
use provision_harness::pve::tls::TlsMode;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploys_vms_on_both_sites_the_way_pve_needs() {
    let env = start(fixed_scenario()).await;
    let files = vec![
        vm1("nginx-proxy-vm"),
        manifest(
            "validator-01",
            "site-2",
            "r630-01",
            "ceph-rbd",
            IMPORT_IMAGE,
            2,
            "20Gi",
            "vmbr0",
        ),
        manifest(
            "cloudflare-tunnel-vm",
            "site-2",
            "r630-01",
            "local-lvm",
            IMPORT_IMAGE,
            2,
            "10Gi",
            "vmbr0",
        ),
    ];
    let d = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    let r = d.deploy(&set(&files)).await.unwrap();
    assert!(r.all_ready(), "{r:#?}");
    for v in &r.vms {
        assert_eq!(v.outcome, Outcome::Ready);
        assert_eq!(v.state.as_deref(), Some("running"));
        assert!(
            v.ip.as_deref()
                .is_some_and(|ip| ip.starts_with("192.168.11.")),
            "{v:?}"
        );
        assert!(v.vmid.is_some());
    }

    let j = env.journal("site-1").await;
    // Every request authenticated with the token header (never a cookie).
    assert!(
        j.iter()
            .all(|e| matches!(&e.auth, AuthKind::ApiToken { tokenid } if tokenid == TOKEN_ID)),
        "{j:#?}"
    );
    assert!(j.iter().all(|e| !e.path.contains("importdisk")));
    let create = j
        .iter()
        .find(|e| e.method == "POST" && e.path == "/nodes/ml110-01/qemu")
        .expect("create call");
    assert_eq!(create.status, 200);
    assert_eq!(
        create.params["scsi0"],
        format!("local-lvm:0,import-from={IMPORT_IMAGE}")
    );
    assert_eq!(create.params["ide2"], "local-lvm:cloudinit");
    assert_eq!(create.params["ciuser"], "admin");
    assert_eq!(create.params["ipconfig0"], "ip=dhcp");
    assert_eq!(create.params["net0"], "virtio,bridge=vmbr0");
    assert!(create.params.values().all(|v| !v.contains("format=qcow2")));
    // Tasks are awaited, the disk grown to the manifest's size, then the VM started.
    assert!(
        j.iter()
            .any(|e| e.path.contains("/tasks/") && e.path.ends_with("/status"))
    );
    let resize = j
        .iter()
        .find(|e| e.method == "PUT" && e.path.ends_with("/resize"))
        .expect("resize");
    assert_eq!(resize.params["size"], "20G");
    assert_eq!(resize.params["disk"], "scsi0");
    assert!(
        j.iter()
            .any(|e| e.method == "POST" && e.path.ends_with("/status/start"))
    );

    let vm = &env.vms_named("site-1", "nginx-proxy-vm").await[0];
    let scsi0 = vm["config"]["scsi0"].as_str().unwrap();
    assert!(
        scsi0.starts_with("local-lvm:vm-") && scsi0.contains("size=20G"),
        "{scsi0}"
    );
    assert_eq!(vm["power"], "running");

    // The state file records what was done.
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.state_path()).unwrap()).unwrap();
    assert_eq!(saved["vms"]["site-1/nginx-proxy-vm"]["stage"], "ready");
    assert_eq!(saved["vms"]["site-1/nginx-proxy-vm"]["created_here"], true);
    assert!(
        !std::fs::read_to_string(env.state_path())
            .unwrap()
            .contains(TOKEN_SECRET)
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_auth_with_csrf_works_for_writes() {
    let mut env = start(fixed_scenario()).await;
    env.provider.credentials = Credentials::Password {
        username: "root@pam".into(),
        password: "harness".into(),
    };
    let d = Deployer::new(env.provider.clone(), options(None)).unwrap();
    let r = d.deploy(&set(&[vm1("ticket-vm")])).await.unwrap();
    assert!(r.all_ready(), "{r:#?}");
    let j = env.journal("site-1").await;
    let writes = writes(&j);
    assert!(!writes.is_empty());
    assert!(
        writes
            .iter()
            .filter(|e| e.path != "/access/ticket")
            .all(|e| matches!(e.auth, AuthKind::Ticket { .. }) && e.status == 200),
        "{writes:#?}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_pinned_fingerprint_is_refused_without_retry() {
    let mut env = start(fixed_scenario()).await;
    for s in &mut env.provider.sites {
        s.tls = TlsMode::Pinned([7u8; 32]);
    }
    let d = Deployer::new(env.provider.clone(), options(None)).unwrap();
    let r = d.deploy(&set(&[vm1("pinned-vm")])).await.unwrap();
    let v = vm(&r, "pinned-vm");
    assert_eq!(v.outcome, Outcome::Failed);
    let e = v.error.as_ref().unwrap();
    assert_eq!(e.reason, "TlsUntrusted", "{e:?}");
    assert!(!e.retryable);
    assert!(
        env.journal("site-1").await.is_empty(),
        "nothing reached the API"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_reports_the_seeds_real_problems_with_only_gets() {
    let env = start(Scenario::embedded_default()).await;
    let mut provider = env.provider.clone();
    provider.credentials = Credentials::Token {
        token_id: TOKEN_ID.into(),
        secret: TOKEN_SECRET.into(),
    };
    let set = load_texts(examples::SANKOFA_MANIFESTS.iter().copied());
    let p = plan(&provider, &set, &PlanOptions::default()).await;
    assert_eq!(p.verdict, Verdict::WouldFail);
    assert_eq!(p.manifests, 30);
    assert_eq!(p.unreadable.len(), 3);
    let errors: Vec<String> = p
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| format!("{}: {}", f.subject, f.message))
        .collect();
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(has("storage r630-01/ceph-fs: type cephfs"), "{errors:#?}");
    assert!(
        has(
            "node ml110-01: CPU over capacity: 12 vCPUs requested + 0 existing on 5 CPU threads = 2.40×"
        ),
        "{errors:#?}"
    );
    for f in ["medium-vm.yaml", "large-vm.yaml", "blockscout.yaml"] {
        assert!(
            errors.iter().any(|e| e.contains(f) && e.contains("line")),
            "{f}: {errors:#?}"
        );
    }
    let ml110 = p.nodes.iter().find(|n| n.node == "ml110-01").unwrap();
    assert_eq!(
        (ml110.new_vms, ml110.requested_cores, ml110.cpu_threads),
        (6, 12, Some(5))
    );
    let cephfs = p.storages.iter().find(|s| s.storage == "ceph-fs").unwrap();
    assert!(!cephfs.holds_vm_disks);
    assert_eq!(cephfs.new_vms, 20);
    for site in ["site-1", "site-2"] {
        let j = env.journal(site).await;
        assert!(!j.is_empty());
        assert!(
            j.iter().all(|e| e.method == "GET"),
            "plan must only read: {:#?}",
            writes(&j)
        );
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehearse_shows_the_seed_failing_and_the_fix_green() {
    let opts = provision_harness::rehearse::RehearseOptions::default();
    let report = provision_harness::rehearse::rehearse(None, true, &opts)
        .await
        .unwrap();
    assert_eq!(report.runs.len(), 2);
    let seed = &report.runs[0];
    assert_eq!(seed.plan.verdict, Verdict::WouldFail);
    assert_eq!(seed.deploy.summary.ready, 0);
    assert_eq!(seed.deploy.summary.unreadable, 3);
    let reasons: Vec<&str> = seed
        .deploy
        .vms
        .iter()
        .filter_map(|v| v.error.as_ref().map(|e| e.reason.as_str()))
        .collect();
    assert!(
        reasons.contains(&"StorageNotForImages") && reasons.contains(&"ImageMissing"),
        "{reasons:?}"
    );
    let fixed = &report.runs[1];
    assert_eq!(
        fixed.plan.verdict,
        Verdict::Ready,
        "{:#?}",
        fixed.plan.findings
    );
    assert_eq!(
        fixed.deploy.summary.ready,
        30,
        "{:#?}",
        fixed
            .deploy
            .vms
            .iter()
            .filter(|v| v.outcome != Outcome::Ready)
            .collect::<Vec<_>>()
    );
    assert!(report.has_problems());
}
