//! What the deployer sent, read from the fake's request journal (the rules are
//! `journal_checks`' verbs on `Journal`).

use anyhow::{anyhow, ensure};
use cucumber::gherkin::Step;
use cucumber::{then, when};

use super::{rows, wait};
use crate::rollout::params::{NodeName, Request};
use crate::rollout::world::RolloutWorld;

#[then(expr = "every API request carried the token {string} in the Authorization header")]
async fn all_token_header(w: &mut RolloutWorld, token: String) -> anyhow::Result<()> {
    let token = w.target_token_id(&token);
    w.deployer_journal().await?.expect_token_header(&token)
}

#[then(expr = "the journal shows a {request} answered {int} before any other request")]
async fn first_request(w: &mut RolloutWorld, req: Request, status: u16) -> anyhow::Result<()> {
    let req = w.target_request(&req);
    w.deployer_journal().await?.expect_first(&req, status)
}

#[then(expr = "every later API request carried the ticket of {string}")]
async fn all_ticket(w: &mut RolloutWorld, user: String) -> anyhow::Result<()> {
    let user = w.target_user(&user);
    w.deployer_journal().await?.expect_ticket_of(&user)
}

#[then("no request was refused for a missing CSRF token")]
async fn no_csrf_refusal(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.deployer_journal().await?.expect_no_csrf_refusal()
}

#[then("the journal shows these requests in order:")]
async fn in_order(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let expected: Vec<(String, String)> = rows(step)
        .into_iter()
        .skip(1)
        .map(|r| (r[0].clone(), w.target_path(&r[1])))
        .collect();
    w.deployer_journal().await?.expect_in_order(&expected)
}

#[then("the VM was created with these parameters:")]
async fn create_params(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = rows(step)
        .into_iter()
        .map(|r| r.iter().map(|c| w.target_text(c)).collect())
        .collect();
    w.deployer_journal().await?.expect_create_params(&rows)
}

#[then("the container was created with these parameters:")]
async fn ct_create_params(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = rows(step)
        .into_iter()
        .map(|r| r.iter().map(|c| w.target_text(c)).collect())
        .collect();
    w.deployer_journal()
        .await?
        .expect_create_params_at("/nodes/*/lxc", &rows)
}

#[then("the create request used the VMID that nextid returned")]
async fn vmid_from_nextid(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let vmid = w.deployer_journal().await?.vmid_of_create_after_nextid()?;
    let reported: Vec<Option<u32>> = w.last_status()?.vms.iter().map(|v| v.vmid).collect();
    ensure!(
        reported
            .iter()
            .any(|v| v.map(|x| x.to_string()).as_ref() == Some(&vmid)),
        "the create used vmid {vmid}, the status reports {reported:?}"
    );
    Ok(())
}

#[then(expr = "no request went to the non-existent {string} route")]
async fn no_route(w: &mut RolloutWorld, route: String) -> anyhow::Result<()> {
    w.deployer_journal().await?.expect_no_request_to(&route)
}

#[then("every task the deployer started was awaited until it stopped")]
async fn tasks_awaited(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let upids = j.polled_tasks()?;
    w.expect_tasks_stopped(&j.first_node(), &upids).await
}

#[then("no mutating request reached Proxmox")]
async fn no_mutation(w: &mut RolloutWorld) -> anyhow::Result<()> {
    w.deployer_journal()
        .await?
        .expect_no_mutation("the deployer")
}

#[then("no mutating request reached Proxmox during the last run")]
async fn no_mutation_last(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.last_run_journal().await?;
    ensure!(
        j.api().count() > 0,
        "the last run sent no request at all (did it look at anything?)"
    );
    j.expect_no_mutation("the re-run")
}

#[then(expr = "the journal shows exactly {int} {request}")]
async fn exactly(w: &mut RolloutWorld, n: usize, req: Request) -> anyhow::Result<()> {
    let req = w.target_request(&req);
    w.deployer_journal().await?.expect_exactly(n, &req)
}

#[then(expr = "the journal shows at least {int} {request} refused because the VMID already exists")]
async fn refused_exists(w: &mut RolloutWorld, n: usize, req: Request) -> anyhow::Result<()> {
    let req = w.target_request(&req);
    w.deployer_journal()
        .await?
        .expect_refused_as_existing(n, &req)
}

/// Waits (the deployer may still be running in the background).
#[when(expr = "the journal shows at least {int} {request}")]
async fn at_least(w: &mut RolloutWorld, n: usize, req: Request) -> anyhow::Result<()> {
    let req = w.target_request(&req);
    let what = format!("{n} × {req}");
    w.wait_journal(wait(), &what, |j| j.count(&req.method, &req.path) >= n)
        .await
}

#[when(expr = "the journal shows at least {int} failed {request}")]
async fn at_least_failed(w: &mut RolloutWorld, n: usize, req: Request) -> anyhow::Result<()> {
    let req = w.target_request(&req);
    let what = format!("{n} failed {req}");
    w.wait_journal(wait(), &what, |j| {
        j.count_failed(&req.method, &req.path) >= n
    })
    .await
}

#[then(expr = "the waits between the failed health checks of {node} grew")]
async fn backoff_grew(w: &mut RolloutWorld, node: NodeName) -> anyhow::Result<()> {
    w.deployer_journal()
        .await?
        .expect_health_check_backoff(&node)
}

#[then("the journal records that request as a token sent in a cookie")]
async fn probe_cookie(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let (a, b) = w.probe_window.ok_or_else(|| anyhow!("no probe was sent"))?;
    w.journal()
        .await?
        .within(&[(a, b)])
        .expect_last_is_cookie_token()
}
