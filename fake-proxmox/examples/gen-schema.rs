//! Generates the committed schema facts (`fake-proxmox/crates/schema/data/pve-*.json`) from the
//! extracted Proxmox VE API dumps in `../shared/pve-api/`: one file per release, each the whole
//! API of that release (`pve-7.4-schema.json` is PVE 7.4-16, `pve-8.4-schema.json` 8.4.5,
//! `pve-9.1-schema.json` 9.1), so a site of any release validates every route it has.
//!
//! Only facts survive: parameter names, types, formats, ranges, lengths, patterns, enums,
//! optional/default flags, property-string structure (`default_key`, `alias`, `keyAlias`),
//! `requires`, and the method flags (`allowtoken`, `protected`, `proxyto`, permission checks).
//! Every human-written text (`description`, `verbose_description`, `typetext`,
//! `format_description`, permission descriptions, `returns`) is dropped.
//!
//! The dumps come in two layouts: a method's `parameters` either maps names to definitions
//! (with `additionalProperties` beside it, the 9.1 extraction) or is the raw JSON schema
//! `{additionalProperties, properties: {name: definition}}` of `apidata.js` (7.4, 8.4).
//! [`method_params`] reads both.
//!
//! Usage: `cargo run -p fake-proxmox --example gen-schema -- /work/shared/pve-api [OUT_DIR]`

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// Keys kept on a parameter or a property-string sub-property.
const PROP_KEYS: &[&str] = &[
    "type",
    "format",
    "optional",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "requires",
    "alias",
    "keyAlias",
    "default_key",
    "items",
];

/// The releases generated, and the dump of each.
const RELEASES: &[(&str, &str)] = &[
    ("9.1", "pve-9.1-schema.json"),
    ("8.4", "pve-8.4-schema.json"),
    ("7.4", "pve-7.4-schema.json"),
];

/// Keys whose Perl-ish 0/1 values become JSON booleans.
const FLAG_KEYS: &[&str] = &["optional", "default_key"];

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty() && s != "0",
        Value::Null => false,
        _ => true,
    }
}

fn number(v: &Value) -> Option<Value> {
    match v {
        Value::Number(_) => Some(v.clone()),
        Value::String(s) => s
            .parse::<i64>()
            .map(Value::from)
            .ok()
            .or_else(|| s.parse::<f64>().ok().map(Value::from)),
        _ => None,
    }
}

fn clean_prop(p: &Value) -> Result<Value> {
    let Some(obj) = p.as_object() else {
        bail!("property definition is not an object: {p}");
    };
    let mut out = Map::new();
    for key in PROP_KEYS {
        let Some(v) = obj.get(*key) else { continue };
        if v.is_null() {
            continue;
        }
        let cleaned = match *key {
            k if FLAG_KEYS.contains(&k) => Value::Bool(truthy(v)),
            "format" => match v {
                Value::Object(sub) => {
                    let mut subs = Map::new();
                    for (name, def) in sub {
                        subs.insert(name.clone(), clean_prop(def)?);
                    }
                    Value::Object(subs)
                }
                other => other.clone(),
            },
            "items" => clean_prop(v)?,
            "enum" => match v {
                // PVE compares enum members with `eq`, so they are strings on the wire.
                Value::Array(items) => Value::Array(
                    items
                        .iter()
                        .map(|i| match i {
                            Value::String(s) => Value::String(s.clone()),
                            other => Value::String(other.to_string()),
                        })
                        .collect(),
                ),
                _ => continue,
            },
            "minimum" | "maximum" | "minLength" | "maxLength" => match number(v) {
                Some(n) => n,
                None => continue,
            },
            _ => v.clone(),
        };
        out.insert((*key).to_string(), cleaned);
    }
    Ok(Value::Object(out))
}

fn clean_permissions(p: &Value) -> Value {
    let mut out = Map::new();
    if let Some(obj) = p.as_object() {
        for key in ["check", "user"] {
            if let Some(v) = obj.get(key) {
                out.insert(key.to_string(), v.clone());
            }
        }
    }
    Value::Object(out)
}

fn clean_method(m: &Value) -> Result<Value> {
    let obj = m.as_object().context("method is not an object")?;
    let mut out = Map::new();
    for flag in ["allowtoken", "protected"] {
        if let Some(v) = obj.get(flag) {
            out.insert(flag.to_string(), Value::Bool(truthy(v)));
        }
    }
    if let Some(v) = obj.get("proxyto").and_then(Value::as_str) {
        out.insert("proxyto".to_string(), Value::String(v.to_string()));
    }
    if let Some(p) = obj.get("permissions") {
        out.insert("permissions".to_string(), clean_permissions(p));
    }
    let (defs, additional) = method_params(obj);
    out.insert("additionalProperties".to_string(), Value::Bool(additional));
    let mut params = Map::new();
    if let Some(ps) = defs {
        for (name, def) in ps {
            params.insert(
                name.clone(),
                clean_prop(def).with_context(|| format!("parameter {name}"))?,
            );
        }
    }
    out.insert("parameters".to_string(), Value::Object(params));
    Ok(Value::Object(out))
}

/// A method's parameter definitions and whether it allows additional properties, from either
/// layout of the dumps (see the module docs). The raw layout is told by its
/// `additionalProperties` flag where the flat one has parameter names (whose definitions are
/// objects).
fn method_params(method: &Map<String, Value>) -> (Option<&Map<String, Value>>, bool) {
    let params = method.get("parameters").and_then(Value::as_object);
    match params {
        Some(p)
            if p.get("additionalProperties")
                .is_some_and(|v| !v.is_object()) =>
        {
            (
                p.get("properties").and_then(Value::as_object),
                p.get("additionalProperties").is_some_and(truthy),
            )
        }
        _ => (
            params,
            method.get("additionalProperties").is_some_and(truthy),
        ),
    }
}

fn generate(input: &Value, version: &str, source: &str) -> Result<Value> {
    let paths = input
        .get("paths")
        .and_then(Value::as_object)
        .context("input has no `paths` object")?;
    let mut out_paths = Map::new();
    for (path, node) in paths {
        let mut methods = Map::new();
        if let Some(ms) = node.get("methods").and_then(Value::as_object) {
            for (method, def) in ms {
                methods.insert(
                    method.clone(),
                    clean_method(def).with_context(|| format!("{method} {path}"))?,
                );
            }
        }
        out_paths.insert(path.clone(), Value::Object(methods));
    }
    Ok(json!({
        "version": version,
        "source": source,
        "paths": out_paths,
    }))
}

/// Where the facts come from, for the file's `source` line.
fn source_of(input: &Value) -> String {
    if let Some(c) = input
        .pointer("/_meta/pve_docs_commit")
        .and_then(Value::as_str)
    {
        return format!("proxmox/pve-docs api-viewer/apidata.js, {c}");
    }
    match input.pointer("/_meta/pve_version").and_then(Value::as_str) {
        Some(v) => format!("apidoc.js (pve-docs api-viewer) of {v}"),
        None => "proxmox/pve-docs api-viewer/apidata.js".to_string(),
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let input_dir = PathBuf::from(args.next().unwrap_or_else(|| "/work/shared/pve-api".into()));
    let out_dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/crates/schema/data").into()),
    );
    for (version, file) in RELEASES {
        let path = input_dir.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let input: Value = serde_json::from_str(&text)?;
        let source = source_of(&input);
        let facts = generate(&input, version, &source)?;
        let out = out_dir.join(format!("pve-{version}.json"));
        // One path per line keeps diffs between regenerations readable.
        let mut text = String::from("{\n");
        text.push_str(&format!("\"version\":{},\n", json!(version)));
        text.push_str(&format!("\"source\":{},\n", json!(source)));
        text.push_str("\"paths\":{\n");
        let paths = facts["paths"].as_object().context("paths")?;
        let n = paths.len();
        for (i, (p, m)) in paths.iter().enumerate() {
            text.push_str(&format!(
                "{}:{}{}\n",
                json!(p),
                serde_json::to_string(m)?,
                if i + 1 < n { "," } else { "" }
            ));
        }
        text.push_str("}}\n");
        std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
        let methods: usize = paths
            .values()
            .map(|m| m.as_object().map_or(0, Map::len))
            .sum();
        println!("wrote {} ({n} paths, {methods} methods)", out.display());
    }
    Ok(())
}
