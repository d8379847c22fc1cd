//! A container's record and its config grammar: mount points (`rootfs`, `mpN`), network
//! devices (`netN`), features, and the config as the API returns it.
//!
//! Read from pve-container `src/PVE/LXC/Config.pm` (`$rootfs_desc`, `$mp_desc`,
//! `$netconf_desc`, `$features_desc`, `print_ct_mountpoint`, `parse_lxc_network`) and
//! pve-common's `print_property_string` (the default key first, then the required keys
//! sorted, then the others sorted).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::guest::record::{GuestCore, GuestKind, Power};
use crate::schema::ApiSchema;
use crate::version::PveVersion;

/// A container: the guest core every kind has. What a VM adds (agent, cloud-init) a
/// container does not have: PVE writes its hostname, addresses and keys into the rootfs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Ct {
    /// What every guest kind has: id, node, config, power state, snapshots.
    #[serde(flatten)]
    pub core: GuestCore,
    /// The memory its processes use, as the executor measured it at its last `refresh_ct`
    /// (`None`: nothing real runs it; `vmstatus` shows the model's figure). Runtime only.
    #[serde(skip)]
    pub mem_used: Option<u64>,
}

impl std::ops::Deref for Ct {
    type Target = GuestCore;
    fn deref(&self) -> &GuestCore {
        &self.core
    }
}

impl std::ops::DerefMut for Ct {
    fn deref_mut(&mut self) -> &mut GuestCore {
        &mut self.core
    }
}

impl crate::guest::Guest for Ct {
    fn core(&self) -> &GuestCore {
        &self.core
    }
    fn memory_bytes(&self) -> u64 {
        Ct::memory_bytes(self)
    }
}

const MIB: u64 = 1024 * 1024;

impl Ct {
    /// A container that is not running.
    pub fn stopped(
        vmid: u32,
        node: &str,
        config: BTreeMap<String, String>,
        lock: Option<&str>,
    ) -> Ct {
        Ct {
            core: GuestCore::stopped(GuestKind::Lxc, vmid, node, config, lock),
            mem_used: None,
        }
    }

    /// `memory` in MiB (512 when unset, as `vmstatus`).
    pub fn memory_bytes(&self) -> u64 {
        self.config
            .get("memory")
            .and_then(|m| m.parse::<u64>().ok())
            .unwrap_or(512)
            * MIB
    }

    /// `swap` in bytes (0 when unset, as `vmstatus`'s `maxswap`).
    pub fn swap_bytes(&self) -> u64 {
        self.config
            .get("swap")
            .and_then(|m| m.parse::<u64>().ok())
            .unwrap_or(0)
            * MIB
    }

    /// Whether the config says `unprivileged: 1` (root in the container is not root on the host).
    pub fn is_unprivileged(&self) -> bool {
        self.config.get("unprivileged").is_some_and(|v| v == "1")
    }

    /// Whether it is not stopped.
    pub fn is_running(&self) -> bool {
        self.power != Power::Stopped
    }

    /// Seconds since its last start at `now`; 0 when stopped.
    pub fn uptime(&self, now: f64) -> u64 {
        if self.is_running() {
            (now - self.started_at).max(0.0) as u64
        } else {
            0
        }
    }

    /// The config with its pending values applied.
    pub fn effective_config(&self) -> BTreeMap<String, String> {
        let mut c = self.config.clone();
        c.extend(self.pending.set.clone());
        for k in self.pending.delete.keys() {
            c.remove(k);
        }
        c
    }

    /// The config file as pve-container writes it (`write_pct_config`): current keys,
    /// `[PENDING]`, then one section per snapshot.
    pub fn conf_text(&self) -> String {
        let mut s = String::new();
        if let Some(l) = &self.lock {
            s.push_str(&format!("lock: {l}\n"));
        }
        for (k, v) in &self.config {
            s.push_str(&format!("{k}: {v}\n"));
        }
        if !self.pending.is_empty() {
            s.push_str("\n[pve:pending]\n");
            for (k, v) in self.pending.lines() {
                s.push_str(&format!("{k}: {v}\n"));
            }
        }
        for (name, snap) in &self.snapshots {
            s.push_str(&format!("\n[{name}]\n"));
            for (k, v) in snap.lines() {
                s.push_str(&format!("{k}: {v}\n"));
            }
        }
        s
    }

    /// The config file's SHA-1 in hex: the `digest` a config update must match.
    pub fn digest(&self) -> String {
        hex::encode(Sha1::digest(self.conf_text().as_bytes()))
    }

    /// `GET …/config`: pending values in unless `current`, typed as the schema types them,
    /// plus `lock` and `digest`.
    pub fn config_json(&self, version: PveVersion, current: bool) -> Value {
        let config = if current {
            self.config.clone()
        } else {
            self.effective_config()
        };
        let mut m = Map::new();
        for (k, v) in &config {
            m.insert(k.clone(), typed_value(k, v, version));
        }
        if let Some(l) = &self.lock {
            m.insert("lock".into(), json!(l));
        }
        m.insert("digest".into(), json!(self.digest()));
        Value::Object(m)
    }

    /// `GET …/pending`: every current key with its pending value or delete mark, then the
    /// keys only pending has.
    pub fn pending_json(&self, version: PveVersion) -> Value {
        let mut current = self.config.clone();
        if let Some(l) = &self.lock {
            current.insert("lock".into(), l.clone());
        }
        current.insert("digest".into(), self.digest());
        let mut out = Vec::new();
        for (k, v) in &current {
            let mut item = json!({"key": k, "value": typed_value(k, v, version)});
            if let Some(p) = self.pending.set.get(k) {
                item["pending"] = typed_value(k, p, version);
            }
            if self.pending.delete.contains_key(k) {
                item["delete"] = json!(1);
            }
            out.push(item);
        }
        for (k, p) in &self.pending.set {
            if !current.contains_key(k) {
                out.push(json!({"key": k, "pending": typed_value(k, p, version)}));
            }
        }
        for k in self.pending.delete.keys() {
            if !current.contains_key(k) && !self.pending.set.contains_key(k) {
                out.push(json!({"key": k, "delete": 1}));
            }
        }
        Value::Array(out)
    }

    /// The mount points of the config (`rootfs` first), parsed.
    pub fn mount_points(&self) -> Vec<(String, MountPoint)> {
        mount_points(&self.config)
    }

    /// The size of the root filesystem, 4 GiB when the config does not say (`vmstatus`).
    pub fn rootfs_size(&self) -> u64 {
        self.config
            .get("rootfs")
            .map(|v| MountPoint::parse(v))
            .and_then(|m| m.size)
            .unwrap_or(4 * 1024 * MIB)
    }

    /// The `hostname`, or PVE's `CT<vmid>`.
    pub fn hostname(&self) -> String {
        self.config
            .get("hostname")
            .cloned()
            .unwrap_or_else(|| format!("CT{}", self.vmid))
    }
}

/// The mount points of a config (`rootfs` first, then `mpN` by number), parsed.
pub fn mount_points(config: &BTreeMap<String, String>) -> Vec<(String, MountPoint)> {
    let mut out: Vec<(u32, String, MountPoint)> = config
        .iter()
        .filter(|(k, _)| is_mp_key(k))
        .map(|(k, v)| {
            let order = k
                .strip_prefix("mp")
                .and_then(|n| n.parse::<u32>().ok())
                .map_or(0, |n| n + 1);
            (order, k.clone(), MountPoint::parse(v))
        })
        .collect();
    out.sort_by_key(|(o, _, _)| *o);
    out.into_iter().map(|(_, k, m)| (k, m)).collect()
}

/// A config value as the API returns it: integers, numbers and booleans as JSON numbers
/// (the types of `POST /nodes/{node}/lxc`'s parameters in the 9.1 schema).
pub fn typed_value(key: &str, value: &str, _version: PveVersion) -> Value {
    let ty = ApiSchema::get(PveVersion::V9_1)
        .method("POST", "/nodes/{node}/lxc")
        .and_then(|m| m.param(key))
        .and_then(|p| p.ty.clone());
    match ty.as_deref() {
        Some("integer" | "boolean") => value
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| json!(value)),
        Some("number") => value
            .parse::<f64>()
            .ok()
            .and_then(|f| {
                if f.fract() == 0.0 && !value.contains('.') {
                    Some(Value::from(f as i64))
                } else {
                    serde_json::Number::from_f64(f).map(Value::Number)
                }
            })
            .unwrap_or_else(|| json!(value)),
        _ => json!(value),
    }
}

fn indexed(k: &str, prefix: &str, max: u32) -> bool {
    match k.strip_prefix(prefix) {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (n == "0" || !n.starts_with('0')) && n.parse::<u32>().is_ok_and(|i| i <= max)
        }
        _ => false,
    }
}

/// `rootfs` or `mp0`–`mp255` (`PVE::LXC::Config::MAX_MOUNT_POINTS` is 256).
pub fn is_mp_key(k: &str) -> bool {
    k == "rootfs" || indexed(k, "mp", 255)
}

/// `net0`–`net31` (`MAX_LXC_NETWORKS`).
pub fn is_net_key(k: &str) -> bool {
    indexed(k, "net", 31)
}

/// `unused0`–`unused255`.
pub fn is_unused_key(k: &str) -> bool {
    indexed(k, "unused", 255)
}

/// What a mount point's `volume` names: a storage volume (or a new one, `STORAGE:SIZE_GB`),
/// a host directory (a bind mount) or a host device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountType {
    /// A storage volume, or a new one to allocate (`STORAGE:SIZE_GB`).
    Volume,
    /// A host directory (bind mount, absolute path).
    Bind,
    /// A host device (under `/dev/`).
    Device,
}

/// A parsed `rootfs`/`mpN` value.
#[derive(Clone, Debug, PartialEq)]
pub struct MountPoint {
    /// What is mounted: volume id, `STORAGE:SIZE_GB`, host directory or host device.
    pub volume: String,
    /// `mp=` (the path inside the container; `/` for the rootfs, never written for it).
    pub mp: Option<String>,
    /// `size=` in bytes, when given.
    pub size: Option<u64>,
    /// The other options, in the order given.
    pub opts: Vec<(String, String)>,
}

impl MountPoint {
    /// Parse a value the schema has already checked; unknown shapes keep their text.
    pub fn parse(value: &str) -> MountPoint {
        let mut m = MountPoint {
            volume: String::new(),
            mp: None,
            size: None,
            opts: Vec::new(),
        };
        for (i, part) in value.split(',').enumerate() {
            match part.split_once('=') {
                Some(("volume", v)) => m.volume = v.to_string(),
                Some(("mp", v)) => m.mp = Some(v.to_string()),
                Some(("size", v)) => m.size = crate::storage::model::parse_size(v),
                Some((k, v)) => m.opts.push((k.to_string(), v.to_string())),
                None if i == 0 => m.volume = part.to_string(),
                None => m.opts.push((part.to_string(), String::new())),
            }
        }
        m
    }

    /// `PVE::LXC::Config::classify_mountpoint`.
    pub fn kind(&self) -> MountType {
        if self.volume.starts_with("/dev") {
            MountType::Device
        } else if self.volume.starts_with('/') {
            MountType::Bind
        } else {
            MountType::Volume
        }
    }

    /// `STORAGE:SIZE_GB` (`$NEW_DISK_RE`): the storage and the size in GiB.
    pub fn new_disk(&self) -> Option<(&str, f64)> {
        let (sid, size) = self.volume.split_once(':')?;
        if sid.is_empty() || sid.contains('/') {
            return None;
        }
        let gib: f64 = size.parse().ok()?;
        let ok = size.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !size.starts_with('.');
        ok.then_some((sid, gib))
    }

    /// The value as `print_ct_mountpoint` writes it: the volume, then `mp=` (required for
    /// `mpN`), then the other options sorted, `size` among them.
    pub fn print(&self, is_root: bool) -> String {
        let mut parts = vec![self.volume.clone()];
        if !is_root && let Some(mp) = &self.mp {
            parts.push(format!("mp={mp}"));
        }
        let mut rest: Vec<(String, String)> = self.opts.clone();
        if let Some(s) = self.size {
            rest.push(("size".into(), crate::storage::model::format_size(s)));
        }
        rest.sort();
        parts.extend(rest.into_iter().map(|(k, v)| format!("{k}={v}")));
        parts.join(",")
    }
}

/// A parsed `netN` value: its keys and values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetConf(pub BTreeMap<String, String>);

impl NetConf {
    /// Split a `netN` value into its `key=value` pairs (pairs without `=` are dropped).
    pub fn parse(value: &str) -> NetConf {
        NetConf(
            value
                .split(',')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// The value of `k`, if set.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// The bridge the interface is on (`bridge=`).
    pub fn bridge(&self) -> Option<&str> {
        self.get("bridge")
    }

    /// `name` (the required key) first, then the others sorted (`print_property_string`).
    pub fn print(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.0.get("name") {
            parts.push(format!("name={n}"));
        }
        parts.extend(
            self.0
                .iter()
                .filter(|(k, _)| *k != "name")
                .map(|(k, v)| format!("{k}={v}")),
        );
        parts.join(",")
    }
}

/// The `features` option's flags that are set to 1 (or, for `mount`, the listed types).
pub fn parse_features(value: &str) -> BTreeMap<String, String> {
    value
        .split(',')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_print_as_pve_writes_them() {
        let m = MountPoint::parse("local-lvm:8,mp=/data,backup=1");
        assert_eq!(m.new_disk(), Some(("local-lvm", 8.0)));
        let mut allocated = m.clone();
        allocated.volume = "local-lvm:vm-100-disk-1".into();
        allocated.size = Some(8 << 30);
        assert_eq!(
            allocated.print(false),
            "local-lvm:vm-100-disk-1,mp=/data,backup=1,size=8G"
        );
        let root = MountPoint::parse("volume=local:100/vm-100-disk-0.raw,size=4G");
        assert_eq!(root.print(true), "local:100/vm-100-disk-0.raw,size=4G");
        assert_eq!(
            MountPoint::parse("/srv/share,mp=/srv").kind(),
            MountType::Bind
        );
        assert_eq!(
            MountPoint::parse("/dev/sdb1,mp=/x").kind(),
            MountType::Device
        );
        assert_eq!(MountPoint::parse("local:vm-1-disk-0").new_disk(), None);
    }

    #[test]
    fn a_network_device_prints_its_name_first() {
        let n = NetConf::parse("bridge=vmbr0,ip=dhcp,name=eth0,hwaddr=BC:24:11:00:00:01");
        assert_eq!(
            n.print(),
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp"
        );
    }

    #[test]
    fn keys_and_types() {
        assert!(is_mp_key("rootfs") && is_mp_key("mp255") && !is_mp_key("mp256"));
        assert!(is_net_key("net31") && !is_net_key("net32") && !is_net_key("net01"));
        assert_eq!(typed_value("memory", "1024", PveVersion::V9_1), json!(1024));
        assert_eq!(typed_value("cpulimit", "1.5", PveVersion::V9_1), json!(1.5));
        assert_eq!(typed_value("onboot", "1", PveVersion::V9_1), json!(1));
        assert_eq!(
            typed_value("hostname", "web", PveVersion::V9_1),
            json!("web")
        );
    }
}
