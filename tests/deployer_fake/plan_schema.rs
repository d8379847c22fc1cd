//! `plan` checks every request the deployer would send against the site release's API schema:
//! what PVE would refuse is reported with PVE's own text before any call, and what it checks
//! is what a run sends.

use fake_proxmox::Scenario;
use fake_proxmox::schema::PveVersion;
use provision_harness::deploy::Deployer;
use provision_harness::examples;
use provision_harness::manifest::load_texts;
use provision_harness::pipeline::{PipelineOptions, VmRequestInputs, vm_requests};
use provision_harness::plan::{PlanOptions, PlanReport, Severity, Verdict, plan};
use provision_harness::validate::ValidSpec;

use crate::support::*;

fn schema_errors(p: &PlanReport) -> Vec<String> {
    p.findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.message.contains("Parameter verification"))
        .map(|f| format!("{}: {}", f.subject, f.message))
        .collect()
}

async fn assert_only_reads(env: &Env, site: &str) {
    let j = env.journal(site).await;
    assert!(!j.is_empty(), "plan read nothing on {site}");
    assert!(
        j.iter().all(|e| e.method == "GET"),
        "plan must only read: {:#?}",
        writes(&j)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_pve_refuses_is_reported_with_pves_text_before_any_call() {
    let env = start(fixed_scenario()).await;
    let (path, text) = vm1("web-01");
    // 1–32 passes the manifest's own check; PVE's CIDR format wants a prefix of 8 or more.
    let text = text.replace(
        "    site: site-1\n",
        "    site: site-1\n    ipAddress: 10.0.0.5/4\n",
    );
    let p = plan(
        &env.provider,
        &set(&[(path, text)]),
        &PlanOptions::default(),
    )
    .await;
    assert_eq!(p.verdict, Verdict::WouldFail, "{:#?}", p.findings);
    let errors = schema_errors(&p);
    assert!(
        errors.iter().any(|e| e.starts_with(
            "web-01.yaml: VM web-01: PVE 9.1 would refuse POST /nodes/{node}/qemu (400 Parameter verification failed) — ipconfig0:"
        ) && e.contains("value does not look like a valid ipv4 network configuration")),
        "{errors:#?}"
    );
    assert_only_reads(&env, "site-1").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_7_1_site_has_no_import_from_and_the_create_is_reported_before_any_call() {
    let mut scenario = fixed_scenario();
    for s in &mut scenario.sites {
        s.version = PveVersion::V7_1;
    }
    let env = start(scenario).await;
    let p = plan(
        &env.provider,
        &set(&[vm1("web-01")]),
        &PlanOptions::default(),
    )
    .await;
    assert_eq!(p.verdict, Verdict::WouldFail);
    let errors = schema_errors(&p);
    assert!(
        errors.iter().any(|e| e.contains(
            "VM web-01: PVE 7.1 would refuse POST /nodes/{node}/qemu (400 Parameter verification failed) — scsi0"
        ) && e.contains("import-from")),
        "{errors:#?}"
    );
    assert_only_reads(&env, "site-1").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixed_seed_rollout_has_nothing_pve_would_refuse() {
    let env = start(fixed_scenario()).await;
    let manifests = load_texts(examples::SANKOFA_FIXED_MANIFESTS.iter().copied());
    let p = plan(&env.provider, &manifests, &PlanOptions::default()).await;
    assert!(p.vms.len() >= 30, "{}", p.vms.len());
    assert_eq!(schema_errors(&p), Vec::<String>::new());
    assert_eq!(p.verdict, Verdict::Ready, "{:#?}", p.findings);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scenarios_releases_are_all_known_to_the_schema() {
    // The seed's default scenario runs releases the schema knows: no such warning there.
    let env = start(Scenario::embedded_default()).await;
    let manifests = load_texts(examples::SANKOFA_MANIFESTS.iter().copied());
    let p = plan(&env.provider, &manifests, &PlanOptions::default()).await;
    assert!(
        !p.findings
            .iter()
            .any(|f| f.message.contains("not checked against PVE's API schema")),
        "{:#?}",
        p.findings
    );
    env.shutdown().await;
}

/// A request as the journal shows it: method, path, parameters in name order.
type Call = (String, String, Vec<(String, String)>);

/// What plan checks is what a run sends: every mutating request of a real run of one VM is,
/// method, path and parameters, one of the requests plan validated for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_plan_checks_is_what_the_pipeline_sends() {
    let env = start(fixed_scenario()).await;
    let files = [vm1("web-01")];
    let p = plan(&env.provider, &set(&files), &PlanOptions::default()).await;
    let import_from = p.vms[0].image.clone().expect("plan resolves the image");
    let d = Deployer::new(env.provider.clone(), options(Some(env.state_path()))).unwrap();
    let r = d.deploy(&set(&files)).await.unwrap();
    let vmid = vm(&r, "web-01").vmid.expect("created");

    let set = set(&files);
    let rollout = provision_harness::rollout::Rollout::new(&set);
    let spec: &ValidSpec = rollout.vms[0].spec.as_ref().unwrap();
    let pipeline = PipelineOptions::default();
    let planned: Vec<Call> = vm_requests(&VmRequestInputs {
        spec,
        vmid,
        listed_storages: vec![],
        import_from: Some(&import_from),
        // The deployer writes the manifest's userData onto the site's snippets share.
        snippet: Some("local:snippets/web-01-user.yaml"),
        ci_user: &pipeline.ci_user,
        create: true,
        start: true,
    })
    .into_iter()
    .filter(|r| r.mutates())
    .map(|r| {
        let mut params: Vec<(String, String)> = r
            .params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        params.sort();
        (r.method.to_string(), r.path(), params)
    })
    .collect();
    let sent: Vec<Call> = writes(&env.journal("site-1").await)
        .into_iter()
        .filter(|e| !e.path.starts_with("/access/"))
        .map(|e| {
            let params: Vec<(String, String)> = e
                .params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (e.method.clone(), e.path.clone(), params)
        })
        .collect();
    let kinds: Vec<&str> = sent.iter().map(|(_, p, _)| p.as_str()).collect();
    assert!(
        kinds.contains(&"/nodes/ml110-01/qemu")
            && kinds.contains(&format!("/nodes/ml110-01/qemu/{vmid}/status/start").as_str()),
        "{sent:#?}"
    );
    for s in &sent {
        assert!(
            planned.contains(s),
            "sent but not planned: {s:#?}\nplanned: {planned:#?}"
        );
    }
    env.shutdown().await;
}
