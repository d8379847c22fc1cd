//! What a VM's status row needs from its config, read in one pass over the config.
//!
//! `cluster/resources` renders every VM of a site for every listing, and a deployer adopting by
//! name lists once per VM: looking each key up in the config map (and walking it again for the
//! disks, the NICs and the serial ports) made those rows most of the fake's CPU in a
//! 10,000-VM rollout. The per-key accessors on `Vm` stay the reference; a property test holds
//! this pass to them.

use std::collections::BTreeMap;

use super::model::{find_prop, is_disk_key, is_net_key};

/// The config values a status row shows, read from a VM's config at once.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFacts<'a> {
    /// Configured RAM in MiB (`memory`, its `current`); 512 when unset.
    pub memory_mib: u64,
    /// Virtual CPUs: `vcpus` if set, else `sockets` × `cores`.
    pub cpus: u32,
    /// `name`, if set.
    pub name: Option<&'a str>,
    /// `tags`, as the config text (`;`-separated).
    pub tags: Option<&'a str>,
    /// `template: 1`.
    pub template: bool,
    /// `balloon` target in MiB (0 disables the balloon device); `None` when unset or unparsable.
    pub balloon_mib: Option<u64>,
    /// `shares`: the memory-balloon fairness weight; `None` when unset.
    pub shares: Option<u64>,
    /// How many `netN` NICs the VM has.
    pub nets: u64,
    /// Has at least one `serialN` port.
    pub serial: bool,
    /// The summed sizes of the disks (not CD-ROMs, not empty drives).
    pub maxdisk: u64,
    /// Guest block devices that see I/O: disks and CD-ROM drives that are not CD-ROMs, without
    /// the EFI vars and TPM state.
    pub io_drives: u64,
}

impl<'a> ConfigFacts<'a> {
    /// Read from a VM's config; unparsable values count as unset.
    pub fn of(config: &'a BTreeMap<String, String>) -> Self {
        let mut f = ConfigFacts {
            memory_mib: 512,
            cpus: 1,
            name: None,
            tags: None,
            template: false,
            balloon_mib: None,
            shares: None,
            nets: 0,
            serial: false,
            maxdisk: 0,
            io_drives: 0,
        };
        let (mut sockets, mut cores, mut vcpus) = (1u32, 1u32, None);
        for (k, v) in config {
            match k.as_str() {
                "memory" => {
                    f.memory_mib = find_prop(v, "current", "current")
                        .and_then(|m| m.parse().ok())
                        .unwrap_or(512);
                }
                "sockets" => sockets = v.parse().unwrap_or(1),
                "cores" => cores = v.parse().unwrap_or(1),
                "vcpus" => vcpus = v.parse().ok(),
                "name" => f.name = Some(v),
                "tags" => f.tags = Some(v),
                "template" => f.template = v == "1",
                "balloon" => f.balloon_mib = v.parse().ok(),
                "shares" => f.shares = v.parse().ok(),
                key if is_net_key(key) => f.nets += 1,
                key if is_serial_key(key) => f.serial = true,
                key if is_disk_key(key) => {
                    let file = find_prop(v, "file", "file");
                    let empty = matches!(file, None | Some("none" | "cdrom"))
                        || find_prop(v, "file", "media") == Some("cdrom");
                    if empty {
                        continue;
                    }
                    let size = find_prop(v, "file", "size")
                        .and_then(crate::storage::model::parse_size)
                        .unwrap_or(0);
                    f.maxdisk = f.maxdisk.saturating_add(size);
                    if key != "efidisk0" && key != "tpmstate0" {
                        f.io_drives += 1;
                    }
                }
                _ => {}
            }
        }
        f.cpus = vcpus.unwrap_or(sockets.saturating_mul(cores));
        f
    }
}

/// `serial0`…`serial3`: the keys of a VM's serial ports.
pub(crate) fn is_serial_key(k: &str) -> bool {
    k.strip_prefix("serial")
        .is_some_and(|n| matches!(n, "0" | "1" | "2" | "3"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::qemu::model::Vm;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("memory"),
            Just("sockets"),
            Just("cores"),
            Just("vcpus"),
            Just("name"),
            Just("tags"),
            Just("template"),
            Just("balloon"),
            Just("shares"),
            Just("net0"),
            Just("net12"),
            Just("net32"),
            Just("serial0"),
            Just("serial4"),
            Just("scsi0"),
            Just("scsi01"),
            Just("virtio15"),
            Just("ide2"),
            Just("sata5"),
            Just("efidisk0"),
            Just("tpmstate0"),
            Just("unused0"),
        ]
        .prop_map(str::to_string)
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{1,5}",
            "-?[0-9]{1,3}x?",
            "(current=)?[0-9]{2,5}(,min=[0-9]{1,3})?",
            "(file=)?(none|cdrom|local-lvm:vm-100-disk-[0-9]|local:iso/a\\.iso)(,media=cdrom)?(,size=[0-9]{1,4}[KMGT]?)?",
            "[a-z;]{0,8}",
        ]
    }

    proptest! {
        /// The single pass agrees with the per-key accessors on any config.
        #[test]
        fn one_pass_agrees_with_the_accessors(
            entries in proptest::collection::btree_map(key(), value(), 0..12),
        ) {
            let vm = Vm::stopped(100, "pve", entries, None);
            let f = ConfigFacts::of(&vm.config);
            prop_assert_eq!(f.memory_mib, vm.memory_mib());
            prop_assert_eq!(f.cpus, vm.cpus());
            prop_assert_eq!(f.name.map(str::to_string).unwrap_or_else(|| "VM 100".into()), vm.name());
            prop_assert_eq!(f.template, vm.is_template());
            prop_assert_eq!(f.maxdisk, vm.maxdisk());
            prop_assert_eq!(f.nets, vm.net_count());
            let reference = vm.vmstatus_reference_parts();
            prop_assert_eq!((f.balloon_mib, f.shares, f.serial, f.io_drives), reference);
        }
    }
}
