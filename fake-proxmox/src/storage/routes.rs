//! `/nodes/{node}/storage...`: list, status, content, allocation, download-url, upload —
//! parse and render; the rules are in `content`, `download` and `upload`.

use serde_json::{Value, json};

use crate::route::{Ctx, Route, route};
use crate::storage::content::volume_name;
use crate::storage::model::{Content, Storage, Volume};
use crate::wire::{PveError, Reply, b};

pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/nodes/{node}/storage", list),
        route("GET", "/nodes/{node}/storage/{storage}", index),
        route("GET", "/nodes/{node}/storage/{storage}/status", status),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/content",
            content_list,
        ),
        route(
            "POST",
            "/nodes/{node}/storage/{storage}/content",
            content_alloc,
        ),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            volume_info,
        ),
        route(
            "DELETE",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            volume_delete,
        ),
        route(
            "POST",
            "/nodes/{node}/storage/{storage}/download-url",
            download_url,
        ),
        route("POST", "/nodes/{node}/storage/{storage}/upload", upload),
    ]
}

fn storage_json(s: &Storage, with_formats: bool) -> Value {
    let used = s.used();
    let mut v = json!({
        "storage": s.name,
        "type": s.kind.as_str(),
        "content": s.content_string(),
        "active": 1,
        "enabled": b(s.enabled),
        "shared": b(s.shared),
        "total": s.total,
        "used": used,
        "avail": s.avail(),
        "used_fraction": if s.total > 0 { used as f64 / s.total as f64 } else { 0.0 },
    });
    if with_formats {
        let (supported, default) = s.kind.formats();
        if let Some(d) = default {
            v["format"] = json!({"default": d, "supported": supported});
        }
    }
    v
}

fn list(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let n = c
        .site
        .node(&node)
        .ok_or_else(|| PveError::die(format!("no such node '{node}'")))?;
    let content: Option<Vec<Content>> = c.req.p.str("content").map(|s| {
        s.split([',', ';', ' '])
            .filter_map(Content::parse)
            .collect()
    });
    let only = c.req.p.str("storage");
    let enabled = c.req.p.flag("enabled");
    let formats = c.req.p.flag("format");
    let data: Vec<Value> = n
        .storages
        .values()
        .filter(|s| c.site.can_see_storage(&c.req.who, &s.name))
        .filter(|s| only.as_ref().is_none_or(|o| o == &s.name))
        .filter(|s| !enabled || s.enabled)
        .filter(|s| {
            content
                .as_ref()
                .is_none_or(|cs| cs.iter().any(|x| s.supports(*x)))
        })
        .map(|s| storage_json(s, formats))
        .collect();
    Ok(Reply::data(Value::Array(data)))
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.storage_of_request(&c.req)?;
    let dirs = [
        "content",
        "download-url",
        "file-restore",
        "import-metadata",
        "prunebackups",
        "rrd",
        "rrddata",
        "status",
        "upload",
    ];
    Ok(Reply::index("subdir", &dirs))
}

fn status(c: &mut Ctx) -> Result<Reply, PveError> {
    let s = c.site.audited_storage(&c.req)?;
    let mut v = storage_json(s, false);
    if let Some(o) = v.as_object_mut() {
        o.remove("storage");
        o.remove("used_fraction");
    }
    Ok(Reply::data(v))
}

fn volume_json(s: &Storage, v: &Volume) -> Value {
    let mut j = json!({
        "volid": s.volid(&v.volname),
        "content": v.vtype.as_str(),
        "format": if v.vtype == Content::Iso { "iso".to_string() } else { v.format.clone() },
        "size": v.size,
        "used": v.used,
        "ctime": v.ctime,
    });
    if let Some(id) = v.vmid {
        j["vmid"] = json!(id);
    }
    j
}

fn content_list(c: &mut Ctx) -> Result<Reply, PveError> {
    let s = c.site.audited_storage(&c.req)?;
    let ct = c.req.p.str("content").and_then(|x| Content::parse(&x));
    let vmid = c.req.p.int("vmid");
    let data: Vec<Value> = s
        .volumes
        .values()
        .filter(|v| ct.is_none_or(|t| v.vtype == t))
        .filter(|v| vmid.is_none_or(|id| v.vmid.map(i64::from) == Some(id)))
        .map(|v| volume_json(s, v))
        .collect();
    Ok(Reply::data(Value::Array(data)))
}

fn content_alloc(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.alloc_volume(&c.req)?)))
}

fn volume_info(c: &mut Ctx) -> Result<Reply, PveError> {
    let s = c.site.audited_storage(&c.req)?;
    let volname = volume_name(&c.req, s)?;
    let v = s
        .volumes
        .get(&volname)
        .ok_or_else(|| PveError::die(format!("volume '{}' does not exist", s.volid(&volname))))?;
    Ok(Reply::data(json!({
        "path": format!("{}/{}", s.path.as_deref().unwrap_or("/dev/pve"), v.volname),
        "size": v.size,
        "used": v.used,
        "format": v.format,
    })))
}

fn volume_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.delete_volume(&c.req)?)))
}

fn upload(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.upload(&c.req)?)))
}

fn download_url(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.download_url(&c.req)?)))
}
