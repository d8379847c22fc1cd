//! `PUT /nodes/{node}/lxc/{vmid}/config`: changes go to `[pve:pending]`, then a stopped
//! container applies them all (`vmconfig_apply_pending`) and a running one those it can
//! change live (`vmconfig_hotplug_pending`): the fast-plug options, memory and swap, CPU
//! limits, network devices and new mount points. The rest waits for the next start.
//! Read from pve-container `src/PVE/API2/LXC/Config.pm` and `src/PVE/LXC/Config.pm`
//! (`update_pct_config`, `$LXC_FASTPLUG_OPTIONS`).

use std::collections::BTreeMap;

use super::model::{MountPoint, MountType, NetConf, is_mp_key, is_net_key, is_unused_key};
use super::perms::ConfigChange;
use crate::request::Request;
use crate::schema::formats::split_list;
use crate::storage::model::Content;
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;

const CONTROL: &[&str] = &["node", "vmid", "delete", "revert", "digest"];

/// Applied at once even while the container runs.
const FASTPLUG: &[&str] = &[
    "description",
    "onboot",
    "startup",
    "protection",
    "hostname",
    "hookscript",
    "cores",
    "tags",
    "lock",
];

/// Whether a running container takes this pending change now.
fn hotpluggable(opt: &str, deleting: bool) -> bool {
    FASTPLUG.contains(&opt)
        || matches!(opt, "cpulimit" | "cpuunits" | "swap")
        || (!deleting && opt == "memory")
        || is_net_key(opt)
        || (deleting && is_unused_key(opt))
}

impl Site {
    /// `PUT …/config`
    pub fn update_ct_config(&mut self, req: &Request) -> Result<(), PveError> {
        let (node, vmid) = self.ct_op(
            req,
            &[
                "VM.Config.Disk",
                "VM.Config.CPU",
                "VM.Config.Memory",
                "VM.Config.Network",
                "VM.Config.Options",
            ],
        )?;
        let p = &req.p;
        let sets: Vec<(String, String)> = p
            .keys()
            .filter(|k| !CONTROL.contains(&k.as_str()))
            .filter_map(|k| Some((k.clone(), p.str(k)?)))
            .collect();
        let delete: Vec<String> = p
            .str("delete")
            .map(|d| split_list(&d).map(str::to_string).collect())
            .unwrap_or_default();
        let revert: Vec<String> = p
            .str("revert")
            .map(|d| split_list(&d).map(str::to_string).collect())
            .unwrap_or_default();
        if sets.is_empty() && delete.is_empty() && revert.is_empty() {
            return Err(PveError::die("no options specified"));
        }
        let ct = self.ct_on(&node, vmid)?;
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})")));
        }
        if let Some(d) = p.str("digest")
            && d != ct.digest()
        {
            return Err(PveError::die(
                "detected modified configuration - file changed by other user? Try again.",
            ));
        }
        let unprivileged = ct.is_unprivileged();
        let old = ct.config.clone();
        for list in [&delete, &revert] {
            self.check_ct_modify_config_perm(
                req,
                &ConfigChange {
                    vmid,
                    pool: None,
                    old: Some(&old),
                    new: &[],
                    delete: list,
                    unprivileged,
                },
            )?;
        }
        let is_set = |k: &str| sets.iter().any(|(s, _)| s == k);
        for opt in &revert {
            if !option_exists(opt) {
                return Err(PveError::param("revert", format!("unknown option '{opt}'")));
            }
            if is_set(opt) {
                return Err(PveError::param(
                    "revert",
                    format!("you can't use '-{opt}' and '-revert {opt}' at the same time"),
                ));
            }
        }
        for opt in &delete {
            if !option_exists(opt) {
                return Err(PveError::param("delete", format!("unknown option '{opt}'")));
            }
            if is_set(opt) {
                return Err(PveError::param(
                    "delete",
                    format!("you can't use '-{opt}' and -delete {opt}' at the same time"),
                ));
            }
            if revert.contains(opt) {
                return Err(PveError::param(
                    "delete",
                    format!("you can't use '-delete {opt}' and '-revert {opt}' at the same time"),
                ));
            }
        }
        self.check_ct_modify_config_perm(
            req,
            &ConfigChange {
                vmid,
                pool: None,
                old: Some(&old),
                new: &sets,
                delete: &[],
                unprivileged,
            },
        )?;
        let running = ct.is_running();
        let protected = ct.config.get("protection").is_some_and(|v| v == "1");
        let mut pending = ct.pending.clone();

        for opt in &revert {
            pending.set.remove(opt);
            pending.delete.remove(opt);
        }
        let mut modified: Vec<String> = Vec::new();
        for opt in &delete {
            if !old.contains_key(opt) && !pending.set.contains_key(opt) {
                // PVE warns and goes on.
                continue;
            }
            if matches!(opt.as_str(), "memory" | "rootfs" | "ostype") {
                return Err(PveError::die(format!(
                    "unable to delete required option '{opt}'"
                )));
            }
            if (is_unused_key(opt) || opt.starts_with("mp")) && protected {
                return Err(PveError::die(format!(
                    "can't remove CT {vmid} drive '{opt}' - protection mode enabled"
                )));
            }
            if opt == "unprivileged" {
                return Err(PveError::die(format!(
                    "unable to delete read-only option: '{opt}'"
                )));
            }
            pending.set.remove(opt);
            pending.delete.insert(opt.clone(), false);
            modified.push(opt.clone());
        }
        for (opt, value) in &sets {
            let mut value = value.clone();
            if is_mp_key(opt) {
                if protected {
                    return Err(PveError::die(format!(
                        "can't update CT {vmid} drive '{opt}' - protection mode enabled"
                    )));
                }
                let m = MountPoint::parse(&value);
                if m.kind() == MountType::Volume {
                    let sid = m
                        .new_disk()
                        .map(|(s, _)| s.to_string())
                        .or_else(|| parse_volid(&m.volume).map(|(s, _)| s.to_string()))
                        .unwrap_or_default();
                    let holds = self
                        .node(&node)
                        .and_then(|n| n.storages.get(&sid))
                        .map(|s| s.supports(Content::Rootdir));
                    match holds {
                        None => {
                            return Err(PveError::die(format!("storage '{sid}' does not exist")));
                        }
                        Some(false) => {
                            return Err(PveError::die(format!(
                                "storage '{sid}' does not allow content type 'rootdir' (Container)"
                            )));
                        }
                        Some(true) => {}
                    }
                }
            } else if opt == "unprivileged" {
                return Err(PveError::die(format!(
                    "unable to modify read-only option: '{opt}'"
                )));
            } else if is_net_key(opt) {
                let mut net = NetConf::parse(&value);
                if net.get("hwaddr").is_none() {
                    let mac = self.random_mac();
                    net.0.insert("hwaddr".into(), mac);
                }
                net.0.insert("type".into(), "veth".into());
                value = net.print();
            }
            pending.delete.remove(opt);
            pending.set.insert(opt.clone(), value);
            modified.push(opt.clone());
        }
        // `cleanup_pending`: a pending value equal to the current one is no change.
        pending.set.retain(|k, v| old.get(k) != Some(v));

        let mut errors: BTreeMap<String, String> = BTreeMap::new();
        let mut config = old.clone();
        let mut allocs: Vec<(String, MountPoint, String, f64)> = Vec::new();
        for opt in &modified {
            let deleting = pending.delete.contains_key(opt);
            if running
                && !hotpluggable(opt, deleting)
                && !(is_mp_key(opt) && !config.contains_key(opt) && !deleting)
            {
                continue;
            }
            if deleting {
                pending.delete.remove(opt);
                if let Some(v) = config.remove(opt)
                    && opt.starts_with("mp")
                {
                    // A removed mount point's volume stays, as `unusedN`.
                    let m = MountPoint::parse(&v);
                    if m.kind() == MountType::Volume {
                        let n = (0..256)
                            .find(|i| !config.contains_key(&format!("unused{i}")))
                            .unwrap_or(0);
                        config.insert(format!("unused{n}"), m.volume);
                    }
                } else if is_unused_key(opt)
                    && let Some(v) = old.get(opt)
                {
                    allocs.push((opt.clone(), MountPoint::parse(v), String::new(), -1.0));
                }
            } else if let Some(v) = pending.set.remove(opt) {
                let m = MountPoint::parse(&v);
                if is_mp_key(opt)
                    && let Some((sid, gib)) = m.new_disk()
                {
                    allocs.push((opt.clone(), m.clone(), sid.to_string(), gib));
                } else {
                    config.insert(opt.clone(), v);
                }
            }
        }
        // New volumes (`create_disks`) and freed unused ones.
        for (opt, m, sid, gib) in allocs {
            if gib < 0.0 {
                self.free_volume(&node, &m.volume);
                continue;
            }
            let size = ((gib * 1024.0) as u64) * 1024 * 1024;
            let v = super::work::NewVolume {
                key: opt.clone(),
                storage: sid,
                size,
                mount: m,
            };
            match self
                .alloc_ct_volume(&node, vmid, &v, req.now)
                .map(|(_, value)| value)
            {
                Ok(value) => {
                    config.insert(opt, value);
                }
                Err(e) => {
                    errors.insert(
                        opt.clone(),
                        format!("unable to apply pending change {opt} : {e}"),
                    );
                }
            }
        }
        if !errors.is_empty() {
            return Err(PveError::params(errors));
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.config = config;
            ct.pending = pending;
        }
        Ok(())
    }
}

/// `option_exists`: a key of the container config schema.
fn option_exists(opt: &str) -> bool {
    crate::schema::ApiSchema::get(crate::version::PveVersion::V9_1)
        .method("PUT", "/nodes/{node}/lxc/{vmid}/config")
        .and_then(|m| m.param(opt))
        .is_some()
        && !CONTROL.contains(&opt)
}
