//! What a scenario asks of the fake's request journal, as verbs on [`Journal`]: each returns
//! `Ok` or an error that shows the requests that broke the rule. Steps call one of these.

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, ensure};
use fake_proxmox::AuthKind;

use crate::rollout::journal::{Entry, Journal, auth_label};
use crate::rollout::params::Request;

fn listing(entries: &[&Entry], max: usize) -> String {
    entries
        .iter()
        .take(max)
        .map(|e| e.render())
        .collect::<Vec<_>>()
        .join("\n  ")
}

impl Journal {
    /// Every API request carried `Authorization: PVEAPIToken=<token>=…`; the seed's cookie
    /// bug is named when that is the cause.
    pub fn expect_token_header(&self, token: &str) -> anyhow::Result<()> {
        let api: Vec<&Entry> = self.api().collect();
        ensure!(!api.is_empty(), "the deployer sent no request at all");
        let wanted = AuthKind::ApiToken {
            tokenid: token.to_string(),
        };
        let bad: Vec<&Entry> = api.iter().copied().filter(|e| e.auth != wanted).collect();
        if bad.is_empty() {
            return Ok(());
        }
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
        bail!("{cause}:\n  {}", listing(&bad, 10))
    }

    /// The very first API request was `req`, answered `status`.
    pub fn expect_first(&self, req: &Request, status: u16) -> anyhow::Result<()> {
        let first = self
            .api()
            .next()
            .ok_or_else(|| anyhow!("the deployer sent no request"))?;
        ensure!(
            first.matches(&req.method, &req.path) && first.status == status,
            "the first request should be {req} -> {status}, was {}",
            first.render()
        );
        Ok(())
    }

    /// Every request after the login carried `user`'s ticket.
    pub fn expect_ticket_of(&self, user: &str) -> anyhow::Result<()> {
        let wanted = AuthKind::Ticket {
            userid: user.to_string(),
        };
        let bad: Vec<&Entry> = self
            .api()
            .filter(|e| e.path != "/access/ticket" && e.auth != wanted)
            .collect();
        ensure!(
            bad.is_empty(),
            "requests without the ticket of {user}:\n  {}",
            listing(&bad, usize::MAX)
        );
        Ok(())
    }

    pub fn expect_no_csrf_refusal(&self) -> anyhow::Result<()> {
        let bad: Vec<&Entry> = self
            .api()
            .filter(|e| e.status_text.contains("csrf"))
            .collect();
        ensure!(
            bad.is_empty(),
            "writes refused for the CSRF token:\n  {}",
            listing(&bad, usize::MAX)
        );
        Ok(())
    }

    /// Requests matching `expected` appear in this order (others in between allowed).
    pub fn expect_in_order(&self, expected: &[(String, String)]) -> anyhow::Result<()> {
        let Err(i) = self.find_in_order(expected) else {
            return Ok(());
        };
        let (m, p) = &expected[i];
        let after = match i.checked_sub(1) {
            None => "the start".to_string(),
            Some(prev) => format!("{} {}", expected[prev].0, expected[prev].1),
        };
        bail!(
            "after {after}, no {m} {p} followed; the deployer's requests:\n{}",
            self.render_tail(60)
        )
    }

    /// The one successful `POST /nodes/*/qemu`.
    pub fn the_create(&self) -> anyhow::Result<&Entry> {
        self.the_create_at("/nodes/*/qemu")
    }

    /// The one successful create at `path` (`/nodes/*/qemu` or `/nodes/*/lxc`).
    pub fn the_create_at<'a>(&'a self, path: &'a str) -> anyhow::Result<&'a Entry> {
        let creates: Vec<&Entry> = self
            .matching("POST", path)
            .filter(|e| e.status == 200)
            .collect();
        match creates.as_slice() {
            [create] => Ok(create),
            _ => bail!(
                "expected one successful create, saw {}:\n{}",
                creates.len(),
                self.render_tail(40)
            ),
        }
    }

    /// The successful create sent each `(parameter, value)`.
    pub fn expect_create_params(&self, rows: &[Vec<String>]) -> anyhow::Result<()> {
        self.expect_create_params_at("/nodes/*/qemu", rows)
    }

    /// The successful create at `path` sent each `(parameter, value)`.
    pub fn expect_create_params_at(&self, path: &str, rows: &[Vec<String>]) -> anyhow::Result<()> {
        let create = self.the_create_at(path)?;
        for row in rows {
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

    /// The VMID the first successful create used, after at least one `GET /cluster/nextid`.
    pub fn vmid_of_create_after_nextid(&self) -> anyhow::Result<String> {
        let create = self
            .matching("POST", "/nodes/*/qemu")
            .find(|e| e.status == 200)
            .ok_or_else(|| anyhow!("no successful create"))?;
        let nextid = self
            .matching("GET", "/cluster/nextid")
            .filter(|e| e.seq < create.seq)
            .count();
        ensure!(nextid >= 1, "no GET /cluster/nextid before the create");
        create
            .params
            .get("vmid")
            .cloned()
            .ok_or_else(|| anyhow!("the create had no vmid"))
    }

    pub fn expect_no_request_to(&self, route: &str) -> anyhow::Result<()> {
        let bad: Vec<&Entry> = self.api().filter(|e| e.path.contains(route)).collect();
        ensure!(
            bad.is_empty(),
            "requests to {route}:\n  {}",
            listing(&bad, usize::MAX)
        );
        Ok(())
    }

    /// The UPIDs of the tasks the deployer polled, after checking that there are at least as
    /// many as successful writes (a task's UPID is only known from the answer; the polls name
    /// it in their path).
    pub fn polled_tasks(&self) -> anyhow::Result<BTreeSet<String>> {
        let writes = self
            .mutating()
            .into_iter()
            .filter(|e| e.status == 200)
            .count();
        ensure!(writes > 0, "the deployer wrote nothing");
        let upids: BTreeSet<String> = self
            .matching("GET", "/nodes/*/tasks/*/status")
            .filter_map(|e| e.path.split('/').nth(4).map(str::to_string))
            .collect();
        ensure!(
            upids.len() >= writes,
            "{writes} successful writes started tasks but only {} distinct tasks were polled:\n{}",
            upids.len(),
            self.render_tail(60)
        );
        Ok(upids)
    }

    /// The node named by the first API request that names one.
    pub fn first_node(&self) -> String {
        self.api()
            .find_map(|e| e.path.split('/').nth(2).map(str::to_string))
            .unwrap_or_default()
    }

    /// Nothing was created, changed or deleted; `who` names the run in the error.
    pub fn expect_no_mutation(&self, who: &str) -> anyhow::Result<()> {
        let m = self.mutating();
        ensure!(
            m.is_empty(),
            "{who} changed things:\n  {}",
            listing(&m, usize::MAX)
        );
        Ok(())
    }

    pub fn expect_exactly(&self, n: usize, req: &Request) -> anyhow::Result<()> {
        let got = self.count(&req.method, &req.path);
        ensure!(
            got == n,
            "expected exactly {n} {req}, the deployer sent {got}:\n{}",
            self.render_tail(60)
        );
        Ok(())
    }

    pub fn expect_refused_as_existing(&self, n: usize, req: &Request) -> anyhow::Result<()> {
        let got = self
            .matching(&req.method, &req.path)
            .filter(|e| e.failed() && e.status_text.contains("already exists"))
            .count();
        ensure!(
            got >= n,
            "expected at least {n} {req} refused with 'already exists', saw {got}:\n{}",
            self.render_tail(60)
        );
        Ok(())
    }

    /// The waits between failed `GET /nodes/{node}/status` grew (equal-jitter exponential
    /// backoff: the wait after the 3rd failure is at least twice the base, the one after the
    /// 1st at most the base).
    pub fn expect_health_check_backoff(&self, node: &str) -> anyhow::Result<()> {
        let path = format!("/nodes/{node}/status");
        let times: Vec<f64> = self
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
        ensure!(
            gaps[2] > gaps[0],
            "no backoff: the gaps between failed health checks (simulated seconds) were {gaps:?}"
        );
        Ok(())
    }

    /// The last API request is recorded as an API token sent in a cookie.
    pub fn expect_last_is_cookie_token(&self) -> anyhow::Result<()> {
        let e = self
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
}
