//! The request pipeline of the emulated API, in PVE's order: HTTP-layer checks, body,
//! credentials (+CSRF), route lookup (501), API-token refusal, duplicate parameters,
//! schema validation, node resolution, faults, then the handler.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Response};
use regex::Regex;

use crate::access::model::Identity;
use crate::journal::{AuthKind, JournalEntry};
use crate::router::{Ctx, handler_for};
use crate::server::state::{Inner, SiteCtx};
use crate::wire::{
    MAX_BODY, PveError, RawParam, Reply, decode_urlencoded, parse_body, render_err, render_ok,
};

const AUTH_DELAY: Duration = Duration::from_secs(3);

static COOKIE_RE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?:^|\s|;)PVEAuthCookie(?:=| )([^;]*)").ok());
static TOKEN_RE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?:^|\s)PVEAPIToken(?:=| )([^;]*)").ok());

fn extract(re: &LazyLock<Option<Regex>>, header: Option<&str>) -> Option<String> {
    let h = header?;
    let c = re.as_ref()?.captures(h)?;
    let v = c.get(1)?.as_str();
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(v).collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Credentials as found on the request, in PVE's lookup order.
#[derive(Debug, Clone)]
pub enum Creds {
    None,
    Ticket(String),
    Token(String),
}

pub fn find_creds(headers: &HeaderMap) -> Creds {
    let h = |n: &str| {
        headers
            .get_all(n)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let cookie = h("cookie");
    let authz = h("authorization");
    if let Some(t) = extract(&COOKIE_RE, Some(&cookie)) {
        return Creds::Ticket(t);
    }
    if let Some(t) = extract(&COOKIE_RE, Some(&authz)) {
        return Creds::Ticket(t);
    }
    if let Some(t) = extract(&TOKEN_RE, Some(&authz)) {
        return Creds::Token(t);
    }
    Creds::None
}

fn is_public(method: &str, path: &str) -> bool {
    matches!(
        (method, path),
        ("GET", "/access/domains")
            | ("GET", "/access/ticket")
            | ("POST", "/access/ticket")
            | ("POST", "/access/vncticket")
            | ("POST", "/access/openid/login")
            | ("POST", "/access/openid/auth-url")
    )
}

struct Prepared {
    handler: crate::router::Handler,
    params: crate::wire::Params,
    who: Identity,
    via_ticket: bool,
    latency_ms: u64,
}

/// Mutable record of one request for the journal.
struct Record {
    path: String,
    params: BTreeMap<String, String>,
    auth: AuthKind,
    node: Option<String>,
}

fn journal(inner: &mut Inner, site: &str, method: &str, rec: &Record, status: u16, text: String) {
    let time = inner.clock.now();
    inner.journal.record(JournalEntry {
        seq: 0,
        time,
        site: site.to_string(),
        method: method.to_string(),
        path: rec.path.clone(),
        params: rec.params.clone(),
        auth: rec.auth.clone(),
        status,
        status_text: text,
        node: rec.node.clone(),
    });
}

pub async fn api_handler(State(ctx): State<SiteCtx>, req: Request) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_string();
    let full_path = {
        let bytes: Vec<u8> = percent_encoding::percent_decode_str(parts.uri.path()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let version = {
        let inner = ctx.shared.inner.lock();
        inner
            .world
            .site(&ctx.site)
            .map_or(crate::version::PveVersion::V9_1, |s| s.version)
    };
    let mut rec = Record {
        path: full_path.clone(),
        params: BTreeMap::new(),
        auth: AuthKind::None,
        node: None,
    };

    // HTTP layer (AnyEvent.pm): method, transfer encoding, format, body.
    let early: Result<(String, BTreeMap<String, RawParam>), PveError> = async {
        if !matches!(method.as_str(), "GET" | "POST" | "PUT" | "DELETE") {
            return Err(PveError::bare(
                501,
                format!("method '{method}' not available"),
            ));
        }
        if let Some(te) = parts
            .headers
            .get("transfer-encoding")
            .and_then(|v| v.to_str().ok())
        {
            if te.eq_ignore_ascii_case("chunked") {
                return Err(PveError::bare(
                    501,
                    "chunked transfer encoding not supported",
                ));
            }
            return Err(PveError::bare(
                501,
                format!("Unknown transfer encoding '{te}'"),
            ));
        }
        let rel = match full_path.strip_prefix("/api2/") {
            Some(rest) => {
                let (format, rel) = match rest.split_once('/') {
                    Some((f, r)) => (f, format!("/{r}")),
                    None => (rest, "/".to_string()),
                };
                if format != "json" {
                    return Err(PveError::bare(
                        501,
                        format!("no formatter for uri {rel}, {format}"),
                    ));
                }
                rel
            }
            None if full_path == "/api2" => return Err(PveError::bare(501, "no such uri")),
            None => return Err(PveError::bare(501, format!("no such file '{full_path}'"))),
        };
        let bytes = axum::body::to_bytes(body, MAX_BODY + 1)
            .await
            .map_err(|_| PveError::bare(501, "for data too large"))?;
        if bytes.len() > MAX_BODY {
            return Err(PveError::bare(501, "for data too large"));
        }
        let mut params = BTreeMap::new();
        if matches!(method.as_str(), "POST" | "PUT") {
            let ct = parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok());
            parse_body(ct, &bytes, &mut params)?;
        } else if !bytes.is_empty() {
            return Err(PveError::bare(
                501,
                format!("Unexpected content for method '{method}'"),
            ));
        }
        if let Some(q) = parts.uri.query() {
            decode_urlencoded(q.as_bytes(), &mut params);
        }
        params.remove("_dc");
        Ok((rel, params))
    }
    .await;

    let (rel, raw) = match early {
        Ok(x) => x,
        Err(e) => {
            journal(
                &mut ctx.shared.inner.lock(),
                &ctx.site,
                &method,
                &rec,
                e.status,
                e.reason(),
            );
            return render_err(&e, version);
        }
    };
    rec.path = rel.clone();
    rec.params = raw.iter().map(|(k, v)| (k.clone(), v.as_text())).collect();
    let creds = find_creds(&parts.headers);
    let csrf = parts
        .headers
        .get("csrfpreventiontoken")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);

    // Auth, route, validation, faults — under the lock.
    let prepared = {
        let mut inner = ctx.shared.inner.lock();
        let r = prepare(
            &mut inner,
            &ctx.site,
            &method,
            &rel,
            raw,
            &creds,
            csrf.as_deref(),
            &mut rec,
        );
        match r {
            Ok(p) => Ok(p),
            Err(e) => {
                journal(&mut inner, &ctx.site, &method, &rec, e.status, e.reason());
                Err(e)
            }
        }
    };
    let (prepared, fault_err) = match prepared {
        Ok(p) => p,
        Err(e) => {
            if e.status == 401 && ctx.shared.auth_failure_delay {
                tokio::time::sleep(AUTH_DELAY).await;
            }
            return render_err(&e, version);
        }
    };
    if prepared.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(prepared.latency_ms)).await;
    }

    finish(&ctx, &method, rec, prepared, fault_err, version)
}

fn finish(
    ctx: &SiteCtx,
    method: &str,
    rec: Record,
    prepared: Prepared,
    fault_err: Option<PveError>,
    version: crate::version::PveVersion,
) -> Response<Body> {
    let mut inner = ctx.shared.inner.lock();
    if let Some(e) = fault_err {
        journal(&mut inner, &ctx.site, method, &rec, e.status, e.reason());
        return render_err(&e, version);
    }
    match run(&mut inner, &ctx.site, prepared) {
        Ok(reply) => {
            journal(&mut inner, &ctx.site, method, &rec, 200, "OK".into());
            drop(inner);
            render_ok(reply)
        }
        Err(e) => {
            journal(&mut inner, &ctx.site, method, &rec, e.status, e.reason());
            drop(inner);
            render_err(&e, version)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn prepare(
    inner: &mut Inner,
    site_name: &str,
    method: &str,
    rel: &str,
    mut raw: BTreeMap<String, RawParam>,
    creds: &Creds,
    csrf: Option<&str>,
    rec: &mut Record,
) -> Result<(Prepared, Option<PveError>), PveError> {
    let now = inner.now();
    let Some(site) = inner.world.site(site_name) else {
        return Err(PveError::bare(500, "site not loaded"));
    };
    let version = site.version;
    // Who is calling.
    let mut api_token = false;
    let auth: Result<(Identity, bool), PveError> = match creds {
        Creds::None => {
            rec.auth = AuthKind::None;
            Err(PveError::bare(401, "No ticket"))
        }
        Creds::Ticket(t) => match site.access.verify_ticket(t, now) {
            Some(user) => {
                rec.auth = AuthKind::Ticket {
                    userid: user.clone(),
                };
                Ok((
                    Identity {
                        userid: user,
                        tokenid: None,
                    },
                    true,
                ))
            }
            None => {
                rec.auth = match t.rsplit_once('=') {
                    Some((id, _)) if id.contains('!') && !t.starts_with("PVE:") => {
                        AuthKind::TokenInCookie {
                            tokenid: id.to_string(),
                        }
                    }
                    _ => AuthKind::InvalidTicket,
                };
                Err(PveError::bare(401, "Authentication failed!"))
            }
        },
        Creds::Token(v) => {
            api_token = true;
            match site.access.verify_token(v) {
                Some(id) => {
                    rec.auth = AuthKind::ApiToken {
                        tokenid: id.tokenid.clone().unwrap_or_default(),
                    };
                    Ok((id, false))
                }
                None => {
                    rec.auth = AuthKind::InvalidToken {
                        tokenid: v.rsplit_once('=').map_or(v.as_str(), |x| x.0).to_string(),
                    };
                    Err(PveError::bare(401, "Authentication failed!"))
                }
            }
        }
    };
    let (who, via_ticket) = if is_public(method, rel) {
        auth.unwrap_or((
            Identity {
                userid: String::new(),
                tokenid: None,
            },
            false,
        ))
    } else {
        let (who, via_ticket) = auth?;
        if via_ticket && method != "GET" {
            let ok = csrf.is_some_and(|c| site.access.verify_csrf(c, &who.userid, now));
            if !ok {
                return Err(PveError::bare(
                    401,
                    "Permission denied - invalid csrf token",
                ));
            }
        }
        (who, via_ticket)
    };

    // Route lookup: unknown routes answer like PVE's rest_handler. The version's schema
    // tree resolves the template as PVE's find_handler does (literal first, no backtracking).
    let found = crate::schema::ApiSchema::get(version)
        .find_template(rel)
        .and_then(|(t, caps)| handler_for(method, t).map(|r| (r, caps)))
        .filter(|(r, _)| crate::validate::route_exists(version, method, r.template));
    let Some((route, caps)) = found else {
        return Err(PveError::not_implemented(method, rel));
    };
    if api_token && !crate::validate::allows_token(version, method, route) {
        return Err(PveError::perm(Some(format!(
            "URI '{rel}' not available with API token, need proper ticket.\n"
        ))));
    }
    // URI parameters win, but a conflicting duplicate in the body is refused.
    for (k, v) in &caps {
        if let Some(old) = raw.get(k)
            && old.as_text() != *v
        {
            let mut e = BTreeMap::new();
            e.insert(
                k.clone(),
                "duplicate parameter (already defined in URI) with conflicting values!".to_string(),
            );
            return Err(PveError::params(e));
        }
        raw.insert(k.clone(), RawParam::Text(v.clone()));
    }
    let node = caps.get("node").cloned();
    rec.node = node.clone();
    // Validate (needs the typed check before node resolution: PVE validates first).
    let params = crate::validate::validate(version, method, route.template, &raw)?;
    if let Some(n) = &node {
        match site.nodes.get(n) {
            None => {
                return Err(PveError::die(format!(
                    "hostname lookup '{n}' failed - failed to get address info for: {n}: Name or service not known"
                )));
            }
            Some(nd) if !nd.online => return Err(PveError::bare(595, "No route to host")),
            Some(_) => {}
        }
    }
    let hit = inner.faults.check(site_name, method, rel, node.as_deref());
    Ok((
        Prepared {
            handler: route.handler,
            params,
            who,
            via_ticket,
            latency_ms: hit.latency_ms,
        },
        hit.error,
    ))
}

fn run(inner: &mut Inner, site_name: &str, p: Prepared) -> Result<Reply, PveError> {
    let now = inner.now();
    let Some(site) = inner.world.site_mut(site_name) else {
        return Err(PveError::bare(500, "site not loaded"));
    };
    let mut ctx = Ctx {
        site,
        p: p.params,
        who: p.who,
        via_ticket: p.via_ticket,
        now,
    };
    (p.handler)(&mut ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                *k,
                HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("")),
            );
        }
        m
    }

    #[test]
    fn cookie_ticket_wins_over_token_header() {
        let c = find_creds(&h(&[
            ("cookie", "a=b; PVEAuthCookie=PVE%3Aroot@pam%3A1::sig"),
            ("authorization", "PVEAPIToken=root@pam!t=s"),
        ]));
        assert!(matches!(c, Creds::Ticket(t) if t == "PVE:root@pam:1::sig"));
    }

    #[test]
    fn authorization_ticket_then_token() {
        let c = find_creds(&h(&[("authorization", "PVEAuthCookie=PVE:x")]));
        assert!(matches!(c, Creds::Ticket(t) if t == "PVE:x"));
        let c = find_creds(&h(&[("authorization", "PVEAPIToken root@pam!t=s=x")]));
        assert!(matches!(c, Creds::Token(t) if t == "root@pam!t=s=x"));
        assert!(matches!(find_creds(&h(&[])), Creds::None));
        assert!(matches!(
            find_creds(&h(&[("authorization", "Bearer x")])),
            Creds::None
        ));
    }

    #[test]
    fn public_routes_are_pves_list() {
        assert!(is_public("POST", "/access/ticket"));
        assert!(is_public("GET", "/access/domains"));
        assert!(!is_public("PUT", "/access/ticket"));
        assert!(!is_public("GET", "/version"));
    }
}
