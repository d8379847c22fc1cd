//! Property strings (`virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1`), parsed like
//! `PVE::JSONSchema::parse_property_string`: `default_key`, `alias` / `keyAlias`, duplicate
//! keys, booleans accepting `1/0/on/off/yes/no/true/false`, then `check_object` on the result.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::ParamErrors;
use crate::errors::{CheckProp, MISSING, UNKNOWN, add_error};
use crate::facts::Prop;

/// `parse_boolean`: `1|on|yes|true` → 1, `0|off|no|false` → 0, case-insensitive.
pub fn parse_boolean(s: &str) -> Option<bool> {
    let l = s.to_ascii_lowercase();
    match l.as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// Why a property string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PropStrError {
    /// A `die` inside the parser, e.g. `invalid key in comma-separated list property: foo\n`.
    Die(String),
    /// `raise "format error\n", errors => {...}`: per-sub-property messages.
    Format(ParamErrors),
}

impl PropStrError {
    /// The text PVE's exception stringifies to (`$@`), as it lands after `invalid format - `.
    pub(crate) fn message(&self) -> String {
        match self {
            PropStrError::Die(msg) => msg.clone(),
            PropStrError::Format(errors) => {
                let mut msg = String::from("format error\n");
                for (k, v) in errors {
                    msg.push_str(k);
                    msg.push_str(": ");
                    msg.push_str(v);
                    msg.push('\n');
                }
                msg
            }
        }
    }
}

/// Parses `data` with an inline property-string format; `path` prefixes sub-property errors.
pub(crate) fn parse_with(
    format: &BTreeMap<String, Prop>,
    data: &str,
    path: &str,
    check_prop: CheckProp,
) -> Result<BTreeMap<String, String>, PropStrError> {
    let die = |m: String| Err(PropStrError::Die(m));
    let mut res: BTreeMap<String, String> = BTreeMap::new();
    let mut default_key: Option<&str> = None;
    for part in data.split(',') {
        if part.trim().is_empty() {
            continue;
        }
        // `/^([^=]+)=(.+)$/`: a key without `=`, then a non-empty value.
        let kv = part
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty() && *v != "\n");
        if let Some((k, v)) = kv {
            if res.contains_key(k) {
                return die(format!(
                    "duplicate key in comma-separated list property: {k}\n"
                ));
            }
            let mut key = k.to_string();
            let mut schema = format.get(k);
            if let Some(alias) = schema.and_then(|s| s.alias.as_ref()) {
                if let Some(key_alias) = schema.and_then(|s| s.key_alias.as_ref()) {
                    if res.contains_key(key_alias) {
                        return die(format!("key alias '{key_alias}' is already defined\n"));
                    }
                    res.insert(key_alias.clone(), k.to_string());
                }
                key = alias.clone();
                schema = format.get(alias);
            }
            let Some(schema) = schema else {
                return die(format!(
                    "invalid key in comma-separated list property: {key}\n"
                ));
            };
            let mut value = v.to_string();
            if schema.ty.as_deref() == Some("boolean")
                && let Some(b) = parse_boolean(v)
            {
                value = if b { "1" } else { "0" }.to_string();
            }
            res.insert(key, value);
        } else if !part.contains('=') {
            if let Some(dk) = default_key {
                return die(format!(
                    "duplicate key in comma-separated list property: {dk}\n"
                ));
            }
            // Perl walks `keys %$format` (random order); a well-formed format has one default key.
            let Some((dk, _)) = format.iter().find(|(_, p)| p.default_key) else {
                return die(
                    "value without key, but schema does not define a default key\n".to_string(),
                );
            };
            default_key = Some(dk.as_str());
            // `if (!$res->{$default_key})`: an empty or "0" value counts as unset.
            let set = res
                .get(dk.as_str())
                .is_some_and(|v| !v.is_empty() && v != "0");
            if set {
                return die(format!(
                    "duplicate key in comma-separated list property: {dk}\n"
                ));
            }
            res.insert(dk.clone(), part.to_string());
        } else {
            return die("missing key in comma-separated list property\n".to_string());
        }
    }

    let mut errors = ParamErrors::new();
    check_object(path, format, &res, &mut errors, check_prop);
    if errors.is_empty() {
        Ok(res)
    } else {
        Err(PropStrError::Format(errors))
    }
}

/// `check_object` with `additionalProperties => 0` over string values.
fn check_object(
    path: &str,
    format: &BTreeMap<String, Prop>,
    res: &BTreeMap<String, String>,
    errors: &mut ParamErrors,
    check_prop: CheckProp,
) {
    let sub = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    for (k, prop) in format {
        match res.get(k) {
            Some(v) => {
                check_prop(prop, &sub(k), &Value::String(v.clone()), errors);
            }
            // Most keys of a drive or NIC format are absent and optional: skip building
            // their error path unless the absence is an error.
            None if prop.optional || prop.alias.is_some() || prop.ty.as_deref() == Some("null") => {
            }
            None => add_error(errors, &sub(k), MISSING),
        }
    }
    for k in res.keys() {
        match format.get(k) {
            Some(prop) => {
                if let Some(req) = &prop.requires
                    && !res.contains_key(req)
                {
                    add_error(
                        errors,
                        &sub(req),
                        format!("missing property - '{}' requires this property", sub(k)),
                    );
                }
            }
            None => add_error(errors, &sub(k), UNKNOWN),
        }
    }
}
