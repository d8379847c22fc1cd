//! A container's own steps (`kind: ProxmoxContainer`): its storage must hold container
//! directories, its template must be on one of the node's storages, and it is created in one
//! call (`POST /nodes/{node}/lxc`: rootfs at its size, the NIC's address, the keys).

use super::{Pipeline, Step, VmJob};
use crate::deployer::errors::StepError;
use crate::deployer::image::StorageView;
use crate::deployer::pve::api::StorageInfo;
use crate::deployer::state::Condition;
use crate::deployer::validate::{ImageSpec, ValidSpec};

/// A container's storage holds `rootdir` content and is enabled.
pub fn check_ct_storage(node: &str, s: &StorageInfo) -> Result<(), StepError> {
    if !s.has_content("rootdir") {
        return Err(StepError::StorageNotForContainers {
            node: node.to_string(),
            storage: s.storage.clone(),
            kind: s.kind.clone(),
            content: s.content.clone(),
        });
    }
    if !s.enabled {
        return Err(StepError::StorageMissing {
            node: node.to_string(),
            storage: format!("{} (disabled)", s.storage),
        });
    }
    Ok(())
}

/// The template's volid: the manifest's volid if its storage lists it, else the first
/// `vztmpl` volume of that file name on the node's storages.
pub fn resolve_template(
    spec: &ValidSpec,
    node: &str,
    views: &[StorageView],
) -> Result<String, StepError> {
    let templates = views
        .iter()
        .flat_map(|v| &v.content)
        .filter(|c| c.content == "vztmpl");
    let found = match &spec.image {
        ImageSpec::Volid { storage, volname } => {
            let volid = format!("{storage}:{volname}");
            templates.map(|c| c.volid.clone()).find(|v| *v == volid)
        }
        ImageSpec::Name { name } => templates
            .map(|c| c.volid.clone())
            .find(|v| v.rsplit('/').next() == Some(name.as_str())),
    };
    found.ok_or_else(|| StepError::ImageMissing {
        image: spec.image.to_string(),
        node: node.to_string(),
        detail: "no vztmpl volume of that name on the node's storages (download one with download-url content=vztmpl, or upload it)".to_string(),
    })
}

/// `POST /nodes/{node}/lxc`'s parameters: an unprivileged container with its rootfs on the
/// manifest's storage at its size, one NIC on its bridge, DHCP or the static address.
pub fn ct_create_params(
    spec: &ValidSpec,
    vmid: u32,
    template: &str,
) -> Vec<(&'static str, String)> {
    let ip = match &spec.ip {
        Some(ip) => match ip.gateway {
            Some(gw) => format!("ip={}/{},gw={gw}", ip.address, ip.prefix),
            None => format!("ip={}/{}", ip.address, ip.prefix),
        },
        None => "ip=dhcp".to_string(),
    };
    let rootfs = if crate::mutants::active(crate::mutants::Mutant::RootfsDefaultSize) {
        // The storage only: PVE makes the rootfs at its default size.
        ("storage", spec.storage.clone())
    } else {
        ("rootfs", format!("{}:{}", spec.storage, spec.disk_gib))
    };
    let unprivileged = if crate::mutants::active(crate::mutants::Mutant::PrivilegedContainers) {
        "0"
    } else {
        "1"
    };
    let mut p = vec![
        ("vmid", vmid.to_string()),
        ("hostname", spec.name.clone()),
        ("ostemplate", template.to_string()),
        rootfs,
        ("cores", spec.cores.to_string()),
        ("memory", spec.memory_mib.to_string()),
        ("net0", format!("name=eth0,bridge={},{ip}", spec.bridge)),
        ("unprivileged", unprivileged.to_string()),
    ];
    if !spec.ssh_keys.is_empty()
        && !crate::mutants::active(crate::mutants::Mutant::ContainerWithoutSshKeys)
    {
        p.push(("ssh-public-keys", spec.ssh_keys.join("\n")));
    }
    p
}

impl Pipeline<'_> {
    /// The template found, then the create with a fresh VMID.
    pub(super) async fn create_ct(
        &self,
        job: &VmJob<'_>,
        storages: &[StorageInfo],
        reuse: bool,
    ) -> Result<u32, StepError> {
        let spec = job.spec;
        let node = spec.node.as_str();
        self.step(job, Step::Image);
        let templates = storages
            .iter()
            .filter(|s| s.has_content("vztmpl"))
            .collect();
        let views = self.storage_views(job, templates, reuse).await?;
        let template = resolve_template(spec, node, &views)?;
        self.record(job, |r| {
            r.set_condition(Condition::new(
                "ImageResolved",
                true,
                "Template",
                template.clone(),
            ))
        });
        self.create_guest(job, &template, |vmid| {
            ct_create_params(spec, vmid, &template)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployer::guest::GuestKind;
    use crate::deployer::validate::StaticIp;

    fn spec() -> ValidSpec {
        ValidSpec {
            kind: GuestKind::Container,
            name: "cache-1".into(),
            site: "site-1".into(),
            node: "ml110-01".into(),
            cores: 1,
            memory_mib: 512,
            disk_gib: 8,
            storage: "local-lvm".into(),
            bridge: "vmbr0".into(),
            image: ImageSpec::Name {
                name: "debian-12-standard_12.7-1_amd64.tar.zst".into(),
            },
            user_data: None,
            ip: None,
            ssh_keys: vec!["ssh-ed25519 AAAA me".into()],
        }
    }

    #[test]
    fn the_create_call_sizes_the_rootfs_and_addresses_the_nic() {
        let mut s = spec();
        let p = ct_create_params(&s, 300, "local:vztmpl/x.tar.zst");
        let get = |k: &str| p.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("rootfs").as_deref(), Some("local-lvm:8"));
        assert_eq!(
            get("net0").as_deref(),
            Some("name=eth0,bridge=vmbr0,ip=dhcp")
        );
        assert_eq!(get("hostname").as_deref(), Some("cache-1"));
        assert_eq!(
            get("ssh-public-keys").as_deref(),
            Some("ssh-ed25519 AAAA me")
        );
        s.ip = Some(StaticIp {
            address: std::net::Ipv4Addr::new(192, 168, 11, 50),
            prefix: 24,
            gateway: Some(std::net::Ipv4Addr::new(192, 168, 11, 1)),
        });
        let p = ct_create_params(&s, 300, "local:vztmpl/x.tar.zst");
        assert!(p.contains(&(
            "net0",
            "name=eth0,bridge=vmbr0,ip=192.168.11.50/24,gw=192.168.11.1".to_string()
        )));
    }
}
