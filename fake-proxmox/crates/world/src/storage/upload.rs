//! `POST /nodes/{node}/storage/{storage}/upload`: the `imgcopy` task that makes an uploaded
//! file (streamed by the HTTP layer to `tmpfilename`, as pveproxy does) a volume, with PVE's
//! privilege, storage, content-type, file-name and checksum rules. An existing file of that
//! name is overwritten, as PVE does.

use std::io::Read;
use std::path::Path;

use sha1::Digest;

use crate::request::Request;
use crate::storage::download::{Arrival, content_dir, require_file_based};
use crate::storage::model::Content;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

impl Site {
    /// Start the copy of an uploaded file; its UPID.
    pub fn upload(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let s = self.template_storage(req)?;
        require_file_based(s)?;
        let tmp = req
            .p
            .str("tmpfilename")
            .ok_or_else(|| PveError::die("missing temporary file name"))?;
        let size = std::fs::metadata(&tmp)
            .map_err(|_| PveError::die(format!("temporary file '{tmp}' does not exist")))?
            .len();
        let content = req.p.req_str("content")?;
        let filename = normalize_filename(&req.p.req_str("filename")?);
        let ct = Content::parse(&content).ok_or_else(|| {
            PveError::param(
                "content",
                format!("upload content type '{content}' not allowed"),
            )
        })?;
        let dir = content_dir(ct, &filename, self.version)?.ok_or_else(|| {
            PveError::param(
                "content",
                format!("upload content type '{content}' not allowed"),
            )
        })?;
        if !s.supports(ct) {
            return Err(PveError::die(format!(
                "storage '{}' does not support '{content}' content",
                s.name
            )));
        }
        let volname = format!("{dir}/{filename}");
        let dest = format!(
            "{}/template/{dir}/{filename}",
            s.path.as_deref().unwrap_or("")
        );
        let checksum = match (req.p.str("checksum"), req.p.str("checksum-algorithm")) {
            (Some(want), Some(algo)) => Some((
                want.to_ascii_lowercase(),
                file_hash(&algo, Path::new(&tmp))?,
            )),
            _ => None,
        };
        let work = Work::Upload {
            storage: s.name.clone(),
            volname,
            tmp: tmp.clone().into(),
        };
        let mut plan = TaskPlan::new("imgcopy", "", &node, &req.task_user(), work);
        plan.line(0.0, format!("starting file import from: {tmp}"));
        if let Some((want, got)) = &checksum {
            if want != got {
                plan.line(0.1, "calculating checksum...");
                plan.duration = 0.2;
                plan.planned_error =
                    Some(format!("checksum mismatch: got '{got}' != expect '{want}'"));
                return Ok(self.start_task(plan, req.now));
            }
            plan.line(0.1, "calculating checksum...OK, checksum verified");
        }
        plan.line(0.1, format!("target node: {node}"));
        plan.line(0.1, format!("target file: {dest}"));
        plan.line(0.1, format!("file size is: {size}"));
        plan.line(0.1, format!("command: cp -- {tmp} {dest}"));
        let secs = size as f64 / (s.speed_mib_s.max(1.0) * 1024.0 * 1024.0);
        plan.line(0.2 + secs, "finished file import successfully");
        plan.duration = 0.3 + secs;
        Ok(self.start_task(plan, req.now))
    }

    /// The upload's copy: the file becomes the volume (replacing one of that name, if it still
    /// fits); the temporary file goes either way.
    pub(crate) fn finish_upload(
        &mut self,
        node: &str,
        storage: &str,
        volname: &str,
        tmp: &Path,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let r = self.place_upload(node, storage, volname, tmp, now);
        if let Err(e) = std::fs::remove_file(tmp) {
            tracing::warn!(
                "unable to clean up temporary file '{}' - {e}",
                tmp.display()
            );
        }
        r
    }

    fn place_upload(
        &mut self,
        node: &str,
        storage: &str,
        volname: &str,
        tmp: &Path,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let size = std::fs::metadata(tmp)
            .map_err(|e| format!("import failed: {}: {e}", tmp.display()))?
            .len();
        self.remove_volume(node, storage, volname);
        match self.add_arrived_file(node, storage, volname, (size, Some(tmp)), |_| size, now) {
            Ok(()) => Ok(Vec::new()),
            Err(Arrival::NoSpace) => {
                Err("import failed: cp: error writing: No space left on device".into())
            }
            Err(Arrival::Refused(e)) => Err(e),
            Err(Arrival::Data(e)) => Err(format!("import failed: {e}")),
        }
    }
}

/// PVE's `normalize_content_filename`: the last path component, every character outside
/// `[-a-zA-Z0-9_.+=]` made `_`.
pub fn normalize_filename(name: &str) -> String {
    let name = name.trim_end_matches(['\n', '\r']);
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    last.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+' | '=') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file's digest in lower-case hex.
fn file_hash(algorithm: &str, path: &Path) -> Result<String, PveError> {
    fn digest<D: Digest>(path: &Path) -> std::io::Result<String> {
        let mut f = std::fs::File::open(path)?;
        let mut d = D::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok(hex::encode(d.finalize()));
            }
            d.update(&buf[..n]);
        }
    }
    let r = match algorithm {
        "md5" => digest::<md5::Md5>(path),
        "sha1" => digest::<sha1::Sha1>(path),
        "sha224" => digest::<sha2::Sha224>(path),
        "sha256" => digest::<sha2::Sha256>(path),
        "sha384" => digest::<sha2::Sha384>(path),
        "sha512" => digest::<sha2::Sha512>(path),
        other => {
            return Err(PveError::param(
                "checksum-algorithm",
                format!("checksum algorithm '{other}' is not supported here"),
            ));
        }
    };
    r.map_err(|e| PveError::die(format!("calculating checksum: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_normalized_as_pve_does() {
        assert_eq!(
            normalize_filename("C:\\isos\\my image (1).iso"),
            "my_image__1_.iso"
        );
        assert_eq!(normalize_filename("../../etc/passwd"), "passwd");
        assert_eq!(normalize_filename("noble.qcow2\n"), "noble.qcow2");
    }
}
