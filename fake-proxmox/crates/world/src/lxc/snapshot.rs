//! A container's snapshots (`/nodes/{node}/lxc/{vmid}/snapshot…`), as pve-container's
//! `src/PVE/API2/LXC/Snapshot.pm` and pve-guest-common's `AbstractConfig` do them: the
//! checks run as the task starts (`vzsnapshot`, `vzdelsnapshot`, `vzrollback`) and end it
//! with PVE's text; a running container is frozen, not stopped, to be snapshotted; a
//! rollback stops it first. Containers have no RAM state (`vmstate` is always 0).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::model::{Ct, MountType};
use super::work::CtWork;
use crate::guest::sections::Snapshot;
use crate::request::Request;
use crate::storage::features::{Feature, VolumeState, has_feature};
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::Work;

impl Site {
    /// `GET …/snapshot`: every snapshot, then `current`.
    pub fn ct_snapshot_list(&self, req: &Request) -> Result<Value, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Audit"])?;
        let ct = self.ct_on(&node, vmid)?;
        let mut out = Vec::new();
        for (name, s) in &ct.snapshots {
            let mut item = json!({
                "name": name,
                "snaptime": s.snaptime,
                "description": s.description.clone().unwrap_or_default(),
            });
            if let Some(p) = s.config.get("parent") {
                item["parent"] = json!(p);
            }
            if let Some(st) = &s.snapstate {
                item["snapstate"] = json!(st);
            }
            out.push(item);
        }
        let mut current = json!({
            "name": "current",
            "digest": ct.digest(),
            "running": u8::from(ct.is_running()),
            "description": "You are here!",
        });
        if let Some(p) = ct.config.get("parent") {
            current["parent"] = json!(p);
        }
        out.push(current);
        Ok(Value::Array(out))
    }

    /// A snapshot of the container, or PVE's error for a missing one.
    pub fn ct_snapshot(&self, req: &Request) -> Result<&Snapshot, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Audit"])?;
        let name = req.p.req_str("snapname")?;
        self.ct_on(&node, vmid)?
            .snapshots
            .get(&name)
            .ok_or_else(|| PveError::die(format!("snapshot '{name}' does not exist")))
    }

    /// `PUT …/snapshot/{snapname}/config`: only the description changes.
    pub fn set_ct_snapshot_description(&mut self, req: &Request) -> Result<(), PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Snapshot"])?;
        let name = req.p.req_str("snapname")?;
        let ct = self.ct_on(&node, vmid)?;
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})")));
        }
        if !ct.snapshots.contains_key(&name) {
            return Err(PveError::die(format!("snapshot '{name}' does not exist")));
        }
        if let (Some(d), Some(ct)) = (req.p.str("description"), self.cts.get_mut(&vmid))
            && let Some(s) = ct.snapshots.get_mut(&name)
        {
            s.description = Some(d);
        }
        Ok(())
    }

    /// Whether every volume of the config supports snapshots (`has_feature`).
    fn ct_can_snapshot(&self, node: &str, ct: &Ct) -> bool {
        let n = self.node(node);
        ct.mount_points().iter().all(|(k, m)| {
            if m.kind() != MountType::Volume {
                // Bind and device mounts are skipped only when excluded from backups.
                return k != "rootfs" && !m.opts.iter().any(|(o, v)| o == "backup" && v == "1");
            }
            parse_volid(&m.volume).is_some_and(|(sid, volname)| {
                n.and_then(|n| n.storages.get(sid)).is_some_and(|s| {
                    let format = s.volumes.get(volname).map_or("raw", |v| v.format.as_str());
                    has_feature(
                        s.kind,
                        Feature::Snapshot,
                        VolumeState::of(volname, false),
                        format,
                    )
                })
            })
        })
    }

    /// `POST …/snapshot`: the `vzsnapshot` task.
    pub fn start_ct_snapshot(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Snapshot"])?;
        let name = req.p.req_str("snapname")?;
        if name == "current" {
            return Err(PveError::die(
                "unable to use snapshot name 'current' (reserved name)",
            ));
        }
        if name.eq_ignore_ascii_case("pending") {
            return Err(PveError::die(
                "unable to use snapshot name 'pending' (reserved name)",
            ));
        }
        let ct = self.ct_on(&node, vmid)?.clone();
        let description = req.p.str("description").filter(|d| !d.is_empty());
        let work = CtWork::SnapshotCreate {
            vmid,
            snapname: name.clone(),
            description: description.clone(),
        };
        let mut plan = self.ct_plan(req, "vzsnapshot", &node, vmid, work);
        let refused = if ct.is_template() {
            Some("you can't take a snapshot if it's a template".to_string())
        } else if let Some(l) = &ct.lock {
            Some(format!("CT is locked ({l})"))
        } else if ct.snapshots.contains_key(&name) {
            Some(format!("snapshot name '{name}' already used"))
        } else if !self.ct_can_snapshot(&node, &ct) {
            Some("snapshot feature is not available".to_string())
        } else {
            None
        };
        if let Some(e) = refused {
            plan.work = Work::Noop;
            plan.planned_error = Some(e);
            plan.duration = 0.1;
            return Ok(self.start_task(plan, req.now));
        }
        let mut t = 0.2;
        if ct.is_running() {
            plan.line(0.1, format!("freezing container {vmid}"));
            t += 0.2;
        }
        plan.duration = t + 0.3;
        let mut config: BTreeMap<String, String> = ct.config.clone();
        config.remove("lock");
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("snapshot".into());
            ct.snapshots.insert(
                name.clone(),
                Snapshot {
                    config,
                    snaptime: req.now as u64,
                    description,
                    vmstate: None,
                    snapstate: Some("prepare".into()),
                },
            );
        }
        Ok(self.start_task(plan, req.now))
    }

    pub(crate) fn finish_snapshot_ct(
        &mut self,
        vmid: u32,
        snapname: &str,
        _description: Option<String>,
        _now: f64,
    ) {
        if let Some(ct) = self.cts.get_mut(&vmid) {
            if let Some(s) = ct.core.snapshots.get_mut(snapname) {
                s.snapstate = None;
            }
            ct.config.insert("parent".into(), snapname.to_string());
            ct.lock = None;
        }
    }

    /// `DELETE …/snapshot/{snapname}`: the `vzdelsnapshot` task.
    pub fn start_ct_snapshot_delete(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Snapshot"])?;
        let name = req.p.req_str("snapname")?;
        let ct = self.ct_on(&node, vmid)?.clone();
        let work = CtWork::SnapshotDelete {
            vmid,
            snapname: name.clone(),
        };
        let mut plan = self.ct_plan(req, "vzdelsnapshot", &node, vmid, work);
        let refused = match ct.snapshots.get(&name) {
            None => Some(format!("snapshot '{name}' does not exist")),
            Some(_) => ct.lock.as_ref().map(|l| format!("CT is locked ({l})")),
        };
        if let Some(e) = refused {
            plan.work = Work::Noop;
            plan.planned_error = Some(e);
            plan.duration = 0.1;
            return Ok(self.start_task(plan, req.now));
        }
        plan.duration = 0.5;
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("snapshot-delete".into());
            if let Some(s) = ct.core.snapshots.get_mut(&name) {
                s.snapstate = Some("delete".into());
            }
        }
        Ok(self.start_task(plan, req.now))
    }

    /// The snapshot goes; its children take its parent, as does the current state.
    pub(crate) fn finish_delsnapshot_ct(&mut self, vmid: u32, snapname: &str) {
        let Some(ct) = self.cts.get_mut(&vmid) else {
            return;
        };
        let parent = ct
            .snapshots
            .get(snapname)
            .and_then(|s| s.config.get("parent").cloned());
        ct.core.snapshots.remove(snapname);
        let repoint = |c: &mut BTreeMap<String, String>| {
            if c.get("parent").map(String::as_str) == Some(snapname) {
                match &parent {
                    Some(p) => c.insert("parent".into(), p.clone()),
                    None => c.remove("parent"),
                };
            }
        };
        repoint(&mut ct.core.config);
        for s in ct.core.snapshots.values_mut() {
            repoint(&mut s.config);
        }
        ct.lock = None;
    }

    /// `POST …/snapshot/{snapname}/rollback`: the `vzrollback` task; a running container
    /// is stopped first.
    pub fn start_ct_rollback(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Snapshot", "VM.Snapshot.Rollback"])?;
        let name = req.p.req_str("snapname")?;
        let start = req.p.flag("start");
        let ct = self.ct_on(&node, vmid)?.clone();
        let work = CtWork::SnapshotRollback {
            vmid,
            snapname: name.clone(),
            start,
        };
        let mut plan = self.ct_plan(req, "vzrollback", &node, vmid, work);
        let refused = if ct.is_template() {
            Some("you can't rollback if vm is a template".to_string())
        } else {
            match ct.snapshots.get(&name) {
                None => Some(format!("snapshot '{name}' does not exist")),
                Some(s) if s.snapstate.is_some() => Some(format!(
                    "unable to rollback to incomplete snapshot (snapstate = {})",
                    s.snapstate.as_deref().unwrap_or("")
                )),
                Some(_) => ct.lock.as_ref().map(|l| format!("CT is locked ({l})")),
            }
        };
        if let Some(e) = refused {
            plan.work = Work::Noop;
            plan.planned_error = Some(e);
            plan.duration = 0.1;
            return Ok(self.start_task(plan, req.now));
        }
        plan.duration = 1.0;
        if self.cts.get(&vmid).is_some_and(|c| c.is_running())
            && let Err(e) = self.kill_ct(vmid, req.now)
        {
            tracing::warn!("CT {vmid}: stopping it for the rollback: {e}");
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("rollback".into());
        }
        Ok(self.start_task(plan, req.now))
    }

    /// The config is the snapshot's again, with the snapshot as its parent.
    pub(crate) fn finish_rollback_ct(&mut self, vmid: u32, snapname: &str) {
        let Some(ct) = self.cts.get_mut(&vmid) else {
            return;
        };
        let Some(s) = ct.snapshots.get(snapname).cloned() else {
            ct.lock = None;
            return;
        };
        let mut config = s.config;
        config.insert("parent".into(), snapname.to_string());
        ct.core.config = config;
        ct.core.pending = Default::default();
        ct.lock = None;
    }
}
