//! The PVE endpoints the deployer uses, typed. PVE is Perl: numbers sometimes arrive as strings
//! and booleans as 1/0, so the decoders here accept both.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

use super::request::Request;
use super::{PveClient, PveError};

/// A count PVE may send as a number, a float or a string; anything else is absent. A visitor,
/// not a `serde_json::Value` per field: listings of thousands of rows decode these by the ten
/// thousand.
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a count as a number or a string")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).ok())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok((v >= 0.0).then_some(v as u64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            while a.next_element::<de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            while a.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_option(V)
}

/// A flag PVE may send as a boolean, 1/0 or a string; anything else is false.
fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a flag as a boolean, a number or a string")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
            Ok(v != 0)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
            Ok(v != 0)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
            // As `Value::as_i64` did: a float is no flag.
            let _ = v;
            Ok(false)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
            Ok(matches!(v, "1" | "true" | "yes" | "on"))
        }
        fn visit_none<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<bool, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
            while a.next_element::<de::IgnoredAny>()?.is_some() {}
            Ok(false)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
            while a.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
            Ok(false)
        }
    }
    d.deserialize_option(V)
}

#[derive(Debug, Clone, Deserialize)]
pub struct Version {
    pub version: String,
    #[serde(default)]
    pub release: Option<String>,
}

impl Version {
    /// `(major, minor)` from `version` ("9.1.1") or `release` ("9.1").
    pub fn major_minor(&self) -> Option<(u32, u32)> {
        let parse = |s: &str| {
            let mut it = s.split(['.', '-', '~']);
            let major = it.next()?.trim().parse().ok()?;
            let minor = it.next().and_then(|m| m.trim().parse().ok()).unwrap_or(0);
            Some((major, minor))
        };
        parse(&self.version).or_else(|| self.release.as_deref().and_then(parse))
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeStatus {
    #[serde(default)]
    pub cpuinfo: CpuInfo,
    #[serde(default)]
    pub memory: MemInfo,
    #[serde(default)]
    pub pveversion: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct CpuInfo {
    /// Logical threads: what `MAX N vcpus allowed per VM` compares against.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub cpus: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub cores: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub sockets: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct MemInfo {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub total: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub used: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NodeEntry {
    pub node: String,
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NetworkIface {
    pub iface: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub active: bool,
}

impl NetworkIface {
    /// Whether a VM's `net0` can name this interface: a Linux or OVS bridge, or an SDN vnet.
    pub fn is_bridge(&self) -> bool {
        self.kind.to_lowercase().contains("bridge") || self.kind == "vnet"
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct StorageInfo {
    pub storage: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Comma-separated content types (`images,rootdir`).
    #[serde(default)]
    pub content: String,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub active: bool,
    #[serde(default = "yes", deserialize_with = "lenient_bool")]
    pub enabled: bool,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub shared: bool,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub total: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub used: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub avail: Option<u64>,
}

fn yes() -> bool {
    true
}

impl StorageInfo {
    pub fn has_content(&self, content: &str) -> bool {
        self.content.split(',').any(|c| c.trim() == content)
    }

    /// Thin storages allocate on write and never check free space at create time.
    pub fn is_thin(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "lvmthin" | "rbd" | "zfspool" | "zfs" | "dir" | "nfs" | "cifs" | "btrfs"
        )
    }

    /// lvm-thin, lvm, rbd, zfs store raw volumes only; file storages take qcow2.
    pub fn raw_only(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "lvmthin" | "lvm" | "rbd" | "zfspool" | "iscsi" | "iscsidirect"
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentEntry {
    pub volid: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub size: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub vmid: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ClusterResource {
    pub id: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub vmid: Option<u64>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub lock: Option<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub template: bool,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub maxcpu: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub maxdisk: Option<u64>,
}

/// One row of a node's guest listing (`GET /nodes/{node}/qemu` or `…/lxc`): what
/// `/cluster/resources` says of the node's guests, without the row's `id`, `type` and `node`.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeGuest {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub vmid: Option<u64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub lock: Option<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub template: bool,
}

impl NodeGuest {
    /// The row as `/cluster/resources` lists it: `family` is `qemu` or `lxc`.
    pub fn into_resource(self, family: &str, node: &str) -> ClusterResource {
        ClusterResource {
            id: format!("{family}/{}", self.vmid.unwrap_or_default()),
            kind: family.to_string(),
            vmid: self.vmid,
            node: Some(node.to_string()),
            name: self.name,
            status: self.status,
            lock: self.lock,
            template: self.template,
            maxcpu: None,
            maxmem: None,
            maxdisk: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct VmCurrent {
    pub status: String,
    #[serde(default)]
    pub lock: Option<String>,
    #[serde(default)]
    pub qmpstatus: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AgentInterfaces {
    #[serde(default)]
    pub result: Vec<AgentInterface>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AgentInterface {
    pub name: String,
    #[serde(rename = "ip-addresses", default)]
    pub ip_addresses: Vec<AgentIp>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AgentIp {
    #[serde(rename = "ip-address")]
    pub ip_address: String,
    #[serde(rename = "ip-address-type", default)]
    pub ip_address_type: String,
}

impl AgentInterfaces {
    /// The first IPv4 address that is not loopback or link-local.
    pub fn primary_ipv4(&self) -> Option<String> {
        let wrong = crate::mutants::active(crate::mutants::Mutant::WrongIp);
        self.result
            .iter()
            .filter(|i| wrong || i.name != "lo")
            .flat_map(|i| &i.ip_addresses)
            .filter(|a| a.ip_address_type == "ipv4")
            .map(|a| a.ip_address.clone())
            .find(|ip| wrong || (!ip.starts_with("127.") && !ip.starts_with("169.254.")))
    }
}

pub type VmConfig = serde_json::Map<String, serde_json::Value>;

/// A UPID or, from PVE < 8.0 resize, `null`.
pub type MaybeUpid = Option<String>;

impl PveClient {
    pub async fn version(&self) -> Result<Version, PveError> {
        self.send(&Request::version()).await
    }

    pub async fn nodes(&self) -> Result<Vec<NodeEntry>, PveError> {
        self.send(&Request::nodes()).await
    }

    pub async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError> {
        self.send(&Request::node_status(node)).await
    }

    pub async fn network(&self, node: &str) -> Result<Vec<NetworkIface>, PveError> {
        self.send(&Request::network(node)).await
    }

    pub async fn storages(&self, node: &str) -> Result<Vec<StorageInfo>, PveError> {
        self.send(&Request::storages(node)).await
    }

    pub async fn storage_content(
        &self,
        node: &str,
        storage: &str,
    ) -> Result<Vec<ContentEntry>, PveError> {
        self.send(&Request::storage_content(node, storage)).await
    }

    /// The next free VMID. PVE returns it as a JSON string; a number is accepted too.
    pub async fn next_id(&self) -> Result<u32, PveError> {
        let v: serde_json::Value = self.send(&Request::next_id()).await?;
        let parsed = match &v {
            serde_json::Value::String(s) => s.parse().ok(),
            serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            _ => None,
        };
        parsed.ok_or_else(|| PveError::Decode {
            method: "GET".into(),
            path: "/cluster/nextid".into(),
            detail: format!("not a VMID: {v}"),
        })
    }

    pub async fn vm_resources(&self) -> Result<Vec<ClusterResource>, PveError> {
        self.send(&Request::vm_resources()).await
    }

    pub async fn create_vm(
        &self,
        node: &str,
        params: &super::Params<'_>,
    ) -> Result<String, PveError> {
        self.send(&Request::create_vm(node, params)).await
    }

    pub async fn vm_config(&self, node: &str, vmid: u32) -> Result<VmConfig, PveError> {
        self.send(&Request::vm_config(node, vmid)).await
    }

    /// Asynchronous config update (returns a UPID).
    pub async fn update_config(
        &self,
        node: &str,
        vmid: u32,
        params: &super::Params<'_>,
    ) -> Result<MaybeUpid, PveError> {
        self.send(&Request::update_config(node, vmid, params)).await
    }

    pub async fn resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<MaybeUpid, PveError> {
        self.send(&Request::resize(node, vmid, disk, size)).await
    }

    pub async fn vm_current(&self, node: &str, vmid: u32) -> Result<VmCurrent, PveError> {
        self.send(&Request::vm_current(node, vmid)).await
    }

    pub async fn start_vm(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        self.send(&Request::start_vm(node, vmid)).await
    }

    pub async fn stop_vm(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        self.send(&Request::stop_vm(node, vmid)).await
    }

    /// `DELETE` with `purge=1` and `destroy-unreferenced-disks=1`: nothing of the VM stays behind.
    pub async fn destroy_vm(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        self.send(&Request::destroy_vm(node, vmid)).await
    }

    pub async fn agent_interfaces(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<AgentInterfaces, PveError> {
        self.send(&Request::agent_interfaces(node, vmid)).await
    }
}

/// The size of a disk from its config value (`local-lvm:vm-100-disk-0,size=2252M`), in MiB.
pub fn disk_size_mib(value: &str) -> Option<u64> {
    let size = value
        .split(',')
        .find_map(|part| part.trim().strip_prefix("size="))?;
    let digits: String = size
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let n: f64 = digits.parse().ok()?;
    let mib = match &size[digits.len()..] {
        "T" => n * 1024.0 * 1024.0,
        "G" => n * 1024.0,
        "M" => n,
        "K" => n / 1024.0,
        "" => n / (1024.0 * 1024.0),
        _ => return None,
    };
    Some(mib.round() as u64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn disk_sizes() {
        assert_eq!(
            disk_size_mib("local-lvm:vm-100-disk-0,size=2252M"),
            Some(2252)
        );
        assert_eq!(
            disk_size_mib("local-lvm:vm-100-disk-0,size=20G"),
            Some(20480)
        );
        assert_eq!(disk_size_mib("local-lvm:vm-100-disk-0"), None);
    }

    #[test]
    fn versions() {
        let v = Version {
            version: "8.4.1".into(),
            release: Some("8.4".into()),
        };
        assert_eq!(v.major_minor(), Some((8, 4)));
        let v = Version {
            version: "7".into(),
            release: None,
        };
        assert_eq!(v.major_minor(), Some((7, 0)));
    }

    #[test]
    fn lenient_decoding() {
        let s: StorageInfo = serde_json::from_str(
            r#"{"storage":"local-lvm","type":"lvmthin","content":"images,rootdir","active":1,"total":"100","avail":50}"#,
        )
        .unwrap();
        assert!(s.active && s.enabled && s.has_content("images") && s.is_thin());
        assert_eq!((s.total, s.avail), (Some(100), Some(50)));
    }
}
