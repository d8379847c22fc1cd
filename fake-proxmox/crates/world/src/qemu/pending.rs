//! The `[PENDING]` section of a VM config. A config change is first written there; a
//! stopped VM applies it at once (`vmconfig_apply_pending`), a running one takes what it can
//! live (see `hotplug`) and keeps the rest until its QEMU process stops (stop, shutdown,
//! reboot) or starts. `GET .../config` shows pending values unless `current=1`;
//! `GET .../pending` lists both. The digest covers the section, as PVE's covers the file.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::cloudinit::record_change;
use super::hotplug::{Features, Live, delete_live, is_fast_plug, set_live};
use crate::qemu::model::{Power, Vm, is_disk_key, is_unused_key, prop, split_props, typed_value};
use crate::storage::volid::parse_volid;
use crate::version::PveVersion;
use crate::world::Site;

type Config = BTreeMap<String, String>;

pub use crate::guest::sections::{Change, Pending};

impl Vm {
    /// The config with pending values in and pending deletions out (`load_current_config`).
    pub fn effective_config(&self) -> Config {
        let mut c = self.config.clone();
        c.extend(self.pending.set.clone());
        for k in self.pending.delete.keys() {
            c.remove(k);
        }
        c
    }

    /// The VM as its next start will see it.
    pub fn with_pending_applied(&self) -> Vm {
        let mut vm = self.clone();
        vm.config = self.effective_config();
        vm.pending = Pending::default();
        vm
    }

    /// `GET .../pending`: every current key with its pending value or delete mark, then
    /// pending-only keys (`config_with_pending_array`). `digest` and `lock` are config keys.
    pub fn pending_json(&self, version: PveVersion) -> Value {
        let ty = |k: &str, v: &str| match k {
            // PVE masks a pending password with a trailing space.
            "cipassword" => json!("********** "),
            _ => typed_value(k, v, version),
        };
        let mut current = self.config.clone();
        if let Some(l) = &self.lock {
            current.insert("lock".into(), l.clone());
        }
        current.insert("digest".into(), self.digest());
        let mut out = Vec::new();
        for (k, v) in &current {
            let mut item = json!({"key": k, "value": typed_value(k, v, version)});
            if let Some(p) = self.pending.set.get(k) {
                item["pending"] = ty(k, p);
            }
            if let Some(force) = self.pending.delete.get(k) {
                item["delete"] = json!(if *force { 2 } else { 1 });
            }
            out.push(item);
        }
        for (k, p) in self
            .pending
            .set
            .iter()
            .filter(|(k, _)| !current.contains_key(*k))
        {
            out.push(json!({"key": k, "pending": ty(k, p)}));
        }
        for (k, force) in &self.pending.delete {
            if !current.contains_key(k) && !self.pending.set.contains_key(k) {
                out.push(json!({"key": k, "delete": if *force { 2 } else { 1 }}));
            }
        }
        Value::Array(out)
    }

    /// Drop pending values equal to the current ones and deletions of absent keys
    /// (`cleanup_pending`).
    pub fn cleanup_pending(&mut self) {
        let core = &mut self.core;
        let cfg = &core.config;
        core.pending.set.retain(|k, v| cfg.get(k) != Some(v));
        core.pending.delete.retain(|k, _| cfg.contains_key(k));
    }
}

/// The volume a drive value refers to, if it is a storage volume and not a CD-ROM medium.
fn drive_volume(value: &str) -> Option<(String, bool)> {
    let p = split_props(value, "file");
    let file = prop(&p, "file")?;
    parse_volid(file)?;
    let cloudinit = file.contains("cloudinit");
    if prop(&p, "media") == Some("cdrom") && !cloudinit {
        return None;
    }
    Some((file.to_string(), cloudinit))
}

/// PVE drops `unusedN` entries whose volume a drive uses again when it writes the config.
fn drop_reused_unused(config: &mut Config) {
    let used: BTreeSet<String> = config
        .iter()
        .filter(|(k, _)| is_disk_key(k))
        .filter_map(|(_, v)| prop(&split_props(v, "file"), "file").map(str::to_string))
        .collect();
    config.retain(|k, v| !(is_unused_key(k) && used.contains(v)));
}

impl Site {
    fn volume_owner(&self, node: &str, volid: &str) -> Option<u32> {
        let (sid, vol) = parse_volid(volid)?;
        self.nodes
            .get(node)?
            .storages
            .get(sid)?
            .volumes
            .get(vol)?
            .vmid
    }

    /// Keep a detached drive's volume as the lowest free `unusedN`, once, if the VM owns it
    /// (`vmconfig_register_unused_drive`); a cloud-init volume is freed instead.
    fn register_unused(&self, vm: &mut Vm, value: &str, free: &mut Vec<String>) {
        let Some((volid, cloudinit)) = drive_volume(value) else {
            return;
        };
        if cloudinit {
            free.push(volid);
            // Without its drive the image is gone, and what it was built from with it.
            vm.cloudinit.clear();
            return;
        }
        let core = &mut vm.core;
        let config = &mut core.config;
        if self.volume_owner(&core.node, &volid) != Some(core.vmid)
            || config.iter().any(|(k, v)| is_unused_key(k) && *v == volid)
        {
            return;
        }
        super::model::add_unused(config, volid);
    }

    /// A drive leaves the config: forced, its own volume is freed (`try_deallocate_drive`);
    /// else it is kept as `unusedN`.
    fn drop_drive(&self, vm: &mut Vm, value: &str, force: bool, free: &mut Vec<String>) {
        if !force {
            self.register_unused(vm, value, free);
        } else if let Some((volid, _)) = drive_volume(value)
            && self.volume_owner(&vm.node, &volid) == Some(vm.vmid)
        {
            free.push(volid);
        }
    }

    fn store(&mut self, vm: Vm, free: Vec<String>) {
        let node = vm.node.clone();
        self.vms.insert(vm.vmid, vm);
        for volid in free {
            self.free_volume(&node, &volid);
        }
    }

    /// Write a request's changes into the pending section (`$update_vm_api`'s worker), then
    /// apply them: all at once on a stopped VM, what hot-plugs on a running one.
    pub(crate) fn change_config(&mut self, vmid: u32, change: &Change) {
        let Some(mut vm) = self.vms.get(&vmid).cloned() else {
            return;
        };
        let mut free = Vec::new();
        let mut modified = BTreeSet::new();
        for key in &change.deletes {
            modified.insert(key.clone());
            let pending_val = vm.pending.set.remove(key);
            let Some(val) = vm.config.get(key).cloned().or(pending_val.clone()) else {
                // PVE warns "cannot delete '…' - not set in current configuration!".
                continue;
            };
            if is_unused_key(key) {
                // Unused volumes go at once, running or not.
                vm.config.remove(key);
                if let Some((volid, _)) = drive_volume(&val)
                    && self.volume_owner(&vm.node, &volid) == Some(vmid)
                {
                    free.push(volid);
                }
                continue;
            }
            if key == "tags" {
                vm.config.remove(key);
                continue;
            }
            if is_disk_key(key)
                && let Some(p) = &pending_val
            {
                self.register_unused(&mut vm, p, &mut free);
            }
            vm.pending.delete.insert(key.clone(), change.force);
        }
        for (key, value) in &change.sets {
            modified.insert(key.clone());
            if vm.pending.set.get(key) == Some(value) {
                continue;
            }
            if key == "cipassword" {
                // Written to the config directly, never pending.
                vm.config.insert(key.clone(), value.clone());
            } else {
                if is_disk_key(key)
                    && let Some(p) = vm.pending.set.get(key).cloned()
                {
                    self.register_unused(&mut vm, &p, &mut free);
                }
                vm.pending.set.insert(key.clone(), value.clone());
            }
            vm.pending.delete.remove(key);
        }
        vm.cleanup_pending();
        let running = vm.power != Power::Stopped;
        self.store(vm, free);
        if running {
            self.hotplug_pending(vmid, &modified);
        } else {
            self.apply_pending(vmid);
        }
    }

    /// Apply the whole pending section to a stopped VM (`vmconfig_apply_pending`): deleted
    /// drives become `unusedN` (or are freed, forced), replaced drives become `unusedN`.
    pub(crate) fn apply_pending(&mut self, vmid: u32) {
        let Some(mut vm) = self.vms.get(&vmid).cloned() else {
            return;
        };
        if vm.pending.is_empty() {
            return;
        }
        let mut free = Vec::new();
        for (key, force) in std::mem::take(&mut vm.pending.delete) {
            if let Some(old) = vm.config.remove(&key)
                && is_disk_key(&key)
            {
                self.drop_drive(&mut vm, &old, force, &mut free);
            }
        }
        vm.cleanup_pending();
        for (key, value) in std::mem::take(&mut vm.pending.set) {
            if is_disk_key(&key)
                && let Some(old) = vm.config.get(&key).cloned()
            {
                self.register_unused(&mut vm, &old, &mut free);
            }
            vm.config.insert(key, value);
        }
        drop_reused_unused(&mut vm.config);
        self.store(vm, free);
    }

    /// Apply to a running VM what it takes live (`vmconfig_hotplug_pending`): fast-plug values
    /// always, other keys only if this request touched them (`selection`) and hot-plug allows.
    pub(crate) fn hotplug_pending(&mut self, vmid: u32, selection: &BTreeSet<String>) {
        let Some(mut vm) = self.vms.get(&vmid).cloned() else {
            return;
        };
        let mut free = Vec::new();
        let fast: Vec<String> = vm
            .pending
            .set
            .keys()
            .filter(|k| is_fast_plug(k))
            .cloned()
            .collect();
        for k in fast {
            if let Some(v) = vm.pending.set.remove(&k) {
                let old = vm.config.get(&k).cloned();
                record_change(&mut vm.cloudinit, &k, old.as_deref(), Some(&v));
                vm.config.insert(k, v);
            }
        }
        let features = Features::of(&vm.config);
        for (key, force) in vm.pending.delete.clone() {
            if !selection.contains(&key) || !delete_live(&vm.config, &features, &key) {
                continue;
            }
            let old = vm.config.remove(&key);
            record_change(&mut vm.cloudinit, &key, old.as_deref(), None);
            if let Some(old) = old
                && is_disk_key(&key)
            {
                self.drop_drive(&mut vm, &old, force, &mut free);
            }
            vm.pending.delete.remove(&key);
        }
        for (key, value) in vm.pending.set.clone() {
            if !selection.contains(&key) {
                continue;
            }
            match set_live(&vm.config, &features, &key, &value) {
                Live::No => continue,
                Live::Yes => {}
                Live::ReplacesDrive => {
                    if let Some(old) = vm.config.get(&key).cloned() {
                        self.register_unused(&mut vm, &old, &mut free);
                    }
                }
            }
            let old = vm.config.get(&key).cloned();
            record_change(&mut vm.cloudinit, &key, old.as_deref(), Some(&value));
            vm.config.insert(key.clone(), value);
            vm.pending.set.remove(&key);
        }
        drop_reused_unused(&mut vm.config);
        self.store(vm, free);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn vm(power: Power, pairs: &[(&str, &str)]) -> Vm {
        let config = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut vm = Vm::stopped(100, "ml110-01", config, None);
        vm.power = power;
        vm
    }

    fn site_with(v: Vm) -> Site {
        let spec = &crate::scenario::Scenario::embedded_default().sites[0];
        let mut s = Site::from_spec(spec, 1, 0.0);
        s.vms.insert(v.vmid, v);
        let sto = s
            .nodes
            .get_mut("ml110-01")
            .and_then(|n| n.storages.get_mut("local-lvm"))
            .unwrap();
        for i in 0..2 {
            sto.alloc_image(100, format!("vm-100-disk-{i}"), "raw", 1 << 30, 0)
                .unwrap();
        }
        s
    }

    fn exists(s: &Site, vol: &str) -> bool {
        s.nodes["ml110-01"].storages["local-lvm"]
            .volumes
            .contains_key(vol)
    }

    fn sets(pairs: &[(&str, &str)]) -> Change {
        Change {
            sets: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Change::default()
        }
    }

    #[test]
    fn running_vm_keeps_memory_pending_and_renames_at_once() {
        let mut s = site_with(vm(Power::Running, &[("memory", "2048"), ("name", "a")]));
        s.change_config(100, &sets(&[("memory", "4096"), ("name", "b")]));
        let v = &s.vms[&100];
        assert_eq!(v.config["memory"], "2048");
        assert_eq!(v.config["name"], "b");
        assert_eq!(v.pending.set["memory"], "4096");
        assert_eq!(v.effective_config()["memory"], "4096");
        // The rename went live, so the cloud-init image (hostname) no longer matches it.
        assert!(
            v.conf_text()
                .ends_with("\n[PENDING]\nmemory: 4096\n\n[special:cloudinit]\nname: a\n"),
            "{}",
            v.conf_text()
        );
    }

    #[test]
    fn live_cloud_init_changes_are_recorded_until_the_next_start() {
        let mut s = site_with(vm(Power::Running, &[("ciuser", "a")]));
        s.change_config(100, &sets(&[("ciuser", "b"), ("ipconfig0", "ip=dhcp")]));
        let v = &s.vms[&100];
        assert_eq!(v.cloudinit["ciuser"], "a");
        assert_eq!(v.cloudinit["added"], "ipconfig0");
        let mut stopped = site_with(vm(Power::Stopped, &[("ciuser", "a")]));
        stopped.change_config(100, &sets(&[("ciuser", "b")]));
        assert!(
            stopped.vms[&100].cloudinit.is_empty(),
            "a stopped VM builds its image at start: nothing to record"
        );
    }

    #[test]
    fn stopped_vm_applies_directly() {
        let mut s = site_with(vm(Power::Stopped, &[("memory", "2048")]));
        s.change_config(100, &sets(&[("memory", "4096")]));
        let v = &s.vms[&100];
        assert_eq!(v.config["memory"], "4096");
        assert!(v.pending.is_empty());
    }

    #[test]
    fn delete_on_running_vm_is_marked_and_forced_is_2() {
        let mut s = site_with(vm(Power::Running, &[("cores", "2"), ("bios", "ovmf")]));
        let ch = Change {
            deletes: vec!["cores".into(), "bios".into(), "nonexistent".into()],
            force: true,
            ..Change::default()
        };
        s.change_config(100, &ch);
        let v = &s.vms[&100];
        assert_eq!(v.config["cores"], "2");
        assert_eq!(
            v.pending.lines(),
            [("delete".into(), "!bios,!cores".into())]
        );
        let items = v.pending_json(PveVersion::V9_1);
        let cores = items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["key"] == "cores")
            .unwrap();
        assert_eq!(cores["delete"], 2);
        assert_eq!(cores["value"], 2);
        assert!(!v.effective_config().contains_key("cores"));
    }

    #[test]
    fn setting_the_current_value_again_clears_the_pending_one() {
        let mut s = site_with(vm(Power::Running, &[("cores", "2")]));
        s.change_config(100, &sets(&[("cores", "4")]));
        assert_eq!(s.vms[&100].pending.set["cores"], "4");
        let d1 = s.vms[&100].digest();
        s.change_config(100, &sets(&[("cores", "2")]));
        assert!(s.vms[&100].pending.is_empty());
        assert_ne!(s.vms[&100].digest(), d1, "the digest covers [PENDING]");
    }

    #[test]
    fn stopping_applies_pending_and_replaced_disk_becomes_unused() {
        let disk = "local-lvm:vm-100-disk-0,size=8G";
        let mut s = site_with(vm(
            Power::Running,
            &[("scsi0", disk), ("cores", "1"), ("hotplug", "network")],
        ));
        let new = "local-lvm:vm-100-disk-1,size=4G";
        s.change_config(100, &sets(&[("scsi0", new), ("cores", "2")]));
        assert_eq!(s.vms[&100].config["scsi0"], disk, "no disk hot-plug");
        s.vms.get_mut(&100).unwrap().power = Power::Stopped;
        s.apply_pending(100);
        let v = &s.vms[&100];
        assert_eq!(v.config["scsi0"], new);
        assert_eq!(v.config["unused0"], "local-lvm:vm-100-disk-0");
        assert_eq!(v.config["cores"], "2");
        assert!(v.pending.is_empty());
    }

    #[test]
    fn disk_hotplug_swaps_at_once_and_cache_change_waits() {
        let disk = "local-lvm:vm-100-disk-0,size=8G";
        let mut s = site_with(vm(Power::Running, &[("scsi0", disk)]));
        let cached = "local-lvm:vm-100-disk-0,cache=writeback,size=8G";
        s.change_config(100, &sets(&[("scsi0", cached)]));
        assert_eq!(s.vms[&100].config["scsi0"], disk);
        s.vms.get_mut(&100).unwrap().power = Power::Stopped;
        s.apply_pending(100);
        let v = &s.vms[&100];
        assert_eq!(v.config["scsi0"], cached);
        assert!(
            !v.config.contains_key("unused0"),
            "same volume is not unused"
        );
    }

    #[test]
    fn forced_disk_delete_frees_the_volume_at_stop() {
        let disk = "local-lvm:vm-100-disk-1,size=1G";
        let mut s = site_with(vm(Power::Running, &[("sata1", disk)]));
        let ch = Change {
            deletes: vec!["sata1".into()],
            force: true,
            ..Change::default()
        };
        s.change_config(100, &ch);
        assert_eq!(
            s.vms[&100].config["sata1"], disk,
            "SATA does not hot-unplug"
        );
        assert!(exists(&s, "vm-100-disk-1"));
        s.vms.get_mut(&100).unwrap().power = Power::Stopped;
        s.apply_pending(100);
        assert!(!s.vms[&100].config.contains_key("sata1"));
        assert!(!s.vms[&100].config.contains_key("unused0"));
        assert!(!exists(&s, "vm-100-disk-1"));
    }

    #[test]
    fn only_touched_keys_are_retried_live() {
        let c = &[("memory", "2048"), ("hotplug", "network,disk")];
        let mut s = site_with(vm(Power::Running, c));
        s.change_config(100, &sets(&[("memory", "4096")]));
        s.change_config(100, &sets(&[("hotplug", "network,disk,memory")]));
        // `hotplug` itself waits (memory hot-plug changes), so memory stays pending too.
        let v = &s.vms[&100];
        assert_eq!(v.pending.set.len(), 2);
    }

    #[test]
    fn revert_like_delete_of_a_pending_only_key_drops_it() {
        let mut s = site_with(vm(Power::Running, &[]));
        s.change_config(100, &sets(&[("bios", "ovmf")]));
        assert_eq!(s.vms[&100].pending.set["bios"], "ovmf");
        let ch = Change {
            deletes: vec!["bios".into()],
            ..Change::default()
        };
        s.change_config(100, &ch);
        assert!(s.vms[&100].pending.is_empty());
    }

    #[test]
    fn start_applies_leftover_pending_even_when_qemu_then_fails() {
        let mut s = site_with(vm(Power::Stopped, &[("memory", "2048")]));
        let v = s.vms.get_mut(&100).unwrap();
        v.pending.set.insert("memory".into(), "4096".into());
        assert!(s.check_start("ml110-01", 100).error.is_none());
        s.finish_start("ml110-01", 100, 1.0).unwrap();
        let v = &s.vms[&100];
        assert_eq!(
            (v.power, v.config["memory"].as_str()),
            (Power::Running, "4096")
        );
        assert!(v.pending.is_empty());
        // Too many vCPUs only in the pending section: the start fails on them, applied.
        let mut s = site_with(vm(Power::Stopped, &[("cores", "1")]));
        let v = s.vms.get_mut(&100).unwrap();
        v.pending.set.insert("cores".into(), "64".into());
        let e = s.check_start("ml110-01", 100).error.unwrap();
        assert!(e.starts_with("MAX "), "{e}");
        assert!(s.finish_start("ml110-01", 100, 1.0).is_err());
        assert_eq!(s.vms[&100].config["cores"], "64");
    }

    #[test]
    fn cipassword_bypasses_pending() {
        let mut s = site_with(vm(Power::Running, &[]));
        s.change_config(100, &sets(&[("cipassword", "x"), ("ciuser", "u")]));
        let v = &s.vms[&100];
        assert_eq!(v.config["cipassword"], "x");
        assert_eq!(v.config["ciuser"], "u");
        assert!(v.pending.is_empty());
    }
}
