//! Image resolution: which volume `import-from` will read, decided from the node's storage
//! listings and the site's PVE version — a pure function, shared by `plan` and the pipeline.
//!
//! Real PVE facts this follows: `import-from` exists since PVE 7.2; its source must be an
//! `images` volume or (since PVE 8.3) an `import` volume — an `iso` volume such as the seed's
//! `local:iso/ubuntu-22.04-cloud.img` is refused ("has wrong type 'iso'"). A cloud image must be
//! placed in a storage's `import` content (as `.qcow2`/`.raw`/`.vmdk`) to be imported through the API.

use serde::Serialize;

use crate::deployer::errors::StepError;
use crate::deployer::pve::api::{ContentEntry, StorageInfo};
use crate::deployer::validate::ImageSpec;

/// PVE release that introduced `import-from` on create.
pub const IMPORT_FROM_SINCE: (u32, u32) = (7, 2);
/// PVE release whose qemu-server accepts `import` volumes as `import-from` sources.
pub const IMPORT_VOLUME_SINCE: (u32, u32) = (8, 3);

const IMPORT_EXTENSIONS: &[&str] = &["qcow2", "raw", "vmdk"];

/// A storage and (for storages that can hold images to import) its content listing.
#[derive(Debug, Clone)]
pub struct StorageView {
    pub info: StorageInfo,
    pub content: Vec<ContentEntry>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ResolvedImage {
    /// The `import-from` source.
    pub volid: String,
    /// `images` or `import`.
    pub content: String,
    /// Virtual size in bytes, when the listing gives it.
    pub size: Option<u64>,
    /// Set when a different volume than the manifest's had to be chosen, and why.
    pub note: Option<String>,
}

/// Storages whose content must be listed to resolve `spec`.
pub fn storages_to_list<'a>(spec: &ImageSpec, storages: &'a [StorageInfo]) -> Vec<&'a StorageInfo> {
    storages
        .iter()
        .filter(|s| s.enabled)
        .filter(|s| match spec {
            ImageSpec::Volid { storage, .. } => &s.storage == storage || s.has_content("import"),
            ImageSpec::Name { .. } => s.has_content("import") || s.has_content("iso"),
        })
        .collect()
}

fn file_name(volid: &str) -> &str {
    let vol = volid.split_once(':').map(|(_, v)| v).unwrap_or(volid);
    vol.rsplit('/').next().unwrap_or(vol)
}

fn stem(file: &str) -> &str {
    match file.rsplit_once('.') {
        Some((s, ext))
            if matches!(ext, "img" | "iso" | "qcow2" | "raw" | "vmdk" | "ova") && !s.is_empty() =>
        {
            s
        }
        _ => file,
    }
}

fn version_text(v: Option<(u32, u32)>) -> String {
    v.map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_else(|| "unknown".into())
}

pub fn resolve(
    spec: &ImageSpec,
    node: &str,
    views: &[StorageView],
    version: Option<(u32, u32)>,
) -> Result<ResolvedImage, StepError> {
    check_import_from(version)?;
    let missing = |detail: String| StepError::ImageMissing {
        image: spec.to_string(),
        node: node.to_string(),
        detail,
    };
    match find_exact(spec, node, views).map_err(missing)? {
        Some((_, c)) if matches!(c.content.as_str(), "images" | "import") => importable(c, version),
        Some((view, c)) => import_twin(view, c, views, version).map_err(|e| match e {
            TwinError::Step(e) => e,
            TwinError::None(detail) => missing(detail),
        }),
        None => {
            let searched: Vec<&str> = views.iter().map(|v| v.info.storage.as_str()).collect();
            Err(missing(format!(
                "not found (searched storages: {})",
                if searched.is_empty() {
                    "none".to_string()
                } else {
                    searched.join(", ")
                }
            )))
        }
    }
}

/// PVE before 7.2 has no `import-from` at all.
fn check_import_from(version: Option<(u32, u32)>) -> Result<(), StepError> {
    match version {
        Some(v) if v < IMPORT_FROM_SINCE => Err(StepError::ImportNotSupported {
            detail: format!(
                "PVE {} has no `import-from` disk option (added in PVE 7.2) and no REST call imports disks (`importdisk` is CLI-only) — upgrade the node or deploy from a template",
                version_text(version)
            ),
        }),
        _ => Ok(()),
    }
}

type Found<'a> = (&'a StorageView, &'a ContentEntry);

fn all_entries(views: &[StorageView]) -> impl Iterator<Item = Found<'_>> + Clone {
    views
        .iter()
        .flat_map(|v| v.content.iter().map(move |c| (v, c)))
}

/// The volume the spec names (by volid, or by file name: an importable one first); `Err`
/// when the named storage is not on the node.
fn find_exact<'a>(
    spec: &ImageSpec,
    node: &str,
    views: &'a [StorageView],
) -> Result<Option<Found<'a>>, String> {
    match spec {
        ImageSpec::Volid { storage, volname } => {
            let volid = format!("{storage}:{volname}");
            if !views.iter().any(|v| &v.info.storage == storage) {
                return Err(format!("storage '{storage}' is not available on {node}"));
            }
            Ok(all_entries(views).find(|(_, c)| c.volid == volid))
        }
        ImageSpec::Name { name } => {
            let mut found: Vec<Found<'a>> = all_entries(views)
                .filter(|(_, c)| file_name(&c.volid) == name)
                .collect();
            // An importable volume of that name beats an ISO-type one.
            found.sort_by_key(|(_, c)| !matches!(c.content.as_str(), "import" | "images"));
            Ok(found.into_iter().next())
        }
    }
}

/// `c` as an `import-from` source, if this PVE version takes its content type.
fn importable(c: &ContentEntry, version: Option<(u32, u32)>) -> Result<ResolvedImage, StepError> {
    if c.content == "import"
        && let Some(v) = version
        && v < IMPORT_VOLUME_SINCE
    {
        return Err(StepError::ImportNotSupported {
            detail: format!(
                "{} is an `import` volume; PVE {} cannot use those as `import-from` sources (PVE 8.3+)",
                c.volid,
                version_text(version)
            ),
        });
    }
    Ok(ResolvedImage {
        volid: c.volid.clone(),
        content: c.content.clone(),
        size: c.size,
        note: None,
    })
}

enum TwinError {
    Step(StepError),
    /// No twin: why the volume found cannot be used.
    None(String),
}

/// An ISO-type volume cannot be imported: the same image in `import` content (the same
/// storage first) stands in for it, with a note saying so.
fn import_twin(
    view: &StorageView,
    c: &ContentEntry,
    views: &[StorageView],
    version: Option<(u32, u32)>,
) -> Result<ResolvedImage, TwinError> {
    let want = stem(file_name(&c.volid));
    let mut twins: Vec<Found<'_>> = all_entries(views)
        .filter(|(_, e)| e.content == "import")
        .filter(|(_, e)| {
            let f = file_name(&e.volid);
            stem(f) == want
                && f.rsplit_once('.')
                    .is_some_and(|(_, ext)| IMPORT_EXTENSIONS.contains(&ext))
        })
        .collect();
    twins.sort_by_key(|(v, _)| v.info.storage != view.info.storage);
    let Some((_, t)) = twins.first() else {
        return Err(TwinError::None(format!(
            "{} is an '{}' volume, and PVE's import-from only takes 'images' or 'import' volumes; place the image as {}:import/{}.qcow2 (download-url with content=import, PVE 8.4+)",
            c.volid, c.content, view.info.storage, want
        )));
    };
    let mut r = importable(t, version).map_err(TwinError::Step)?;
    r.note = Some(format!(
        "{} is an '{}' volume, which import-from refuses; using {}",
        c.volid, c.content, t.volid
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(entries: &[(&str, &str)]) -> StorageView {
        StorageView {
            info: serde_json::from_value(serde_json::json!({
                "storage": "local", "type": "dir", "content": "iso,import,snippets", "active": 1, "enabled": 1
            }))
            .expect("storage"),
            content: entries
                .iter()
                .map(|(volid, content)| {
                    serde_json::from_value(serde_json::json!({"volid": volid, "content": content, "size": 2361393152u64}))
                        .expect("entry")
                })
                .collect(),
        }
    }

    fn volid(s: &str) -> ImageSpec {
        crate::deployer::validate::parse_image(s).expect("image")
    }

    #[test]
    fn iso_volume_alone_is_not_importable() {
        let v = [local(&[("local:iso/ubuntu-22.04-cloud.img", "iso")])];
        let e = resolve(
            &volid("local:iso/ubuntu-22.04-cloud.img"),
            "n",
            &v,
            Some((9, 1)),
        )
        .expect_err("not importable");
        assert_eq!(e.reason(), "ImageMissing");
        assert!(
            e.to_string()
                .contains("local:import/ubuntu-22.04-cloud.qcow2"),
            "{e}"
        );
    }

    #[test]
    fn iso_with_an_import_twin_uses_the_twin() {
        let v = [local(&[
            ("local:import/ubuntu-22.04-cloud.qcow2", "import"),
            ("local:iso/ubuntu-22.04-cloud.img", "iso"),
        ])];
        let r = resolve(
            &volid("local:iso/ubuntu-22.04-cloud.img"),
            "n",
            &v,
            Some((9, 1)),
        )
        .expect("resolves");
        assert_eq!(r.volid, "local:import/ubuntu-22.04-cloud.qcow2");
        assert!(r.note.is_some());
    }

    #[test]
    fn versions_gate_import() {
        let v = [local(&[("local:import/u.qcow2", "import")])];
        let spec = volid("local:import/u.qcow2");
        assert!(resolve(&spec, "n", &v, Some((9, 1))).is_ok());
        assert_eq!(
            resolve(&spec, "n", &v, Some((8, 2)))
                .expect_err("old")
                .reason(),
            "ImportNotSupported"
        );
        assert_eq!(
            resolve(&spec, "n", &v, Some((7, 1)))
                .expect_err("old")
                .reason(),
            "ImportNotSupported"
        );
    }

    #[test]
    fn search_by_name_and_missing() {
        let v = [local(&[("local:import/u.qcow2", "import")])];
        let r = resolve(
            &ImageSpec::Name {
                name: "u.qcow2".into(),
            },
            "n",
            &v,
            None,
        )
        .expect("found");
        assert_eq!(r.volid, "local:import/u.qcow2");
        let e = resolve(
            &ImageSpec::Name {
                name: "x.qcow2".into(),
            },
            "n",
            &v,
            None,
        )
        .expect_err("missing");
        assert!(e.is_retryable());
    }
}
