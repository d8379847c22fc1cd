//! `GET|POST …/migrate`: moving a container to another node of its cluster, after
//! pve-container `src/PVE/API2/LXC.pm` (`migrate_vm_precondition`, `migrate_vm`) and
//! `src/PVE/LXC/Migrate.pm` (`prepare`, `phase1`, `final_cleanup`). There is no live
//! migration: a running container moves only in restart mode (`restart=1`: shut down,
//! moved, started on the target). The checks of the API come before the `vzmigrate` task;
//! those of `prepare` and `phase1` fail the task: `migration aborted`, the cause logged as
//! `ERROR: migration aborted (duration …): …` (pve-guest-common `AbstractMigrate::migrate`).

use serde_json::{Value, json};

use super::model::{MountPoint, MountType, is_mp_key, is_unused_key};
use super::volumes::duration_text;
use super::work::CtWork;
use crate::qemu::storage_map::{StorageMap, parse_idmap};
use crate::request::Request;
use crate::storage::model::{Content, StorageType};
use crate::storage::volid::parse_volid;
use crate::tasks::model::TransferStyle;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// The task being laid out by `phase1`, and its clock.
struct Phase1<'a> {
    task: &'a mut TaskPlan,
    at: &'a mut f64,
}

/// One volume of the config (`foreach_volume_full` with unused ones).
struct CtVolume {
    key: String,
    mount: MountPoint,
}

impl Site {
    /// `GET …/migrate`: whether it runs, and the other nodes (no HA: none is blocked).
    pub fn ct_migrate_precondition(&self, req: &Request) -> Result<Value, PveError> {
        let (node, vmid) = (req.node()?, req.vmid()?);
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Migrate")?;
        self.check_cfs_quorum()?;
        let ct = self.ct_on(&node, vmid)?;
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})\n")));
        }
        let others: Vec<&String> = self.nodes.keys().filter(|n| **n != node).collect();
        Ok(json!({
            "running": u8::from(ct.is_running()),
            "allowed-nodes": others,
            "not-allowed-nodes": {},
        }))
    }

    /// `POST …/migrate`: the `vzmigrate` task's UPID.
    pub fn migrate_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid, p) = (req.node()?, req.vmid()?, &req.p);
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Migrate")?;
        let target = p.req_str("target")?;
        if target == node {
            return Err(PveError::param("target", "target is local node."));
        }
        self.check_cfs_quorum()?;
        if !self.nodes.contains_key(&target) {
            return Err(PveError::die(format!("no such cluster node '{target}'\n")));
        }
        let running = self.ct_on(&node, vmid)?.is_running();
        let (online, restart) = (p.flag("online"), p.flag("restart"));
        if running && !online && !restart {
            return Err(PveError::die(
                "can't migrate running container without --online or --restart\n",
            ));
        }
        let storages = match p.str("target-storage") {
            Some(text) => {
                let map = parse_idmap(&text).map_err(|e| {
                    PveError::param(
                        "target-storage",
                        format!("failed to parse storage map: {e}"),
                    )
                })?;
                if !map.identity {
                    self.require(&req.who, &format!("/vms/{vmid}"), "VM.Config.Disk")?;
                }
                let targets = map.map.entries.values().chain(map.map.default.iter());
                for sid in targets {
                    self.check_storage_access_migrate(req, sid, &target)?;
                }
                map.map
            }
            None => StorageMap::default(),
        };
        let mut task = self.ct_plan(req, "vzmigrate", &node, vmid, CtWork::Start { vmid });
        let locked = self.ct_on(&node, vmid)?.lock.is_some();
        let mut at = 0.1;
        // Restart mode: `prepare` shuts the running container down once its checks pass.
        let mut stopped = false;
        let failure = match self.ct_migrate_prepare(&node, vmid, &target, &storages, online) {
            Err(e) => Some(e),
            Ok(volumes) => {
                if running {
                    task.line(at, format!("shutdown CT {vmid}"));
                    at += 2.0;
                    stopped = true;
                }
                let mut phase = Phase1 {
                    task: &mut task,
                    at: &mut at,
                };
                self.ct_migrate_phase1(&node, vmid, &target, &storages, &volumes, &mut phase)
                    .err()
            }
        };
        match &failure {
            Some(e) => {
                let msg = format!("migration aborted (duration {}): {e}", duration_text(at));
                task.line(at, format!("ERROR: {msg}"));
                if stopped {
                    task.line(at, "start container on source node");
                }
                // AbstractMigrate dies with `migration aborted`: the cause is in the log.
                task.planned_error = Some("migration aborted".into());
                task.duration = at;
            }
            None => {
                task.line(at, "start final cleanup");
                if stopped {
                    task.line(at, "start container on target node");
                    at += 1.0;
                }
                at += 0.5;
                task.line(
                    at,
                    format!(
                        "migration finished successfully (duration {})",
                        duration_text(at)
                    ),
                );
                task.duration = at;
            }
        }
        // A locked container's `prepare` fails before anything is taken: nothing to undo.
        task.work = if locked {
            Work::Noop
        } else {
            Work::Ct(CtWork::Migrate {
                vmid,
                target,
                storages,
                restart: stopped,
            })
        };
        if let Some(ct) = self.cts.get_mut(&vmid)
            && ct.lock.is_none()
        {
            // `phase1` writes the lock; a locked container's `prepare` failed before it.
            ct.lock = Some("migrate".into());
            if stopped && let Err(e) = self.kill_ct(vmid, req.now) {
                tracing::warn!("CT {vmid}: stopping it for the migration: {e}");
            }
        }
        Ok(self.start_task(task, req.now))
    }

    /// `Migrate.pm` `prepare`: the lock, no live migration, every mount point a volume (or
    /// shared), its storage holding container directories here and available on the
    /// target, the target reachable.
    fn ct_migrate_prepare(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        storages: &StorageMap,
        online: bool,
    ) -> Result<Vec<CtVolume>, String> {
        let ct = self
            .ct_on(node, vmid)
            .map_err(|e| e.message.trim_end().to_string())?;
        if let Some(l) = &ct.lock {
            return Err(format!("CT is locked ({l})"));
        }
        if ct.is_running() && online {
            return Err("lxc live migration is currently not implemented".into());
        }
        let mut volumes = Vec::new();
        for (key, value) in &ct.config {
            if !is_mp_key(key) && !is_unused_key(key) {
                continue;
            }
            let mount = MountPoint::parse(value);
            let ty = match mount.kind() {
                MountType::Volume => None,
                MountType::Bind => Some("bind"),
                MountType::Device => Some("device"),
            };
            if let Some(ty) = ty {
                if mount.opts.iter().any(|(k, v)| k == "shared" && v == "1") {
                    continue;
                }
                return Err(format!("cannot migrate local {ty} mount point '{key}'"));
            }
            let Some((sid, _)) = parse_volid(&mount.volume) else {
                return Err(format!(
                    "can't determine assigned storage for mount point '{key}'"
                ));
            };
            let sto = self
                .storage_check_enabled(node, sid)
                .map_err(|e| e.message.trim_end().to_string())?;
            if !sto.supports(Content::Rootdir) {
                return Err(format!(
                    "content type 'rootdir' is not available on storage '{sid}'"
                ));
            }
            let tsid = if sto.shared {
                sid.to_string()
            } else {
                storages.target(sid)
            };
            let tsto = self
                .storage_check_enabled(target, &tsid)
                .map_err(|e| e.message.trim_end().to_string())?;
            if !tsto.supports(Content::Rootdir) {
                return Err(format!(
                    "{}: content type 'rootdir' is not available on storage '{tsid}'",
                    mount.volume
                ));
            }
            volumes.push(CtVolume {
                key: key.clone(),
                mount,
            });
        }
        if !self.nodes.get(target).is_some_and(|n| n.online) {
            return Err("Can't connect to destination address using public key".into());
        }
        Ok(volumes)
    }

    /// `Migrate.pm` `phase1`: the local volumes found (snapshots only on ZFS and btrfs),
    /// each copied to the target's storage.
    fn ct_migrate_phase1(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        storages: &StorageMap,
        volumes: &[CtVolume],
        phase: &mut Phase1<'_>,
    ) -> Result<(), String> {
        let (task, at) = (&mut *phase.task, &mut *phase.at);
        let ip = self.nodes.get(target).map_or("", |n| n.ip.as_str());
        task.line(
            *at,
            format!("starting migration of CT {vmid} to node '{target}' ({ip})"),
        );
        let Some(ct) = self.cts.get(&vmid) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        let mut local: Vec<(&CtVolume, String, &str)> = Vec::new();
        let mut errors: Vec<(String, &str)> = Vec::new();
        for v in volumes {
            let Some((sid, _)) = parse_volid(&v.mount.volume) else {
                continue;
            };
            let Some(sto) = self.node(node).and_then(|n| n.storages.get(sid)) else {
                continue;
            };
            if sto.shared {
                task.line(
                    *at,
                    format!("volume '{}' is on shared storage '{sid}'", v.mount.volume),
                );
                continue;
            }
            let in_snapshot = ct.snapshots.values().any(|s| {
                s.config
                    .values()
                    .any(|val| MountPoint::parse(val).volume == v.mount.volume)
            });
            if in_snapshot && !matches!(sto.kind, StorageType::ZfsPool | StorageType::Btrfs) {
                errors.push((v.mount.volume.clone(), "non-migratable snapshot exists"));
            }
            let how = if is_unused_key(&v.key) || !in_snapshot {
                "in current VM config"
            } else {
                "referenced by snapshot(s)"
            };
            local.push((v, storages.target(sid), how));
        }
        local.sort_by(|a, b| a.0.mount.volume.cmp(&b.0.mount.volume));
        for (v, _, how) in &local {
            task.line(
                *at,
                format!("found local volume '{}' ({how})", v.mount.volume),
            );
        }
        if !errors.is_empty() {
            errors.sort();
            for (volid, e) in &errors {
                task.line(*at, format!("can't migrate local volume '{volid}': {e}"));
            }
            return Err("can't migrate CT - check log".into());
        }
        for (v, tsid, _) in &local {
            let Some((sid, volname)) = parse_volid(&v.mount.volume) else {
                continue;
            };
            let used = self.volume_used(node, &v.mount.volume);
            let secs = self.copy_secs((node, sid), (target, tsid), used);
            task.transfer(*at + 0.1, secs, used, TransferStyle::QemuImg);
            *at += 0.2 + secs;
            task.line(
                *at,
                format!(
                    "volume '{}' is '{tsid}:{volname}' on the target",
                    v.mount.volume
                ),
            );
        }
        *at += 0.2;
        Ok(())
    }

    /// The end of `vzmigrate`: the local volumes on the target's storages, the config
    /// there and unlocked; in restart mode the container starts there.
    pub(crate) fn finish_migrate_ct(
        &mut self,
        node: &str,
        vmid: u32,
        target: &str,
        storages: &StorageMap,
        restart: bool,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let Some(ct) = self.cts.get(&vmid) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        let mut config = ct.config.clone();
        for (key, value) in &ct.config {
            if !is_mp_key(key) && !is_unused_key(key) {
                continue;
            }
            let mut m = MountPoint::parse(value);
            let Some((sid, volname)) =
                parse_volid(&m.volume).map(|(s, v)| (s.to_string(), v.to_string()))
            else {
                continue;
            };
            let shared = self
                .node(node)
                .and_then(|n| n.storages.get(&sid))
                .is_none_or(|s| s.shared);
            if shared {
                continue;
            }
            let dst = storages.target(&sid);
            let vol = self
                .nodes
                .get_mut(node)
                .and_then(|n| n.storages.get_mut(&sid))
                .and_then(|s| s.volumes.remove(&volname));
            if let Some(vol) = vol
                && let Some(s) = self
                    .nodes
                    .get_mut(target)
                    .and_then(|n| n.storages.get_mut(&dst))
            {
                s.volumes.insert(volname.clone(), vol);
            }
            if dst != sid {
                m.volume = format!("{dst}:{volname}");
                let v = if is_unused_key(key) {
                    m.volume.clone()
                } else {
                    m.print(key == "rootfs")
                };
                config.insert(key.clone(), v);
            }
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.config = config;
            ct.node = target.to_string();
            ct.lock = None;
        }
        if restart {
            self.finish_start_ct(vmid, now)?;
        }
        Ok(Vec::new())
    }

    /// A failed `vzmigrate`: the container stays, unlocked; in restart mode it starts again
    /// on the source node (`final_cleanup`).
    pub(crate) fn abort_migrate_ct(&mut self, vmid: u32, restart: bool, now: f64) {
        if let Some(ct) = self.cts.get_mut(&vmid)
            && ct.lock.as_deref() == Some("migrate")
        {
            ct.lock = None;
            if restart {
                let _ = self.finish_start_ct(vmid, now);
            }
        }
    }
}
