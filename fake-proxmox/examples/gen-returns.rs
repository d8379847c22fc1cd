//! Generates `fake-proxmox/crates/schema/data/returns-{9.1,8.4,7.4}.json`: the declared
//! `returns` of every GET in each release's whole API dump, reduced to what a response's shape
//! is checked against (`type`, `optional`, `enum`, `properties`, `items`,
//! `additionalProperties`). Texts are dropped.
//! The API shape test (`tests/api/shapes/`) reads it.
//!
//! Usage: `cargo run -p fake-proxmox --example gen-returns -- /work/shared/pve-api [OUT_DIR]`

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::{Map, Value};

/// Keys of a returns schema (or a property of one) that describe its shape.
const SHAPE_KEYS: &[&str] = &["type", "optional", "enum"];

fn reduce(schema: &Value) -> Value {
    let Some(obj) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for k in SHAPE_KEYS {
        if let Some(v) = obj.get(*k) {
            out.insert((*k).to_string(), v.clone());
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        let reduced: Map<String, Value> =
            props.iter().map(|(k, v)| (k.clone(), reduce(v))).collect();
        out.insert("properties".into(), Value::Object(reduced));
    }
    if let Some(items) = obj.get("items") {
        out.insert("items".into(), reduce(items));
    }
    if let Some(extra) = obj.get("additionalProperties") {
        out.insert("additionalProperties".into(), reduce(extra));
    }
    Value::Object(out)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let input_dir = PathBuf::from(args.next().unwrap_or_else(|| "/work/shared/pve-api".into()));
    let out_dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/crates/schema/data").into()),
    );
    for (dump_name, out_name) in [
        ("pve-9.1-schema.json", "returns-9.1.json"),
        ("pve-8.4-schema.json", "returns-8.4.json"),
        ("pve-7.4-schema.json", "returns-7.4.json"),
    ] {
        let input = input_dir.join(dump_name);
        let text = std::fs::read_to_string(&input)
            .with_context(|| format!("reading {}", input.display()))?;
        let dump: Value = serde_json::from_str(&text).context("parsing the API dump")?;
        let paths = dump["paths"]
            .as_object()
            .context("the dump has no `paths`")?;
        let mut out = Map::new();
        for (path, entry) in paths {
            if let Some(returns) = entry["methods"]["GET"].get("returns") {
                out.insert(path.clone(), reduce(returns));
            }
        }
        let file = out_dir.join(out_name);
        let mut body = serde_json::to_string_pretty(&Value::Object(out))?;
        body.push('\n');
        std::fs::write(&file, body).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}
