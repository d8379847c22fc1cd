//! The appliance index's records (`PVE/APLInfo.pm` `read_aplinfo_from_fh`): what a site's
//! scenario lists under `appliances:` and `GET /nodes/{node}/aplinfo` shows (see `aplinfo`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where PVE's appliance index points (`get_apl_sources`); data only, never contacted.
const SOURCE: &str = "http://download.proxmox.com/images";

/// One appliance of the index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Appliance {
    /// The file name, as `pveam` and the API name it (`debian-12-standard_12.7-1_amd64.tar.zst`).
    pub template: String,
    /// Package name (`debian-12-standard`).
    pub package: String,
    /// Package version (`12.7-1`).
    pub version: String,
    /// `debian-12`, `ubuntu-24.04`, `alpine-3.20`, …
    pub os: String,
    /// Index section (default `system`).
    #[serde(default = "default_section")]
    pub section: String,
    /// One-line summary.
    pub headline: String,
    /// Longer description, if any.
    #[serde(default)]
    pub description: Option<String>,
    /// CPU architecture (default `amd64`).
    #[serde(default = "default_arch")]
    pub architecture: String,
    /// The template file's size: what the download transfers and the volume holds.
    pub size_bytes: u64,
    /// A local file that stands for the template (copied where volumes have real data).
    #[serde(default)]
    pub file: Option<PathBuf>,
}

fn default_section() -> String {
    "system".into()
}

fn default_arch() -> String {
    "amd64".into()
}

impl Appliance {
    fn system(
        template: &str,
        package: &str,
        version: &str,
        os: &str,
        headline: &str,
        size: u64,
    ) -> Self {
        Appliance {
            template: template.into(),
            package: package.into(),
            version: version.into(),
            os: os.into(),
            section: default_section(),
            headline: headline.into(),
            description: None,
            architecture: default_arch(),
            size_bytes: size,
            file: None,
        }
    }

    /// Its URL (`Location:`, made absolute as `read_aplinfo_from_fh` does).
    pub fn location(&self) -> String {
        format!("{SOURCE}/{}/{}", self.section, self.template)
    }

    /// One entry of `GET …/aplinfo`: the index record's keys, lowercased, with `source`,
    /// `template` and the absolute `location`.
    pub fn json(&self) -> Value {
        use sha2::{Digest, Sha512};
        // The real file's checksum is a fact of that file; this one stands for it.
        let sha512 = hex::encode(Sha512::digest(self.template.as_bytes()));
        json!({
            "package": self.package,
            "version": self.version,
            "type": "lxc",
            "os": self.os,
            "section": self.section,
            "maintainer": "Proxmox Support Team <support@proxmox.com>",
            "architecture": self.architecture,
            "infopage": "https://pve.proxmox.com/wiki/Linux_Container#pct_supported_distributions",
            "headline": self.headline,
            "description": self.description.clone().unwrap_or_else(|| self.headline.clone()),
            "location": self.location(),
            "sha512sum": sha512,
            "source": SOURCE,
            "template": self.template,
        })
    }
}

/// The index a site has when its scenario names none: templates PVE offers (sizes chosen,
/// near the real files').
pub fn builtin_index() -> Vec<Appliance> {
    vec![
        Appliance::system(
            "debian-12-standard_12.7-1_amd64.tar.zst",
            "debian-12-standard",
            "12.7-1",
            "debian-12",
            "Debian 12 Bookworm (standard)",
            126_628_704,
        ),
        Appliance::system(
            "ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
            "ubuntu-24.04-standard",
            "24.04-2",
            "ubuntu-24.04",
            "Ubuntu 24.04 Noble (standard)",
            141_589_286,
        ),
        Appliance::system(
            "alpine-3.20-default_20240908_amd64.tar.xz",
            "alpine-3.20-default",
            "20240908",
            "alpine-3.20",
            "Alpine Linux 3.20 (default)",
            3_098_628,
        ),
    ]
}
