//! Convergence: the nextid race, re-runs, adoption by name, runs killed and resumed, destroy.

use std::sync::Arc;
use std::time::Duration;

use fake_proxmox::FaultRule;
use provision_harness::deploy::{Deployer, Outcome};
use provision_harness::pve::{ClientOptions, Credentials, PveClient};

use crate::support::*;

/// Two creators get the same id from nextid; the loser's create fails 500 "already exists" and
/// the deployer takes a fresh id instead of failing or touching the other VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nextid_race_is_handled() {
    let env = start(fixed_scenario()).await;
    let ctl = env.ctl("site-1");
    // Hold the deployer's create in the server long enough for another creator to take its id.
    ctl.add_fault(FaultRule {
        method: Some("POST".into()),
        path_pattern: Some("/nodes/*/qemu".into()),
        count: Some(1),
        latency_ms: Some(3000),
        ..FaultRule::default()
    })
    .await
    .unwrap();
    let d = Deployer::new(env.provider.clone(), options(None)).unwrap();
    let files = [vm1("racer-vm")];
    let manifests = set(&files);
    let site = env.provider.site("site-1").unwrap().clone();
    let intruder = async {
        // The fault's count drops to 0 once the deployer's create is inside its delay.
        loop {
            let rules = ctl.faults().await.unwrap();
            if rules.iter().all(|r| r.count == Some(0)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let other = PveClient::new(
            &site.endpoint,
            Credentials::Token {
                token_id: "root@pam!harness".into(),
                secret: "3b8e5d4a-7c1f-4e2a-9d6b-0f1e2d3c4b5a".into(),
            },
            &ClientOptions {
                tls: site.tls.clone(),
                ..ClientOptions::default()
            },
        )
        .unwrap();
        other
            .create_vm(
                "ml110-01",
                &[
                    ("vmid", "100".into()),
                    ("name", "intruder".into()),
                    ("memory", "512".into()),
                ],
            )
            .await
            .unwrap();
    };
    let (r, ()) = tokio::join!(d.deploy(&manifests), intruder);
    let r = r.unwrap();
    let v = vm(&r, "racer-vm");
    assert_eq!(v.outcome, Outcome::Ready, "{v:#?}");
    assert_eq!(v.vmid, Some(101));
    assert_eq!(
        v.attempts, 1,
        "handled inside the create step, not by a retry"
    );
    let j = env.journal("site-1").await;
    let creates: Vec<_> = j
        .iter()
        .filter(|e| {
            e.method == "POST"
                && e.path == "/nodes/ml110-01/qemu"
                && e.params.get("name").map(String::as_str) == Some("racer-vm")
        })
        .collect();
    assert_eq!(creates.len(), 2, "{creates:#?}");
    assert_eq!(
        (creates[0].params["vmid"].as_str(), creates[0].status),
        ("100", 500)
    );
    assert_eq!(
        (creates[1].params["vmid"].as_str(), creates[1].status),
        ("101", 200)
    );
    assert_eq!(env.vms_named("site-1", "intruder").await[0]["vmid"], 100);
    env.shutdown().await;
}

/// A second run with the same state changes nothing: only GETs reach PVE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_changes_nothing() {
    let env = start(fixed_scenario()).await;
    let files = vec![vm1("stable-a"), vm1("stable-b")];
    let first = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    let r1 = first.deploy(&set(&files)).await.unwrap();
    assert!(r1.all_ready(), "{r1:#?}");
    env.ctl("site-1").clear_journal().await.unwrap();

    let second = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    let r2 = second.deploy(&set(&files)).await.unwrap();
    assert!(r2.all_ready(), "{r2:#?}");
    for name in ["stable-a", "stable-b"] {
        assert_eq!(vm(&r1, name).vmid, vm(&r2, name).vmid);
        assert_eq!(env.vms_named("site-1", name).await.len(), 1);
    }
    let j = env.journal("site-1").await;
    assert!(writes(&j).is_empty(), "re-run wrote: {:#?}", writes(&j));
    env.shutdown().await;
}

/// Without any state file, VMs that already exist under the manifest's name are adopted, not
/// duplicated — and `destroy` leaves adopted VMs alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_vms_are_adopted_by_name() {
    let env = start(fixed_scenario()).await;
    let files = vec![vm1("adopt-me")];
    let r1 = Deployer::new(env.provider.clone(), options(None))
        .unwrap()
        .deploy(&set(&files))
        .await
        .unwrap();
    assert!(r1.all_ready());
    env.ctl("site-1").clear_journal().await.unwrap();

    let fresh = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    let r2 = fresh.deploy(&set(&files)).await.unwrap();
    let v = vm(&r2, "adopt-me");
    assert_eq!(v.outcome, Outcome::Ready);
    assert_eq!(v.vmid, vm(&r1, "adopt-me").vmid);
    assert!(v.conditions.iter().any(|c| c.reason == "Adopted"), "{v:#?}");
    assert!(writes(&env.journal("site-1").await).is_empty());

    let gone = fresh.destroy(&set(&files)).await.unwrap();
    assert_eq!(vm(&gone, "adopt-me").outcome, Outcome::Skipped);
    assert_eq!(env.vms_named("site-1", "adopt-me").await.len(), 1);
    env.shutdown().await;
}

/// With a reused site listing (`listing_max_age`), VMs with nothing recorded share one
/// `/cluster/resources` and an existing VM is still adopted by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_listing_still_adopts_by_name() {
    let env = start(fixed_scenario()).await;
    let r1 = Deployer::new(env.provider.clone(), options(None))
        .unwrap()
        .deploy(&set(&[vm1("shared-a")]))
        .await
        .unwrap();
    assert!(r1.all_ready(), "{r1:#?}");
    env.ctl("site-1").clear_journal().await.unwrap();

    let names = ["shared-a", "shared-b", "shared-c", "shared-d"];
    let files: Vec<(String, String)> = names.iter().map(|n| vm1(n)).collect();
    let mut opts = options(Some(env.state_path()));
    opts.pipeline.listing_max_age = Duration::from_secs(60);
    let r2 = Deployer::new(env.provider.clone(), opts)
        .unwrap()
        .deploy(&set(&files))
        .await
        .unwrap();
    assert!(r2.all_ready(), "{r2:#?}");
    let a = vm(&r2, "shared-a");
    assert_eq!(a.vmid, vm(&r1, "shared-a").vmid);
    assert!(a.conditions.iter().any(|c| c.reason == "Adopted"), "{a:#?}");
    for n in names {
        assert_eq!(env.vms_named("site-1", n).await.len(), 1, "{n}");
    }
    let listings = env
        .journal("site-1")
        .await
        .iter()
        .filter(|e| e.method == "GET" && e.path == "/cluster/resources")
        .count();
    assert_eq!(listings, 1, "four VMs, one shared listing");
    let journal = env.journal("site-1").await;
    for path in [
        "/nodes/ml110-01/status",
        "/nodes/ml110-01/network",
        "/nodes/ml110-01/storage",
    ] {
        let reads = journal
            .iter()
            .filter(|e| e.method == "GET" && e.path == path)
            .count();
        assert_eq!(reads, 1, "{path}: read once for four VMs");
    }
    env.shutdown().await;
}

/// A run killed at any point and resumed with a reused listing: the resumed run's VMs with a
/// recorded VMID read a fresh listing, so nothing is created twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_resumes_without_duplicates_with_a_reused_listing() {
    let names = ["reuse-a", "reuse-b", "reuse-c"];
    for kill_after_ms in [5u64, 30, 60] {
        kill_and_resume(&names, kill_after_ms, Duration::from_secs(60)).await;
    }
}

/// A run killed at any point — before, during or after the create call — and run again ends
/// with every VM exactly once and no orphan disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_resumes_without_duplicates_or_orphans() {
    let names = ["resume-a", "resume-b", "resume-c"];
    for kill_after_ms in [0u64, 5, 15, 30, 60, 120] {
        kill_and_resume(&names, kill_after_ms, Duration::ZERO).await;
    }
}

/// Deploys `names` on a fresh fake, kills the run after `kill_after_ms`, runs it again (both
/// with `listing_max_age`) and checks every VM exists once, as reported, with no orphan disk.
async fn kill_and_resume(names: &[&str], kill_after_ms: u64, listing_max_age: Duration) {
    let env = start(fixed_scenario()).await;
    let files: Vec<(String, String)> = names.iter().map(|n| vm1(n)).collect();
    let state = env.state_path();
    let opts = || {
        let mut o = options(Some(state.clone()));
        o.pipeline.listing_max_age = listing_max_age;
        o
    };
    let d = Arc::new(Deployer::new(env.provider.clone(), opts()).unwrap());
    let manifests = Arc::new(set(&files));
    let run = {
        let d = Arc::clone(&d);
        let m = Arc::clone(&manifests);
        tokio::spawn(async move { d.deploy(&m).await })
    };
    tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
    run.abort();
    let _ = run.await;
    drop(d);

    let r = Deployer::new(env.provider.clone(), opts())
        .unwrap()
        .deploy(&manifests)
        .await
        .unwrap();
    assert!(r.all_ready(), "kill after {kill_after_ms} ms: {r:#?}");
    for &n in names {
        let found = env.vms_named("site-1", n).await;
        assert_eq!(
            found.len(),
            1,
            "kill after {kill_after_ms} ms: {n} exists {} times",
            found.len()
        );
        assert_eq!(
            Some(found[0]["vmid"].as_u64().unwrap() as u32),
            vm(&r, n).vmid
        );
    }
    assert!(
        env.orphan_volumes("site-1").await.is_empty(),
        "kill after {kill_after_ms} ms: orphans"
    );
    env.shutdown().await;
}

/// Killed right after the create call was sent (the worker keeps running server-side): the
/// resumed run finds the VM by the VMID recorded before the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_right_after_create_resumes_the_same_vm() {
    let env = start(fixed_scenario()).await;
    let ctl = env.ctl("site-1");
    let files = vec![vm1("mid-create")];
    let state = env.state_path();
    let d = Arc::new(Deployer::new(env.provider.clone(), options(Some(state.clone()))).unwrap());
    let manifests = Arc::new(set(&files));
    let run = {
        let d = Arc::clone(&d);
        let m = Arc::clone(&manifests);
        tokio::spawn(async move { d.deploy(&m).await })
    };
    loop {
        let j = ctl.journal().await.unwrap();
        if j.iter()
            .any(|e| e.method == "POST" && e.path == "/nodes/ml110-01/qemu")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    run.abort();
    let _ = run.await;
    // What a fresh process finds on disk: the snapshot with the journal the killed run left.
    let saved = provision_harness::deployer::state::StateStore::read(&state).unwrap();
    let recorded = saved.vms["site-1/mid-create"].vmid.map(u64::from);
    assert!(
        recorded.is_some(),
        "the VMID is on disk before the create call: {saved:#?}"
    );

    let r = Deployer::new(env.provider.clone(), options(Some(state)))
        .unwrap()
        .deploy(&manifests)
        .await
        .unwrap();
    let v = vm(&r, "mid-create");
    assert_eq!(v.outcome, Outcome::Ready);
    assert_eq!(v.vmid.map(u64::from), recorded);
    assert_eq!(env.vms_named("site-1", "mid-create").await.len(), 1);
    let creates = ctl
        .journal()
        .await
        .unwrap()
        .iter()
        .filter(|e| e.method == "POST" && e.path == "/nodes/ml110-01/qemu")
        .count();
    assert_eq!(creates, 1, "never created twice");
    env.shutdown().await;
}

/// `destroy` stops and purges what the rollout created; `status` then reports them absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_then_status() {
    let env = start(fixed_scenario()).await;
    let files = vec![vm1("short-lived")];
    let d = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    assert!(d.deploy(&set(&files)).await.unwrap().all_ready());
    let st = d.status(&set(&files)).await.unwrap();
    assert_eq!(vm(&st, "short-lived").outcome, Outcome::Ready);
    assert_eq!(vm(&st, "short-lived").state.as_deref(), Some("running"));

    let gone = d.destroy(&set(&files)).await.unwrap();
    assert_eq!(vm(&gone, "short-lived").outcome, Outcome::Destroyed);
    assert!(env.vms_named("site-1", "short-lived").await.is_empty());
    assert!(env.orphan_volumes("site-1").await.is_empty());
    let st = d.status(&set(&files)).await.unwrap();
    assert_eq!(vm(&st, "short-lived").outcome, Outcome::Absent);
    env.shutdown().await;
}

/// `status` lists a site's guests once per run, not once per manifest, and still finds each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_the_site_listing_once() {
    let env = start(fixed_scenario()).await;
    let names = ["seen-a", "seen-b", "seen-c"];
    let files: Vec<(String, String)> = names.iter().map(|n| vm1(n)).collect();
    let d = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    let r = d.deploy(&set(&files)).await.unwrap();
    assert!(r.all_ready(), "{r:#?}");
    env.ctl("site-1").clear_journal().await.unwrap();

    let st = d.status(&set(&files)).await.unwrap();
    for n in names {
        assert_eq!(vm(&st, n).outcome, Outcome::Ready, "{n}");
        assert_eq!(vm(&st, n).vmid, vm(&r, n).vmid, "{n}");
    }
    let listings = env
        .journal("site-1")
        .await
        .iter()
        .filter(|e| e.method == "GET" && e.path == "/cluster/resources")
        .count();
    assert_eq!(listings, 1, "three manifests, one listing");
    env.shutdown().await;
}

/// `dependsOn` holds a VM until its dependency is ready, and fails it if the dependency fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depends_on_is_respected() {
    let env = start(fixed_scenario()).await;
    let (p1, dns) = vm1("dns");
    let (p2, mut app) = vm1("app");
    app.push_str("  deployment:\n    dependsOn: [dns]\n");
    let (p3, broken) = manifest(
        "broken",
        "site-1",
        "ml110-01",
        "local-lvm",
        IMPORT_IMAGE,
        1,
        "20Gi",
        "vmbr7",
    );
    let (p4, mut child) = vm1("child");
    child.push_str("  deployment:\n    dependsOn: [broken]\n");
    let files = vec![(p1, dns), (p2, app), (p3, broken), (p4, child)];
    let d = Deployer::new(env.provider.clone(), options(None)).unwrap();
    let r = d.deploy(&set(&files)).await.unwrap();
    assert_eq!(vm(&r, "app").outcome, Outcome::Ready);
    assert_eq!(
        vm(&r, "child").error.as_ref().unwrap().reason,
        "DependencyFailed"
    );
    let j = env.journal("site-1").await;
    let create_of = |n: &str| {
        j.iter().position(|e| {
            e.method == "POST"
                && e.path == "/nodes/ml110-01/qemu"
                && e.params.get("name").map(String::as_str) == Some(n)
        })
    };
    let start_dns = j
        .iter()
        .position(|e| e.method == "POST" && e.path.ends_with("/status/start"))
        .unwrap();
    assert!(
        create_of("app").unwrap() > start_dns,
        "app created after dns started"
    );
    assert!(create_of("child").is_none());
    env.shutdown().await;
}
