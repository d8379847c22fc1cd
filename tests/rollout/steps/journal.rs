//! What the deployer sent, read from the fake's request journal.

use anyhow::{anyhow, bail, ensure};
use cucumber::gherkin::Step;
use cucumber::{then, when};
use fake_proxmox::AuthKind;

use super::{WAIT, rows};
use crate::rollout::journal::auth_label;
use crate::rollout::world::RolloutWorld;

#[then(regex = r#"^every API request carried the token "([^"]+)" in the Authorization header$"#)]
async fn all_token_header(w: &mut RolloutWorld, token: String) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let api: Vec<_> = j.api().collect();
    ensure!(!api.is_empty(), "the deployer sent no request at all");
    let bad: Vec<String> = api
        .iter()
        .filter(|e| {
            e.auth
                != AuthKind::ApiToken {
                    tokenid: token.clone(),
                }
        })
        .map(|e| e.render())
        .collect();
    if !bad.is_empty() {
        let cookie = api
            .iter()
            .filter(|e| matches!(e.auth, AuthKind::TokenInCookie { .. }))
            .count();
        let cause = if cookie > 0 {
            format!(
                "{cookie} request(s) sent the API token as a PVEAuthCookie cookie (the seed's bug: PVE reads that cookie as a ticket and answers 401)"
            )
        } else {
            format!(
                "{} request(s) did not carry `Authorization: PVEAPIToken={token}=…`",
                bad.len()
            )
        };
        bail!(
            "{cause}:\n  {}",
            bad.iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
    Ok(())
}

#[then(
    regex = r#"^the journal shows a "([A-Z]+)" "([^"]+)" answered (\d+) before any other request$"#
)]
async fn first_request(
    w: &mut RolloutWorld,
    method: String,
    path: String,
    status: u16,
) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let first = j
        .api()
        .next()
        .ok_or_else(|| anyhow!("the deployer sent no request"))?;
    ensure!(
        first.matches(&method, &path) && first.status == status,
        "the first request should be {method} {path} -> {status}, was {}",
        first.render()
    );
    Ok(())
}

#[then(regex = r#"^every later API request carried the ticket of "([^"]+)"$"#)]
async fn all_ticket(w: &mut RolloutWorld, user: String) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let bad: Vec<String> = j
        .api()
        .filter(|e| e.path != "/access/ticket")
        .filter(|e| {
            e.auth
                != AuthKind::Ticket {
                    userid: user.clone(),
                }
        })
        .map(|e| e.render())
        .collect();
    ensure!(
        bad.is_empty(),
        "requests without the ticket of {user}:\n  {}",
        bad.join("\n  ")
    );
    Ok(())
}

#[then("no request was refused for a missing CSRF token")]
async fn no_csrf_refusal(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let bad: Vec<String> = j
        .api()
        .filter(|e| e.status_text.contains("csrf"))
        .map(|e| e.render())
        .collect();
    ensure!(
        bad.is_empty(),
        "writes refused for the CSRF token:\n  {}",
        bad.join("\n  ")
    );
    Ok(())
}

#[then("the journal shows these requests in order:")]
async fn in_order(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let expected: Vec<(String, String)> = rows(step)
        .into_iter()
        .skip(1)
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    let j = w.deployer_journal().await?;
    if let Err(i) = j.find_in_order(&expected) {
        let (m, p) = &expected[i];
        bail!(
            "after {}, no {m} {p} followed; the deployer's requests:\n{}",
            if i == 0 {
                "the start".to_string()
            } else {
                format!("{} {}", expected[i - 1].0, expected[i - 1].1)
            },
            j.render_tail(60)
        );
    }
    Ok(())
}

#[then("the VM was created with these parameters:")]
async fn create_params(w: &mut RolloutWorld, step: &Step) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let creates: Vec<_> = j
        .matching("POST", "/nodes/*/qemu")
        .filter(|e| e.status == 200)
        .collect();
    let [create] = creates.as_slice() else {
        bail!(
            "expected one successful create, saw {}:\n{}",
            creates.len(),
            j.render_tail(40)
        );
    };
    for row in rows(step) {
        let [k, v] = row.as_slice() else {
            bail!("rows are | parameter | value |")
        };
        let got = create.params.get(k);
        ensure!(
            got == Some(v),
            "create parameter {k}: expected {v:?}, sent {got:?} (all: {:?})",
            create.params
        );
    }
    Ok(())
}

#[then("the create request used the VMID that nextid returned")]
async fn vmid_from_nextid(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let create = j
        .matching("POST", "/nodes/*/qemu")
        .find(|e| e.status == 200)
        .ok_or_else(|| anyhow!("no successful create"))?;
    let nextid = j
        .matching("GET", "/cluster/nextid")
        .filter(|e| e.seq < create.seq)
        .count();
    ensure!(nextid >= 1, "no GET /cluster/nextid before the create");
    let vmid = create
        .params
        .get("vmid")
        .ok_or_else(|| anyhow!("the create had no vmid"))?;
    let status = w.last_status()?;
    ensure!(
        status
            .vms
            .iter()
            .any(|v| v.vmid.map(|x| x.to_string()).as_ref() == Some(vmid)),
        "the create used vmid {vmid}, the status reports {:?}",
        status.vms.iter().map(|v| v.vmid).collect::<Vec<_>>()
    );
    Ok(())
}

#[then(regex = r#"^no request went to the non-existent "([^"]+)" route$"#)]
async fn no_route(w: &mut RolloutWorld, route: String) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let bad: Vec<String> = j
        .api()
        .filter(|e| e.path.contains(&route))
        .map(|e| e.render())
        .collect();
    ensure!(
        bad.is_empty(),
        "requests to {route}:\n  {}",
        bad.join("\n  ")
    );
    Ok(())
}

#[then("every task the deployer started was awaited until it stopped")]
async fn tasks_awaited(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    // A task's UPID is only known from the answer; the polls name it in their path.
    let polls: Vec<&str> = j
        .matching("GET", "/nodes/*/tasks/*/status")
        .map(|e| e.path.as_str())
        .collect();
    let writes = j.mutating().into_iter().filter(|e| e.status == 200).count();
    ensure!(writes > 0, "the deployer wrote nothing");
    let upids: std::collections::BTreeSet<&str> =
        polls.iter().filter_map(|p| p.split('/').nth(4)).collect();
    ensure!(
        upids.len() >= writes,
        "{writes} successful writes started tasks but only {} distinct tasks were polled:\n{}",
        upids.len(),
        j.render_tail(60)
    );
    let obs_node = j
        .api()
        .find_map(|e| e.path.split('/').nth(2).map(str::to_string))
        .unwrap_or_default();
    let obs = w.observer(&obs_node).await?;
    for upid in upids {
        let node = upid.split(':').nth(1).unwrap_or_default();
        let st = obs
            .get(&format!("/nodes/{node}/tasks/{upid}/status"))
            .await?;
        ensure!(
            st["status"] == "stopped",
            "task {upid} is still {}",
            st["status"]
        );
    }
    Ok(())
}

#[then("no mutating request reached Proxmox")]
async fn no_mutation(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let m: Vec<String> = j.mutating().iter().map(|e| e.render()).collect();
    ensure!(
        m.is_empty(),
        "the deployer changed things:\n  {}",
        m.join("\n  ")
    );
    Ok(())
}

#[then("no mutating request reached Proxmox during the last run")]
async fn no_mutation_last(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let j = w.last_run_journal().await?;
    ensure!(
        j.api().count() > 0,
        "the last run sent no request at all (did it look at anything?)"
    );
    let m: Vec<String> = j.mutating().iter().map(|e| e.render()).collect();
    ensure!(
        m.is_empty(),
        "the re-run changed things:\n  {}",
        m.join("\n  ")
    );
    Ok(())
}

#[then(regex = r#"^the journal shows exactly (\d+) "([A-Z]+)" "([^"]+)"$"#)]
async fn exactly(
    w: &mut RolloutWorld,
    n: usize,
    method: String,
    path: String,
) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let got = j.count(&method, &path);
    ensure!(
        got == n,
        "expected exactly {n} {method} {path}, the deployer sent {got}:\n{}",
        j.render_tail(60)
    );
    Ok(())
}

#[then(
    regex = r#"^the journal shows at least (\d+) "([A-Z]+)" "([^"]+)" refused because the VMID already exists$"#
)]
async fn refused_exists(
    w: &mut RolloutWorld,
    n: usize,
    method: String,
    path: String,
) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let got = j
        .matching(&method, &path)
        .filter(|e| e.failed() && e.status_text.contains("already exists"))
        .count();
    ensure!(
        got >= n,
        "expected at least {n} {method} {path} refused with 'already exists', saw {got}:\n{}",
        j.render_tail(60)
    );
    Ok(())
}

/// Waits (the deployer may still be running in the background).
#[when(regex = r#"^the journal shows at least (\d+) "([A-Z]+)" "([^"]+)"$"#)]
async fn at_least(
    w: &mut RolloutWorld,
    n: usize,
    method: String,
    path: String,
) -> anyhow::Result<()> {
    let what = format!("{n} × {method} {path}");
    w.wait_journal(WAIT, &what, |j| j.count(&method, &path) >= n)
        .await
}

#[when(regex = r#"^the journal shows at least (\d+) failed "([A-Z]+)" "([^"]+)"$"#)]
async fn at_least_failed(
    w: &mut RolloutWorld,
    n: usize,
    method: String,
    path: String,
) -> anyhow::Result<()> {
    let what = format!("{n} failed {method} {path}");
    w.wait_journal(WAIT, &what, |j| j.count_failed(&method, &path) >= n)
        .await
}

#[then(regex = r#"^the waits between the failed health checks of "([^"]+)" grew$"#)]
async fn backoff_grew(w: &mut RolloutWorld, node: String) -> anyhow::Result<()> {
    let j = w.deployer_journal().await?;
    let path = format!("/nodes/{node}/status");
    let times: Vec<f64> = j
        .matching("GET", &path)
        .filter(|e| e.failed())
        .map(|e| e.time)
        .collect();
    ensure!(
        times.len() >= 4,
        "need at least 4 failed health checks, saw {}",
        times.len()
    );
    let gaps: Vec<f64> = times.windows(2).map(|p| p[1] - p[0]).collect();
    // Equal-jitter exponential backoff: the wait after the 3rd failure is at least twice the base,
    // the one after the 1st at most the base.
    ensure!(
        gaps[2] > gaps[0],
        "no backoff: the gaps between failed health checks (simulated seconds) were {gaps:?}"
    );
    Ok(())
}

#[then("the journal records that request as a token sent in a cookie")]
async fn probe_cookie(w: &mut RolloutWorld) -> anyhow::Result<()> {
    let (a, b) = w.probe_window.ok_or_else(|| anyhow!("no probe was sent"))?;
    let j = w.journal().await?.within(&[(a, b)]);
    let e = j
        .api()
        .last()
        .ok_or_else(|| anyhow!("the probe is not in the journal"))?;
    ensure!(
        matches!(e.auth, AuthKind::TokenInCookie { .. }),
        "the journal records the probe as {}",
        auth_label(&e.auth)
    );
    Ok(())
}
