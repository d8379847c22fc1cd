//! `POST …/clone`: a new container from a container or its snapshot, after pve-container
//! `src/PVE/API2/LXC.pm` (`clone_vm`): the checks before the `vzclone` task, in PVE's order;
//! the source locked `disk` and the new config locked `create` while it runs; a full copy
//! of each mount point (the default for a container) or, from a template, a linked clone
//! where the storage makes one.

use std::collections::BTreeMap;

use super::model::{MountPoint, MountType, NetConf, is_mp_key, is_net_key, is_unused_key};
use super::volumes::links_ct_volumes;
use super::work::CtWork;
use crate::lxc::Ct;
use crate::request::Request;
use crate::storage::features::{Feature, VolumeState, has_feature};
use crate::storage::volid::parse_volid;
use crate::tasks::model::TransferStyle;
use crate::wire::PveError;
use crate::world::Site;

/// What the checks decided: the new config and the mount points the task makes.
struct ClonePlan {
    config: BTreeMap<String, String>,
    /// Key, source mount point, full copy.
    mounts: Vec<(String, MountPoint, bool)>,
}

fn mount_type(m: &MountPoint) -> &'static str {
    match m.kind() {
        MountType::Bind => "bind",
        MountType::Device => "device",
        MountType::Volume => "volume",
    }
}

impl Site {
    /// `POST /nodes/{node}/lxc/{vmid}/clone`
    pub fn clone_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let (node, vmid, p) = (req.node()?, req.vmid()?, &req.p);
        let newid = u32::try_from(p.req_int("newid")?).unwrap_or(u32::MAX);
        // The declared check: `VM.Clone` here, `VM.Allocate` on the new id or the pool.
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Clone")?;
        let pool = p.str("pool");
        let on_pool = pool.as_ref().is_some_and(|pool| {
            self.access
                .has(&req.who, &format!("/pool/{pool}"), "VM.Allocate")
        });
        if !on_pool {
            self.require(&req.who, &format!("/vms/{newid}"), "VM.Allocate")?;
        }
        if let Some(pool) = &pool {
            self.check_pool_exists(pool)?;
        }
        let snapname = p.str("snapname");
        let storage = p.str("storage");
        let target = p.str("target").filter(|t| *t != node && t != "localhost");
        if let Some(t) = &target
            && !self.nodes.contains_key(t)
        {
            return Err(PveError::die(format!("no such cluster node '{t}'\n")));
        }
        if let Some(sid) = &storage {
            self.storage_check_enabled(&node, sid)?;
            if let Some(t) = &target
                && !self.storage_check_enabled(t, sid)?.shared
            {
                return Err(PveError::die(format!(
                    "can't clone to non-shared storage '{sid}'\n"
                )));
            }
        }
        self.check_cfs_quorum()?;
        // `set_lock($vmid, 'disk')`, then `create_and_lock_config($newid)`.
        let src = self.ct_on(&node, vmid)?;
        if let Some(l) = &src.lock {
            return Err(PveError::die(format!("CT is locked ({l})\n")));
        }
        if let Some(existing) = self.guest(newid) {
            let core = existing.core();
            return Err(PveError::die(format!(
                "{} {newid} already exists on node '{}'\n",
                core.kind.label(),
                core.node
            )));
        }
        let plan = self.check_ct_clone(req, &node, vmid, target.as_deref())?;
        let firewall = self.ct_on(&node, vmid)?.firewall.clone();
        let mut clone = Ct::stopped(newid, &node, plan.config, Some("create"));
        // `clone_vmfw_conf`: the clone starts with the source's firewall config.
        clone.firewall = firewall;
        self.cts.insert(newid, clone);
        if let Some(ct) = self.cts.get_mut(&vmid) {
            ct.lock = Some("disk".into());
        }

        let mut task = self.ct_plan(
            req,
            "vzclone",
            &node,
            vmid,
            CtWork::Clone {
                src: vmid,
                newid,
                snapname,
                storage: storage.clone(),
                mounts: plan
                    .mounts
                    .iter()
                    .map(|(k, _, f)| (k.clone(), *f))
                    .collect(),
                pool,
                target,
            },
        );
        task.line(
            0.0,
            format!("creating a clone of container {vmid} with ID {newid}"),
        );
        let mut t = 0.1;
        for (key, m, full) in &plan.mounts {
            if *full {
                task.line(
                    t,
                    format!("create full clone of mountpoint {key} ({})", m.volume),
                );
                let used = self.volume_used(&node, &m.volume);
                let from = parse_volid(&m.volume).map_or("", |(s, _)| s);
                let to = storage.as_deref().unwrap_or(from);
                let secs = self.copy_secs((&node, from), (&node, to), used);
                task.transfer(t + 0.1, secs, used, TransferStyle::QemuImg);
                t += 0.1 + secs;
            } else {
                task.line(
                    t,
                    format!("create linked clone of mount point {key} ({})", m.volume),
                );
                t += 0.2;
            }
        }
        task.duration = t + 0.3;
        Ok(self.start_task(task, req.now))
    }

    /// The new config and its mount points, as `clone_vm` walks the source's keys (sorted;
    /// `unusedN` left out): volumes only, each a full copy or a linked clone the storage
    /// can make; every NIC a new MAC; snapshot keys, pending values and `template` dropped.
    fn check_ct_clone(
        &mut self,
        req: &Request,
        node: &str,
        vmid: u32,
        target: Option<&str>,
    ) -> Result<ClonePlan, PveError> {
        let p = &req.p;
        let src = self.ct_on(node, vmid)?;
        let running = src.is_running();
        let full = p.bool("full").unwrap_or(!src.is_template());
        let storage = p.str("storage");
        if storage.is_some() && !full {
            return Err(PveError::die(
                "parameter 'storage' not allowed for linked clones\n",
            ));
        }
        let snapname = p.str("snapname");
        let conf = match &snapname {
            Some(s) => {
                let snap = src
                    .snapshots
                    .get(s)
                    .ok_or_else(|| PveError::die(format!("snapshot '{s}' does not exist\n")))?;
                snap.config.clone()
            }
            None => src.config.clone(),
        };
        let mut config = BTreeMap::new();
        let mut mounts = Vec::new();
        let mut shared_all = true;
        let mut nets = Vec::new();
        for (k, v) in &conf {
            if is_unused_key(k) {
                continue;
            }
            if is_mp_key(k) {
                let m = MountPoint::parse(v);
                if m.kind() != MountType::Volume {
                    return Err(PveError::die(format!(
                        "unable to clone mountpoint '{k}' (type {})\n",
                        mount_type(&m)
                    )));
                }
                let (src_sid, volname) = parse_volid(&m.volume).ok_or_else(|| {
                    PveError::die(format!("unable to parse volume ID '{}'\n", m.volume))
                })?;
                let sid = storage.as_deref().unwrap_or(src_sid);
                let sto = self
                    .nodes
                    .values()
                    .find_map(|n| n.storages.get(sid))
                    .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist\n")))?;
                if !sto.shared {
                    shared_all = false;
                }
                self.require(
                    &req.who,
                    &format!("/storage/{sid}"),
                    "Datastore.AllocateSpace",
                )?;
                if full {
                    if running && snapname.is_none() {
                        return Err(PveError::die(
                            "Full clone of a running container is only possible from a snapshot\n",
                        ));
                    }
                } else {
                    let linkable = self
                        .node(node)
                        .and_then(|n| n.storages.get(src_sid))
                        .is_some_and(|s| {
                            let format =
                                s.volumes.get(volname).map_or("raw", |v| v.format.as_str());
                            links_ct_volumes(s.kind)
                                && has_feature(
                                    s.kind,
                                    Feature::Clone,
                                    VolumeState::of(volname, snapname.is_some()),
                                    format,
                                )
                        });
                    if !linkable {
                        return Err(PveError::die(format!(
                            "Linked clone feature for '{}' is not available\n",
                            m.volume
                        )));
                    }
                }
                mounts.push((k.clone(), m, full));
            } else if is_net_key(k) {
                nets.push((k.clone(), v.clone()));
            } else if !matches!(
                k.as_str(),
                "parent" | "snaptime" | "snapstate" | "template" | "vmstate"
            ) {
                config.insert(k.clone(), v.clone());
            }
        }
        // `random_ether_addr`: always a new MAC.
        for (k, v) in nets {
            let mut net = NetConf::parse(&v);
            net.0.insert("hwaddr".into(), self.random_mac());
            config.insert(k, net.print());
        }
        // The task makes them as `foreach_volume` walks a config: the rootfs first.
        mounts.sort_by_key(|(k, _, _)| {
            k.strip_prefix("mp")
                .and_then(|n| n.parse::<u32>().ok())
                .map_or(0, |n| n + 1)
        });
        if let Some(t) = target
            && !shared_all
        {
            return Err(PveError::die(format!(
                "can't clone CT to node '{t}' (CT uses local storage)\n"
            )));
        }
        for k in ["hostname", "description"] {
            if let Some(v) = p.str(k).filter(|v| !v.is_empty()) {
                config.insert(k.to_string(), v);
            }
        }
        Ok(ClonePlan { config, mounts })
    }

    /// The end of `vzclone`: each mount point copied or linked into the new config, the
    /// pool joined, the new config unlocked (and moved to `target`), the source unlocked.
    /// A failure frees what was made and removes the new config (`clone failed: …`).
    pub(crate) fn finish_clone_ct(
        &mut self,
        node: &str,
        work: &CtWork,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let CtWork::Clone {
            src,
            newid,
            snapname,
            storage,
            mounts,
            pool,
            target,
        } = work
        else {
            return Ok(Vec::new());
        };
        let (src, newid) = (*src, *newid);
        if let Some(ct) = self.cts.get_mut(&src)
            && ct.lock.as_deref() == Some("disk")
        {
            ct.lock = None;
        }
        let Some(source) = self.cts.get(&src) else {
            self.cts.remove(&newid);
            return Err(format!("clone failed: CT {src} does not exist"));
        };
        let conf = match snapname {
            Some(s) => source.snapshots.get(s).map(|s| s.config.clone()),
            None => Some(source.config.clone()),
        }
        .unwrap_or_default();
        let mut made: Vec<String> = Vec::new();
        let mut values = Vec::new();
        for (key, full) in mounts {
            let m = MountPoint::parse(conf.get(key).map_or("", String::as_str));
            let r = if *full {
                let from = parse_volid(&m.volume).map_or(String::new(), |(s, _)| s.to_string());
                let to = storage.clone().unwrap_or(from);
                self.copy_ct_volume(node, key, &m, newid, &to, now)
            } else {
                self.link_ct_volume(node, key, &m, newid, now)
            };
            match r {
                Ok((volid, value)) => {
                    made.push(volid);
                    values.push((key.clone(), value));
                }
                Err(e) => {
                    for volid in made {
                        if let Some((sid, volname)) = parse_volid(&volid) {
                            self.remove_volume(node, sid, volname);
                        }
                    }
                    self.cts.remove(&newid);
                    return Err(format!("clone failed: {e}"));
                }
            }
        }
        if let Some(pool) = pool {
            self.access.add_vm_to_pool(newid, pool);
        }
        if let Some(ct) = self.cts.get_mut(&newid) {
            ct.config.extend(values);
            ct.lock = None;
            if let Some(t) = target {
                ct.node = t.clone();
            }
        }
        Ok(Vec::new())
    }
}
