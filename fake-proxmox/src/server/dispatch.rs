//! The request pipeline of the emulated API, in PVE's order: HTTP-layer checks, body,
//! credentials (+CSRF), route lookup (501), API-token refusal, duplicate parameters,
//! schema validation, node resolution, faults, then the handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Response;

use crate::access::model::Identity;
use crate::journal::{AuthKind, JournalEntry};

use crate::route::Ctx;
use crate::router::handler_for;
use crate::schema::RawValue;
use crate::server::http::{Creds, find_creds, read_request};
use crate::server::state::VersionHint;
use crate::server::state::{Inner, SiteCtx};
use crate::version::PveVersion;
use crate::wire::{PveError, Reply, render_err, render_ok};

const AUTH_DELAY: Duration = Duration::from_secs(3);

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
    handler: crate::route::Handler,
    /// The route's schema path (the handler may serve several families' paths).
    template: &'static str,
    params: crate::wire::Params,
    who: Identity,
    via_ticket: bool,
    latency_ms: u64,
    answer_latency_ms: u64,
    /// The listener's certificate, for the handlers that hand out the cluster's CA.
    ca_pem: Option<Arc<str>>,
}

/// Mutable record of one request for the journal.
struct Record {
    path: String,
    params: BTreeMap<String, String>,
    auth: AuthKind,
    node: Option<String>,
    /// When the request arrived, for its latency in the journal.
    arrived: Instant,
    received_at: f64,
    /// How long the answer is held after it is journaled (a fault rule, the 401 delay).
    hold_ms: u64,
}

/// The change count of the state a request saw (counting its own change, if it may have
/// made one): set on every API response, so the durability middleware needs no second
/// acquisition of the lock to learn it.
#[derive(Clone, Copy, Debug)]
pub struct Seen(pub u64);

impl Seen {
    fn on(self, mut resp: Response<Body>) -> Response<Body> {
        resp.extensions_mut().insert(self);
        resp
    }
}

/// Journal a request's outcome; the request is done with the state here, so this is also
/// where it counts its change (any method but GET and HEAD may have made one). Returns the
/// entry the journal's ring let go of, to be freed once the lock is released.
fn journal(
    inner: &mut Inner,
    site: &str,
    method: &str,
    rec: Record,
    status: u16,
    text: String,
) -> (Seen, Option<JournalEntry>) {
    if !matches!(method, "GET" | "HEAD") {
        inner.dirty += 1;
    }
    let seen = Seen(inner.dirty);
    let time = inner.clock.now();
    let duration_ms = rec.arrived.elapsed().as_secs_f64() * 1000.0 + rec.hold_ms as f64;
    let evicted = inner.journal.record(JournalEntry {
        seq: 0,
        time,
        site: site.to_string(),
        method: method.to_string(),
        path: rec.path,
        params: rec.params,
        auth: rec.auth,
        status,
        status_text: text,
        node: rec.node,
        received_at: rec.received_at,
        duration_ms,
    });
    (seen, evicted)
}

fn site_version(inner: &Inner, site: &str) -> crate::version::PveVersion {
    inner
        .world
        .site(site)
        .map_or(crate::version::PveVersion::V9_1, |s| s.version)
}

/// Answers one `/api2/json` request of a site's listener: authentication,
/// the route and its schema check, the faults that match, the handler under the state's lock,
/// and the journal entry, in PVE's envelope.
pub async fn api_handler(State(ctx): State<SiteCtx>, req: Request) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_string();
    let full_path = percent_encoding::percent_decode_str(parts.uri.path())
        .decode_utf8_lossy()
        .into_owned();
    let mut rec = Record {
        path: full_path.clone(),
        params: BTreeMap::new(),
        auth: AuthKind::None,
        node: None,
        arrived: Instant::now(),
        received_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        hold_ms: 0,
    };

    let early = read_request(&method, &full_path, &parts, body).await;

    let (rel, raw, mut spooled) = match early {
        Ok(x) => x,
        Err(e) => {
            let mut inner = ctx.shared.inner.lock();
            let version = site_version(&inner, &ctx.site);
            let (seen, _evicted) =
                journal(&mut inner, &ctx.site, &method, rec, e.status, e.reason());
            drop(inner);
            return seen.on(render_err(&e, version));
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

    // The route and the parameters' check depend on the site's PVE version alone: done here,
    // outside the lock every request serialises on, for the version the site answered as
    // last time (checked under the lock, and done again there should it have changed).
    let (mut values, nulls) = crate::validate::split_raw(raw);
    let api_token = matches!(creds, Creds::Token(_));
    let early = ctx.version.get().map(|v| {
        let r = resolve(v, &method, &rel, &mut values, &nulls, api_token);
        (v, r)
    });
    let incoming = Incoming {
        method: &method,
        rel: &rel,
        values,
        nulls,
        creds: &creds,
        csrf: csrf.as_deref(),
        early,
    };
    let answer = locked_part(&ctx, incoming, rec);
    // A response held by a fault rule was decided before its wait: keep an accepted upload's
    // file now, before anything else can tick its task to the end.
    if let (Some(s), Locked::Done(resp) | Locked::Held(resp, _)) = (spooled.as_mut(), &answer)
        && resp.status().is_success()
    {
        s.keep();
    }
    let resp = match answer {
        Locked::Done(resp) => resp,
        Locked::AuthFailed(resp) => {
            if ctx.shared.auth_failure_delay {
                tokio::time::sleep(AUTH_DELAY).await;
            }
            resp
        }
        Locked::Held(resp, answer_ms) => {
            tokio::time::sleep(Duration::from_millis(answer_ms)).await;
            resp
        }
        Locked::Delayed(d) => {
            tokio::time::sleep(Duration::from_millis(d.prepared.latency_ms)).await;
            let answer_ms = d.prepared.answer_latency_ms;
            let resp = {
                let inner = ctx.shared.inner.lock();
                finish(
                    inner,
                    &ctx.site,
                    &method,
                    d.rec,
                    d.prepared,
                    d.fault_err,
                    d.version,
                )
            };
            if let Some(s) = spooled.as_mut()
                && resp.status().is_success()
            {
                s.keep();
            }
            if answer_ms > 0 {
                tokio::time::sleep(Duration::from_millis(answer_ms)).await;
            }
            resp
        }
    };
    // An accepted upload's task owns its spooled file; a refused one's is removed here.
    drop(spooled);
    resp
}

/// What the part of a request under the lock ends with.
enum Locked {
    Done(Response<Body>),
    /// A 401: PVE delays those to slow down password guessing.
    AuthFailed(Response<Body>),
    /// A fault rule adds latency: the handler runs after it, under the lock again.
    Delayed(Box<DelayedRequest>),
    /// Handled and journaled; a fault rule holds the answer this many milliseconds.
    Held(Response<Body>, u64),
}

struct DelayedRequest {
    rec: Record,
    prepared: Prepared,
    fault_err: Option<PveError>,
    version: crate::version::PveVersion,
}

/// A request as it arrived: method, path below `/api2/json`, raw parameters, credentials.
struct Incoming<'a> {
    method: &'a str,
    rel: &'a str,
    /// The parameters given with a value, as the validator reads them.
    values: BTreeMap<String, RawValue>,
    /// The keys given without a value (`?key`).
    nulls: Vec<String>,
    creds: &'a Creds,
    csrf: Option<&'a str>,
    /// The route and parameters resolved before the lock, for the version they were
    /// resolved for.
    early: Option<(PveVersion, Resolution)>,
}

/// A request's route, the node its path names and its typed parameters.
struct Resolved {
    route: &'static crate::route::Route,
    /// The URI's parameters by name.
    caps: BTreeMap<String, String>,
    node: Option<String>,
    params: crate::wire::Params,
}

/// What [`resolve`] found: the node for the journal (set once the route and its URI
/// parameters are known, as before validation), and the route or the error to answer.
type Resolution = (Option<String>, Result<Resolved, PveError>);

/// The route of `method rel` in `version`'s schema and the parameters checked against it:
/// a pure function of its arguments, `values` as it was when it returns.
fn resolve(
    version: PveVersion,
    method: &str,
    rel: &str,
    values: &mut BTreeMap<String, RawValue>,
    nulls: &[String],
    api_token: bool,
) -> Resolution {
    let (route, info, caps) = match find_route(version, method, rel, api_token) {
        Ok(found) => found,
        Err(e) => {
            // A method of PVE's schema the fake does not model yet: PVE would check its
            // parameters first, so the fake does too, and says 501 only for a valid call.
            let schema = crate::schema::ApiSchema::get(version);
            if e.status == 501
                && let Some((template, caps)) = schema.find_template(rel)
                && crate::validate::route_exists(version, method, template)
            {
                let checked = with_uri_params(&caps, values, nulls, |v| {
                    crate::validate::validate(version, method, template, v)
                });
                if let Err(refused) = checked.and_then(|r| r) {
                    return (None, Err(refused));
                }
            }
            return (None, Err(e));
        }
    };
    let node = caps.get("node").cloned();
    let checked = with_uri_params(&caps, values, nulls, |v| {
        crate::validate::validate_method(info, v)
    });
    match checked {
        Err(conflict) => (None, Err(conflict)),
        Ok(params) => {
            let resolved = params.map(|params| Resolved {
                route,
                caps,
                node: node.clone(),
                params,
            });
            (node, resolved)
        }
    }
}

/// Auth, route, validation, faults and — unless a fault adds latency — the handler, all
/// under one acquisition of the lock: it is the one point every request serialises on.
fn locked_part(ctx: &SiteCtx, incoming: Incoming, mut rec: Record) -> Locked {
    let method = incoming.method;
    let mut inner = ctx.shared.inner.lock();
    let version = site_version(&inner, &ctx.site);
    let (prepared, fault_err) =
        match prepare(&mut inner, &ctx.site, &ctx.version, incoming, &mut rec) {
            Ok((p, fault)) => (
                Prepared {
                    ca_pem: ctx.ca_pem.clone(),
                    ..p
                },
                fault,
            ),
            Err(e) => {
                if e.status == 401 && ctx.shared.auth_failure_delay {
                    rec.hold_ms = AUTH_DELAY.as_millis() as u64;
                }
                let (seen, _evicted) =
                    journal(&mut inner, &ctx.site, method, rec, e.status, e.reason());
                drop(inner);
                let resp = seen.on(render_err(&e, version));
                return if e.status == 401 {
                    Locked::AuthFailed(resp)
                } else {
                    Locked::Done(resp)
                };
            }
        };
    if prepared.latency_ms == 0 {
        let answer_ms = prepared.answer_latency_ms;
        let resp = finish(inner, &ctx.site, method, rec, prepared, fault_err, version);
        return if answer_ms == 0 {
            Locked::Done(resp)
        } else {
            Locked::Held(resp, answer_ms)
        };
    }
    Locked::Delayed(Box::new(DelayedRequest {
        rec,
        prepared,
        fault_err,
        version,
    }))
}

/// Journal the outcome and render it; the reply is serialised after the lock is released.
fn finish(
    mut inner: parking_lot::MutexGuard<'_, Inner>,
    site: &str,
    method: &str,
    rec: Record,
    prepared: Prepared,
    fault_err: Option<PveError>,
    version: crate::version::PveVersion,
) -> Response<Body> {
    let mut rec = rec;
    rec.hold_ms = prepared.answer_latency_ms;
    let outcome = match fault_err {
        Some(e) => Err(e),
        None => run(&mut inner, site, prepared),
    };
    match outcome {
        Ok(reply) => {
            let (seen, _evicted) = journal(&mut inner, site, method, rec, 200, "OK".into());
            drop(inner);
            seen.on(render_ok(reply))
        }
        Err(e) => {
            let (seen, _evicted) = journal(&mut inner, site, method, rec, e.status, e.reason());
            drop(inner);
            seen.on(render_err(&e, version))
        }
    }
}

fn prepare(
    inner: &mut Inner,
    site_name: &str,
    hint: &VersionHint,
    incoming: Incoming,
    rec: &mut Record,
) -> Result<(Prepared, Option<PveError>), PveError> {
    let Incoming {
        method,
        rel,
        mut values,
        nulls,
        creds,
        csrf,
        early,
    } = incoming;
    let now = inner.now();
    let Some(site) = inner.world.site(site_name) else {
        return Err(PveError::bare(500, "site not loaded"));
    };
    let version = site.version;
    let auth = authenticate(site, creds, now, rec);
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
    let api_token = matches!(creds, Creds::Token(_));
    let (node, resolved) = match early {
        Some((v, resolution)) if v == version => resolution,
        _ => resolve(version, method, rel, &mut values, &nulls, api_token),
    };
    hint.set(version);
    rec.node = node;
    let Resolved {
        route,
        caps,
        node,
        params,
    } = resolved?;
    if let Some(n) = node.as_ref().filter(|_| !route.local) {
        check_node_reachable(site, n)?;
    }
    if let Some(refused) =
        crate::cluster::model::quorum_refusal(site, method, route.template, &caps, now)
    {
        return Err(refused);
    }
    if let Some(refused) =
        crate::server::limits::guest_refusal(&inner.world, &inner.limits, method, route.template)
    {
        return Err(refused);
    }
    let hit = inner.faults.check(site_name, method, rel, node.as_deref());
    if hit.stop_clock {
        inner.clock.set_mode(crate::clock::ClockMode::Stepped);
    }
    Ok((
        Prepared {
            handler: route.handler,
            template: route.template,
            params,
            who,
            via_ticket,
            latency_ms: hit.latency_ms,
            answer_latency_ms: hit.answer_latency_ms,
            ca_pem: None,
        },
        hit.error,
    ))
}

/// Who is calling, and whether through a ticket (which then needs the CSRF token for
/// writes); records how the request authenticated, successful or not.
fn authenticate(
    site: &crate::world::Site,
    creds: &Creds,
    now: f64,
    rec: &mut Record,
) -> Result<(Identity, bool), PveError> {
    match creds {
        Creds::None => {
            rec.auth = AuthKind::None;
            Err(PveError::bare(401, "No ticket"))
        }
        Creds::Ticket(t) => match site.access.verify_ticket(t, now) {
            Some(user) => {
                rec.auth = AuthKind::Ticket {
                    userid: user.clone(),
                };
                let who = Identity {
                    userid: user,
                    tokenid: None,
                };
                Ok((who, true))
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
        Creds::Token(v) => match site.access.verify_token(v, now) {
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
        },
    }
}

/// The route, its schema method and its URI captures. Unknown routes answer like PVE's
/// rest_handler; the version's schema tree resolves the template as PVE's find_handler does
/// (literal first, no backtracking). The schema method is looked up once, here.
fn find_route(
    version: crate::version::PveVersion,
    method: &str,
    rel: &str,
    api_token: bool,
) -> Result<
    (
        &'static crate::route::Route,
        &'static crate::schema::MethodInfo,
        BTreeMap<String, String>,
    ),
    PveError,
> {
    let schema = crate::schema::ApiSchema::get(version);
    let found = schema.find_template(rel).and_then(|(t, caps)| {
        let route = handler_for(method, t)?;
        let info = schema.method(method, route.template)?;
        Some((route, info, caps))
    });
    let Some((route, info, caps)) = found else {
        return Err(PveError::not_implemented(method, rel));
    };
    // `allowtoken => 0` in PVE's schema, or ours for a route we pin.
    if api_token && !(route.allowtoken && info.allows_token()) {
        return Err(PveError::perm(Some(format!(
            "URI '{rel}' not available with API token, need proper ticket.\n"
        ))));
    }
    Ok((route, info, caps))
}

/// Runs `f` on the parameters with the URI's own added (URI parameters win, but a
/// conflicting duplicate in the body is refused), then takes them out again: `values` is as
/// it was, for a second resolution against another version.
fn with_uri_params<T>(
    caps: &BTreeMap<String, String>,
    values: &mut BTreeMap<String, RawValue>,
    nulls: &[String],
    f: impl FnOnce(&BTreeMap<String, RawValue>) -> T,
) -> Result<T, PveError> {
    for (k, v) in caps {
        // A key without a value reads as the empty string, which no URI segment is.
        let clashes = nulls.contains(k)
            || values
                .get(k)
                .is_some_and(|old| crate::validate::value_text(old) != v.as_str());
        if clashes {
            let mut e = BTreeMap::new();
            e.insert(
                k.clone(),
                "duplicate parameter (already defined in URI) with conflicting values!".to_string(),
            );
            return Err(PveError::params(e));
        }
    }
    let replaced: Vec<(&String, Option<RawValue>)> = caps
        .iter()
        .map(|(k, v)| (k, values.insert(k.clone(), RawValue::Text(v.clone()))))
        .collect();
    let out = f(values);
    for (k, old) in replaced {
        match old {
            Some(o) => {
                values.insert(k.clone(), o);
            }
            None => {
                values.remove(k);
            }
        }
    }
    Ok(out)
}

/// The node a path names must resolve and be online, as PVE's proxy to it finds out.
fn check_node_reachable(site: &crate::world::Site, node: &str) -> Result<(), PveError> {
    match site.nodes.get(node) {
        None => Err(PveError::die(format!(
            "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
        ))),
        Some(nd) if !nd.online => Err(PveError::bare(595, "No route to host")),
        Some(_) => Ok(()),
    }
}

fn run(inner: &mut Inner, site_name: &str, p: Prepared) -> Result<Reply, PveError> {
    let now = inner.now();
    let Some(site) = inner.world.site_mut(site_name) else {
        return Err(PveError::bare(500, "site not loaded"));
    };
    let ca_pem = p.ca_pem;
    let mut ctx = Ctx {
        site,
        ca_pem: ca_pem.as_deref(),
        req: crate::request::Request {
            who: p.who,
            via_ticket: p.via_ticket,
            template: p.template,
            p: p.params,
            now,
        },
    };
    let reply = (p.handler)(&mut ctx);
    ctx.site.share_storages();
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::http::extract;
    use axum::http::{HeaderMap, HeaderValue};

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

    /// The regexes PVE's lookup amounts to; the hand-written scanner must agree with them.
    fn by_regex(header: &str, re: &str) -> Option<String> {
        let re = regex::Regex::new(re).ok()?;
        let v = re.captures(header)?.get(1)?.as_str();
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(v).collect();
        Some(String::from_utf8_lossy(&decoded).into_owned())
    }

    proptest::proptest! {
        #[test]
        fn scanner_agrees_with_the_regex(
            h in "([ \t;=a-z%0-9]|PVEAuthCookie|PVEAPIToken){0,12}"
        ) {
            proptest::prop_assert_eq!(
                extract(&h, "PVEAuthCookie", true),
                by_regex(&h, r"(?:^|\s|;)PVEAuthCookie(?:=| )([^;]*)")
            );
            proptest::prop_assert_eq!(
                extract(&h, "PVEAPIToken", false),
                by_regex(&h, r"(?:^|\s)PVEAPIToken(?:=| )([^;]*)")
            );
        }
    }

    #[test]
    fn public_routes_are_pves_list() {
        assert!(is_public("POST", "/access/ticket"));
        assert!(is_public("GET", "/access/domains"));
        assert!(!is_public("PUT", "/access/ticket"));
        assert!(!is_public("GET", "/version"));
    }
}
