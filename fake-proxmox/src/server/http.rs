//! The HTTP layer of the API (PVE's AnyEvent.pm and Formatter.pm): credentials from the
//! headers, then the method, transfer encoding, format and body of a request — with the
//! multipart upload streamed to its spool file ([`super::upload`]).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::HeaderMap;

use crate::server::upload::{self, Spooled};
use crate::wire::{MAX_BODY, PveError, RawParam, decode_urlencoded, parse_body};

/// The value of `name` in a credentials header, found as PVE's Formatter.pm looks it up:
/// the name at the start or after whitespace (or `;` where `after_semicolon`), then `=` or a
/// space, the value running to the next `;`, percent-decoded.
///
/// Hand-written rather than a regex: it runs on every request, and the regex search was a
/// measurable part of the per-request CPU in the load benchmark's profile.
pub(super) fn extract(header: &str, name: &str, after_semicolon: bool) -> Option<String> {
    let bytes = header.as_bytes();
    let mut from = 0;
    while let Some(i) = header[from..].find(name) {
        let at = from + i;
        let starts_ok = at == 0 || {
            let b = bytes[at - 1];
            b.is_ascii_whitespace() || (after_semicolon && b == b';')
        };
        let rest = &header[at + name.len()..];
        if starts_ok && (rest.starts_with('=') || rest.starts_with(' ')) {
            let v = rest[1..].split(';').next().unwrap_or("");
            return Some(
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned(),
            );
        }
        from = at + 1;
    }
    None
}

/// Credentials as found on the request, in PVE's lookup order.
#[derive(Debug, Clone)]
pub enum Creds {
    /// Neither a ticket nor a token.
    None,
    /// A ticket, from the `PVEAuthCookie` cookie or an `Authorization: PVEAuthCookie=` header.
    Ticket(String),
    /// The value of an `Authorization: PVEAPIToken=` header (`user@realm!name=secret`).
    Token(String),
}

/// The credentials of a request's headers, looked up in PVE's order: the `PVEAuthCookie`
/// cookie, then an `Authorization: PVEAuthCookie=` header, then `Authorization: PVEAPIToken=`.
pub fn find_creds(headers: &HeaderMap) -> Creds {
    // Several headers of one name read as one joined value; the usual single one is borrowed.
    let h = |n: &str| -> std::borrow::Cow<'_, str> {
        let mut values = headers.get_all(n).iter().filter_map(|v| v.to_str().ok());
        match (values.next(), values.next()) {
            (None, _) => "".into(),
            (Some(one), None) => one.into(),
            (Some(a), Some(b)) => std::iter::once(a)
                .chain(std::iter::once(b))
                .chain(values)
                .collect::<Vec<_>>()
                .join("; ")
                .into(),
        }
    };
    let cookie = h("cookie");
    let authz = h("authorization");
    if let Some(t) = extract(&cookie, "PVEAuthCookie", true) {
        return Creds::Ticket(t);
    }
    if let Some(t) = extract(&authz, "PVEAuthCookie", true) {
        return Creds::Ticket(t);
    }
    if let Some(t) = extract(&authz, "PVEAPIToken", false) {
        return Creds::Token(t);
    }
    Creds::None
}

/// The HTTP layer (AnyEvent.pm): method, transfer encoding, format and body; the path below
/// `/api2/json` and the raw parameters (body, then query).
pub(super) async fn read_request(
    method: &str,
    full_path: &str,
    parts: &axum::http::request::Parts,
    body: Body,
) -> Result<(String, BTreeMap<String, RawParam>, Option<Spooled>), PveError> {
    if !matches!(method, "GET" | "POST" | "PUT" | "DELETE") {
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
    let ct = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    if method == "POST" && upload::is_multipart(ct) {
        if !upload::is_upload_path(&rel) {
            return Err(PveError::bare(
                501,
                "multipart/form-data is only accepted for uploads",
            ));
        }
        let mut params = BTreeMap::new();
        let spooled = upload::read_multipart(ct.unwrap_or(""), body, &mut params).await?;
        if let Some(q) = parts.uri.query() {
            decode_urlencoded(q.as_bytes(), &mut params);
        }
        params.remove("_dc");
        return Ok((rel, params, spooled));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY + 1)
        .await
        .map_err(|_| PveError::bare(501, "for data too large"))?;
    if bytes.len() > MAX_BODY {
        return Err(PveError::bare(501, "for data too large"));
    }
    let mut params = BTreeMap::new();
    if matches!(method, "POST" | "PUT") {
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
    // Only the HTTP layer names the spooled file (PVE: only on the trusted local port).
    params.remove("tmpfilename");
    Ok((rel, params, None))
}
