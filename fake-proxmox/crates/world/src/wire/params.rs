//! Request parameters: raw as they came off the wire, typed after schema validation.

use std::collections::BTreeMap;

use serde_json::Value;

use super::PveError;

/// A parameter value as received: form/query text, or a JSON body value.
#[derive(Clone, Debug, PartialEq)]
pub enum RawParam {
    /// Form or query text.
    Text(String),
    /// A value from a JSON body.
    Json(Value),
    /// `key` without `=value` in a query string.
    Null,
}

impl RawParam {
    /// The value as text, the way Perl would stringify it (for duplicate checks, journal).
    pub fn as_text(&self) -> String {
        match self {
            RawParam::Text(s) => s.clone(),
            RawParam::Json(v) => json_text(v).into_owned(),
            RawParam::Null => String::new(),
        }
    }
}

/// A JSON body's value as text, the way Perl would stringify it (`true` is `1`).
pub fn json_text(v: &Value) -> std::borrow::Cow<'_, str> {
    match v {
        Value::String(s) => s.as_str().into(),
        Value::Bool(b) => u8::from(*b).to_string().into(),
        v => v.to_string().into(),
    }
}

/// Validated parameters, typed as the schema says (integers as numbers, booleans 0/1).
/// Getters are lenient about representation so handlers never care where a value came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params(pub BTreeMap<String, Value>);

impl Params {
    /// Whether `k` is given and not null.
    pub fn has(&self, k: &str) -> bool {
        self.0.get(k).is_some_and(|v| !v.is_null())
    }

    /// `k` as text (numbers as written, booleans as `0`/`1`); `None` when absent or null.
    pub fn str(&self, k: &str) -> Option<String> {
        match self.0.get(k)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            Value::Bool(b) => Some(u8::from(*b).to_string()),
            v => Some(v.to_string()),
        }
    }

    /// `k` as an integer (from a number, numeric text or a boolean); `None` otherwise.
    pub fn int(&self, k: &str) -> Option<i64> {
        match self.0.get(k)? {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            Value::String(s) => s.trim().parse().ok(),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// `k` as a boolean (Perl truth: `0` and empty are false); `None` when absent or not scalar.
    pub fn bool(&self, k: &str) -> Option<bool> {
        match self.0.get(k)? {
            Value::Bool(b) => Some(*b),
            Value::Number(n) => Some(n.as_i64().unwrap_or(0) != 0),
            Value::String(s) => Some(!matches!(s.as_str(), "" | "0")),
            _ => None,
        }
    }

    /// `k` as a boolean, false when absent.
    pub fn flag(&self, k: &str) -> bool {
        self.bool(k).unwrap_or(false)
    }

    /// A required string; missing gives PVE's parameter error.
    pub fn req_str(&self, k: &str) -> Result<String, PveError> {
        self.str(k)
            .ok_or_else(|| PveError::param(k, "property is missing and it is not optional"))
    }

    /// A required integer.
    ///
    /// # Errors
    /// PVE's parameter error when it is missing or not an integer.
    pub fn req_int(&self, k: &str) -> Result<i64, PveError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Err(PveError::param(
                k,
                "property is missing and it is not optional",
            )),
            Some(_) => self.int(k).ok_or_else(|| {
                PveError::param(
                    k,
                    format!(
                        "type check ('integer') failed - got '{}'",
                        self.str(k).unwrap_or_default()
                    ),
                )
            }),
        }
    }

    /// The `vmid` parameter as a VMID.
    ///
    /// # Errors
    /// PVE's parameter error when it is missing, not an integer or out of range.
    pub fn vmid(&self) -> Result<u32, PveError> {
        let v = self.req_int("vmid")?;
        u32::try_from(v)
            .map_err(|_| PveError::param("vmid", "value must have a maximum value of 999999999"))
    }

    /// The names of the parameters given.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }
}
