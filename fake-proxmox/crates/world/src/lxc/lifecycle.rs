//! A container's life apart from power: the end of its create task, destroy, conversion to
//! a template, growing a mount point, and the storage features it has. Texts from
//! pve-container `src/PVE/API2/LXC.pm` (`destroy_vm`, `template`, `resize_vm`,
//! `vm_feature`) and `src/PVE/LXC.pm` (`alloc_disk`, `destroy_lxc_container`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::model::{Ct, MountPoint, MountType, is_mp_key, is_unused_key};
use super::work::{CtWork, NewVolume};
use crate::exec::{CtCreate, Vol};
use crate::request::Request;
use crate::storage::features::{Feature, VolumeState, has_feature};
use crate::storage::model::{StorageType, format_size, parse_size};
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

impl Site {
    /// The container `vmid` on `node`, or PVE's missing-config error.
    pub fn ct_on(&self, node: &str, vmid: u32) -> Result<&Ct, PveError> {
        self.cts
            .get(&vmid)
            .filter(|c| c.node == node)
            .ok_or_else(|| {
                PveError::die(format!(
                    "Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist"
                ))
            })
    }

    /// The container of the request's path, after at least one of `privs` on it.
    pub fn ct_op(&self, req: &Request, privs: &[&str]) -> Result<(String, u32), PveError> {
        let (node, vmid) = (req.node()?, req.vmid()?);
        self.ct_on(&node, vmid)?;
        self.require_any(&req.who, &format!("/vms/{vmid}"), privs)?;
        Ok((node, vmid))
    }

    /// A task on container `vmid`, run as the caller.
    pub(crate) fn ct_plan(
        &self,
        req: &Request,
        ttype: &'static str,
        node: &str,
        vmid: u32,
        work: CtWork,
    ) -> TaskPlan {
        TaskPlan::new(
            ttype,
            vmid.to_string(),
            node,
            &req.task_user(),
            Work::Ct(work),
        )
    }

    /// The end of `vzcreate`: the volumes allocated, the config written, the template
    /// unpacked and root's keys written by the executor, the lock gone. On an error the
    /// volumes and the config go again.
    pub(crate) fn finish_create_ct(
        &mut self,
        node: &str,
        vmid: u32,
        config: &[(String, String)],
        volumes: &[NewVolume],
        made: &CtMade<'_>,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let mut conf: BTreeMap<String, String> = config.iter().cloned().collect();
        let mut allocated: Vec<(String, String)> = Vec::new();
        let mut failed = None;
        for v in volumes {
            match self.alloc_ct_volume(node, vmid, v, now) {
                Ok((volid, value)) => {
                    allocated.push((v.storage.clone(), volid));
                    conf.insert(v.key.clone(), value);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let mut log = Vec::new();
        if failed.is_none() {
            match self.cts.get_mut(&vmid) {
                Some(ct) => ct.config = conf,
                None => failed = Some("config vanished".into()),
            }
        }
        if failed.is_none()
            && let Some(ostemplate) = made.ostemplate
        {
            match self.unpack_ct(node, vmid, ostemplate, made.ssh_keys) {
                Ok(l) => log = l,
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            for (sid, volid) in allocated {
                if let Some((_, volname)) = parse_volid(&volid) {
                    self.remove_volume(node, &sid, volname);
                }
            }
            self.cts.remove(&vmid);
            return Err(format!("unable to create CT {vmid} - {e}"));
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = None;
        }
        Ok(log)
    }

    /// The executor's part of a create: the template into the root file system, root's
    /// keys; the OS it detects replaces the guess from the template's name.
    fn unpack_ct(
        &mut self,
        node: &str,
        vmid: u32,
        ostemplate: &str,
        ssh_keys: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let exec = self.exec_on(node).clone();
        let Some(ct) = self.cts.get(&vmid) else {
            return Err("config vanished".into());
        };
        let job = CtCreate {
            ct,
            ostemplate,
            template: parse_volid(ostemplate).map(|(sid, volname)| Vol::new(node, sid, volname)),
            ssh_keys,
        };
        let created = exec.create_ct(&job)?;
        if let Some(os) = created.ostype
            && let Some(ct) = self.cts.get_mut(&vmid)
        {
            ct.config.insert("ostype".into(), os);
        }
        Ok(created.log)
    }

    /// `alloc_disk`: the volume's id and the mount point's new config value.
    pub(crate) fn alloc_ct_volume(
        &mut self,
        node: &str,
        vmid: u32,
        v: &NewVolume,
        now: f64,
    ) -> Result<(String, String), String> {
        let s = self
            .node(node)
            .and_then(|n| n.storages.get(&v.storage))
            .ok_or_else(|| format!("storage '{}' does not exist", v.storage))?;
        let subvol = (s.kind.is_file_based() && v.size == 0) || s.kind == StorageType::ZfsPool;
        let fmt = if subvol { "subvol" } else { "raw" };
        let volname = if subvol {
            let base = s
                .next_disk_name(vmid, "raw")
                .replace("vm-", "subvol-")
                .trim_end_matches(".raw")
                .to_string();
            base.rsplit('/').next().unwrap_or(&base).to_string()
        } else {
            s.next_disk_name(vmid, "raw")
        };
        let volname = self.alloc_rootdir_data(node, &v.storage, vmid, volname, fmt, v.size, now)?;
        let volid = format!("{}:{volname}", v.storage);
        let mut m = v.mount.clone();
        m.volume = volid.clone();
        m.size = Some(v.size);
        Ok((volid, m.print(v.key == "rootfs")))
    }

    /// `DELETE /nodes/{node}/lxc/{vmid}`
    pub fn destroy_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Allocate"])?;
        let ct = self.ct_on(&node, vmid)?;
        if ct.config.get("protection").is_some_and(|v| v == "1") {
            return Err(PveError::die(format!(
                "can't remove CT {vmid} - protection mode enabled"
            )));
        }
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})")));
        }
        let force = req.p.flag("force");
        if ct.is_running() && !force {
            return Err(PveError::die(format!(
                "unable to destroy CT {vmid} - container is running"
            )));
        }
        let mut plan = self.ct_plan(
            req,
            "vzdestroy",
            &node,
            vmid,
            CtWork::Destroy {
                vmid,
                unreferenced: req.p.flag("destroy-unreferenced-disks"),
            },
        );
        let mut t = 0.2;
        if ct.is_running() {
            plan.line(0.05, format!("forced to stop CT {vmid} before destroying!"));
            t += 1.0;
        }
        for volid in ct_volumes(&ct.config) {
            if let Some((sid, volname)) = parse_volid(&volid)
                && self
                    .node(&node)
                    .and_then(|n| n.storages.get(sid))
                    .is_some_and(|s| matches!(s.kind, StorageType::Lvm | StorageType::LvmThin))
            {
                t += 0.2;
                plan.line(
                    t,
                    format!("  Logical volume \"{volname}\" successfully removed."),
                );
            }
        }
        if req.p.flag("purge") {
            plan.line(
                t,
                format!("purging CT {vmid} from related configurations.."),
            );
        }
        plan.duration = t + 0.2;
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("destroyed".into());
        }
        Ok(self.start_task(plan, req.now))
    }

    /// The end of `vzdestroy`: whatever runs the container stops, then its volumes,
    /// config, ACLs and pool entry go.
    pub(crate) fn finish_destroy_ct(&mut self, vmid: u32, unreferenced: bool) {
        let Some(ct) = self.cts.remove(&vmid) else {
            return;
        };
        self.exec_on(&ct.node).destroy_ct(&ct);
        for volid in ct_volumes(&ct.config) {
            self.free_volume(&ct.node, &volid);
        }
        if unreferenced {
            self.remove_volumes_of(&ct.node, vmid);
        }
        self.access.remove_vm_access(vmid);
    }

    /// `POST …/template`
    pub fn template_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Allocate"])?;
        let ct = self.ct_on(&node, vmid)?;
        if ct.is_template() {
            return Err(PveError::die("you can't convert a template to a template"));
        }
        if ct.is_running() {
            return Err(PveError::die(
                "you can't convert a running CT to a template",
            ));
        }
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})")));
        }
        let mut plan = self.ct_plan(req, "vztemplate", &node, vmid, CtWork::Template { vmid });
        plan.duration = 0.5;
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("template".into());
        }
        Ok(self.start_task(plan, req.now))
    }

    pub(crate) fn finish_template_ct(&mut self, vmid: u32) {
        let Some(ct) = self.cts.get(&vmid) else {
            return;
        };
        let node = ct.node.clone();
        let mut renames: Vec<(String, String, String)> = Vec::new();
        for (k, m) in ct.mount_points() {
            if m.kind() != MountType::Volume {
                continue;
            }
            if let Some((sid, volname)) = parse_volid(&m.volume) {
                let base = volname.replacen("vm-", "base-", 1);
                renames.push((k, sid.to_string(), base));
            }
        }
        let mut new_values = Vec::new();
        for (k, sid, base) in renames {
            let Some(ct) = self.cts.get(&vmid) else {
                return;
            };
            let mut m = MountPoint::parse(ct.config.get(&k).map(String::as_str).unwrap_or(""));
            let Some((_, old)) =
                parse_volid(&m.volume).map(|(s, v)| (s.to_string(), v.to_string()))
            else {
                continue;
            };
            if let Some(mut vol) = self.remove_volume(&node, &sid, &old) {
                vol.volname = base.clone();
                if let Some(s) = self
                    .nodes
                    .get_mut(&node)
                    .and_then(|n| n.storages.get_mut(&sid))
                {
                    s.volumes.insert(base.clone(), vol);
                }
            }
            m.volume = format!("{sid}:{base}");
            new_values.push((k.clone(), m.print(k == "rootfs")));
        }
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.config.extend(new_values);
            ct.config.insert("template".into(), "1".into());
            ct.lock = None;
        }
    }

    /// `PUT …/resize`: grow a mount point (`+SIZE` or `SIZE`); shrinking is refused.
    pub fn resize_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Config.Disk"])?;
        let disk = req.p.req_str("disk")?;
        let size = req.p.req_str("size")?;
        let ct = self.ct_on(&node, vmid)?;
        if let Some(d) = req.p.str("digest")
            && d != ct.digest()
        {
            return Err(PveError::die(
                "detected modified configuration - file changed by other user? Try again.",
            ));
        }
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})")));
        }
        let value = ct
            .config
            .get(&disk)
            .ok_or_else(|| PveError::die(format!("no such disk '{disk}'")))?;
        let m = MountPoint::parse(value);
        if m.kind() != MountType::Volume {
            return Err(PveError::die(format!(
                "you can't resize a mount point of type '{}'",
                if m.kind() == MountType::Bind {
                    "bind"
                } else {
                    "device"
                }
            )));
        }
        let current = m.size.unwrap_or(0);
        let (grow, amount) = match size.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, size.as_str()),
        };
        let bytes = parse_size(amount)
            .ok_or_else(|| PveError::param("size", format!("unable to parse size '{size}'")))?;
        let new_size = if grow { current + bytes } else { bytes };
        if new_size < current {
            return Err(PveError::die("unable to shrink disk size"));
        }
        let mut plan = self.ct_plan(
            req,
            "resize",
            &node,
            vmid,
            CtWork::Resize {
                vmid,
                disk: disk.clone(),
                new_size,
            },
        );
        plan.line(
            0.1,
            format!(
                "  Size of logical volume changed to {}.",
                format_size(new_size)
            ),
        );
        plan.duration = 0.5;
        Ok(self.start_task(plan, req.now))
    }

    pub(crate) fn finish_resize_ct(
        &mut self,
        vmid: u32,
        disk: &str,
        new_size: u64,
    ) -> Result<Vec<String>, String> {
        let Some(ct) = self.cts.get(&vmid) else {
            return Err(format!("CT {vmid} does not exist"));
        };
        let node = ct.node.clone();
        let mut m = MountPoint::parse(ct.config.get(disk).map(String::as_str).unwrap_or(""));
        if let Some((sid, volname)) = parse_volid(&m.volume)
            && let Some(s) = self
                .nodes
                .get_mut(&node)
                .and_then(|n| n.storages.get_mut(sid))
        {
            s.volumes.update(volname, |v| v.size = new_size);
        }
        m.size = Some(new_size);
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.config
                .insert(disk.to_string(), m.print(disk == "rootfs"));
        }
        Ok(Vec::new())
    }

    /// `GET …/feature`: whether every volume supports `feature` (`has_feature`).
    pub fn ct_feature(&self, req: &Request) -> Result<Value, PveError> {
        let (node, vmid) = self.ct_op(req, &["VM.Audit"])?;
        let name = req.p.req_str("feature")?;
        let feature = Feature::parse(&name).ok_or_else(|| {
            PveError::param(
                "feature",
                format!(
                    "value '{name}' does not have a value in the enumeration 'snapshot, clone, copy'"
                ),
            )
        })?;
        let ct = self.ct_on(&node, vmid)?;
        let n = self.node(&node);
        let mut ok = true;
        for (_, m) in ct.mount_points() {
            if m.kind() != MountType::Volume {
                // Bind and device mounts support nothing (`volume_has_feature` is not asked).
                ok = false;
                continue;
            }
            let supported = parse_volid(&m.volume).is_some_and(|(sid, volname)| {
                n.and_then(|n| n.storages.get(sid)).is_some_and(|s| {
                    let format = s.volumes.get(volname).map_or("raw", |v| v.format.as_str());
                    has_feature(s.kind, feature, VolumeState::of(volname, false), format)
                })
            });
            ok &= supported;
        }
        Ok(json!({"hasFeature": u8::from(ok), "nodes": [node]}))
    }
}

/// Every volume a container's config names: its mount points and `unusedN`.
pub fn ct_volumes(config: &BTreeMap<String, String>) -> Vec<String> {
    config
        .iter()
        .filter(|(k, _)| is_mp_key(k) || is_unused_key(k))
        .map(|(_, v)| MountPoint::parse(v))
        .filter(|m| m.kind() == MountType::Volume && parse_volid(&m.volume).is_some())
        .map(|m| m.volume)
        .collect()
}

/// What a create hands its executor besides the config: the template and root's keys.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CtMade<'a> {
    /// `None` for a restore (its archive is not unpacked).
    pub ostemplate: Option<&'a str>,
    pub ssh_keys: Option<&'a str>,
}
