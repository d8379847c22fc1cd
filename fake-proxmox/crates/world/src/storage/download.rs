//! `POST /nodes/{node}/storage/{storage}/download-url`: the `download` task, with PVE's
//! privilege, content-type and file-name rules; the file becomes a volume when it ends.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::request::Request;
use crate::storage::model::{Content, Storage, Volume};
use crate::storage::volid::parse_volname;
use crate::tasks::model::{TransferStyle, render_bytes};
use crate::version::PveVersion;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

static IMPORT_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z0-9\-\.\+=_]+\.(ova|qcow2|raw|vmdk)$").ok());

/// Where a download goes: its volume name and its path on the node.
struct Target {
    volname: String,
    path: String,
}

impl Site {
    /// Start a download; its UPID.
    pub fn download_url(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let s = self.template_storage(req)?;
        self.require_network(req, &node)?;
        let url = req.p.req_str("url")?;
        let content = req.p.req_str("content")?;
        let filename = req.p.req_str("filename")?;
        let target = download_target(s, self.version, &content, &filename, req)?;
        let remote = self.remote_files.iter().find(|f| f.url == url);
        let size = remote.map_or(512 * 1024 * 1024, |f| f.size_bytes);
        let file = remote.and_then(|f| f.file.clone());
        let speed = self.download_mib_s.min(s.speed_mib_s) * 1024.0 * 1024.0;
        let avail = s.avail();
        let work = Work::Download {
            storage: s.name.clone(),
            volname: target.volname.clone(),
            size,
            file,
        };
        let mut plan = TaskPlan::new("download", filename, &node, &req.task_user(), work);
        lay_out(
            &mut plan,
            &url,
            &target.path,
            size,
            size as f64 / speed,
            avail,
            req.now,
        );
        Ok(self.start_task(plan, req.now))
    }

    /// The storage a download or upload writes to, once the caller may put templates there
    /// (`Datastore.AllocateTemplate`, the first check of both).
    pub(crate) fn template_storage(&self, req: &Request) -> Result<&Storage, PveError> {
        let s = self.storage_of_request(req)?;
        self.require(
            &req.who,
            &format!("/storage/{}", s.name),
            "Datastore.AllocateTemplate",
        )?;
        Ok(s)
    }

    /// Fetching from the network: `Sys.Audit` and `Sys.Modify` on `/`, or
    /// `Sys.AccessNetwork` on the node.
    fn require_network(&self, req: &Request, node: &str) -> Result<(), PveError> {
        let has = |path: &str, privilege: &str| self.access.has(&req.who, path, privilege);
        if (has("/", "Sys.Audit") && has("/", "Sys.Modify"))
            || has(&format!("/nodes/{node}"), "Sys.AccessNetwork")
        {
            Ok(())
        } else {
            Err(PveError::perm(Some(format!(
                "/nodes/{node}, Sys.AccessNetwork"
            ))))
        }
    }

    /// The file (`size` bytes, a copy of a local file with real disks) has arrived: it
    /// becomes a volume (if it still fits).
    pub fn finish_download(
        &mut self,
        node: &str,
        storage: &str,
        volname: &str,
        (size, file): (u64, Option<&Path>),
        now: f64,
    ) -> Result<Vec<String>, String> {
        // A downloaded qcow2 cloud image is ~3.4x smaller than the disk it describes.
        let virtual_size = |format: &str| {
            if format == "qcow2" || volname.ends_with(".img") {
                size.saturating_mul(34) / 10
            } else {
                size
            }
        };
        match self.add_arrived_file(node, storage, volname, (size, file), virtual_size, now) {
            Ok(()) => Ok(Vec::new()),
            Err(Arrival::NoSpace) => {
                Err("download failed: write error: No space left on device".into())
            }
            Err(Arrival::Refused(e)) => Err(e),
            Err(Arrival::Data(e)) => Err(format!("download failed: {e}")),
        }
    }

    /// A file that arrived (`used` bytes; `virtual_size` from its format) becomes volume
    /// `volname` if it still fits, its data placed from `file`; a record left behind by a
    /// failed placement is removed.
    pub(crate) fn add_arrived_file(
        &mut self,
        node: &str,
        storage: &str,
        volname: &str,
        (used, file): (u64, Option<&Path>),
        virtual_size: impl FnOnce(&str) -> u64,
        now: f64,
    ) -> Result<(), Arrival> {
        let sto = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.storages.get_mut(storage))
            .ok_or_else(|| Arrival::Refused(format!("storage '{storage}' does not exist")))?;
        if sto.full || used > sto.avail() {
            return Err(Arrival::NoSpace);
        }
        let (vtype, _, format) = parse_volname(sto.kind, volname)
            .ok_or_else(|| Arrival::Refused(format!("invalid volume name '{volname}'")))?;
        let size = virtual_size(&format);
        sto.volumes.insert(
            volname.to_string(),
            Volume {
                volname: volname.to_string(),
                vtype,
                format,
                size,
                used,
                vmid: None,
                ctime: now as u64,
                notes: None,
                protected: false,
                image: None,
                text: None,
            },
        );
        if let Err(e) = self.place_data(node, storage, volname, file, size) {
            self.remove_volume(node, storage, volname);
            return Err(Arrival::Data(e));
        }
        Ok(())
    }
}

/// Why an arrived file did not become a volume (each caller words it as PVE's task does).
pub(crate) enum Arrival {
    NoSpace,
    /// Not even recorded: the storage or the name is wrong.
    Refused(String),
    /// Recorded, but its data could not be placed.
    Data(String),
}

/// Downloads and uploads go to storages with a path.
pub(crate) fn require_file_based(s: &Storage) -> Result<(), PveError> {
    if s.kind.is_file_based() {
        Ok(())
    } else {
        Err(PveError::die(format!(
            "can't upload to storage type '{}', not a file based storage!",
            s.kind.as_str()
        )))
    }
}

/// PVE's checks of storage, content type and file name, in its order.
fn download_target(
    s: &Storage,
    version: PveVersion,
    content: &str,
    filename: &str,
    req: &Request,
) -> Result<Target, PveError> {
    require_file_based(s)?;
    let not_in_enum = || {
        PveError::param(
            "content",
            format!(
                "value '{content}' does not have a value in the enumeration 'iso, vztmpl, import'"
            ),
        )
    };
    let ct = Content::parse(content).ok_or_else(not_in_enum)?;
    if ct == Content::Import && !version.has_import_content() {
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
    let dir = content_dir(ct, filename, version)?.ok_or_else(not_in_enum)?;
    if req.p.has("compression") && ct != Content::Iso {
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
    Ok(Target { volname, path })
}

/// The directory a content type downloads into, once the file name fits it; `None` for a
/// content type that cannot be downloaded.
pub(crate) fn content_dir(
    ct: Content,
    filename: &str,
    version: PveVersion,
) -> Result<Option<&'static str>, PveError> {
    let lower = filename.to_ascii_lowercase();
    let wrong = || PveError::param("filename", "wrong file extension");
    Ok(Some(match ct {
        Content::Iso => {
            if !(lower.ends_with(".iso") || lower.ends_with(".img")) {
                return Err(wrong());
            }
            "iso"
        }
        Content::Vztmpl => {
            if ![".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"]
                .iter()
                .any(|e| lower.ends_with(e))
            {
                return Err(wrong());
            }
            "vztmpl"
        }
        Content::Import => {
            let ok = IMPORT_NAME.as_ref().is_some_and(|r| r.is_match(filename))
                && (lower.ends_with(".ova") || version >= PveVersion::V8_4);
            if !ok {
                return Err(PveError::param(
                    "filename",
                    "invalid filename or wrong extension",
                ));
            }
            "import"
        }
        _ => return Ok(None),
    }))
}

/// The task log wget writes, and the end: finished, or the storage filling up part-way.
pub(crate) fn lay_out(
    plan: &mut TaskPlan,
    url: &str,
    path: &str,
    size: u64,
    secs: f64,
    avail: u64,
    now: f64,
) {
    plan.line(0.0, format!("downloading {url} to {path}"));
    plan.line(0.2, format!("--{}--  {url}", iso_time(now)));
    plan.line(
        0.2,
        format!(
            "Length: {size} ({}) [application/octet-stream]",
            render_bytes(size)
        ),
    );
    plan.line(
        0.2,
        format!("Saving to: '{path}.tmp.{}'", std::process::id()),
    );
    plan.transfer(0.3, secs, size, TransferStyle::Download);
    if size > avail {
        let frac = avail as f64 / size.max(1) as f64;
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
}

fn iso_time(now: f64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(now as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    t.format(&f).unwrap_or_default()
}
