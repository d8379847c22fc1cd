//! Snippets (`<storage>:snippets/<name>`): the files `cicustom` names. PVE's API cannot
//! upload them (`upload` takes `iso`, `vztmpl` and `import` only), so deployers place them
//! on the node's file system or on a share every node mounts; PVE then lists what is in the
//! directory and reads the file when it builds a cloud-init drive.
//!
//! Here a storage's snippets are real files where the storage has a directory: the disks
//! seam's with real disks, the scenario's `backing_dir` on a node with simulated disks (a
//! share the deployer mounts too). Elsewhere a snippet is a record that may carry its text
//! (placed by the scenario or the control API).

use std::io::Read;
use std::path::PathBuf;

use crate::exec::Vol;
use crate::storage::model::Content;
use crate::storage::volid::parse_volname;
use crate::storage::volumes::Volume;
use crate::world::Site;

/// PVE reads at most this much of a snippet (`read_cloudinit_snippets_file`).
pub const SNIPPET_LIMIT: u64 = 1024 * 1024;

impl Site {
    /// The directory whose files are storage `sid`'s snippets on `node`, if it has one.
    pub fn snippets_dir(&self, node: &str, sid: &str) -> Option<PathBuf> {
        if let Some(p) = self.disks_on(node).path(node, sid, "snippets/probe") {
            return p.parent().map(PathBuf::from);
        }
        let storage = self.nodes.get(node)?.storages.get(sid)?;
        let dir = storage.backing_dir.as_ref()?;
        storage
            .content
            .contains(&Content::Snippets)
            .then(|| dir.join("snippets"))
    }

    /// Bring the snippet records of storage `sid` on `node` up to its directory, as PVE
    /// lists the directory: a file placed there appears, one removed goes. A storage
    /// without a directory keeps its records.
    pub fn rescan_snippets(&mut self, node: &str, sid: &str) {
        let Some(dir) = self.snippets_dir(node, sid) else {
            return;
        };
        let mut found: Vec<(String, u64, u64)> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let Ok(meta) = e.metadata() else { continue };
                let Some(name) = e.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if !meta.is_file() || name.starts_with('.') {
                    continue;
                }
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                found.push((format!("snippets/{name}"), meta.len(), mtime));
            }
        }
        let Some(storage) = self.storage_mut(node, sid) else {
            return;
        };
        let gone: Vec<String> = storage
            .volumes
            .values()
            .filter(|v| v.vtype == Content::Snippets && v.text.is_none())
            .filter(|v| !found.iter().any(|(n, _, _)| *n == v.volname))
            .map(|v| v.volname.clone())
            .collect();
        let mut changed = !gone.is_empty();
        for g in gone {
            storage.volumes.remove(&g);
        }
        for (volname, len, mtime) in found {
            let Some((vtype, vmid, format)) = parse_volname(storage.kind, &volname) else {
                continue;
            };
            let same = storage
                .volumes
                .get(&volname)
                .is_some_and(|v| v.size == len && v.ctime == mtime);
            if same {
                continue;
            }
            changed = true;
            storage.volumes.insert(
                volname.clone(),
                Volume {
                    volname,
                    vtype,
                    format,
                    size: len,
                    used: len,
                    vmid,
                    ctime: mtime,
                    notes: None,
                    protected: false,
                    image: None,
                    text: None,
                },
            );
        }
        if changed {
            self.share_storages();
        }
    }

    /// A snippet's text as `read_cloudinit_snippets_file` reads it: from the storage's
    /// directory, else the record's text (empty when a record carries none). The errors are
    /// PVE's (`file_get_contents`).
    pub fn snippet_text(&self, node: &str, sid: &str, volname: &str) -> Result<String, String> {
        let vol = Vol::new(node, sid, volname);
        if self.disks_on(node).path(node, sid, volname).is_some() {
            return self
                .disks_on(node)
                .read_snippet(vol, SNIPPET_LIMIT)
                .map(Option::unwrap_or_default);
        }
        let storage = self
            .nodes
            .get(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
        let pve_path = format!(
            "{}/{volname}",
            storage.path.as_deref().unwrap_or("/var/lib/vz")
        );
        let record = storage.volumes.get(volname);
        if let Some(dir) = self.snippets_dir(node, sid) {
            let name = volname.trim_start_matches("snippets/");
            let file = match std::fs::File::open(dir.join(name)) {
                Ok(f) => f,
                Err(_) if record.is_some_and(|r| r.text.is_some()) => {
                    return Ok(record.and_then(|r| r.text.clone()).unwrap_or_default());
                }
                Err(e) => return Err(format!("can't open '{pve_path}' - {}", os_text(&e))),
            };
            let mut buf = Vec::new();
            file.take(SNIPPET_LIMIT + 1)
                .read_to_end(&mut buf)
                .map_err(|e| format!("can't read '{pve_path}' - {}", os_text(&e)))?;
            if buf.len() as u64 > SNIPPET_LIMIT {
                return Err(format!("content '{pve_path}' too large"));
            }
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        match record {
            Some(v) => Ok(v.text.clone().unwrap_or_default()),
            None => Err(format!(
                "can't open '{pve_path}' - No such file or directory"
            )),
        }
    }
}

/// Perl's `$!` text: the OS message without Rust's ` (os error N)`.
fn os_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
