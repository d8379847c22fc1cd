//! `/nodes/{node}/storage...`: list, status, content, allocation, download-url.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::route::{Ctx, Route, route};
use crate::storage::model::{Content, Storage, Volume};
use crate::storage::volid::{parse_volid, parse_volname};
use crate::tasks::model::{Chunk, TaskPlan, TransferStyle, Work};
use crate::wire::{PveError, Reply, b};
use crate::world::Site;

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
    ]
}

fn storage<'a>(c: &'a Ctx) -> Result<&'a Storage, PveError> {
    let node = c.node()?;
    let sid = c.req.p.req_str("storage")?;
    let n = c
        .site
        .node(&node)
        .ok_or_else(|| PveError::die(format!("no such node '{node}'")))?;
    let s = n
        .storages
        .get(&sid)
        .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))?;
    if !s.enabled {
        return Err(PveError::die(format!("storage '{sid}' is disabled")));
    }
    Ok(s)
}

fn can_see(c: &Ctx, sid: &str) -> bool {
    let path = format!("/storage/{sid}");
    c.site.access.has(&c.req.who, &path, "Datastore.Audit")
        || c.site
            .access
            .has(&c.req.who, &path, "Datastore.AllocateSpace")
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
        .filter(|s| can_see(c, &s.name))
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
    storage(c)?;
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
    Ok(Reply::data(Value::Array(
        dirs.iter().map(|d| json!({"subdir": d})).collect(),
    )))
}

fn status(c: &mut Ctx) -> Result<Reply, PveError> {
    let s = storage(c)?;
    c.require_any(
        &format!("/storage/{}", s.name),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
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
    let s = storage(c)?;
    c.require_any(
        &format!("/storage/{}", s.name),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
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

static ALLOC_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(vm|base)-(\d+)-(\S+)$").ok());

fn content_alloc(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let s = storage(c)?.clone();
    c.require(&format!("/storage/{}", s.name), "Datastore.AllocateSpace")?;
    let vmid = c.req.p.vmid()?;
    let filename = c.req.p.req_str("filename")?;
    let size_s = c.req.p.req_str("size")?;
    let size = parse_kib(&size_s)
        .ok_or_else(|| PveError::param("size", format!("unable to parse size '{size_s}'")))?;
    s.check_images()?;
    let fmt = s.resolve_format(c.req.p.str("format").as_deref());
    let base = filename
        .rsplit_once('.')
        .map_or(filename.as_str(), |(b, _)| b)
        .to_string();
    let owner = ALLOC_NAME
        .as_ref()
        .and_then(|r| r.captures(&base))
        .and_then(|cp| cp.get(2))
        .and_then(|m| m.as_str().parse::<u32>().ok());
    match owner {
        Some(o) if o == vmid => {}
        _ => {
            return Err(PveError::param(
                "filename",
                "illegal name - should be 'vm-VMID-*' or 'base-VMID-*'",
            ));
        }
    }
    let volname = s.image_volname(vmid, &base, &fmt);
    if s.volumes.contains_key(&volname) {
        return Err(PveError::die(format!(
            "volume '{}' already exists",
            s.volid(&volname)
        )));
    }
    let now = c.req.now as u64;
    let sto = c
        .site
        .nodes
        .get_mut(&node)
        .and_then(|n| n.storages.get_mut(&s.name))
        .ok_or_else(|| PveError::die(format!("storage '{}' does not exist", s.name)))?;
    let v = sto
        .alloc_image(vmid, volname, &fmt, size, now)
        .map_err(PveError::die)?;
    Ok(Reply::data(json!(sto.volid(&v))))
}

/// `size` of content POST: `\d+[MG]?`, KiB by default.
fn parse_kib(s: &str) -> Option<u64> {
    let (n, mult) = match s.chars().last()? {
        'M' => (&s[..s.len() - 1], 1u64 << 20),
        'G' => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1u64 << 10),
    };
    n.parse::<u64>().ok()?.checked_mul(mult)
}

fn volume_name(c: &Ctx, s: &Storage) -> Result<String, PveError> {
    let vol = c.req.p.req_str("volume")?;
    let volname = match parse_volid(&vol) {
        Some((sid, name)) if sid == s.name => name.to_string(),
        Some((sid, _)) => {
            return Err(PveError::die(format!(
                "volume '{vol}' is on storage '{sid}', not '{}'",
                s.name
            )));
        }
        None => vol.clone(),
    };
    if parse_volname(s.kind, &volname).is_none() {
        return Err(PveError::die(format!(
            "unable to parse volume name '{volname}'"
        )));
    }
    Ok(volname)
}

fn volume_info(c: &mut Ctx) -> Result<Reply, PveError> {
    let s = storage(c)?;
    c.require_any(
        &format!("/storage/{}", s.name),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
    let volname = volume_name(c, s)?;
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
    let node = c.node()?;
    let s = storage(c)?.clone();
    let volname = volume_name(c, &s)?;
    let v = s
        .volumes
        .get(&volname)
        .ok_or_else(|| PveError::die(format!("volume '{}' does not exist", s.volid(&volname))))?;
    match v.vmid {
        Some(id) => c
            .require(&format!("/vms/{id}"), "VM.Config.Disk")
            .or_else(|_| c.require(&format!("/storage/{}", s.name), "Datastore.Allocate"))?,
        None => c.require(&format!("/storage/{}", s.name), "Datastore.Allocate")?,
    }
    if let Some(id) = v.vmid
        && let Some(vm) = c.site.vms.get(&id)
        && vm.referenced_volumes().contains(&s.volid(&volname))
    {
        return Err(PveError::die(format!(
            "unable to delete volume '{}' - volume is still in use by VM {id}",
            s.volid(&volname)
        )));
    }
    let mut plan = TaskPlan::new(
        "imgdel",
        s.volid(&volname),
        &node,
        &c.req.who.task_user(),
        Work::DeleteVolume {
            storage: s.name.clone(),
            volname: volname.clone(),
        },
    );
    plan.id = s.volid(&volname).replace([':', '/'], "_");
    plan.duration = 0.3;
    if s.kind.is_file_based() {
        plan.line(0.1, format!("Removed volume '{}'", s.volid(&volname)));
    } else {
        plan.line(
            0.1,
            format!("  Logical volume \"{volname}\" successfully removed."),
        );
    }
    Ok(Reply::data(json!(c.site.start_task(plan, c.req.now))))
}

static IMPORT_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z0-9\-\.\+=_]+\.(ova|qcow2|raw|vmdk)$").ok());

fn download_url(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let s = storage(c)?.clone();
    c.require(
        &format!("/storage/{}", s.name),
        "Datastore.AllocateTemplate",
    )?;
    let net_ok = (c.site.access.has(&c.req.who, "/", "Sys.Audit")
        && c.site.access.has(&c.req.who, "/", "Sys.Modify"))
        || c.site
            .access
            .has(&c.req.who, &format!("/nodes/{node}"), "Sys.AccessNetwork");
    if !net_ok {
        return Err(PveError::perm(Some(format!(
            "/nodes/{node}, Sys.AccessNetwork"
        ))));
    }
    let url = c.req.p.req_str("url")?;
    let content = c.req.p.req_str("content")?;
    let filename = c.req.p.req_str("filename")?;
    if !s.kind.is_file_based() {
        return Err(PveError::die(format!(
            "can't upload to storage type '{}', not a file based storage!",
            s.kind.as_str()
        )));
    }
    let ct = Content::parse(&content).ok_or_else(|| {
        PveError::param(
            "content",
            format!(
                "value '{content}' does not have a value in the enumeration 'iso, vztmpl, import'"
            ),
        )
    })?;
    if ct == Content::Import && !c.site.version.has_import_content() {
        return Err(PveError::param(
            "content",
            format!("value '{content}' does not have a value in the enumeration 'iso, vztmpl'"),
        ));
    }
    if !s.supports(ct) {
        return Err(PveError::die(format!(
            "storage '{}' is not configured for content-type '{content}'",
            s.name
        )));
    }
    let lower = filename.to_ascii_lowercase();
    let dir = match ct {
        Content::Iso => {
            if !(lower.ends_with(".iso") || lower.ends_with(".img")) {
                return Err(PveError::param("filename", "wrong file extension"));
            }
            "iso"
        }
        Content::Vztmpl => {
            if !regex_like_vztmpl(&lower) {
                return Err(PveError::param("filename", "wrong file extension"));
            }
            "vztmpl"
        }
        Content::Import => {
            let ok = IMPORT_NAME.as_ref().is_some_and(|r| r.is_match(&filename))
                && (lower.ends_with(".ova")
                    || c.site.version == crate::version::PveVersion::V9_1
                    || c.site.version == crate::version::PveVersion::V8_4);
            if !ok {
                return Err(PveError::param(
                    "filename",
                    "invalid filename or wrong extension",
                ));
            }
            "import"
        }
        _ => {
            return Err(PveError::param(
                "content",
                format!(
                    "value '{content}' does not have a value in the enumeration 'iso, vztmpl, import'"
                ),
            ));
        }
    };
    if c.req.p.has("compression") && ct != Content::Iso {
        return Err(PveError::param(
            "compression",
            "decompression is only supported for iso content",
        ));
    }
    let volname = format!("{dir}/{filename}");
    let path = format!(
        "{}/template/{dir}/{filename}",
        s.path.as_deref().unwrap_or("")
    );
    if s.volumes.contains_key(&volname) {
        return Err(PveError::die(format!(
            "refusing to override existing file '{path}'"
        )));
    }
    let size = c
        .site
        .remote_files
        .iter()
        .find(|f| f.url == url)
        .map_or(512 * 1024 * 1024, |f| f.size_bytes);
    let speed = c.site.download_mib_s.min(s.speed_mib_s) * 1024.0 * 1024.0;
    let secs = size as f64 / speed;
    let id = filename.clone();
    let mut plan = TaskPlan::new(
        "download",
        id,
        &node,
        &c.req.who.task_user(),
        Work::Download {
            storage: s.name.clone(),
            volname,
            size,
        },
    );
    plan.line(0.0, format!("downloading {url} to {path}"));
    plan.line(0.2, format!("--{}--  {url}", iso_time(c.req.now)));
    plan.line(
        0.2,
        format!(
            "Length: {size} ({}) [application/octet-stream]",
            crate::tasks::model::render_bytes(size)
        ),
    );
    plan.line(
        0.2,
        format!("Saving to: '{path}.tmp.{}'", std::process::id()),
    );
    plan.timeline.push((
        0.3,
        Chunk::Transfer {
            total: size,
            until: 0.3 + secs,
            style: TransferStyle::Download,
        },
    ));
    if size > s.avail() {
        let frac = s.avail() as f64 / size.max(1) as f64;
        plan.duration = 0.3 + secs * frac;
        plan.planned_error = Some(format!(
            "download failed: write error: No space left on device (downloading {url})"
        ));
    } else {
        plan.line(
            0.3 + secs,
            format!("download of '{url}' to '{path}' finished"),
        );
        plan.duration = 0.4 + secs;
    }
    Ok(Reply::data(json!(c.site.start_task(plan, c.req.now))))
}

fn regex_like_vztmpl(name: &str) -> bool {
    [".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"]
        .iter()
        .any(|e| name.ends_with(e))
}

fn iso_time(now: f64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(now as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    t.format(&f).unwrap_or_default()
}

impl Site {
    /// The simulated file has arrived: it becomes a volume (if it still fits).
    pub fn finish_download(
        &mut self,
        node: &str,
        storage: &str,
        volname: &str,
        size: u64,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let sto = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.storages.get_mut(storage))
            .ok_or_else(|| format!("storage '{storage}' does not exist"))?;
        if sto.full || size > sto.avail() {
            return Err("download failed: write error: No space left on device".into());
        }
        let (vtype, _, format) = parse_volname(sto.kind, volname)
            .ok_or_else(|| format!("invalid volume name '{volname}'"))?;
        // A downloaded qcow2 cloud image is ~3.4x smaller than the disk it describes.
        let virtual_size = if format == "qcow2" || volname.ends_with(".img") {
            size.saturating_mul(34) / 10
        } else {
            size
        };
        sto.volumes.insert(
            volname.to_string(),
            Volume {
                volname: volname.to_string(),
                vtype,
                format,
                size: virtual_size,
                used: size,
                vmid: None,
                ctime: now as u64,
            },
        );
        Ok(Vec::new())
    }
}
