//! ProxmoxVM manifests in the seed's Crossplane shape, loaded from a directory tree, and
//! ProxmoxContainer manifests of the same shape (`image` names an OS template).
//!
//! A manifest that cannot be read or parsed is not dropped: it is kept as an [`Unreadable`] entry
//! with the parser's message and line, because `plan` must report it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One `kind: ProxmoxVM` (or `kind: ProxmoxContainer`) document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProxmoxVm {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: VmSpec,
}

impl ProxmoxVm {
    /// The guest the manifest asks for (a VM unless `kind: ProxmoxContainer`).
    pub fn guest_kind(&self) -> crate::deployer::guest::GuestKind {
        crate::deployer::guest::GuestKind::of_manifest(&self.kind).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmSpec {
    pub for_provider: ForProvider,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config_ref: Option<NameRef>,
    /// Rollout ordering (this harness's extension; the seed orders by prose).
    #[serde(default)]
    pub deployment: Deployment,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NameRef {
    pub name: String,
}

/// `spec.forProvider`: what the VM is. Sizes stay strings here; `validate` parses them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ForProvider {
    pub node: String,
    pub name: String,
    pub cpu: i64,
    pub memory: String,
    pub disk: String,
    pub storage: String,
    pub network: String,
    pub image: String,
    pub site: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The first NIC's static IPv4 address with its prefix (`192.168.100.11/24`), applied by
    /// cloud-init (PVE's `ipconfig0`). This harness's extension; absent: DHCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// The default gateway with `ipAddress` (PVE's `ipconfig0` `gw=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// SSH public keys for the cloud-init user (PVE's `sshkeys`). This harness's extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<String>,
}

/// Where a VM sits in the rollout: the seed's priority phases, its "deploy together" groups, and
/// explicit dependencies on other manifests (by VM name).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Orders groups inside a phase (lower first); groups without one go first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
}

/// The seed's deployment order: critical path, high, medium, blockchain groups, test VMs.
#[derive(
    Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Critical,
    High,
    #[default]
    Medium,
    Blockchain,
    Test,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Critical => "critical",
            Phase::High => "high",
            Phase::Medium => "medium",
            Phase::Blockchain => "blockchain",
            Phase::Test => "test",
        }
    }
}

/// A manifest file that parsed into a ProxmoxVM.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Path relative to the manifests directory (e.g. `production/phoenix/dns-primary.yaml`).
    pub path: String,
    pub vm: ProxmoxVm,
}

/// A manifest file that could not be read or parsed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unreadable {
    pub path: String,
    pub error: String,
    /// 1-based line of the error, when the parser knows it.
    pub line: Option<usize>,
    pub column: Option<usize>,
}

/// Everything found under a manifests directory.
#[derive(Debug, Clone, Default)]
pub struct ManifestSet {
    pub vms: Vec<Loaded>,
    pub unreadable: Vec<Unreadable>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("manifests directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Parses one YAML text. `Ok(None)` means the document is valid YAML but not a ProxmoxVM
/// (ProviderConfig, Secret, …), which is skipped, not reported.
pub fn parse_manifest(path: &str, text: &str) -> Result<Option<ProxmoxVm>, Unreadable> {
    let value: serde_norway::Value =
        serde_norway::from_str(text).map_err(|e| unreadable(path, &e))?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    if crate::deployer::guest::GuestKind::of_manifest(kind).is_none() {
        // Not a Kubernetes object at all (a fake-proxmox scenario, a lab spec): not ours to judge.
        if value.get("apiVersion").is_none() && value.get("spec").is_none() {
            return Ok(None);
        }
        if kind.is_empty() {
            return Err(Unreadable {
                path: path.to_string(),
                error: "missing `kind` (expected ProxmoxVM or ProxmoxContainer)".to_string(),
                line: None,
                column: None,
            });
        }
        return Ok(None);
    }
    // Deserialize from the text (not the Value) so field errors keep their line numbers.
    serde_norway::from_str::<ProxmoxVm>(text)
        .map(Some)
        .map_err(|e| unreadable(path, &e))
}

fn unreadable(path: &str, e: &serde_norway::Error) -> Unreadable {
    let loc = e.location();
    Unreadable {
        path: path.to_string(),
        error: e.to_string(),
        line: loc.as_ref().map(|l| l.line()),
        column: loc.as_ref().map(|l| l.column()),
    }
}

/// Loads every `*.yaml` / `*.yml` under `dir`, recursively, in path order.
pub fn load_dir(dir: &Path) -> Result<ManifestSet, LoadError> {
    let mut files = Vec::new();
    collect(dir, &mut files).map_err(|source| LoadError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    files.sort();
    let mut set = ManifestSet::default();
    for file in files {
        let rel = file
            .strip_prefix(dir)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace('\\', "/");
        match std::fs::read_to_string(&file) {
            Ok(text) => match parse_manifest(&rel, &text) {
                Ok(Some(vm)) => set.vms.push(Loaded { path: rel, vm }),
                Ok(None) => {}
                Err(u) => set.unreadable.push(u),
            },
            Err(e) => set.unreadable.push(Unreadable {
                path: rel,
                error: format!("cannot read: {e}"),
                line: None,
                column: None,
            }),
        }
    }
    Ok(set)
}

/// Loads manifests from in-memory `(relative path, text)` pairs (the embedded example rollout).
pub fn load_texts<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> ManifestSet {
    let mut set = ManifestSet::default();
    for (path, text) in files {
        match parse_manifest(path, text) {
            Ok(Some(vm)) => set.vms.push(Loaded {
                path: path.to_string(),
                vm,
            }),
            Ok(None) => {}
            Err(u) => set.unreadable.push(u),
        }
    }
    set
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: proxmox.sankofa.nexus/v1alpha1
kind: ProxmoxVM
metadata:
  name: nginx-proxy-vm
spec:
  forProvider:
    node: ml110-01
    name: nginx-proxy-vm
    cpu: 2
    memory: 4Gi
    disk: 20Gi
    storage: local-lvm
    network: vmbr0
    image: local:iso/ubuntu-22.04-cloud.img
    site: site-1
    userData: |
      #cloud-config
      packages: [nginx]
  providerConfigRef:
    name: proxmox-provider-config
  deployment:
    phase: critical
"#;

    #[test]
    fn parses_the_seed_shape() {
        let vm = parse_manifest("a.yaml", GOOD)
            .expect("parses")
            .expect("is a VM");
        assert_eq!(vm.spec.for_provider.node, "ml110-01");
        assert_eq!(vm.spec.for_provider.cpu, 2);
        assert_eq!(vm.spec.deployment.phase, Phase::Critical);
        assert!(
            vm.spec
                .for_provider
                .user_data
                .as_deref()
                .is_some_and(|u| u.starts_with("#cloud-config"))
        );
    }

    #[test]
    fn syntax_error_keeps_line() {
        let bad = "kind: ProxmoxVM\nspec:\n  forProvider:\n    cpu: 2\n   memory: 4Gi\n";
        let err = parse_manifest("bad.yaml", bad).expect_err("unreadable");
        assert_eq!(err.path, "bad.yaml");
        assert!(err.line.is_some(), "{err:?}");
    }

    #[test]
    fn missing_field_is_reported() {
        let bad = GOOD.replace("    cpu: 2\n", "");
        let err = parse_manifest("m.yaml", &bad).expect_err("unreadable");
        assert!(err.error.contains("cpu"), "{}", err.error);
    }

    #[test]
    fn other_kinds_are_skipped() {
        let pc = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n";
        assert_eq!(parse_manifest("s.yaml", pc), Ok(None));
    }
}
