//! The wire layer: request bodies and parameters in, PVE's envelope and status lines out.
//!
//! Everything PVE-specific about encoding lives here: form and JSON bodies merged with the
//! query string, the 512 KiB body limit, 1/0 booleans, `{"data":..}` with extra top-level
//! keys such as `total`, and error envelopes whose status line is the message's first line.

// PVE's errors and typed parameters are the model's vocabulary too: they live in the world crate.
pub use fake_proxmox_world::wire::{b, error, params};

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

pub use error::{ErrorBody, PveError};
pub use params::{Params, RawParam};

use crate::version::PveVersion;

/// PVE refuses request bodies above this size.
pub const MAX_BODY: usize = 512 * 1024;

/// A successful handler result: `data` plus optional extra top-level keys (`total`, `changes`).
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// The envelope's `data`.
    pub data: Data,
    /// Top-level keys beside `data`, in order (`total` of a paged listing, `changes`).
    pub extra: Vec<(String, Value)>,
}

/// The `data` of a reply: a JSON tree, or a typed payload already serialised by the handler.
#[derive(Debug, Clone)]
pub enum Data {
    /// A JSON tree the envelope serialises.
    Value(Value),
    /// JSON text already serialised (by [`Reply::typed`]), put into the envelope as it is.
    Json(Vec<u8>),
}

impl Default for Data {
    fn default() -> Self {
        Data::Value(Value::Null)
    }
}

impl Reply {
    /// A reply whose `data` is `data`.
    pub fn data(data: Value) -> Self {
        Reply {
            data: Data::Value(data),
            extra: Vec::new(),
        }
    }
    /// A typed payload, serialised at once (the hot polling routes: no JSON tree built).
    pub fn typed<T: serde::Serialize>(data: &T) -> Self {
        let data = match serde_json::to_vec(data) {
            Ok(bytes) => Data::Json(bytes),
            Err(e) => {
                tracing::error!("serialising a reply failed: {e}");
                Data::Value(Value::Null)
            }
        };
        Reply {
            data,
            extra: Vec::new(),
        }
    }
    /// `data: null`, what PVE answers for methods that return nothing.
    pub fn null() -> Self {
        Reply::data(Value::Null)
    }
    /// An index route's listing: `[{key: name}, …]` (`subdir` or `name`, as PVE's index
    /// handlers use one or the other).
    pub fn index(key: &str, names: &[&str]) -> Self {
        let list = names
            .iter()
            .map(|n| {
                let mut m = serde_json::Map::new();
                m.insert(key.to_string(), Value::from(*n));
                Value::Object(m)
            })
            .collect();
        Reply::data(Value::Array(list))
    }
    /// Adds a top-level key beside `data` (e.g. `total`).
    pub fn with(mut self, key: &str, v: Value) -> Self {
        self.extra.push((key.to_string(), v));
        self
    }
}

fn base_headers(h: &mut HeaderMap) {
    h.insert(
        header::SERVER,
        HeaderValue::from_static("pve-api-daemon/3.0"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=0"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    if let Some(v) = httpdate_now() {
        h.insert(header::EXPIRES, v);
    }
}

thread_local! {
    /// The formatted date changes once a second, so it is formatted once a second per thread.
    static HTTP_DATE: std::cell::RefCell<(i64, Option<HeaderValue>)> =
        const { std::cell::RefCell::new((i64::MIN, None)) };
}

fn httpdate_now() -> Option<HeaderValue> {
    let now = time::OffsetDateTime::now_utc();
    HTTP_DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != now.unix_timestamp() {
            let fmt = time::macros::format_description!(
                "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
            );
            let text = now.format(&fmt).unwrap_or_default();
            *cached = (now.unix_timestamp(), HeaderValue::from_str(&text).ok());
        }
        cached.1.clone()
    })
}

fn json_response(status: StatusCode, reason: Option<String>, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    base_headers(resp.headers_mut());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json;charset=UTF-8"),
    );
    if let Some(r) = reason
        && let Ok(rp) = hyper::ext::ReasonPhrase::try_from(r.into_bytes())
    {
        resp.extensions_mut().insert(rp);
    }
    resp
}

/// Render a successful reply: `{"data":…}` and the extra keys.
pub fn render_ok(reply: Reply) -> Response<Body> {
    let mut body = Vec::with_capacity(256);
    if let Err(e) = write_envelope(&mut body, &reply) {
        tracing::error!("serialising a reply failed: {e}");
        body = b"{\"data\":null}".to_vec();
    }
    json_response(StatusCode::OK, None, body)
}

fn write_envelope(body: &mut Vec<u8>, reply: &Reply) -> serde_json::Result<()> {
    body.extend_from_slice(b"{\"data\":");
    match &reply.data {
        Data::Json(bytes) => body.extend_from_slice(bytes),
        Data::Value(v) => serde_json::to_writer(&mut *body, v)?,
    }
    for (k, v) in &reply.extra {
        body.push(b',');
        serde_json::to_writer(&mut *body, k)?;
        body.push(b':');
        serde_json::to_writer(&mut *body, v)?;
    }
    body.push(b'}');
    Ok(())
}

/// Render an error as the given PVE version does (the `message` key exists since
/// libpve-http-server-perl 5.2.0, i.e. on 8.4 and 9.x but not on 7.x).
pub fn render_err(err: &PveError, version: PveVersion) -> Response<Body> {
    let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match err.body {
        ErrorBody::Empty => Vec::new(),
        ErrorBody::Envelope => {
            let mut m = Map::new();
            m.insert("data".into(), Value::Null);
            if let Some(errors) = &err.errors {
                m.insert("errors".into(), json!(errors));
            }
            if version.has_error_message_key() {
                m.insert("message".into(), Value::String(err.message.clone()));
            }
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        }
    };
    json_response(status, Some(err.reason()), body)
}

/// Decode `a=1&b=2` as PVE's `decode_urlencoded`: `+` is space, `%XX` unescaped, values
/// decoded as UTF-8 non-strictly (invalid sequences become U+FFFD), repeated keys joined by NUL.
pub fn decode_urlencoded(data: &[u8], into: &mut BTreeMap<String, RawParam>) {
    for kv in data.split(|c| *c == b'&' || *c == b';') {
        if kv.is_empty() {
            continue;
        }
        let mut it = kv.splitn(2, |c| *c == b'=');
        let k = unescape(it.next().unwrap_or_default());
        let key = String::from_utf8_lossy(&k).into_owned();
        match it.next() {
            Some(v) => {
                let v = String::from_utf8_lossy(&unescape(v)).into_owned();
                let joined = match into.get(&key) {
                    Some(RawParam::Text(old)) => format!("{old}\0{v}"),
                    _ => v,
                };
                into.insert(key, RawParam::Text(joined));
            }
            None => {
                into.entry(key).or_insert(RawParam::Null);
            }
        }
    }
}

fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => {
                let h = std::str::from_utf8(&s[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match h {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// Parse a POST/PUT body as PVE's `extract_params` does. A JSON body that does not decode
/// makes the HTTP layer answer 501 with JSON::XS's message as the reason phrase.
pub fn parse_body(
    content_type: Option<&str>,
    body: &[u8],
    into: &mut BTreeMap<String, RawParam>,
) -> Result<(), PveError> {
    let ct = content_type
        .and_then(|c| c.split([';', ',']).next())
        .map(|c| c.trim().to_ascii_lowercase());
    if ct.as_deref() == Some("application/json") {
        if body.iter().all(|c| c.is_ascii_whitespace()) {
            return Err(json_error(
                "malformed JSON string, neither tag, array, object, number, string or atom, at character offset 0 (before \"(end of string)\")",
            ));
        }
        let v: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                let msg = if std::str::from_utf8(body).is_err() {
                    "malformed UTF-8 character in JSON string".to_string()
                } else {
                    format!("malformed JSON string: {e}")
                };
                return Err(json_error(&msg));
            }
        };
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    into.insert(k, RawParam::Json(v));
                }
                Ok(())
            }
            _ => Err(PveError::bare(
                501,
                "Not a HASH reference at /usr/share/perl5/PVE/APIServer/AnyEvent.pm line 1005.",
            )),
        }
    } else {
        decode_urlencoded(body, into);
        Ok(())
    }
}

fn json_error(msg: &str) -> PveError {
    PveError::bare(
        501,
        format!("{msg} at /usr/share/perl5/PVE/APIServer/AnyEvent.pm line 1005.\n"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn index_replies_list_one_key_per_entry() {
        let Data::Value(v) = Reply::index("subdir", &["config", "status"]).data else {
            panic!("an index reply is a JSON tree");
        };
        assert_eq!(
            v,
            serde_json::json!([{"subdir": "config"}, {"subdir": "status"}])
        );
    }

    fn text(m: &BTreeMap<String, RawParam>, k: &str) -> String {
        match m.get(k) {
            Some(RawParam::Text(s)) => s.clone(),
            other => panic!("{k}: {other:?}"),
        }
    }

    #[test]
    fn urlencoded_like_pve() {
        let mut m = BTreeMap::new();
        decode_urlencoded(b"net0=virtio%2Cbridge%3Dvmbr0&name=a+b&x=%zz&flag", &mut m);
        assert_eq!(text(&m, "net0"), "virtio,bridge=vmbr0");
        assert_eq!(text(&m, "name"), "a b");
        assert_eq!(text(&m, "x"), "%zz");
        assert!(matches!(m.get("flag"), Some(RawParam::Null)));
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        let mut m = BTreeMap::new();
        decode_urlencoded(b"name=%ff%fe", &mut m);
        assert_eq!(text(&m, "name"), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn repeated_keys_join_with_nul() {
        let mut m = BTreeMap::new();
        decode_urlencoded(b"a=1&a=2", &mut m);
        assert_eq!(text(&m, "a"), "1\u{0}2");
    }

    #[test]
    fn trailing_percent_is_kept() {
        let mut m = BTreeMap::new();
        decode_urlencoded(b"a=5%&b=%4", &mut m);
        assert_eq!(text(&m, "a"), "5%");
        assert_eq!(text(&m, "b"), "%4");
    }

    #[test]
    fn bad_json_is_http_layer_501() {
        let mut m = BTreeMap::new();
        let e = parse_body(Some("application/json"), b"{nope", &mut m).unwrap_err();
        assert_eq!(e.status, 501);
        assert_eq!(e.body, ErrorBody::Empty);
        let e = parse_body(Some("application/json"), b"[1]", &mut m).unwrap_err();
        assert_eq!(e.status, 501);
        parse_body(
            Some("application/json; charset=utf-8"),
            br#"{"cores":2}"#,
            &mut m,
        )
        .unwrap();
        assert!(matches!(m.get("cores"), Some(RawParam::Json(_))));
    }
}
