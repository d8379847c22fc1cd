//! The checks of `pve-common src/PVE/JSONSchema.pm`: `check_object`, `check_prop` and
//! `check_type`, with their exact messages and their order (type, format, pattern,
//! maxLength, minLength, maximum, minimum, enum — the first failure wins).

use std::collections::BTreeMap;

use serde_json::{Number, Value};

use crate::errors::{MISSING, UNKNOWN, add_error};
use crate::facts::{MethodInfo, Prop, PropFormat};
use crate::propstr::{PropStrError, parse_with};
use crate::{ApiSchema, ParamErrors, PveVersion, RawValue, formats};

fn raw_json(raw: &RawValue) -> Value {
    match raw {
        RawValue::Text(s) => Value::String(s.clone()),
        RawValue::Json(v) => v.clone(),
    }
}

pub(crate) fn validate_params(
    info: &MethodInfo,
    params: &BTreeMap<String, RawValue>,
) -> Result<BTreeMap<String, Value>, ParamErrors> {
    let mut errors = ParamErrors::new();
    let mut out = BTreeMap::new();
    // pve-http-server drops the ExtJS cache buster before anything sees the parameters.
    let params = params.iter().filter(|(k, _)| k.as_str() != "_dc");
    let params: BTreeMap<&String, &RawValue> = params.collect();

    // Pass 1 (check_object's loop over the schema): every defined property.
    for (name, prop) in &info.parameters {
        if name.ends_with("[n]") {
            continue; // indexed options are all optional; present ones are checked below
        }
        if !params.contains_key(name) {
            check_prop(prop, name, &Value::Null, &mut errors);
        }
    }
    for (&name, &raw) in &params {
        if let Some(prop) = info.param(name) {
            let value = match (raw, prop.ty.as_deref()) {
                // pve-http-server makes repeated form keys an array (joined with NUL here),
                // and RESTHandler wraps a single value for an `array` property.
                (RawValue::Text(s), Some("array")) if !s.is_empty() => {
                    Value::Array(s.split('\0').map(|p| Value::String(p.into())).collect())
                }
                _ => raw_json(raw),
            };
            if let Some(typed) = check_prop(prop, name, &value, &mut errors) {
                out.insert(name.clone(), typed);
            }
        }
    }
    // Pass 2 (check_object's loop over the value): `requires`, then unknown keys.
    for (&name, &raw) in &params {
        match info.param(name) {
            Some(prop) => {
                if let Some(req) = &prop.requires {
                    let present = params
                        .get(req)
                        .is_some_and(|v| !matches!(v, RawValue::Json(Value::Null)));
                    if !present {
                        add_error(
                            &mut errors,
                            req,
                            format!("missing property - '{name}' requires this property"),
                        );
                    }
                }
            }
            None if info.additional_properties => {
                out.insert(name.clone(), raw_json(raw));
            }
            None => add_error(&mut errors, name, UNKNOWN),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// `is_integer`: `^[+-]?\d+$`.
pub(crate) fn is_integer(s: &str) -> bool {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// `is_number`: `^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`.
pub(crate) fn is_number(s: &str) -> bool {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => (digits(a) && (b.is_empty() || digits(b))) || (a.is_empty() && digits(b)),
        None => digits(mantissa),
    };
    let exp_ok = match exp {
        None => true,
        Some(e) => digits(e.strip_prefix(['+', '-']).unwrap_or(e)),
    };
    mantissa_ok && exp_ok
}

/// Perl's stringification of a JSON number (`%.15g`-like for floats).
fn perl_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// Formats a schema bound the way Perl prints it (`4094`, not `4094.0`).
pub(crate) fn perl_bound(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

fn type_name(ty: Option<&str>) -> &str {
    ty.unwrap_or("any")
}

/// `check_prop` for one value. Returns the typed value when the value passed.
pub(crate) fn check_prop(
    prop: &Prop,
    path: &str,
    value: &Value,
    errors: &mut ParamErrors,
) -> Option<Value> {
    let ty = prop.ty.as_deref();
    let scalar: String = match value {
        Value::Null => {
            if ty != Some("null") && !prop.optional && prop.alias.is_none() {
                add_error(errors, path, MISSING);
            }
            return None;
        }
        Value::Array(items) => return check_array(prop, path, value, items, errors),
        Value::Object(_) => return check_object(ty, path, value, errors),
        Value::Bool(b) => return check_bool(ty, path, *b, errors),
        Value::Number(n) => perl_number(n),
        Value::String(s) => s.clone(),
    };
    if let Err(e) = check_scalar_type(ty, &scalar) {
        add_error(errors, path, e);
        return None;
    }
    if !check_scalar(prop, path, &scalar, errors) {
        return None;
    }
    Some(typed(ty, scalar))
}

/// A JSON array: only `array` (items checked one by one) or an untyped property takes it.
fn check_array(
    prop: &Prop,
    path: &str,
    value: &Value,
    items: &[Value],
    errors: &mut ParamErrors,
) -> Option<Value> {
    match prop.ty.as_deref() {
        Some("array") => {
            let mut typed = Vec::with_capacity(items.len());
            let before = errors.len();
            for (i, item) in items.iter().enumerate() {
                match &prop.items {
                    Some(item_schema) => {
                        let at = format!("{path}[{i}]");
                        if let Some(t) = check_prop(item_schema, &at, item, errors) {
                            typed.push(t);
                        }
                    }
                    None => typed.push(item.clone()),
                }
            }
            (errors.len() == before).then_some(Value::Array(typed))
        }
        None | Some("any") => Some(value.clone()),
        Some(t) => {
            add_error(
                errors,
                path,
                format!("type check ('{t}') failed - got ARRAY"),
            );
            None
        }
    }
}

/// A JSON object (a Perl HASH reference).
fn check_object(
    ty: Option<&str>,
    path: &str,
    value: &Value,
    errors: &mut ParamErrors,
) -> Option<Value> {
    match ty {
        Some("object") | None | Some("any") => Some(value.clone()),
        Some("array") => {
            add_error(errors, path, "type check ('array') failed");
            None
        }
        Some(t) => {
            add_error(
                errors,
                path,
                format!("type check ('{t}') failed - got HASH"),
            );
            None
        }
    }
}

/// A JSON boolean is a blessed reference in Perl: only `boolean` accepts it, and no
/// format/enum checks run on references.
fn check_bool(ty: Option<&str>, path: &str, b: bool, errors: &mut ParamErrors) -> Option<Value> {
    match ty {
        Some("boolean") | None | Some("any") => Some(Value::from(u8::from(b))),
        Some(t @ ("array" | "object")) => {
            add_error(errors, path, format!("type check ('{t}') failed"));
            None
        }
        Some(t) => {
            add_error(
                errors,
                path,
                format!("type check ('{t}') failed - got JSON::PP::Boolean"),
            );
            None
        }
    }
}

/// `check_type` for a plain scalar: the error text when it is not of the type.
fn check_scalar_type(ty: Option<&str>, scalar: &str) -> Result<(), String> {
    match ty {
        Some("boolean") if scalar != "1" && scalar != "0" => {
            Err(format!("type check ('boolean') failed - got '{scalar}'"))
        }
        Some("integer") if !is_integer(scalar) => {
            Err(format!("type check ('integer') failed - got '{scalar}'"))
        }
        Some("number") if !is_number(scalar) => {
            Err(format!("type check ('number') failed - got '{scalar}'"))
        }
        Some(t @ ("array" | "object")) => Err(format!("type check ('{t}') failed")),
        Some("null") => Err(format!(
            "type check ('{}') failed - value is not null",
            type_name(ty)
        )),
        _ => Ok(()),
    }
}

/// The checks after `check_type` for a non-reference value.
pub(crate) fn check_scalar(prop: &Prop, path: &str, value: &str, errors: &mut ParamErrors) -> bool {
    if let Some(format) = &prop.format
        && let Err(msg) = check_format(format, value, path)
    {
        add_error(errors, path, format!("invalid format - {msg}"));
        return false;
    }
    if prop.pattern.is_some() {
        let matched = prop.regex().is_none_or(|re| re.is_match(value));
        if !matched {
            add_error(errors, path, "value does not match the regex pattern");
            return false;
        }
    }
    let len = value.chars().count();
    if let Some(max) = prop.max_length
        && len > max
    {
        add_error(
            errors,
            path,
            format!("value may only be {max} characters long"),
        );
        return false;
    }
    if let Some(min) = prop.min_length
        && len < min
    {
        add_error(
            errors,
            path,
            format!("value must be at least {min} characters long"),
        );
        return false;
    }
    if is_number(value) {
        let v = value
            .trim_end_matches('\n')
            .parse::<f64>()
            .unwrap_or(f64::NAN);
        if let Some(max) = prop.maximum
            && v > max
        {
            let max = perl_bound(max);
            add_error(
                errors,
                path,
                format!("value must have a maximum value of {max}"),
            );
            return false;
        }
        if let Some(min) = prop.minimum
            && v < min
        {
            let min = perl_bound(min);
            add_error(
                errors,
                path,
                format!("value must have a minimum value of {min}"),
            );
            return false;
        }
    }
    if let Some(values) = &prop.enumeration
        && !values.iter().any(|e| e == value)
    {
        add_error(
            errors,
            path,
            format!(
                "value '{value}' does not have a value in the enumeration '{}'",
                values.join(", ")
            ),
        );
        return false;
    }
    true
}

/// The JSON value a handler sees for a validated scalar.
fn typed(ty: Option<&str>, scalar: String) -> Value {
    let trimmed = scalar.trim_end_matches('\n');
    match ty {
        Some("boolean") => Value::from(u8::from(trimmed == "1")),
        Some("integer") => {
            let digits = trimmed.strip_prefix('+').unwrap_or(trimmed);
            if let Ok(i) = digits.parse::<i64>() {
                Value::from(i)
            } else if let Ok(u) = digits.parse::<u64>() {
                Value::from(u)
            } else {
                digits
                    .parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map_or(Value::String(scalar), Value::Number)
            }
        }
        Some("number") => {
            let digits = trimmed.strip_prefix('+').unwrap_or(trimmed);
            if let Ok(i) = digits.parse::<i64>() {
                Value::from(i)
            } else {
                digits
                    .parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map_or(Value::String(scalar), Value::Number)
            }
        }
        _ => Value::String(scalar),
    }
}

/// Checks `value` against a format; `Err` holds PVE's `die` text (usually ending in `\n`).
pub(crate) fn check_format(format: &PropFormat, value: &str, path: &str) -> Result<(), String> {
    match format {
        PropFormat::Hash(h) => parse_with(h, value, path, check_prop)
            .map(|_| ())
            .map_err(|e| e.message()),
        PropFormat::Named(name) => {
            if name == "regex" {
                return Ok(());
            }
            // `$format =~ m/^(.*?)(?:-(list|opt))?$/`
            let (base, kind) = if let Some(b) = name.strip_suffix("-list") {
                (b, Kind::List)
            } else if let Some(b) = name.strip_suffix("-opt") {
                (b, Kind::Opt)
            } else {
                (name.as_str(), Kind::One)
            };
            if let Some(hash) = formats::named_hash(base) {
                if kind != Kind::One {
                    return Err(format!(
                        "'-{}' format must have code ref, not hash\n",
                        kind.name()
                    ));
                }
                let parsed = parse_with(hash, value, path, check_prop).map_err(|e| e.message())?;
                // pve-storage registers `prune-backups` with a verify function.
                if base == "prune-backups" {
                    crate::prune::validate_prune_backups(&parsed)?;
                }
                return Ok(());
            }
            match kind {
                Kind::One => formats::check_named(base, value),
                Kind::Opt if value.is_empty() || value == "0" => Ok(()),
                Kind::Opt => formats::check_named(base, value),
                Kind::List => {
                    formats::split_list(value).try_for_each(|v| formats::check_named(base, v))
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    One,
    List,
    Opt,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::One => "none",
            Kind::List => "list",
            Kind::Opt => "opt",
        }
    }
}

/// Parses a property string the way PVE parses the option or format `format_key`:
/// an option name (`net0`, `scsi1`, `ipconfig0`, `memory`, `agent`, `efidisk0`, …, looked up in
/// the PVE 9.1 VM config schema) or a named format (`pve-qm-ipconfig`, `pve-qm-boot`, …).
///
/// Returns the keys as PVE stores them (aliases resolved, `keyAlias` filled in: `virtio=MAC`
/// gives `model=virtio` and `macaddr=MAC`; booleans as `1`/`0`). Errors are keyed like PVE's:
/// `net0.bridge` → message for a bad sub-property, `net0` → message for a malformed string.
pub fn parse_property_string(
    format_key: &str,
    value: &str,
) -> Result<BTreeMap<String, String>, ParamErrors> {
    let unknown = || {
        let mut e = ParamErrors::new();
        e.insert(
            format_key.to_string(),
            format!("unknown format: {format_key}\n"),
        );
        e
    };
    let hash: &BTreeMap<String, Prop> = if let Some(h) = formats::named_hash(format_key) {
        h
    } else {
        let schema = ApiSchema::get(PveVersion::V9_1);
        let option = schema
            .method("PUT", "/nodes/{node}/qemu/{vmid}/config")
            .and_then(|m| m.param(format_key));
        match option.and_then(|p| p.format.as_ref()) {
            Some(PropFormat::Hash(h)) => h,
            Some(PropFormat::Named(n)) => formats::named_hash(n).ok_or_else(unknown)?,
            None => return Err(unknown()),
        }
    };
    parse_with(hash, value, format_key, check_prop).map_err(|e| match e {
        PropStrError::Die(msg) => {
            let mut errors = ParamErrors::new();
            errors.insert(format_key.to_string(), msg);
            errors
        }
        PropStrError::Format(errors) => errors,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lists_split_like_split_list() {
        let f = PropFormat::Named("pve-configid-list".into());
        assert!(check_format(&f, "net0,scsi1;ide2 virtio0", "delete").is_ok());
        assert_eq!(
            check_format(&f, "net0,9x", "delete").unwrap_err(),
            "invalid configuration ID '9x'\n"
        );
    }

    #[test]
    fn integers_and_numbers_follow_perl_regexes() {
        for ok in ["0", "+5", "-12", "007"] {
            assert!(is_integer(ok), "{ok}");
        }
        for bad in ["", "+", "1.0", "1e3", " 1", "x"] {
            assert!(!is_integer(bad), "{bad}");
        }
        for ok in ["1", "1.5", "1.", ".5", "-2e10", "+3E-2"] {
            assert!(is_number(ok), "{ok}");
        }
        for bad in ["", ".", "e5", "1e", "1.2.3", "inf", "NaN", "0x10"] {
            assert!(!is_number(bad), "{bad}");
        }
    }

    #[test]
    fn bounds_print_like_perl() {
        assert_eq!(perl_bound(4094.0), "4094");
        assert_eq!(perl_bound(0.5), "0.5");
        assert_eq!(perl_bound(999_999_999.0), "999999999");
    }
}
