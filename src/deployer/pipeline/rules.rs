//! The pure rules of the pipeline: storage checks, the create call's parameters, and which create
//! refusals mean "cannot import" — kept apart so they are tested without a server.

use crate::deployer::errors::StepError;
use crate::deployer::image::StorageView;
use crate::deployer::pve::PveError;
use crate::deployer::pve::api::StorageInfo;
use crate::deployer::validate::ValidSpec;

/// Storage checks that no wait can fix.
pub fn check_vm_storage(node: &str, s: &StorageInfo) -> Result<(), StepError> {
    if !s.has_content("images") {
        let hint = if s.kind == "cephfs" {
            "; CephFS stores files, not VM disks — use an RBD storage for disks on Ceph".to_string()
        } else {
            String::new()
        };
        return Err(StepError::StorageNotForImages {
            node: node.to_string(),
            storage: s.storage.clone(),
            kind: s.kind.clone(),
            content: s.content.clone(),
            hint,
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

/// Thick storages need the whole disk free; thin ones need *some* room to start with.
pub fn check_free_space(node: &str, s: &StorageInfo, disk_gib: u64) -> Result<(), StepError> {
    let Some(avail) = s.avail else {
        return Ok(());
    };
    let need = disk_gib * 1024 * 1024 * 1024;
    let full = if s.is_thin() {
        avail == 0
    } else {
        avail < need
    };
    if full {
        return Err(StepError::StorageFull {
            node: node.to_string(),
            storage: s.storage.clone(),
            detail: format!(
                "{} GiB free, {} GiB requested ({} storage)",
                avail / (1024 * 1024 * 1024),
                disk_gib,
                if s.is_thin() { "thin" } else { "thick" }
            ),
        });
    }
    Ok(())
}

/// A user-data snippet already placed for this VM (`<storage>:snippets/<name>-user.yaml`).
pub fn find_user_snippet(views: &[StorageView], name: &str) -> Option<String> {
    let wanted = [
        format!("snippets/{name}-user.yaml"),
        format!("snippets/{name}-user.yml"),
    ];
    views
        .iter()
        .filter(|v| v.info.has_content("snippets"))
        .flat_map(|v| &v.content)
        .find(|c| wanted.iter().any(|w| c.volid.ends_with(&format!(":{w}"))))
        .map(|c| c.volid.clone())
}

/// The create call: disk imported with `import-from` (size 0, no format: lvm-thin is raw-only and
/// PVE picks each storage's default), cloud-init drive on the same storage.
pub fn create_params(
    spec: &ValidSpec,
    vmid: u32,
    import_from: &str,
    snippet: Option<&str>,
    ci_user: &str,
) -> Vec<(&'static str, String)> {
    let mut p = vec![
        ("vmid", vmid.to_string()),
        ("name", spec.name.clone()),
        ("cores", spec.cores.to_string()),
        ("memory", spec.memory_mib.to_string()),
        ("ostype", "l26".to_string()),
        (
            "agent",
            if crate::mutants::active(crate::mutants::Mutant::NoGuestAgent) {
                "0"
            } else {
                "1"
            }
            .to_string(),
        ),
        ("scsihw", "virtio-scsi-single".to_string()),
        ("net0", format!("virtio,bridge={}", spec.bridge)),
        (
            "scsi0",
            if crate::mutants::active(crate::mutants::Mutant::Qcow2OnLvmThin) {
                format!("{}:0,import-from={import_from},format=qcow2", spec.storage)
            } else {
                format!("{}:0,import-from={import_from}", spec.storage)
            },
        ),
        ("ide2", format!("{}:cloudinit", spec.storage)),
        (
            "boot",
            if crate::mutants::active(crate::mutants::Mutant::BootsFromCloudInitDrive) {
                // The boot order names the cloud-init drive, which holds no boot loader.
                "order=ide2"
            } else {
                "order=scsi0"
            }
            .to_string(),
        ),
        ("ciuser", ci_user.to_string()),
        ("ipconfig0", ipconfig0(spec)),
        ("serial0", "socket".to_string()),
    ];
    if crate::mutants::active(crate::mutants::Mutant::DefaultScsiController) {
        // Left to PVE's default controller (LSI 53C895A), which many cloud kernels cannot drive.
        p.retain(|(k, _)| *k != "scsihw");
    }
    if let Some(s) = snippet {
        p.push(("cicustom", format!("user={s}")));
    }
    if let Some(k) = sshkeys(spec) {
        p.push(("sshkeys", k));
    }
    p
}

/// The cloud-init settings of a VM that has no cloud-init drive yet (one adopted from elsewhere):
/// the drive on the VM's storage, the user, the address and the keys.
pub fn cloud_init_params(spec: &ValidSpec, ci_user: &str) -> Vec<(&'static str, String)> {
    let mut params = vec![
        ("ide2", format!("{}:cloudinit", spec.storage)),
        ("ciuser", ci_user.to_string()),
        ("ipconfig0", ipconfig0(spec)),
    ];
    if let Some(k) = sshkeys(spec) {
        params.push(("sshkeys", k));
    }
    params
}

/// `ipconfig0`: the manifest's static address, else DHCP.
pub fn ipconfig0(spec: &ValidSpec) -> String {
    spec.ip
        .as_ref()
        .map(|ip| ip.ipconfig())
        .unwrap_or_else(|| "ip=dhcp".to_string())
}

/// `sshkeys`: one key per line, URL-encoded as PVE stores it (`%20`, `%0A`); `None` without
/// keys.
pub fn sshkeys(spec: &ValidSpec) -> Option<String> {
    if spec.ssh_keys.is_empty() {
        return None;
    }
    let joined = spec.ssh_keys.join("\n");
    Some(
        percent_encoding::utf8_percent_encode(&joined, percent_encoding::NON_ALPHANUMERIC)
            .to_string(),
    )
}

/// The `size` of the resize call: the manifest's GiB, in PVE's `G` (GiB).
pub fn resize_size(disk_gib: u64) -> String {
    if crate::mutants::active(crate::mutants::Mutant::DisksInGb) {
        return format!("{}M", disk_gib * 1_000_000_000 / (1024 * 1024));
    }
    format!("{disk_gib}G")
}

/// Create refusals that mean "this PVE cannot import" or "this is not an importable image".
pub fn create_refused(node: &str, spec: &ValidSpec, e: &PveError) -> Option<StepError> {
    let text = e.text();
    if text.contains("import-from")
        && (text.contains("not defined in schema") || text.contains("unknown"))
    {
        return Some(StepError::ImportNotSupported {
            detail: format!("the node refused `import-from`: {}", text.trim()),
        });
    }
    if text.contains("wrong type") || text.contains("needs to be 'images' or 'import'") {
        return Some(StepError::ImageMissing {
            image: spec.image.to_string(),
            node: node.to_string(),
            detail: text.trim().to_string(),
        });
    }
    None
}

/// The seed's nginx-proxy-vm as a validated spec, for unit tests.
#[cfg(test)]
pub(crate) fn test_spec() -> ValidSpec {
    ValidSpec {
        kind: crate::deployer::guest::GuestKind::Vm,
        name: "nginx-proxy-vm".into(),
        site: "site-1".into(),
        node: "ml110-01".into(),
        cores: 2,
        memory_mib: 4096,
        disk_gib: 20,
        storage: "local-lvm".into(),
        bridge: "vmbr0".into(),
        image: crate::deployer::validate::ImageSpec::Name {
            name: "u.qcow2".into(),
        },
        user_data: None,
        ip: None,
        ssh_keys: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ValidSpec {
        test_spec()
    }

    #[test]
    fn create_params_are_what_pve_needs() {
        let p = create_params(&spec(), 104, "local:import/u.qcow2", None, "admin");
        let get = |k: &str| p.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("scsi0"),
            Some("local-lvm:0,import-from=local:import/u.qcow2")
        );
        assert_eq!(get("ide2"), Some("local-lvm:cloudinit"));
        assert_eq!(get("memory"), Some("4096"));
        assert_eq!(get("net0"), Some("virtio,bridge=vmbr0"));
        assert!(p.iter().all(|(_, v)| !v.contains("format=qcow2")));
        assert_eq!(get("ipconfig0"), Some("ip=dhcp"));
        assert_eq!(get("sshkeys"), None);
    }

    #[test]
    fn a_static_address_and_keys_reach_cloud_init() {
        let mut s = spec();
        s.ip = Some(crate::deployer::validate::StaticIp {
            address: "192.168.100.11".parse().expect("ip"),
            prefix: 24,
            gateway: Some("192.168.100.1".parse().expect("ip")),
        });
        s.ssh_keys = vec!["ssh-ed25519 AAAA a@b".into(), "ssh-rsa BBBB c@d".into()];
        let p = create_params(&s, 104, "local:import/u.qcow2", None, "admin");
        let get = |k: &str| p.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("ipconfig0"),
            Some("ip=192.168.100.11/24,gw=192.168.100.1")
        );
        assert_eq!(
            get("sshkeys"),
            Some("ssh%2Ded25519%20AAAA%20a%40b%0Assh%2Drsa%20BBBB%20c%40d")
        );
    }

    #[test]
    fn cephfs_is_refused_with_a_hint() {
        let s: StorageInfo = serde_json::from_value(serde_json::json!({
            "storage": "ceph-fs", "type": "cephfs", "content": "iso,vztmpl,backup,snippets", "active": 1
        }))
        .expect("storage");
        let e = check_vm_storage("r630-01", &s).expect_err("no images");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("RBD"), "{e}");
    }

    #[test]
    fn free_space_thin_vs_thick() {
        let mk = |kind: &str, avail: u64| -> StorageInfo {
            serde_json::from_value(serde_json::json!({
                "storage": "s", "type": kind, "content": "images", "avail": avail
            }))
            .expect("storage")
        };
        let gib = 1024u64 * 1024 * 1024;
        assert!(check_free_space("n", &mk("lvmthin", 5 * gib), 20).is_ok());
        assert!(check_free_space("n", &mk("lvmthin", 0), 20).is_err());
        assert!(check_free_space("n", &mk("lvm", 5 * gib), 20).is_err());
        assert!(check_free_space("n", &mk("lvm", 50 * gib), 20).is_ok());
    }
}
