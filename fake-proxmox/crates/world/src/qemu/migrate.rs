//! `GET|POST …/migrate`: moving a VM to another node of its cluster (qemu-server's
//! `migrate_vm_precondition`, `migrate_vm` and `QemuMigrate`): the checks made before the
//! `qmigrate` task (500/400), the `migrate` lock while it runs, local disks copied to the
//! target's storage of the same name (or `targetstorage`'s), a running VM moved live only
//! with `online=1` (and its local disks only with `with-local-disks=1`), and the failure a
//! node that cannot be reached gives. Shared-storage volumes are not copied; the fake keeps
//! a storage's volumes per node, so their records move with the VM.

use serde_json::{Value, json};

use super::model::{Power, Vm, is_disk_key, is_unused_key, prop, split_props};
use super::op::unlocked;
use super::storage_map::StorageMap;
use crate::request::Request;
use crate::storage::volid::parse_volid;
use crate::tasks::model::TransferStyle;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::Work;

/// One volume of the VM's config that lives on a storage of its node.
#[derive(Clone, Debug)]
struct Disk {
    key: String,
    volid: String,
    storage: String,
    volname: String,
    size: u64,
    used: u64,
    shared: bool,
    cdrom: bool,
}

impl Site {
    /// The VM's volumes with where they live (cdroms with a volume too; `none` and host
    /// devices skipped).
    fn vm_disks(&self, node: &str, vm: &Vm) -> Vec<Disk> {
        let mut out = Vec::new();
        for (key, value) in &vm.config {
            if !is_disk_key(key) && !is_unused_key(key) {
                continue;
            }
            let props = split_props(value, "file");
            let Some(file) = prop(&props, "file") else {
                continue;
            };
            let Some((sid, volname)) = parse_volid(file) else {
                continue;
            };
            let Some(sto) = self.nodes.get(node).and_then(|n| n.storages.get(sid)) else {
                continue;
            };
            let vol = sto.volumes.get(volname);
            out.push(Disk {
                key: key.clone(),
                volid: file.to_string(),
                storage: sid.to_string(),
                volname: volname.to_string(),
                size: vol.map_or(0, |v| v.size),
                used: vol.map_or(0, |v| v.used),
                shared: sto.shared,
                cdrom: prop(&props, "media") == Some("cdrom"),
            });
        }
        out
    }

    /// Storages the VM uses that `target` lacks (PVE: not enabled there).
    fn missing_on(&self, target: &str, disks: &[Disk]) -> Vec<String> {
        let mut missing: Vec<String> = disks
            .iter()
            .map(|d| d.storage.clone())
            .filter(|sid| {
                !self
                    .nodes
                    .get(target)
                    .is_some_and(|n| n.storages.get(sid).is_some_and(|s| s.enabled))
            })
            .collect();
        // Each storage once, whatever the order of the disks on it.
        missing.sort();
        missing.dedup();
        missing
    }

    /// `GET …/migrate`: where the VM may go and what holds it.
    pub fn migrate_precondition(&self, req: &Request) -> Result<Value, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Migrate"])?;
        unlocked(vm, false)?;
        let disks = self.vm_disks(&op.node, vm);
        let mut allowed = Vec::new();
        let mut not_allowed = serde_json::Map::new();
        for name in self.nodes.keys().filter(|n| **n != op.node) {
            let missing = self.missing_on(name, &disks);
            if missing.is_empty() {
                allowed.push(json!(name));
            } else {
                not_allowed.insert(name.clone(), json!({ "unavailable_storages": missing }));
            }
        }
        let local: Vec<Value> = disks
            .iter()
            .filter(|d| !d.shared)
            .map(|d| {
                json!({
                    "volid": d.volid,
                    "size": d.size,
                    "cdrom": u8::from(d.cdrom),
                    "is_unused": u8::from(is_unused_key(&d.key)),
                    "drivename": d.key,
                })
            })
            .collect();
        Ok(json!({
            "running": u8::from(vm.power != Power::Stopped),
            "allowed_nodes": allowed,
            "not_allowed_nodes": not_allowed,
            "local_disks": local,
            "local_resources": local_resources(vm),
            "mapped-resources": [],
            "mapped-resource-info": {},
            "has-dbus-vmstate": 1,
        }))
    }

    /// `POST …/migrate`: the `qmigrate` task's UPID.
    pub fn migrate(&mut self, req: &Request) -> Result<String, PveError> {
        let (op, vm) = self.vm_op(req, &["VM.Migrate"])?;
        let p = &req.p;
        let target = p.req_str("target")?;
        if target == op.node {
            return Err(PveError::param("target", "target is local node."));
        }
        let Some(tnode) = self.nodes.get(&target) else {
            return Err(PveError::die(format!("no such cluster node '{target}'\n")));
        };
        let reachable = tnode.online;
        let root = req.task_user() == "root@pam";
        for opt in ["force", "migration_type", "migration_network"] {
            if p.has(opt) && !root && (opt != "force" || p.flag("force")) {
                return Err(PveError::param(opt, "Only root may use this option."));
            }
        }
        unlocked(vm, false)?;
        let running = vm.power != Power::Stopped;
        let online = running && p.flag("online");
        if running && !online {
            return Err(PveError::die("can't migrate running VM without --online\n"));
        }
        let disks = self.vm_disks(&op.node, vm);
        let map = match p.str("targetstorage") {
            Some(t) => {
                let map = StorageMap::parse(&t).map_err(|e| {
                    PveError::param("targetstorage", format!("failed to parse storage map: {e}"))
                })?;
                let targets = map.entries.values().chain(map.default.iter());
                for sid in targets {
                    self.require(
                        &req.who,
                        &format!("/storage/{sid}"),
                        "Datastore.AllocateSpace",
                    )?;
                    let sto = tnode
                        .storages
                        .get(sid)
                        .filter(|s| s.enabled)
                        .ok_or_else(|| {
                            PveError::die(format!(
                                "storage '{sid}' is not available on node '{target}'\n"
                            ))
                        })?;
                    if !sto
                        .content
                        .contains(&crate::storage::model::Content::Images)
                    {
                        return Err(PveError::die(format!(
                            "storage '{sid}' does not support vm images\n"
                        )));
                    }
                }
                map
            }
            None => {
                if let Some(sid) = self.missing_on(&target, &disks).first() {
                    return Err(PveError::die(format!(
                        "storage '{sid}' is not available on node '{target}'\n"
                    )));
                }
                StorageMap::default()
            }
        };
        let vmid = op.vmid;
        let local: Vec<&Disk> = disks.iter().filter(|d| !d.shared).collect();
        let target_ip = tnode.ip.clone();
        let mut task = op.plan(
            "qmigrate",
            Work::Migrate {
                vmid,
                target: target.clone(),
                storages: map.clone(),
                online,
            },
        );
        task.line(
            0.0,
            format!("starting migration of VM {vmid} to node '{target}' ({target_ip})"),
        );
        let mut at = 0.1;
        if !reachable {
            at += 3.0;
            task.duration = at;
            // AbstractMigrate logs the cause and dies with `migration aborted`: the task's
            // exit status is that, the cause is in its log.
            task.line(
                at,
                format!(
                    "ERROR: migration aborted (duration {}): Can't connect to destination address using public key",
                    duration_text(at)
                ),
            );
            task.planned_error = Some("migration aborted".into());
        } else if online && !local.is_empty() && !p.flag("with-local-disks") {
            task.duration = at;
            let e = format!(
                "migration aborted (duration {}): can't live migrate attached local disks without with-local-disks option",
                duration_text(at)
            );
            task.line(at, format!("ERROR: {e}"));
            task.planned_error = Some("migration aborted".into());
        } else {
            for d in &local {
                let how = if is_unused_key(&d.key) {
                    "unused"
                } else {
                    "attached"
                };
                task.line(at, format!("found local disk '{}' ({how})", d.volid));
            }
            if !local.is_empty() {
                let speed = self.migrate_speed(&op.node, &local);
                task.line(at, "copying local disk images".to_string());
                for d in &local {
                    let secs = (d.used.max(1 << 20) as f64 / speed).max(0.2);
                    let dst = map.target(&d.storage);
                    task.line(
                        at,
                        format!("copying volume {} to {dst}:{}", d.volid, d.volname),
                    );
                    task.transfer(at + 0.1, secs, d.used, TransferStyle::QemuImg);
                    at += 0.2 + secs;
                }
            }
            if online {
                task.line(at, format!("starting VM {vmid} on remote node '{target}'"));
                at += 1.0;
                task.line(at, "migration active, transferred memory".to_string());
                at += 1.0;
                task.line(
                    at,
                    "stopping NBD storage migration server on target.".to_string(),
                );
            }
            at += 0.5;
            task.duration = at;
            task.line(
                at,
                format!(
                    "migration finished successfully (duration {})",
                    duration_text(at)
                ),
            );
        }
        if let Some(v) = self.vms.get_mut(&vmid) {
            v.lock = Some("migrate".into());
        }
        Ok(self.start_task(task, req.now))
    }

    /// Bytes per second of a copy between nodes: the slower of the storages, at most a
    /// gigabit link.
    fn migrate_speed(&self, node: &str, disks: &[&Disk]) -> f64 {
        let link = 117.0_f64;
        disks
            .iter()
            .filter_map(|d| self.nodes.get(node)?.storages.get(&d.storage))
            .map(|s| s.speed_mib_s)
            .fold(link, f64::min)
            * 1024.0
            * 1024.0
    }

    /// A `qmigrate` task finished: the config and its volumes are on the target node; a
    /// live-migrated VM runs there.
    pub(crate) fn finish_migrate(
        &mut self,
        node: &str,
        vmid: u32,
        target: &str,
        storages: &StorageMap,
    ) -> Result<Vec<String>, String> {
        let Some(vm) = self.vms.get(&vmid).cloned() else {
            return Err(format!("VM {vmid} does not exist"));
        };
        let disks = self.vm_disks(node, &vm);
        let mut config = vm.config.clone();
        for d in &disks {
            // A shared storage's volumes are the same on every node: nothing moves.
            if d.shared {
                continue;
            }
            let dst = storages.target(&d.storage);
            let vol = self
                .nodes
                .get_mut(node)
                .and_then(|n| n.storages.get_mut(&d.storage))
                .and_then(|s| s.volumes.remove(&d.volname));
            if let Some(vol) = vol
                && let Some(s) = self
                    .nodes
                    .get_mut(target)
                    .and_then(|n| n.storages.get_mut(&dst))
            {
                s.volumes.insert(d.volname.clone(), vol);
            }
            if dst != d.storage
                && let Some(v) = config.get_mut(&d.key)
            {
                *v = v.replacen(&format!("{}:", d.storage), &format!("{dst}:"), 1);
            }
        }
        if let Some(v) = self.vms.get_mut(&vmid) {
            v.config = config;
            v.node = target.to_string();
            v.lock = None;
        }
        Ok(Vec::new())
    }

    /// A failed `qmigrate`: the VM stays where it was, unlocked.
    pub(crate) fn abort_migrate(&mut self, vmid: u32) {
        if let Some(v) = self.vms.get_mut(&vmid)
            && v.lock.as_deref() == Some("migrate")
        {
            v.lock = None;
        }
    }
}

/// PVE's `HH:MM:SS` duration.
fn duration_text(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Devices that tie the VM to its node (`check_local_resources`): passed-through PCI and
/// USB devices, serial ports on host devices.
fn local_resources(vm: &Vm) -> Vec<String> {
    vm.config
        .iter()
        .filter(|(k, v)| {
            k.starts_with("hostpci")
                || (k.starts_with("usb") && !v.contains("spice") && !v.starts_with("mapping="))
                || (k.starts_with("serial") && v.starts_with("/dev/"))
                || (k.starts_with("parallel"))
        })
        .map(|(k, _)| k.clone())
        .collect()
}
