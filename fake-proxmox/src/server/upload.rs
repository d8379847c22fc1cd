//! Multipart uploads, as pveproxy takes them for `POST …/storage/{storage}/upload` (the one
//! "upload" URL): the file part is streamed to `/var/tmp/pveupload-<hex>` — the path PVE's
//! schema allows for `tmpfilename` — and the handler gets that path as `tmpfilename`, the file
//! part's name as `filename`; the other parts are ordinary parameters. Nothing is held in
//! memory, so an image of any size can be uploaded. A request that is refused removes its file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use axum::body::Body;
use rand::Rng;
use tokio::io::AsyncWriteExt;

use crate::wire::{PveError, RawParam};

/// Where uploads are spooled (PVE's schema pins `tmpfilename` to this pattern).
const SPOOL_PREFIX: &str = "/var/tmp/pveupload-";

/// Whether `rel` (below `/api2/json`) is the upload URL.
pub fn is_upload_path(rel: &str) -> bool {
    let parts: Vec<&str> = rel.trim_matches('/').split('/').collect();
    matches!(parts.as_slice(), ["nodes", _, "storage", _, "upload"])
}

/// Whether the content type is `multipart/form-data`.
pub fn is_multipart(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|c| c.split(';').next())
        .is_some_and(|c| c.trim().eq_ignore_ascii_case("multipart/form-data"))
}

/// The spooled file of one upload; removed on drop unless [`Spooled::keep`] was called.
#[derive(Debug)]
pub struct Spooled {
    path: PathBuf,
    keep: bool,
}

impl Spooled {
    /// Where the uploaded bytes are on disk.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The handler took the file over (its task removes it when it ends).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Read a multipart body into `params`, streaming its file part to the spool.
pub async fn read_multipart(
    content_type: &str,
    body: Body,
    params: &mut BTreeMap<String, RawParam>,
) -> Result<Option<Spooled>, PveError> {
    let bad = |e: multer::Error| PveError::bare(400, format!("malformed multipart body: {e}"));
    let boundary = multer::parse_boundary(content_type).map_err(bad)?;
    let mut parts = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut spooled: Option<Spooled> = None;
    while let Some(mut field) = parts.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or("").to_string();
        match field.file_name().map(str::to_string) {
            Some(file_name) if spooled.is_none() => {
                let hex: u64 = rand::rng().random();
                let path = PathBuf::from(format!("{SPOOL_PREFIX}{hex:016x}"));
                let mut file = tokio::fs::File::create(&path).await.map_err(|e| {
                    PveError::bare(
                        500,
                        format!("unable to create upload file '{}': {e}", path.display()),
                    )
                })?;
                let s = Spooled { path, keep: false };
                while let Some(chunk) = field.chunk().await.map_err(bad)? {
                    file.write_all(&chunk)
                        .await
                        .map_err(|e| PveError::bare(500, format!("writing the upload: {e}")))?;
                }
                file.flush()
                    .await
                    .map_err(|e| PveError::bare(500, format!("writing the upload: {e}")))?;
                params.insert("filename".into(), RawParam::Text(file_name));
                params.insert(
                    "tmpfilename".into(),
                    RawParam::Text(s.path.display().to_string()),
                );
                spooled = Some(s);
            }
            Some(_) => {
                return Err(PveError::bare(400, "only one file can be uploaded at once"));
            }
            None => {
                let text = field.text().await.map_err(bad)?;
                params.entry(name).or_insert(RawParam::Text(text));
            }
        }
    }
    Ok(spooled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_storage_upload_url_takes_files() {
        assert!(is_upload_path("/nodes/pve1/storage/local/upload"));
        assert!(!is_upload_path("/nodes/pve1/storage/local/download-url"));
        assert!(!is_upload_path("/nodes/pve1/qemu/100/upload"));
        assert!(is_multipart(Some("multipart/form-data; boundary=x")));
        assert!(!is_multipart(Some("application/x-www-form-urlencoded")));
    }
}
