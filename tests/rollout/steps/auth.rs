//! Credentials the deployer uses, and raw authentication probes made the way other clients do.

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};

use crate::rollout::adapter::Creds;
use crate::rollout::params::Request;
use crate::rollout::world::{HARNESS_TOKEN_ID, HARNESS_TOKEN_SECRET, RolloutWorld};

fn known_secret(token: &str) -> anyhow::Result<&'static str> {
    match token {
        HARNESS_TOKEN_ID => Ok(HARNESS_TOKEN_SECRET),
        other => Err(anyhow!(
            "no known secret for token '{other}' (the harness knows {HARNESS_TOKEN_ID})"
        )),
    }
}

/// Against a real PVE the credentials come from the environment instead.
#[given(regex = r#"^the deployer authenticates with the API token "([^"]+)"$"#)]
fn token(w: &mut RolloutWorld, id: String) -> anyhow::Result<()> {
    let secret = secret_of(w, &id)?;
    let id = w.target_token_id(&id);
    w.creds = Creds::Token { id, secret };
    Ok(())
}

/// The secret of a token the scenario names: the harness's on the fake, the environment's on a
/// real target.
fn secret_of(w: &RolloutWorld, id: &str) -> anyhow::Result<String> {
    match &w.map {
        Some(m) => m.token_secret(id),
        None => Ok(known_secret(id)?.to_string()),
    }
}

#[given(
    regex = r#"^the deployer authenticates with the API token "([^"]+)" and the secret "([^"]+)"$"#
)]
fn token_secret(w: &mut RolloutWorld, id: String, secret: String) {
    let id = w.target_token_id(&id);
    w.creds = Creds::Token { id, secret };
}

#[given(regex = r#"^the deployer authenticates as "([^"]+)" with the password "([^"]+)"$"#)]
fn password_creds(w: &mut RolloutWorld, username: String, password: String) -> anyhow::Result<()> {
    let (username, password) = match &w.map {
        Some(m) => m.login(&username, &password)?,
        None => (username, password),
    };
    w.creds = Creds::Password { username, password };
    Ok(())
}

async fn probe(
    w: &mut RolloutWorld,
    method: &str,
    path: &str,
    headers: Vec<(&str, String)>,
) -> anyhow::Result<()> {
    let path = w.target_path(path);
    let path = path.as_str();
    let node = path.split('/').nth(2).unwrap_or("ml110-01").to_string();
    let obs = match w.is_real() {
        // Through the recorder, so the probe is in the journal and the cassette like the
        // deployer's requests.
        true => {
            w.sites().await?;
            let rec = w
                .recorder
                .as_ref()
                .ok_or_else(|| anyhow!("no recorder (HARNESS_PVE_RECORD=0)"))?;
            crate::rollout::pve::Observer::new(rec.url(), w.creds.clone())?
        }
        false => w.observer(&node).await?,
    };
    let first = w.journal_mark().await? + 1;
    let answer = obs.raw(method, path, &headers).await?;
    let last = w.journal_mark().await?;
    w.probe_window = Some((first, last));
    // The journal holds PVE's reason phrase as sent (the client library may normalise it).
    let reason = match w.journal().await {
        Ok(j) => j
            .within(&[(first, last)])
            .api()
            .last()
            .map(|e| e.status_text.clone())
            .unwrap_or(answer.reason.clone()),
        Err(_) => answer.reason.clone(),
    };
    w.answer = Some((answer.status, reason));
    Ok(())
}

#[when(expr = "a client sends {request} with the token {string} as a PVEAuthCookie cookie")]
async fn token_cookie(w: &mut RolloutWorld, req: Request, id: String) -> anyhow::Result<()> {
    let Request { method, path } = req;
    let secret = secret_of(w, &id)?;
    let id = w.target_token_id(&id);
    // Exactly what the seed's deployer sent: `Cookie: PVEAuthCookie=<tokenid>=<secret>`.
    probe(
        w,
        &method,
        &path,
        vec![("Cookie", format!("PVEAuthCookie={id}={secret}"))],
    )
    .await
}

#[when(expr = "a client sends {request} with the token {string} in the Authorization header")]
async fn token_header(w: &mut RolloutWorld, req: Request, id: String) -> anyhow::Result<()> {
    let Request { method, path } = req;
    let secret = secret_of(w, &id)?;
    let id = w.target_token_id(&id);
    probe(
        w,
        &method,
        &path,
        vec![("Authorization", format!("PVEAPIToken={id}={secret}"))],
    )
    .await
}

#[when(
    expr = "a client logs in as {string} with the password {string} and sends {request} without the CSRF token"
)]
async fn no_csrf(
    w: &mut RolloutWorld,
    user: String,
    password: String,
    req: Request,
) -> anyhow::Result<()> {
    let Request { method, path } = req;
    let (user, password) = match &w.map {
        Some(m) => m.login(&user, &password)?,
        None => (user, password),
    };
    let node = w.real_node(path.split('/').nth(2).unwrap_or("ml110-01"));
    let obs = w.observer(&node).await?;
    let (ticket, _csrf) = obs.login(&user, &password).await?;
    probe(
        w,
        &method,
        &path,
        vec![("Cookie", format!("PVEAuthCookie={ticket}"))],
    )
    .await
}

#[then(regex = r#"^the answer is (\d+) "(.+)"$"#)]
fn answer_reason(w: &mut RolloutWorld, status: u16, reason: String) -> anyhow::Result<()> {
    let (got, text) = w
        .answer
        .clone()
        .ok_or_else(|| anyhow!("no probe was sent"))?;
    ensure!(
        got == status && text.trim() == reason,
        "expected {status} \"{reason}\", got {got} \"{text}\""
    );
    Ok(())
}

#[then(regex = r#"^the answer is (\d+)$"#)]
fn answer(w: &mut RolloutWorld, status: u16) -> anyhow::Result<()> {
    let (got, text) = w
        .answer
        .clone()
        .ok_or_else(|| anyhow!("no probe was sent"))?;
    ensure!(got == status, "expected {status}, got {got} \"{text}\"");
    Ok(())
}
