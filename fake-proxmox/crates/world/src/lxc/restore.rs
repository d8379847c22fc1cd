//! `POST /nodes/{node}/lxc` with `restore=1`: a container from a vzdump backup archive, in
//! pve-container's order (`src/PVE/API2/LXC.pm` `create_vm`, `src/PVE/LXC/Create.pm`
//! `recover_config`, `sanitize_and_merge_config`). The archive's config is the backup's
//! `config` (the scenario's `etc/vzdump/pct.conf`); with no mount points given, the
//! container gets the archive's rootfs and mount points at their sizes on `storage`.

use std::collections::BTreeMap;

use super::create::{create_options, ostype_of};
use super::model::{Ct, MountPoint, MountType, NetConf, is_mp_key, is_net_key, is_unused_key};
use super::perms::ConfigChange;
use super::work::{CtWork, NewVolume};
use crate::request::Request;
use crate::storage::model::Content;
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

const GIB: f64 = (1u64 << 30) as f64;

/// Keys of the archive's config a restore never takes over (`sanitize_and_merge_config`).
fn recovered(key: &str) -> bool {
    !(matches!(
        key,
        "digest" | "rootfs" | "snapshots" | "unprivileged" | "parent" | "template"
    ) || is_mp_key(key)
        || is_unused_key(key)
        || key == "lock")
}

impl Site {
    /// The restore branch of `POST /nodes/{node}/lxc`: a `vzrestore` task.
    pub(super) fn restore_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let p = &req.p;
        let node = req.node()?;
        let vmid = req.vmid()?;
        if p.flag("ha-managed") {
            self.require(&req.who, "/", "Sys.Console")?;
        }
        let exists_here = self.cts.get(&vmid).is_some_and(|c| c.node == node);
        if exists_here && p.flag("force") {
            return Err(PveError::die(
                "fake-proxmox: overwriting an existing container by a restore is not simulated",
            ));
        }
        let pool = self.ct_create_access(req, vmid)?;
        let archive = p.req_str("ostemplate")?;
        let storage = p.str("storage").unwrap_or_else(|| "local".into());
        let unprivileged = p.bool("unprivileged");
        let options = create_options(req, &storage);
        // Unknown privilege level until the archive is read: checked as privileged.
        self.check_ct_modify_config_perm(
            req,
            &ConfigChange {
                vmid,
                pool: pool.as_deref(),
                old: None,
                new: &options,
                delete: &[],
                unprivileged: unprivileged.unwrap_or(false),
            },
        )?;
        let (archive_exists, old_conf) = self.archive_config(req, &node, &archive)?;
        let storage_only = !options.iter().any(|(k, _)| is_mp_key(k));
        if !storage_only && !options.iter().any(|(k, _)| k == "rootfs") {
            return Err(PveError::die(
                "mount points configured, but 'rootfs' not set - aborting",
            ));
        }
        if storage_only {
            self.check_rootdir_storage(req, &node, &storage)?;
        }
        let is_root = req.who.userid == "root@pam" && req.who.tokenid.is_none();

        // The task's plan: what it recovers, allocates and writes, or where it fails.
        let mut error: Option<String> = None;
        let mut config: BTreeMap<String, String> = BTreeMap::new();
        let mut mounts: Vec<(String, String)> = Vec::new();
        let mut delayed: Vec<(String, String)> = Vec::new();
        for (k, v) in &options {
            if is_mp_key(k) {
                mounts.push((k.clone(), v.clone()));
            } else {
                config.insert(k.clone(), v.clone());
            }
        }
        match &old_conf {
            None if !archive_exists => error = Some(format!("can't find file '{archive}'")),
            None => error = Some("ERROR: archive contains no configuration file".into()),
            Some(old) if storage_only => {
                for (k, v) in old.iter().filter(|(k, _)| is_mp_key(k)) {
                    let mut m = MountPoint::parse(v);
                    match m.kind() {
                        MountType::Volume => match m.size {
                            None => {
                                error = Some(format!(
                                    "unable to detect disk size - please specify {k} (size)"
                                ));
                                break;
                            }
                            Some(size) => {
                                let gib = size as f64 / GIB;
                                m.volume = format!("{storage}:{gib}");
                                m.size = None;
                                mounts.push((k.clone(), m.print(k == "rootfs")));
                            }
                        },
                        other => {
                            let ty = if other == MountType::Bind {
                                "bind"
                            } else {
                                "device"
                            };
                            if k == "rootfs" {
                                error = Some(format!(
                                    "restoring rootfs to {ty} mount is only possible by specifying -rootfs manually!"
                                ));
                                break;
                            }
                            if !is_root {
                                error = Some(format!(
                                    "restoring '{k}' to {ty} mount is only possible for root"
                                ));
                                break;
                            }
                            delayed.push((k.clone(), v.clone()));
                        }
                    }
                }
                if error.is_none() && !mounts.iter().any(|(k, _)| k == "rootfs") {
                    error = Some(
                        "rootfs configuration could not be recovered, please check and specify manually!"
                            .into(),
                    );
                }
            }
            Some(_) => {}
        }
        let old = old_conf.unwrap_or_default();
        let unprivileged =
            unprivileged.unwrap_or_else(|| old.get("unprivileged").is_some_and(|v| v == "1"));
        if error.is_none() && !unprivileged && !self.access.has(&req.who, "/", "Sys.Modify") {
            error = Some("Permission check failed (/, Sys.Modify)".into());
        }
        // `sanitize_and_merge_config`: what the request does not set comes from the archive.
        let unique = p.flag("unique");
        for (k, v) in old.iter().filter(|(k, _)| recovered(k)) {
            if unique && is_net_key(k) {
                let mut net = NetConf::parse(v);
                let mac = self.random_mac();
                net.0.insert("hwaddr".into(), mac);
                config.insert(k.clone(), net.print());
                continue;
            }
            config.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let net_keys: Vec<String> = config.keys().filter(|k| is_net_key(k)).cloned().collect();
        for k in net_keys {
            let mut net = NetConf::parse(config.get(&k).map(String::as_str).unwrap_or(""));
            if net.get("hwaddr").is_none() {
                let mac = self.random_mac();
                net.0.insert("hwaddr".into(), mac);
            }
            net.0.insert("type".into(), "veth".into());
            config.insert(k, net.print());
        }
        if unprivileged {
            config.insert("unprivileged".into(), "1".into());
        }
        config
            .entry("arch".into())
            .or_insert_with(|| "amd64".into());
        config
            .entry("ostype".into())
            .or_insert_with(|| ostype_of(&archive).into());
        config
            .entry("hostname".into())
            .or_insert(format!("CT{vmid}"));
        config.entry("memory".into()).or_insert("512".into());
        config.entry("swap".into()).or_insert("512".into());
        config.extend(delayed);
        if old.get("template").is_some_and(|v| v == "1") {
            config.insert("template".into(), "1".into());
        }

        let mut volumes = Vec::new();
        for (k, v) in &mounts {
            let m = MountPoint::parse(v);
            match m.new_disk() {
                Some((sid, gib)) => {
                    if error.is_none()
                        && let Err(e) = self.check_rootdir_storage(req, &node, sid)
                    {
                        return Err(e);
                    }
                    volumes.push(NewVolume {
                        key: k.clone(),
                        storage: sid.to_string(),
                        size: ((gib * 1024.0) as u64) * 1024 * 1024,
                        mount: m.clone(),
                    });
                }
                None => {
                    config.insert(k.clone(), m.print(k == "rootfs"));
                }
            }
        }
        volumes.sort_by_key(|v| {
            v.key
                .strip_prefix("mp")
                .and_then(|n| n.parse::<u32>().ok())
                .map_or(0, |n| n + 1)
        });

        self.cts.insert(
            vmid,
            Ct::stopped(vmid, &node, BTreeMap::new(), Some("create")),
        );
        let mut plan = TaskPlan::new(
            "vzrestore",
            vmid.to_string(),
            &node,
            &req.task_user(),
            Work::Noop,
        );
        let mut t = 0.1;
        plan.line(
            t,
            format!("recovering backed-up configuration from '{archive}'"),
        );
        if error.is_none() {
            for v in &volumes {
                if let Err(e) = self.lay_out_ct_volume(&node, vmid, v, &mut plan, &mut t) {
                    error = Some(e);
                    break;
                }
            }
        }
        if error.is_none() {
            let bytes = self.archive_bytes(&node, &archive);
            t += 0.2;
            plan.line(t, format!("restoring '{archive}' now.."));
            let secs = (bytes as f64 / (150.0 * 1024.0 * 1024.0)).max(0.5);
            t += secs;
            plan.line(
                t,
                format!(
                    "Total bytes read: {bytes} ({}MiB, {}MiB/s)",
                    bytes >> 20,
                    ((bytes >> 20) as f64 / secs) as u64
                ),
            );
            plan.line(t, "merging backed-up and given configuration..");
            if config.get("template").is_some_and(|v| v == "1") {
                plan.line(t, "Convert restored container to template...");
            }
        }
        plan.duration = t + 0.3;
        plan.planned_error = error.map(|e| format!("unable to restore CT {vmid} - {e}"));
        plan.work = Work::Ct(CtWork::Create {
            vmid,
            config: config.into_iter().collect(),
            volumes,
            start_after: p.flag("start"),
            pool,
            // A backup's files are not unpacked (see the module's deviations).
            ostemplate: None,
            ssh_keys: p.str("ssh-public-keys"),
        });
        Ok(self.start_task(plan, req.now))
    }

    /// `check_volume_access` for the archive (content `backup`, `VM.Backup` on its owner);
    /// whether the file is there, and the config inside it, if it has one.
    fn archive_config(
        &self,
        req: &Request,
        node: &str,
        archive: &str,
    ) -> Result<(bool, Option<BTreeMap<String, String>>), PveError> {
        let (sid, volname) = parse_volid(archive)
            .ok_or_else(|| PveError::die(format!("unable to parse volume ID '{archive}'")))?;
        let s = self
            .node(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))?;
        self.check_volume_access(&req.who, s, volname, Some(Content::Backup))?;
        let exists = s.volumes.contains_key(volname);
        let config = s
            .archive_configs
            .get(volname)
            .filter(|_| exists)
            .map(|text| {
                // The current section only (`parse_pct_config`; snapshots are dropped).
                text.lines()
                    .take_while(|l| !l.starts_with('['))
                    .filter(|l| !l.starts_with('#'))
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .collect()
            });
        Ok((exists, config))
    }

    /// The archive's size, what the extraction reads.
    fn archive_bytes(&self, node: &str, archive: &str) -> u64 {
        parse_volid(archive)
            .and_then(|(sid, volname)| {
                self.node(node)?
                    .storages
                    .get(sid)?
                    .volumes
                    .get(volname)
                    .map(|v| v.used.max(v.size))
            })
            .unwrap_or(0)
    }
}
