//! `GET /nodes/{node}/storage/{storage}/import-metadata` (Status.pm `get_import_metadata`,
//! DirPlugin.pm): what a VM made from an importable volume — an OVA, or an OVF beside its
//! disk images — would be created with.
//!
//! The fake reads no OVF XML: every OVA/OVF volume describes the manifest a typical
//! exported Linux VM has — named after the file (as PVE cleans a name), 2 cores, 2048 MiB,
//! `l26`, one SCSI disk `<stem>-disk1.vmdk` and one `e1000` NIC. An OVA's disk is as large as
//! the volume's size; an OVF's disk must exist beside it (`import/<stem>-disk1.vmdk`).

use serde_json::{Value, json};

use crate::request::Request;
use crate::storage::model::Content;
use crate::wire::PveError;
use crate::world::Site;

/// `$qm->{name}` from an OVF name: whitespace runs become `-`, then anything outside
/// `[a-zA-Z0-9.-]` goes.
fn clean_name(name: &str) -> String {
    let mut out = String::new();
    let mut in_space = false;
    for c in name.chars() {
        if c.is_whitespace() {
            if !in_space {
                out.push('-');
            }
            in_space = true;
            continue;
        }
        in_space = false;
        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
            out.push(c);
        }
    }
    out
}

impl Site {
    /// The import metadata of `{volume}` (a volume name: PVE prefixes it with the storage).
    pub fn import_metadata(&self, req: &Request) -> Result<Value, PveError> {
        let s = self.configured_storage(req)?;
        let volname = req.p.req_str("volume")?;
        let (vtype, _) = self.check_volume_access(&req.who, s, &volname, None)?;
        if !s.kind.is_file_based() {
            return Err(PveError::die("storage does not support the importer API"));
        }
        if vtype != Content::Import {
            return Err(PveError::die(format!(
                "invalid content type '{}'",
                vtype.as_str()
            )));
        }
        let file = volname.trim_start_matches("import/");
        let (stem, ext) = file.rsplit_once('.').unwrap_or((file, ""));
        let ova = match ext {
            "ova" => true,
            "ovf" => false,
            _ => return Err(PveError::die("invalid format")),
        };
        let path = s.file_path(&volname);
        let Some(v) = s.volumes.get(&volname) else {
            return Err(PveError::die(if ova {
                format!(
                    "command 'tar -xO --wildcards --occurrence=1 -f {path} '*.ovf'' failed: exit code 2"
                )
            } else {
                format!("unable to open file '{path}' - No such file or directory")
            }));
        };
        let disk_file = format!("{stem}-disk1.vmdk");
        let mut disk = json!({});
        if ova {
            disk["volid"] = json!(format!("{}:{volname}/{disk_file}", s.name));
            disk["size"] = json!(v.size);
        } else {
            let disk_vol = format!("import/{disk_file}");
            let backing = s.volumes.get(&disk_vol).ok_or_else(|| {
                PveError::die(format!(
                    "error parsing {disk_file}, file seems not to exist at {}",
                    s.file_path(&disk_vol)
                ))
            })?;
            disk["volid"] = json!(s.volid(&disk_vol));
            disk["size"] = json!(backing.size);
        }
        let warnings: Vec<Value> = if ova {
            vec![json!({"type": "ova-needs-extracting"})]
        } else {
            Vec::new()
        };
        // OVF values are XML text: PVE passes them on as strings.
        Ok(json!({
            "type": "vm",
            "source": volname,
            "create-args": {
                "name": clean_name(stem),
                "cores": "2",
                "memory": "2048",
                "ostype": "l26",
                "boot": "order=scsi0",
            },
            "disks": {"scsi0": disk},
            "net": {"net0": {"model": "e1000"}},
            "warnings": warnings,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_as_pve_does() {
        assert_eq!(clean_name("My VM (copy) 2"), "My-VM-copy-2");
        assert_eq!(clean_name("web_01.example"), "web01.example");
    }
}
