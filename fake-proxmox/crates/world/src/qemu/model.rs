//! VM state and the VM config grammar: drives, NICs, typed config rendering, digests.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::storage::model::format_size;
use crate::version::PveVersion;

pub use crate::guest::record::{GuestCore, GuestKind, Power};

/// The config file's `[special:cloudinit]` section: the values the drive was last built from.
pub type CloudinitSection = BTreeMap<String, String>;

/// A QEMU VM: the guest core every kind has, and what only a VM has (the guest agent's
/// readiness, the cloud-init section, the simulated OS behind the agent).
///
/// The core's fields read and write through the VM (`vm.lock`, `vm.config`): a VM *is* a
/// guest, and the QEMU verbs were written against those fields long before containers.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Vm {
    /// Flattened: a VM's state file entry keeps the shape it always had.
    #[serde(flatten)]
    pub core: GuestCore,
    /// When the guest agent starts answering (simulated boot).
    pub agent_ready_at: Option<f64>,
    /// The config file's `[special:cloudinit]` section (see `cloudinit`).
    pub cloudinit: CloudinitSection,
    /// The simulated guest behind the agent (files, processes, freeze; see `agent`).
    pub guest: crate::agent::guest_os::GuestOs,
}

impl std::ops::Deref for Vm {
    type Target = GuestCore;
    fn deref(&self) -> &GuestCore {
        &self.core
    }
}

impl std::ops::DerefMut for Vm {
    fn deref_mut(&mut self) -> &mut GuestCore {
        &mut self.core
    }
}

impl crate::guest::Guest for Vm {
    fn core(&self) -> &GuestCore {
        &self.core
    }
    fn memory_bytes(&self) -> u64 {
        Vm::memory_bytes(self)
    }
}

impl Vm {
    /// The guest is gone with the process that ran it: stopped, as after a node crash.
    pub fn power_lost(&mut self) {
        self.core.power_lost();
        self.agent_ready_at = None;
    }

    /// A VM whose QEMU is not running, with no pending changes, snapshots or leases.
    pub fn stopped(
        vmid: u32,
        node: &str,
        config: BTreeMap<String, String>,
        lock: Option<&str>,
    ) -> Vm {
        Vm {
            core: GuestCore::stopped(GuestKind::Qemu, vmid, node, config, lock),
            agent_ready_at: None,
            cloudinit: Default::default(),
            guest: Default::default(),
        }
    }
}

/// A disk to allocate (or import) inside a task.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct DiskPlan {
    /// Drive key it goes to, e.g. `scsi0`.
    pub key: String,
    /// Storage ID the volume is allocated on.
    pub storage: String,
    /// The volume name chosen at plan time (unique: it carries the vmid).
    pub volname: String,
    /// Image format (`raw`, `qcow2`, `vmdk`).
    pub format: String,
    /// Virtual size in bytes.
    pub size: u64,
    /// Source volume of an import: (storage, volname) and the bytes it will write.
    pub import_from: Option<(String, String)>,
    /// Bytes of data the import writes (the source's used space); 0 for a new empty disk.
    pub data_bytes: u64,
    /// Drive options kept in the config (`cache=`, `discard=`, ...), without file/size.
    pub opts: Vec<(String, String)>,
    /// A cloud-init drive (`STORAGE:cloudinit`), not a data disk.
    pub cloudinit: bool,
}

static NEW_DISK: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(?:([^/:\s]+):)?(\d+(?:\.\d+)?)$").ok());

/// `scsi0`–`scsi30`, `virtio0`–`virtio15`, `sata0`–`sata5`, `ide0`–`ide3`, `efidisk0`, `tpmstate0`.
pub fn is_disk_key(k: &str) -> bool {
    indexed(k, "scsi", 30)
        || indexed(k, "virtio", 15)
        || indexed(k, "sata", 5)
        || indexed(k, "ide", 3)
        || k == "efidisk0"
        || k == "tpmstate0"
}

fn indexed(k: &str, prefix: &str, max: u32) -> bool {
    match k.strip_prefix(prefix) {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (n == "0" || !n.starts_with('0')) && n.parse::<u32>().is_ok_and(|i| i <= max)
        }
        _ => false,
    }
}

/// `net0`–`net31`: the keys of a VM's NICs.
pub fn is_net_key(k: &str) -> bool {
    indexed(k, "net", 31)
}

/// `unused0`–`unused255`: volumes detached from the VM but still owned by it.
pub fn is_unused_key(k: &str) -> bool {
    indexed(k, "unused", 255)
}

/// Keep a volume as the lowest free `unusedN` (`add_unused_volume`).
pub fn add_unused(config: &mut BTreeMap<String, String>, volid: String) {
    let mut i = 0;
    while config.contains_key(&format!("unused{i}")) {
        i += 1;
    }
    config.insert(format!("unused{i}"), volid);
}

/// `ipconfig0`–`ipconfig31`: cloud-init addressing of the NIC of the same index.
pub fn is_ipconfig_key(k: &str) -> bool {
    indexed(k, "ipconfig", 31)
}

/// Split a property string into ordered key/value pairs; a bare first value goes to `default_key`.
pub fn split_props(s: &str, default_key: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, part) in s.split(',').enumerate() {
        if part.is_empty() {
            continue;
        }
        match part.split_once('=') {
            Some((k, v)) => out.push((k.trim().to_string(), v.to_string())),
            None if i == 0 => out.push((default_key.to_string(), part.to_string())),
            None => out.push((part.trim().to_string(), "1".to_string())),
        }
    }
    out
}

/// One property of a property string, as `prop(&split_props(s, default_key), key)` finds it,
/// without building the list: the status routes read a few properties of every VM.
pub fn find_prop<'a>(s: &'a str, default_key: &str, key: &str) -> Option<&'a str> {
    for (i, part) in s.split(',').enumerate() {
        if part.is_empty() {
            continue;
        }
        let (k, v) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), v),
            None if i == 0 => (default_key, part),
            None => (part.trim(), "1"),
        };
        if k == key {
            return Some(v);
        }
    }
    None
}

/// Value of key `k` in a list from `split_props`; the first one if repeated.
pub fn prop<'a>(props: &'a [(String, String)], k: &str) -> Option<&'a str> {
    props
        .iter()
        .find(|(kk, _)| kk == k)
        .map(|(_, v)| v.as_str())
}

/// A drive value: `file` first, then the other options sorted (PVE's print order).
pub fn print_drive(file: &str, opts: &[(String, String)]) -> String {
    let mut o: Vec<&(String, String)> = opts.iter().filter(|(k, _)| k != "file").collect();
    o.sort_by(|a, b| a.0.cmp(&b.0));
    let mut s = file.to_string();
    for (k, v) in o {
        s.push(',');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// NIC models a `netN` value may name (the model key also carries the MAC: `virtio=MAC`).
pub const NIC_MODELS: &[&str] = &[
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];

/// A parsed NIC: model, MAC (if any) and the other options in order.
pub struct Nic {
    /// Emulated NIC model, e.g. `virtio`, `e1000`; `virtio` when the value names none.
    pub model: String,
    /// MAC address, upper-cased; `None` when the value carries none.
    pub mac: Option<String>,
    /// The other options (`bridge`, `tag`, `firewall`, `rate`, ...), in the value's order.
    pub opts: Vec<(String, String)>,
}

impl Nic {
    /// Parse a `netN` value; never fails, unknown keys are kept in `opts`.
    pub fn parse(s: &str) -> Nic {
        let mut model = "virtio".to_string();
        let mut mac = None;
        let mut opts = Vec::new();
        for (k, v) in split_props(s, "model") {
            if k == "model" {
                model = v;
            } else if k == "macaddr" {
                mac = Some(v.to_ascii_uppercase());
            } else if NIC_MODELS.contains(&k.as_str()) {
                model = k;
                mac = Some(v.to_ascii_uppercase());
            } else {
                opts.push((k, v));
            }
        }
        Nic { model, mac, opts }
    }

    /// The bridge it is attached to (`bridge=`); `None` when unattached.
    pub fn bridge(&self) -> Option<&str> {
        prop(&self.opts, "bridge")
    }

    /// `model=MAC,bridge=..,rest` as `print_net` writes it.
    pub fn print(&self) -> String {
        let mut s = match &self.mac {
            Some(m) => format!("{}={m}", self.model),
            None => self.model.clone(),
        };
        let mut rest: Vec<&(String, String)> = self.opts.iter().collect();
        rest.sort_by_key(|(k, _)| (k != "bridge", k.clone()));
        for (k, v) in rest {
            s.push(',');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }
}

/// How a drive's `file` part is to be handled.
#[derive(Debug, PartialEq)]
pub enum DriveFile {
    /// `STORAGE:SIZE` (size in GiB, may be fractional); storage may come from `storage=`.
    New {
        /// Storage ID before the colon, if any.
        storage: Option<String>,
        /// Requested size in GiB.
        gib: f64,
    },
    /// `STORAGE:cloudinit`
    CloudInit {
        /// Storage ID to put the cloud-init drive on.
        storage: String,
    },
    /// An existing volume id or `none`/`cdrom`/path.
    Existing(String),
}

/// Tell a drive's `file` value apart: a disk to allocate, a cloud-init drive, or anything
/// else (kept as given).
pub fn classify_file(file: &str) -> DriveFile {
    if let Some(c) = NEW_DISK.as_ref().and_then(|r| r.captures(file)) {
        let gib = c
            .get(2)
            .and_then(|g| g.as_str().parse().ok())
            .unwrap_or(0.0);
        return DriveFile::New {
            storage: c.get(1).map(|s| s.as_str().to_string()),
            gib,
        };
    }
    if let Some(s) = file.strip_suffix(":cloudinit") {
        return DriveFile::CloudInit {
            storage: s.to_string(),
        };
    }
    DriveFile::Existing(file.to_string())
}

/// Config keys whose schema type is integer or boolean: emitted as JSON numbers.
const NUMERIC_KEYS: &[&str] = &[
    "acpi",
    "autostart",
    "balloon",
    "ciupgrade",
    "cores",
    "cpuunits",
    "freeze",
    "keephugepages",
    "kvm",
    "localtime",
    "migrate_speed",
    "numa",
    "onboot",
    "protection",
    "reboot",
    "shares",
    "sockets",
    "tablet",
    "template",
    "vcpus",
];

impl Vm {
    /// `agent` has `enabled=1` (or a true bare value): the QEMU guest agent is configured.
    pub fn is_agent_enabled(&self) -> bool {
        self.config.get("agent").is_some_and(|a| {
            find_prop(a, "enabled", "enabled")
                .is_some_and(|v| matches!(v, "1" | "on" | "yes" | "true"))
        })
    }

    /// Configured RAM in MiB (`memory`, its `current`); 512 when unset or unparsable.
    pub fn memory_mib(&self) -> u64 {
        self.config
            .get("memory")
            .map(|m| {
                find_prop(m, "current", "current")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(512)
            })
            .unwrap_or(512)
    }

    /// `memory_mib` in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_mib().saturating_mul(1024 * 1024)
    }

    /// Virtual CPUs: `vcpus` if set, else `sockets` × `cores` (each 1 when unset).
    pub fn cpus(&self) -> u32 {
        let get = |k: &str, d: u32| self.config.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        let total = get("sockets", 1).saturating_mul(get("cores", 1));
        self.config
            .get("vcpus")
            .and_then(|v| v.parse().ok())
            .unwrap_or(total)
    }

    /// `name`, or `VM {vmid}` as PVE shows a VM without one.
    pub fn name(&self) -> String {
        self.config
            .get("name")
            .cloned()
            .unwrap_or_else(|| format!("VM {}", self.vmid))
    }

    /// `template: 1`: the VM was converted to a template.
    pub fn is_template(&self) -> bool {
        self.config.get("template").is_some_and(|v| v == "1")
    }

    /// `(key, volid, size)` of every disk in the config (not cdroms, not `none`).
    pub fn disks(&self) -> Vec<(String, String, u64)> {
        self.config
            .iter()
            .filter(|(k, _)| is_disk_key(k))
            .filter_map(|(k, v)| {
                let p = split_props(v, "file");
                let file = prop(&p, "file")?;
                if prop(&p, "media") == Some("cdrom") || file == "none" || file == "cdrom" {
                    return None;
                }
                let size = prop(&p, "size")
                    .and_then(crate::storage::model::parse_size)
                    .unwrap_or(0);
                Some((k.clone(), file.to_string(), size))
            })
            .collect()
    }

    /// Every volume id the config references (disks, cdroms on storages, unused).
    pub fn referenced_volumes(&self) -> Vec<String> {
        self.config
            .iter()
            .filter(|(k, _)| is_disk_key(k) || is_unused_key(k))
            .filter_map(|(_, v)| {
                let p = split_props(v, "file");
                prop(&p, "file")
                    .filter(|f| crate::storage::volid::parse_volid(f).is_some())
                    .map(str::to_string)
            })
            .collect()
    }

    /// The sum of the disks' sizes — `disks()` without building its list.
    pub fn maxdisk(&self) -> u64 {
        self.config
            .iter()
            .filter(|(k, _)| is_disk_key(k))
            .filter_map(|(_, v)| {
                let file = find_prop(v, "file", "file")?;
                if find_prop(v, "file", "media") == Some("cdrom")
                    || file == "none"
                    || file == "cdrom"
                {
                    return None;
                }
                Some(
                    find_prop(v, "file", "size")
                        .and_then(crate::storage::model::parse_size)
                        .unwrap_or(0),
                )
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The config file text (what `digest` is computed over), `[PENDING]` section included.
    pub fn conf_text(&self) -> String {
        let mut s = String::new();
        if let Some(l) = &self.lock {
            s.push_str(&format!("lock: {l}\n"));
        }
        for (k, v) in &self.config {
            s.push_str(&format!("{k}: {v}\n"));
        }
        if !self.pending.is_empty() {
            s.push_str("\n[PENDING]\n");
            for (k, v) in self.pending.lines() {
                s.push_str(&format!("{k}: {v}\n"));
            }
        }
        if !self.cloudinit.is_empty() {
            s.push_str("\n[special:cloudinit]\n");
            for (k, v) in &self.cloudinit {
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

    /// SHA-1 of `conf_text`, hex: the `digest` a config update must match.
    pub fn digest(&self) -> String {
        hex::encode(Sha1::digest(self.conf_text().as_bytes()))
    }

    /// `GET .../config`: pending values in unless `current`, typed as PVE types them,
    /// `cipassword` masked, plus `lock` and `digest`.
    pub fn config_json(&self, version: PveVersion, current: bool) -> Value {
        let effective;
        let config = if current {
            &self.config
        } else {
            effective = self.effective_config();
            &effective
        };
        let mut m = Map::new();
        for (k, v) in config {
            m.insert(k.clone(), typed_value(k, v, version));
        }
        if let Some(l) = &self.lock {
            m.insert("lock".into(), json!(l));
        }
        m.insert("digest".into(), json!(self.digest()));
        Value::Object(m)
    }

    /// Seconds since the QEMU process started (`now` in Unix seconds); 0 when stopped.
    pub fn uptime(&self, now: f64) -> u64 {
        match self.power {
            Power::Stopped => 0,
            _ => (now - self.started_at).max(0.0) as u64,
        }
    }

    /// `status` as the API reports it: `stopped`, or `running` (paused VMs included).
    pub fn status_str(&self) -> &'static str {
        match self.power {
            Power::Stopped => "stopped",
            _ => "running",
        }
    }
}

/// A config value as the API returns it: integers and booleans as JSON numbers, `memory`
/// a string from PVE 8.1 on, `cipassword` masked.
pub fn typed_value(key: &str, value: &str, version: PveVersion) -> Value {
    if key == "cipassword" {
        json!("**********")
    } else if NUMERIC_KEYS.contains(&key) || (key == "memory" && !version.memory_is_string()) {
        value
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| json!(value))
    } else {
        json!(value)
    }
}

/// The disk's config value after allocation: `storage:volname,opts...,size=NG`.
pub fn allocated_drive(volid: &str, opts: &[(String, String)], size: u64) -> String {
    let mut o: Vec<(String, String)> = opts
        .iter()
        .filter(|(k, _)| k != "size" && k != "import-from" && k != "format")
        .cloned()
        .collect();
    o.push(("size".into(), format_size(size)));
    print_drive(volid, &o)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// The guest core is flattened into the VM's state entry: state files keep the flat
    /// shape they always had, and one written before guest kinds existed loads as a VM.
    #[test]
    fn a_vm_state_entry_stays_flat_and_old_entries_load_as_qemu() {
        let mut config = BTreeMap::new();
        config.insert("name".to_string(), "web".to_string());
        let vm = Vm::stopped(100, "pve", config, Some("create"));
        let v = serde_json::to_value(&vm).unwrap();
        assert_eq!(v["vmid"], 100);
        assert_eq!(v["lock"], "create");
        assert_eq!(v["kind"], "qemu");
        assert!(v.get("core").is_none(), "{v}");
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("kind");
        let back: Vm = serde_json::from_value(old).unwrap();
        assert_eq!(back.kind, GuestKind::Qemu);
        assert_eq!(back.core.name(), Some("web"));
        assert_eq!(back.config, vm.config);
    }

    #[test]
    fn nic_gains_printed_mac() {
        let mut n = Nic::parse("virtio,bridge=vmbr0,firewall=1");
        assert!(n.mac.is_none());
        n.mac = Some("BC:24:11:00:11:22".into());
        assert_eq!(
            n.print(),
            "virtio=BC:24:11:00:11:22,bridge=vmbr0,firewall=1"
        );
        let n = Nic::parse("model=e1000,macaddr=bc:24:11:aa:bb:cc,bridge=vmbr1");
        assert_eq!(n.print(), "e1000=BC:24:11:AA:BB:CC,bridge=vmbr1");
    }

    #[test]
    fn drive_files() {
        assert_eq!(
            classify_file("local-lvm:32"),
            DriveFile::New {
                storage: Some("local-lvm".into()),
                gib: 32.0
            }
        );
        assert_eq!(
            classify_file("0.001"),
            DriveFile::New {
                storage: None,
                gib: 0.001
            }
        );
        assert_eq!(
            classify_file("local-lvm:cloudinit"),
            DriveFile::CloudInit {
                storage: "local-lvm".into()
            }
        );
        assert!(matches!(
            classify_file("local:iso/x.iso"),
            DriveFile::Existing(_)
        ));
        assert_eq!(
            allocated_drive(
                "local-lvm:vm-100-disk-0",
                &[
                    ("iothread".into(), "1".into()),
                    ("format".into(), "raw".into())
                ],
                32 << 30
            ),
            "local-lvm:vm-100-disk-0,iothread=1,size=32G"
        );
    }

    #[test]
    fn keys() {
        assert!(is_disk_key("scsi30") && !is_disk_key("scsi31") && is_disk_key("efidisk0"));
        assert!(
            is_net_key("net0")
                && is_net_key("net31")
                && !is_net_key("net32")
                && !is_net_key("net01")
        );
    }

    proptest! {
        #[test]
        fn disk_keys_are_pves_list(k in "(scsi|virtio|sata|ide|efidisk|tpmstate|net)[0-9]{0,3}") {
            let re = Regex::new(
                r"^(?:scsi(?:[0-9]|[12][0-9]|30)|virtio(?:[0-9]|1[0-5])|sata[0-5]|ide[0-3]|efidisk0|tpmstate0)$",
            );
            prop_assert_eq!(is_disk_key(&k), re.is_ok_and(|r| r.is_match(&k)));
        }

        #[test]
        fn find_prop_agrees_with_split_props(
            s in "([a-z]{0,3}(=[a-z0-9:]{0,4})?,?){0,5}",
            key in "(file|size|media|a|b)",
        ) {
            let listed = split_props(&s, "file");
            prop_assert_eq!(find_prop(&s, "file", &key), prop(&listed, &key));
        }

        #[test]
        fn property_strings_never_panic(s in "\\PC{0,60}") {
            let _ = split_props(&s, "file");
            let _ = Nic::parse(&s).print();
            let _ = classify_file(&s);
        }
    }
}
