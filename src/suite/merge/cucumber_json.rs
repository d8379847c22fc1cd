//! Cucumber JSON (an array of features, each with its scenario elements): shards' reports
//! joined feature by feature, elements in file order. Elements are kept as the shards wrote
//! them.

use serde_json::{Value, json};

/// Reads one report: it must be an array of feature objects.
pub fn parse(text: &str) -> Result<Vec<Value>, String> {
    if text.trim().is_empty() {
        return Err("empty file (did the run end before writing its report?)".into());
    }
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Array(features) = v else {
        return Err("the top level is not an array of features".into());
    };
    if let Some(bad) = features.iter().find(|f| !f.is_object()) {
        return Err(format!("not a feature object: {bad}"));
    }
    Ok(features)
}

/// A feature holding one failed scenario that says a shard's report is missing or unreadable.
pub fn missing(shard: &str, file: &str, why: &str) -> Value {
    json!({
        "uri": format!("{shard}/{file}"),
        "keyword": "Feature",
        "name": "Shard reports",
        "tags": [],
        "elements": [{
            "keyword": "Scenario",
            "type": "scenario",
            "id": format!("shard-reports/{shard}"),
            "line": 0,
            "name": format!("{shard}: {file}"),
            "tags": [],
            "steps": [{
                "keyword": "Given ",
                "line": 0,
                "name": format!("the report {file} of {shard}"),
                "result": {
                    "status": "failed",
                    "duration": 0,
                    "error_message": format!("the shard's report {file} is missing or unreadable: {why}"),
                },
            }],
        }],
    })
}

fn identity(f: &Value) -> (Option<&str>, Option<&str>) {
    (
        f.get("uri").and_then(Value::as_str),
        f.get("name").and_then(Value::as_str),
    )
}

/// Joins the features of all parts: one feature per (uri, name), in order of first appearance,
/// its elements sorted by line (stable, so a background stays before its scenario).
pub fn join(parts: Vec<Vec<Value>>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for mut f in parts.into_iter().flatten() {
        let elements = match f.get_mut("elements").map(Value::take) {
            Some(Value::Array(e)) => e,
            _ => Vec::new(),
        };
        let pos = out.iter().position(|o| identity(o) == identity(&f));
        let target = match pos {
            Some(i) => &mut out[i],
            None => {
                f["elements"] = Value::Array(Vec::new());
                out.push(f);
                let last = out.len() - 1;
                &mut out[last]
            }
        };
        if let Some(Value::Array(all)) = target.get_mut("elements") {
            all.extend(elements);
        }
    }
    for f in &mut out {
        if let Some(Value::Array(all)) = f.get_mut("elements") {
            all.sort_by_key(|e| e.get("line").and_then(Value::as_u64).unwrap_or(0));
        }
    }
    out
}
