//! ProxmoxVM manifests written by the steps, in the seed's Crossplane shape, with the seed's
//! standard configuration as defaults (2 cores, 4 GiB, 20 GiB on local-lvm, vmbr0, the Ubuntu
//! cloud image, cloud-init user data).

/// The seed manifests' user-data: Ubuntu's cloud image has no guest agent, so the VM's
/// cloud-config installs and starts it (without it, no address is ever reported).
pub const SEED_USER_DATA: &str = "#cloud-config\npackage_update: true\npackages:\n  - qemu-guest-agent\nruncmd:\n  - systemctl enable --now qemu-guest-agent\n";

#[derive(Debug, Clone)]
pub struct VmManifest {
    /// `ProxmoxVM`, or `ProxmoxContainer` for an LXC container.
    pub kind: String,
    pub name: String,
    pub node: String,
    pub site: String,
    pub cpu: String,
    pub memory: String,
    pub disk: String,
    pub storage: String,
    pub network: String,
    pub image: String,
    pub user_data: Option<String>,
    /// `sshKeys`: keys for the cloud-init user.
    pub ssh_keys: Vec<String>,
}

impl VmManifest {
    pub fn standard(name: &str, node: &str, site: &str) -> VmManifest {
        VmManifest {
            kind: "ProxmoxVM".into(),
            name: name.to_string(),
            node: node.to_string(),
            site: site.to_string(),
            cpu: "2".into(),
            memory: "4Gi".into(),
            disk: "20Gi".into(),
            storage: "local-lvm".into(),
            network: "vmbr0".into(),
            image: "local:iso/ubuntu-22.04-cloud.img".into(),
            user_data: Some(SEED_USER_DATA.into()),
            ssh_keys: Vec::new(),
        }
    }

    /// A container of the same shape: 1 core, 512 MiB, an 8 GiB rootfs on local-lvm, vmbr0,
    /// the Debian template PVE offers, no user data (a container has no cloud-init).
    pub fn container(name: &str, node: &str, site: &str) -> VmManifest {
        VmManifest {
            kind: "ProxmoxContainer".into(),
            cpu: "1".into(),
            memory: "512Mi".into(),
            disk: "8Gi".into(),
            image: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst".into(),
            user_data: None,
            ..VmManifest::standard(name, node, site)
        }
    }

    /// Applies one `| field | value |` row of a step table.
    pub fn set(&mut self, field: &str, value: &str) -> Result<(), String> {
        let v = value.to_string();
        match field {
            "cpu" | "cores" => self.cpu = v,
            "memory" => self.memory = v,
            "disk" => self.disk = v,
            "storage" => self.storage = v,
            "network" | "bridge" => self.network = v,
            "image" => self.image = v,
            "node" => self.node = v,
            "site" => self.site = v,
            "userData" => self.user_data = (!v.is_empty()).then_some(v.replace("\\n", "\n")),
            "sshKeys" => self.ssh_keys = v.split(';').map(|k| k.trim().to_string()).collect(),
            other => {
                return Err(format!(
                    "unknown manifest field '{other}' (known: cpu, memory, disk, storage, network, image, node, site, userData, sshKeys)"
                ));
            }
        }
        Ok(())
    }

    pub fn to_yaml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let mut y = format!(
            "apiVersion: proxmox.sankofa.nexus/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    node: {node}\n    name: {name}\n    cpu: {cpu}\n    memory: {memory}\n    disk: {disk}\n    storage: {storage}\n    network: {network}\n    image: {image}\n    site: {site}\n",
            kind = self.kind,
            name = q(&self.name),
            node = q(&self.node),
            cpu = self.cpu,
            memory = q(&self.memory),
            disk = q(&self.disk),
            storage = q(&self.storage),
            network = q(&self.network),
            image = q(&self.image),
            site = q(&self.site),
        );
        if !self.ssh_keys.is_empty() {
            y.push_str("    sshKeys:\n");
            for k in &self.ssh_keys {
                y.push_str(&format!("      - {}\n", q(k)));
            }
        }
        if let Some(u) = &self.user_data {
            y.push_str("    userData: |\n");
            for line in u.lines() {
                y.push_str("      ");
                y.push_str(line);
                y.push('\n');
            }
        }
        y.push_str("  providerConfigRef:\n    name: harness-provider-config\n");
        y
    }
}
