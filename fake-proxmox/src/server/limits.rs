//! What one world (the server's own, or a tenant's) may take, so that one job of a CI fleet
//! cannot starve the others: request bodies, guests, tasks kept, journal entries, and open
//! connections. Each refusal says which limit it hit and which flag raises it; nothing else
//! is disturbed (the request is refused before it touches the world; a full journal or task
//! list forgets its oldest entries, a ring).
//!
//! Deviation from real PVE: PVE has none of these limits but the 512 KiB of a non-upload
//! body (kept as PVE answers it, `501 for data too large`, below `max_body`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::Json;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum_server::accept::{Accept, NoDelayAcceptor};
use serde_json::json;

use crate::wire::PveError;

/// The limits of one world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one request body, API (uploads included) and control plane (state imports
    /// included); larger ones get `413`.
    pub max_body: usize,
    /// Guests (VMs and containers) of all the world's sites together; a create or clone
    /// past it is refused (`500`, PVE's envelope, the message names the limit).
    pub max_guests: usize,
    /// Tasks kept per site; past it the oldest finished ones are forgotten (running ones
    /// never are).
    pub max_tasks: usize,
    /// Journal entries kept; past it the oldest are dropped.
    pub max_journal: usize,
    /// Connections open at once on a tenant's listeners; one more is answered `503` and
    /// closed. Tenants only (the server's own listeners are not limited).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 256 * 1024 * 1024,
            // Room for the 10,000-VM rehearsal and more; a bound on a shared server's memory.
            max_guests: 100_000,
            max_tasks: crate::tasks::store::MAX_TASKS,
            max_journal: crate::journal::MAX_ENTRIES,
            max_connections: 256,
        }
    }
}

/// The refusal of a request whose `Content-Length` passes `max_body`, before its body is read:
/// the control plane with a JSON `{"error"}`, the API with PVE's envelope. (A body without
/// a length is bounded by the extractors: the API refuses chunked bodies, the control plane
/// reads at most `max_body`.)
pub fn body_refusal(max: usize, req: &Request) -> Option<Response> {
    let n = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n > max as u64)?;
    let msg = format!(
        "request body too large: {n} bytes, the most this server takes is {max} (--max-body)"
    );
    Some(if req.uri().path().starts_with("/_fake") {
        (StatusCode::PAYLOAD_TOO_LARGE, Json(json!({"error": msg}))).into_response()
    } else {
        crate::wire::render_err(&PveError::new(413, msg), crate::version::PveVersion::V9_1)
    })
}

/// The refusal of a create or clone past `max_guests`, or `None`.
pub fn guest_refusal(
    world: &crate::world::World,
    limits: &Limits,
    method: &str,
    template: &str,
) -> Option<PveError> {
    let creates = method == "POST"
        && matches!(
            template,
            "/nodes/{node}/qemu"
                | "/nodes/{node}/lxc"
                | "/nodes/{node}/qemu/{vmid}/clone"
                | "/nodes/{node}/lxc/{vmid}/clone"
        );
    if !creates {
        return None;
    }
    let guests: usize = world.sites.iter().map(|s| s.vms.len() + s.cts.len()).sum();
    (guests >= limits.max_guests).then(|| {
        PveError::new(
            500,
            format!(
                "fake-proxmox limit: this world holds {guests} guests, the most it may (--max-guests {}); delete some first",
                limits.max_guests
            ),
        )
    })
}

/// Open connections of one tenant (all its listeners), against its limit.
#[derive(Debug)]
pub struct Connections {
    open: AtomicUsize,
    max: usize,
}

impl Connections {
    /// No connection open yet; at most `max` served at once.
    pub fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            open: AtomicUsize::new(0),
            max,
        })
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// Held by a connection while it is open (its service's clones share it).
#[derive(Debug)]
struct Slot {
    conns: Arc<Connections>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether a connection is past its tenant's limit: a request extension, read by
/// [`connection_refusal`].
#[derive(Clone, Copy, Debug)]
struct OverLimit(usize);

/// The acceptor of a tenant's listeners: counts the connection and marks its requests
/// when it is one too many (TCP_NODELAY as the server's own).
#[derive(Clone, Debug)]
pub struct CountingAcceptor {
    conns: Option<Arc<Connections>>,
}

impl CountingAcceptor {
    /// Counts against `conns` (`None`: counts nothing, only sets TCP_NODELAY).
    pub fn new(conns: Option<Arc<Connections>>) -> CountingAcceptor {
        CountingAcceptor { conns }
    }
}

impl<S> Accept<tokio::net::TcpStream, S> for CountingAcceptor {
    type Stream = tokio::net::TcpStream;
    type Service = Counted<S>;
    type Future = std::future::Ready<std::io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let slot = self.conns.as_ref().map(|c| {
            let n = c.open.fetch_add(1, Ordering::Relaxed) + 1;
            let over = (n > c.max).then_some(OverLimit(c.max));
            (Arc::new(Slot { conns: c.clone() }), over)
        });
        let (slot, over) = match slot {
            Some((s, o)) => (Some(s), o),
            None => (None, None),
        };
        let accepted = NoDelayAcceptor::new().accept(stream, ());
        std::future::ready(accepted.into_inner().map(|(stream, ())| {
            (
                stream,
                Counted {
                    inner: service,
                    _slot: slot,
                    over,
                },
            )
        }))
    }
}

/// A connection's service: the router, with the connection's slot and mark.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    _slot: Option<Arc<Slot>>,
    over: Option<OverLimit>,
}

impl<S, B> tower::Service<axum::http::Request<B>> for Counted<S>
where
    S: tower::Service<axum::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: axum::http::Request<B>) -> Self::Future {
        if let Some(o) = self.over {
            req.extensions_mut().insert(o);
        }
        self.inner.call(req)
    }
}

/// The `503` that closes a connection past its tenant's limit, or `None`.
pub fn connection_refusal(req: &Request) -> Option<Response> {
    let OverLimit(max) = req.extensions().get::<OverLimit>().copied()?;
    let msg = format!(
        "too many connections: this tenant has {max} open, the most it may (--max-tenant-connections); close some or reuse them"
    );
    let mut resp = if req.uri().path().starts_with("/_fake") {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": msg}))).into_response()
    } else {
        crate::wire::render_err(&PveError::new(503, msg), crate::version::PveVersion::V9_1)
    };
    resp.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    Some(resp)
}
