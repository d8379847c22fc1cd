//! Which pending changes a running VM takes live (qemu-server's `vmconfig_hotplug_pending`):
//! fast-plug options always, devices as the VM's `hotplug` option allows (default
//! `network,disk,usb`), a few cgroup and balloon knobs; everything else waits for the next
//! stop or start of the QEMU process.

use std::collections::BTreeMap;

use crate::qemu::model::{Nic, is_disk_key, is_ipconfig_key, is_net_key, prop, split_props};

type Config = BTreeMap<String, String>;

/// Options a running VM takes without touching QEMU (`$fast_plug_option`); every cloud-init
/// option is one too: those only matter when the cloud-init drive is next generated.
const FAST_PLUG: &[&str] = &[
    "description",
    "hookscript",
    "lock",
    "migrate_downtime",
    "migrate_speed",
    "name",
    "onboot",
    "protection",
    "shares",
    "startup",
    "tags",
    "vmstatestorage",
];

/// Whether a running VM applies a change of this key at once, whatever `hotplug` says.
pub fn is_fast_plug(key: &str) -> bool {
    FAST_PLUG.contains(&key) || super::cloudinit::OPTIONS.contains(&key) || is_ipconfig_key(key)
}

fn is_usb_key(key: &str) -> bool {
    key.strip_prefix("usb")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The VM's `hotplug` option parsed (`parse_hotplug_features`): unset or `1` is
/// `network,disk,usb`, `0` is nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Features {
    /// NICs (`netN`) can be added, changed and removed live.
    pub network: bool,
    /// Disks can be attached, changed and detached live.
    pub disk: bool,
    /// vCPU count (`vcpus`) can change live.
    pub cpu: bool,
    /// `memory` can change live.
    pub memory: bool,
    /// USB devices (`usbN`) can be attached and detached live.
    pub usb: bool,
}

impl Features {
    /// Parse from a VM's config (its `hotplug` key); unknown feature names are ignored.
    pub fn of(config: &Config) -> Features {
        let raw = config.get("hotplug").map_or("1", String::as_str);
        let list = match raw {
            "0" => "",
            "1" => "network,disk,usb",
            other => other,
        };
        let mut f = Features::default();
        for feature in list.split([',', ';', ' ']) {
            match feature {
                "network" => f.network = true,
                "disk" => f.disk = true,
                "cpu" => f.cpu = true,
                "memory" => f.memory = true,
                "usb" => f.usb = true,
                _ => {}
            }
        }
        f
    }

    /// USB devices hot-plug only for Linux and Windows 8+ guests (and QEMU ≥ 7.1, which the
    /// simulated node always runs).
    fn usb_devices(&self, config: &Config) -> bool {
        self.usb
            && config
                .get("ostype")
                .is_some_and(|o| matches!(o.as_str(), "l26" | "win8" | "win10" | "win11"))
    }
}

/// How a pending value reaches a running VM.
#[derive(Debug, PartialEq)]
pub enum Live {
    /// It stays pending.
    No,
    /// It applies now.
    Yes,
    /// It applies now; the drive it replaces is unplugged and becomes an `unusedN`.
    ReplacesDrive,
}

fn bool_live(b: bool) -> Live {
    if b { Live::Yes } else { Live::No }
}

fn mentions(v: Option<&String>, what: &str) -> bool {
    v.is_some_and(|v| v.contains(what))
}

/// Can a running VM with `config` take `key: new` now?
pub fn set_live(config: &Config, f: &Features, key: &str, new: &str) -> Live {
    if is_fast_plug(key) {
        return Live::Yes;
    }
    let cur = config.get(key);
    match key {
        // Changing whether memory or CPUs hot-plug needs a restart, either way.
        "hotplug" => bool_live(
            !new.contains("memory")
                && !mentions(cur, "memory")
                && !new.contains("cpu")
                && !mentions(cur, "cpu"),
        ),
        "tablet" => bool_live(f.usb),
        "vcpus" => bool_live(f.cpu),
        "memory" => bool_live(f.memory),
        "cpuunits" | "cpulimit" => Live::Yes,
        // Enabling or disabling the balloon device is not hot-pluggable; a new target is.
        "balloon" => bool_live(cur.is_none_or(|c| c != "0") == (new != "0")),
        "agent" => bool_live(agent_live(cur, new)),
        k if is_usb_key(k) => bool_live(f.usb_devices(config)),
        k if is_net_key(k) => bool_live(net_live(cur, new, f.network)),
        k if is_disk_key(k) => disk_live(cur, k, new, f.disk),
        _ => Live::No,
    }
}

/// Can a running VM with `config` drop `key` now?
pub fn delete_live(config: &Config, f: &Features, key: &str) -> bool {
    if is_fast_plug(key) {
        return true;
    }
    match key {
        "hotplug" => {
            !mentions(config.get("hotplug"), "cpu") && !mentions(config.get("hotplug"), "memory")
        }
        "tablet" => f.usb,
        "vcpus" => f.cpu,
        "memory" => f.memory,
        "cpuunits" | "cpulimit" => true,
        "balloon" => config.get("balloon").is_none_or(|b| b != "0"),
        k if is_usb_key(k) => f.usb_devices(config),
        k if is_net_key(k) => f.network,
        k if is_disk_key(k) => {
            f.disk
                && !["efidisk", "ide", "sata", "tpmstate"]
                    .iter()
                    .any(|p| k.starts_with(p))
        }
        _ => false,
    }
}

/// Only `fstrim_cloned_disks` of the agent options changes live (`vmconfig_update_agent`).
fn agent_live(cur: Option<&String>, new: &str) -> bool {
    let Some(cur) = cur else {
        return false;
    };
    let strip = |v: &str| -> BTreeMap<String, String> {
        split_props(v, "enabled")
            .into_iter()
            .filter(|(k, _)| k != "fstrim_cloned_disks")
            .collect()
    };
    strip(cur) == strip(new)
}

/// `vmconfig_update_net`: bridge, VLAN, trunks, firewall, rate and link state change on the
/// live tap device; a new NIC, or a new model, MAC, queue count or MTU, needs network hot-plug.
fn net_live(cur: Option<&String>, new: &str, network_hotplug: bool) -> bool {
    let Some(cur) = cur else {
        return network_hotplug;
    };
    let (old, new) = (Nic::parse(cur), Nic::parse(new));
    let same = |k: &str| prop(&old.opts, k) == prop(&new.opts, k);
    let replug = old.model != new.model
        || old.mac != new.mac
        || !same("queues")
        || !same("mtu")
        || old.bridge().is_none()
        || new.bridge().is_none();
    !replug || network_hotplug
}

/// Drive options QEMU cannot change on an attached drive.
const DRIVE_COLD_OPTS: &[&str] = &[
    "aio", "discard", "iothread", "queues", "product", "cache", "ssd", "vendor", "ro",
];

/// `vmconfig_update_disk`: a CD-ROM's medium changes live; an attached disk takes new
/// throttling live but not cache/aio/iothread-like options; a new or swapped disk needs disk
/// hot-plug (never on IDE/SATA, EFI or TPM state).
fn disk_live(cur: Option<&String>, key: &str, new: &str, disk_hotplug: bool) -> Live {
    if key == "efidisk0" || key == "tpmstate0" {
        return Live::No;
    }
    if let Some(cur) = cur {
        let (old, new) = (split_props(cur, "file"), split_props(new, "file"));
        let media = |p: &[(String, String)]| prop(p, "media").unwrap_or("disk").to_string();
        if media(&old) != media(&new) {
            // PVE: "hotplug problem - unable to change media type"; the value stays pending.
            return Live::No;
        }
        if media(&old) == "cdrom" {
            return Live::Yes;
        }
        if prop(&old, "file") != prop(&new, "file") {
            return if disk_hotplug {
                Live::ReplacesDrive
            } else {
                Live::No
            };
        }
        let cold_change = DRIVE_COLD_OPTS
            .iter()
            .any(|o| prop(&old, o) != prop(&new, o));
        return bool_live(!cold_change);
    }
    bool_live(disk_hotplug && !key.starts_with("ide") && !key.starts_with("sata"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn hotplug_option_defaults_to_network_disk_usb() {
        let d = Features::of(&cfg(&[]));
        assert!(d.network && d.disk && d.usb && !d.cpu && !d.memory);
        assert_eq!(Features::of(&cfg(&[("hotplug", "1")])), d);
        assert_eq!(Features::of(&cfg(&[("hotplug", "0")])), Features::default());
        let m = Features::of(&cfg(&[("hotplug", "memory,cpu")]));
        assert!(m.memory && m.cpu && !m.disk);
    }

    #[test]
    fn fast_plug_and_cloud_init_options_are_live() {
        let c = cfg(&[]);
        let f = Features::of(&c);
        for k in [
            "name",
            "description",
            "onboot",
            "tags",
            "protection",
            "ciuser",
            "sshkeys",
            "ipconfig3",
        ] {
            assert_eq!(set_live(&c, &f, k, "x"), Live::Yes, "{k}");
            assert!(delete_live(&c, &f, k), "{k}");
        }
        for k in [
            "cores", "sockets", "cpu", "bios", "ostype", "machine", "boot", "scsihw",
        ] {
            assert_eq!(set_live(&c, &f, k, "2"), Live::No, "{k}");
            assert!(!delete_live(&c, &f, k), "{k}");
        }
    }

    #[test]
    fn memory_and_vcpus_need_their_hotplug_feature() {
        let c = cfg(&[("memory", "2048")]);
        let f = Features::of(&c);
        assert_eq!(set_live(&c, &f, "memory", "4096"), Live::No);
        assert_eq!(set_live(&c, &f, "vcpus", "2"), Live::No);
        let c = cfg(&[("memory", "2048"), ("hotplug", "disk,memory,cpu")]);
        let f = Features::of(&c);
        assert_eq!(set_live(&c, &f, "memory", "4096"), Live::Yes);
        assert_eq!(set_live(&c, &f, "vcpus", "2"), Live::Yes);
        // Turning memory/cpu hot-plug on or off waits for a restart.
        assert_eq!(set_live(&c, &f, "hotplug", "disk"), Live::No);
        let plain = cfg(&[]);
        assert_eq!(set_live(&plain, &f, "hotplug", "network"), Live::Yes);
    }

    #[test]
    fn balloon_target_is_live_but_not_enabling_the_device() {
        let c = cfg(&[("balloon", "1024")]);
        let f = Features::of(&c);
        assert_eq!(set_live(&c, &f, "balloon", "512"), Live::Yes);
        assert_eq!(set_live(&c, &f, "balloon", "0"), Live::No);
        let off = cfg(&[("balloon", "0")]);
        assert_eq!(set_live(&off, &f, "balloon", "512"), Live::No);
        assert!(!delete_live(&off, &f, "balloon"));
    }

    #[test]
    fn nics_follow_network_hotplug_except_tap_level_changes() {
        let c = cfg(&[("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0")]);
        let on = Features::of(&c);
        let off = Features::of(&cfg(&[("hotplug", "disk")]));
        let vlan = "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=20";
        assert_eq!(set_live(&c, &off, "net0", vlan), Live::Yes);
        let model = "e1000=BC:24:11:00:00:01,bridge=vmbr0";
        assert_eq!(set_live(&c, &off, "net0", model), Live::No);
        assert_eq!(set_live(&c, &on, "net0", model), Live::Yes);
        assert_eq!(set_live(&c, &off, "net1", vlan), Live::No);
        assert_eq!(set_live(&c, &on, "net1", vlan), Live::Yes);
        assert!(delete_live(&c, &on, "net0") && !delete_live(&c, &off, "net0"));
    }

    #[test]
    fn disks_follow_disk_hotplug() {
        let c = cfg(&[
            ("scsi0", "local-lvm:vm-100-disk-0,size=8G"),
            ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
        ]);
        let on = Features::of(&c);
        let off = Features::of(&cfg(&[("hotplug", "network")]));
        let new = "local-lvm:vm-100-disk-1,size=4G";
        assert_eq!(set_live(&c, &on, "scsi1", new), Live::Yes);
        assert_eq!(set_live(&c, &off, "scsi1", new), Live::No);
        assert_eq!(set_live(&c, &on, "sata1", new), Live::No);
        assert_eq!(set_live(&c, &on, "efidisk0", new), Live::No);
        assert_eq!(set_live(&c, &on, "scsi0", new), Live::ReplacesDrive);
        let cached = "local-lvm:vm-100-disk-0,cache=writeback,size=8G";
        assert_eq!(set_live(&c, &on, "scsi0", cached), Live::No);
        let limited = "local-lvm:vm-100-disk-0,mbps_rd=100,size=8G";
        assert_eq!(set_live(&c, &off, "scsi0", limited), Live::Yes);
        assert_eq!(set_live(&c, &off, "ide2", "none,media=cdrom"), Live::Yes);
        assert!(delete_live(&c, &on, "scsi0"));
        assert!(!delete_live(&c, &on, "ide2") && !delete_live(&c, &off, "scsi0"));
    }

    #[test]
    fn agent_only_fstrim_is_live() {
        let c = cfg(&[("agent", "1")]);
        let f = Features::of(&c);
        assert_eq!(
            set_live(&c, &f, "agent", "1,fstrim_cloned_disks=1"),
            Live::Yes
        );
        assert_eq!(set_live(&c, &f, "agent", "0"), Live::No);
        assert_eq!(set_live(&cfg(&[]), &f, "agent", "1"), Live::No);
    }

    #[test]
    fn usb_devices_need_a_modern_guest() {
        let f = Features::of(&cfg(&[]));
        let l26 = cfg(&[("ostype", "l26")]);
        assert_eq!(set_live(&l26, &f, "usb0", "spice"), Live::Yes);
        let xp = cfg(&[("ostype", "wxp")]);
        assert_eq!(set_live(&xp, &f, "usb0", "spice"), Live::No);
        assert_eq!(set_live(&xp, &f, "tablet", "0"), Live::Yes);
    }
}
