//! The cloud-init drive's image, as qemu-server's `generate_cloudinit_config` makes it on
//! every start (and on `PUT …/cloudinit`): for each `vm-VMID-cloudinit` volume, the
//! NoCloud (`cidata`) or config-drive (`config-2`) files, the same documents
//! `GET …/cloudinit/dump` renders unless `cicustom` names a snippet for one, written through
//! the site's disks seam.
//!
//! The image is only made where the disks seam keeps the volume's data (`Disks::path`);
//! with simulated disks nothing is generated and no snippet is read, as before.
//! Deviations: `opennebula` is not made (the start fails saying so); Windows guests get
//! the Linux config-drive documents the dump shows, not cloudbase-init's.

use super::cloudinit::{DumpType, dump, format_of, metadata};
use super::model::{Vm, is_disk_key, prop, split_props};
use crate::exec::{CloudInitImage, Vol};
use crate::storage::model::Content;
use crate::storage::volid::{parse_volid, parse_volname};
use crate::world::Site;

/// PVE's cap on the sum of the image's files.
const FILES_LIMIT: usize = 3 * 1024 * 1024;
/// The size of a cloud-init volume (`CLOUDINIT_DISK_SIZE`).
const DRIVE_SIZE: u64 = 4 * 1024 * 1024;

/// The `cicustom` snippets' texts, by part.
#[derive(Debug, Default)]
pub(crate) struct Custom {
    pub user: Option<String>,
    pub network: Option<String>,
    pub meta: Option<String>,
    pub vendor: Option<String>,
}

/// The files of the image, from the config's documents and the custom ones
/// (`generate_nocloud` / `generate_configdrive2`).
fn image(vm: &Vm, host: &super::cloudinit::HostDns, c: Custom) -> Result<CloudInitImage, String> {
    let format = format_of(&vm.config).to_string();
    let nocloud = match format.as_str() {
        "nocloud" => true,
        "configdrive2" => false,
        other => {
            return Err(format!(
                "cloud-init type '{other}' is not implemented by fake-proxmox"
            ));
        }
    };
    let user = c.user.unwrap_or_else(|| dump(vm, DumpType::User, host));
    let network = c
        .network
        .unwrap_or_else(|| dump(vm, DumpType::Network, host));
    let vendor = c.vendor.unwrap_or_default();
    let meta = c.meta.unwrap_or_else(|| metadata(nocloud, &user, &network));
    if user.len() + network.len() + meta.len() + vendor.len() > FILES_LIMIT {
        return Err("Cloud-Init sum of snippets too big (> 3 MiB)".into());
    }
    let (label, names) = if nocloud {
        (
            "cidata",
            [
                "/user-data",
                "/network-config",
                "/meta-data",
                "/vendor-data",
            ],
        )
    } else {
        (
            "config-2",
            [
                "/openstack/latest/user_data",
                "/openstack/content/0000",
                "/openstack/latest/meta_data.json",
                "/openstack/latest/vendor_data.json",
            ],
        )
    };
    let files = names
        .into_iter()
        .map(str::to_string)
        .zip([user, network, meta, vendor])
        .collect();
    Ok(CloudInitImage { label, files })
}

/// The VM's cloud-init volumes: `(storage, volname)`.
fn drives(vm: &Vm) -> Vec<(String, String)> {
    let name = format!("vm-{}-cloudinit", vm.vmid);
    vm.config
        .iter()
        .filter(|(k, _)| is_disk_key(k))
        .filter_map(|(_, v)| {
            let props = split_props(v, "file");
            let (sid, volname) = parse_volid(prop(&props, "file")?)?;
            volname
                .contains(name.as_str())
                .then(|| (sid.to_string(), volname.to_string()))
        })
        .collect()
}

impl Site {
    /// Write every cloud-init drive of the VM whose data the disks seam keeps; the task
    /// log lines that printed. Errors are the start's (or `PUT …/cloudinit`'s).
    pub(crate) fn write_cloudinit_drives(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<Vec<String>, String> {
        let Some(vm) = self.vms.get(&vmid) else {
            return Ok(Vec::new());
        };
        let real: Vec<(String, String)> = drives(vm)
            .into_iter()
            .filter(|(sid, vol)| self.disks_on(node).path(node, sid, vol).is_some())
            .collect();
        if real.is_empty() {
            return Ok(Vec::new());
        }
        let custom = self.custom_snippets(node, vm)?;
        let image = image(vm, &self.host_dns(node), custom)?;
        let mut lines = Vec::new();
        for (sid, vol) in real {
            let record = self
                .nodes
                .get(node)
                .and_then(|n| n.storages.get(&sid))
                .and_then(|s| s.volumes.get(&vol));
            let (format, size) = match record {
                Some(v) => (v.format.clone(), v.size.max(DRIVE_SIZE)),
                None if vol.ends_with(".qcow2") => ("qcow2".into(), DRIVE_SIZE),
                None => ("raw".into(), DRIVE_SIZE),
            };
            let vol = Vol::new(node, &sid, &vol);
            lines.extend(
                self.disks_on(node)
                    .write_cloudinit(vol, &format, size, &image)?,
            );
        }
        Ok(lines)
    }

    /// `get_custom_cloudinit_files`: the snippets `cicustom` names, each checked to be a
    /// snippet (`read_cloudinit_snippets_file`).
    pub(crate) fn custom_snippets(&self, node: &str, vm: &Vm) -> Result<Custom, String> {
        let mut c = Custom::default();
        let Some(cicustom) = vm.config.get("cicustom") else {
            return Ok(c);
        };
        for (part, volid) in split_props(cicustom, "") {
            let slot = match part.as_str() {
                "user" => &mut c.user,
                "network" => &mut c.network,
                "meta" => &mut c.meta,
                "vendor" => &mut c.vendor,
                _ => continue,
            };
            let (sid, volname) = parse_volid(&volid)
                .ok_or_else(|| format!("unable to parse volume ID '{volid}'"))?;
            let sto = self
                .nodes
                .get(node)
                .and_then(|n| n.storages.get(sid))
                .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
            if parse_volname(sto.kind, volname).map(|v| v.0) != Some(Content::Snippets) {
                return Err(format!("{volid} is not in the snippets directory"));
            }
            *slot = Some(self.snippet_text(node, sid, volname)?);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use super::*;
    use crate::qemu::cloudinit::HostDns;

    fn vm(pairs: &[(&str, &str)]) -> Vm {
        let config: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Vm::stopped(100, "pve", config, None)
    }

    fn file<'a>(img: &'a CloudInitImage, name: &str) -> &'a str {
        img.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.as_str())
            .unwrap()
    }

    #[test]
    fn nocloud_holds_the_dumps_documents() {
        let v = vm(&[
            ("name", "web1"),
            ("ciuser", "ops"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
        ]);
        let host = HostDns::default();
        let img = image(&v, &host, Custom::default()).unwrap();
        assert_eq!(img.label, "cidata");
        assert_eq!(file(&img, "/user-data"), dump(&v, DumpType::User, &host));
        assert_eq!(
            file(&img, "/network-config"),
            dump(&v, DumpType::Network, &host)
        );
        assert_eq!(file(&img, "/meta-data"), dump(&v, DumpType::Meta, &host));
        assert_eq!(file(&img, "/vendor-data"), "");
    }

    #[test]
    fn configdrive2_uses_the_openstack_layout() {
        let v = vm(&[("citype", "configdrive2"), ("name", "w")]);
        let host = HostDns::default();
        let img = image(&v, &host, Custom::default()).unwrap();
        assert_eq!(img.label, "config-2");
        let names: Vec<&str> = img.files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "/openstack/latest/user_data",
                "/openstack/content/0000",
                "/openstack/latest/meta_data.json",
                "/openstack/latest/vendor_data.json"
            ]
        );
        assert_eq!(
            file(&img, "/openstack/latest/meta_data.json"),
            dump(&v, DumpType::Meta, &host)
        );
    }

    #[test]
    fn a_custom_user_snippet_replaces_the_user_data_and_renames_the_instance() {
        let v = vm(&[("name", "w")]);
        let host = HostDns::default();
        let custom = Custom {
            user: Some("#cloud-config\nruncmd: [true]\n".into()),
            ..Custom::default()
        };
        let img = image(&v, &host, custom).unwrap();
        let network = dump(&v, DumpType::Network, &host);
        assert_eq!(file(&img, "/user-data"), "#cloud-config\nruncmd: [true]\n");
        assert_eq!(
            file(&img, "/meta-data"),
            metadata(true, "#cloud-config\nruncmd: [true]\n", &network)
        );
        assert_ne!(file(&img, "/meta-data"), dump(&v, DumpType::Meta, &host));
    }

    #[test]
    fn too_much_data_and_unknown_types_fail_the_start() {
        let host = HostDns::default();
        let big = Custom {
            vendor: Some("x".repeat(FILES_LIMIT)),
            ..Custom::default()
        };
        let e = image(&vm(&[]), &host, big).unwrap_err();
        assert_eq!(e, "Cloud-Init sum of snippets too big (> 3 MiB)");
        let e = image(&vm(&[("citype", "opennebula")]), &host, Custom::default()).unwrap_err();
        assert!(e.contains("opennebula"), "{e}");
    }
}
