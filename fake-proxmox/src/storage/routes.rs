//! `/nodes/{node}/storage...`: list, status, content, allocation, volume attributes and
//! copies, prunes, download-url, upload, OCI pulls, import metadata, file restore — parse
//! and render; the rules are in the module of each.

use serde_json::{Value, json};

use crate::route::{Ctx, Route, route};
use crate::storage::attributes::{Attribute, attributes};
use crate::storage::backup::{archive_info, listed_vmid};
use crate::storage::content::volume_name;
use crate::storage::model::{Content, Storage, Volume};
use crate::wire::{PveError, Reply, b};

/// The `/api2/json` routes of storages under `/nodes/{node}/storage[/{storage}…]`: list,
/// status, content (list, allocate, read, update, copy, delete volumes), prunes,
/// import metadata, file restore, `download-url`, `upload` and OCI pulls, plus the
/// appliance index `/nodes/{node}/aplinfo`; collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        // The appliance index and its downloads (`pveam`): templates onto a storage.
        route("GET", "/nodes/{node}/aplinfo", |c| {
            Ok(Reply::data(c.site.aplinfo(&c.req)?))
        }),
        route("POST", "/nodes/{node}/aplinfo", |c| {
            Ok(Reply::data(json!(c.site.apl_download(&c.req)?)))
        }),
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
            "PUT",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            volume_update,
        ),
        route(
            "POST",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            volume_copy,
        ),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/prunebackups",
            prune_dry_run,
        ),
        route(
            "DELETE",
            "/nodes/{node}/storage/{storage}/prunebackups",
            prune,
        ),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/import-metadata",
            import_metadata,
        ),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/file-restore/list",
            file_restore,
        ),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/file-restore/download",
            file_restore,
        ),
        route(
            "POST",
            "/nodes/{node}/storage/{storage}/oci-registry-pull",
            oci_registry_pull,
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
    if v.vtype == Content::Backup {
        backup_json(&mut j, v);
    }
    j
}

/// What a backup's entry adds (Plugin.pm `$get_subdir_files`): the guest type, the time
/// and VMID its name gives, the first line of its notes, its protection.
fn backup_json(j: &mut Value, v: &Volume) {
    let file = v.volname.trim_start_matches("backup/");
    let info = archive_info(file);
    j["subtype"] = json!(info.as_ref().map_or("unknown", |i| i.guest.as_str()));
    if let Some((_, ctime)) = info.and_then(|i| i.std) {
        j["ctime"] = json!(ctime);
    }
    if let Some(id) = v.vmid.or_else(|| listed_vmid(file)) {
        j["vmid"] = json!(id);
    }
    if let Some(first) = v.notes.as_deref().and_then(|n| n.lines().next()) {
        j["notes"] = json!(first);
    }
    if v.protected {
        j["protected"] = json!(1);
    }
}

fn content_list(c: &mut Ctx) -> Result<Reply, PveError> {
    // PVE lists a directory: snippets a deployer placed on the share appear.
    if let (Ok(node), Some(sid)) = (c.node(), c.req.p.str("storage")) {
        c.site.rescan_snippets(&node, &sid);
    }
    let s = c.site.audited_storage(&c.req)?;
    let ct = c.req.p.str("content").and_then(|x| Content::parse(&x));
    let vmid = c.req.p.int("vmid");
    // Holders of Datastore.Allocate may read every volume: no need to ask per volume.
    let all = c.site.access.has(
        &c.req.who,
        &format!("/storage/{}", s.name),
        "Datastore.Allocate",
    );
    let data: Vec<Value> = s
        .volumes
        .values()
        .filter(|v| ct.is_none_or(|t| v.vtype == t))
        .filter(|v| vmid.is_none_or(|id| v.vmid.map(i64::from) == Some(id)))
        // Content.pm `index` leaves out what `check_volume_access` refuses the caller.
        .filter(|v| {
            all || c
                .site
                .check_volume_access(&c.req.who, s, &v.volname, None)
                .is_ok()
        })
        .map(|v| volume_json(s, v))
        .collect();
    Ok(Reply::data(Value::Array(data)))
}

fn content_alloc(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.alloc_volume(&c.req)?)))
}

fn volume_info(c: &mut Ctx) -> Result<Reply, PveError> {
    let s = c.site.storage_of_request(&c.req)?;
    let volname = volume_name(&c.req, s)?;
    c.site.check_volume_access(&c.req.who, s, &volname, None)?;
    let v = s
        .volumes
        .get(&volname)
        .ok_or_else(|| PveError::die(format!("volume '{}' does not exist", s.volid(&volname))))?;
    // `volume_size_info` reads a backup archive as a raw file.
    let format = if v.vtype == Content::Backup {
        "raw"
    } else {
        v.format.as_str()
    };
    let mut j = json!({
        "path": if s.kind.is_file_based() {
            s.file_path(&v.volname)
        } else {
            format!("/dev/pve/{}", v.volname)
        },
        "size": v.size,
        "used": v.used,
        "format": format,
    });
    for a in attributes(s, &volname) {
        match a {
            Attribute::Notes(n) => j["notes"] = json!(n),
            Attribute::Protected(p) => j["protected"] = b(p),
        }
    }
    Ok(Reply::data(j))
}

fn volume_update(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.update_volume_attributes(&c.req)?;
    Ok(Reply::null())
}

fn volume_copy(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.copy_volume(&c.req)?)))
}

fn prune_dry_run(c: &mut Ctx) -> Result<Reply, PveError> {
    let list = c.site.prune_dry_run(&c.req)?;
    let data: Vec<Value> = list
        .iter()
        .map(|e| {
            let mut j = json!({
                "volid": e.volid,
                "ctime": e.ctime,
                "type": e.guest,
                "mark": e.mark.map_or("keep", |m| m.as_str()),
            });
            if let Some(id) = e.vmid {
                j["vmid"] = json!(id);
            }
            j
        })
        .collect();
    Ok(Reply::data(Value::Array(data)))
}

fn prune(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.prune_backups(&c.req)?)))
}

fn import_metadata(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(c.site.import_metadata(&c.req)?))
}

fn file_restore(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.file_restore(&c.req)?;
    Ok(Reply::null())
}

fn oci_registry_pull(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(json!(c.site.oci_registry_pull(&c.req)?)))
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
