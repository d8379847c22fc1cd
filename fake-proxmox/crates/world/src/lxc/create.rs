//! `POST /nodes/{node}/lxc`: a container from an OS template, in pve-container's order
//! (`src/PVE/API2/LXC.pm` `create_vm`): the synchronous checks answer at once, then a
//! `vzcreate` task allocates the mount points' volumes, extracts the template and writes the
//! config (`PVE::LXC::create_disks`, `PVE::LXC::Create::restore_archive`).

use std::collections::BTreeMap;

use super::model::{Ct, MountPoint, MountType, NetConf, is_mp_key, is_net_key, is_unused_key};
use super::perms::ConfigChange;
use super::work::{CtWork, NewVolume};
use crate::request::Request;
use crate::storage::model::{Content, StorageType};
use crate::storage::volid::parse_volid;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// Parameters of create that are not config options.
pub(super) const CREATE_CONTROL: &[&str] = &[
    "node",
    "vmid",
    "ostemplate",
    "password",
    "storage",
    "force",
    "restore",
    "unique",
    "pool",
    "ignore-unpack-errors",
    "ssh-public-keys",
    "bwlimit",
    "start",
    "ha-managed",
    "unprivileged",
];

const GIB: u64 = 1 << 30;

/// The OS a template's file name names (`PVE::LXC::Setup` detects it from the rootfs; the
/// appliance templates are named after it).
pub(super) fn ostype_of(template: &str) -> &'static str {
    let file = template.rsplit('/').next().unwrap_or(template);
    for os in [
        "debian",
        "ubuntu",
        "alpine",
        "centos",
        "fedora",
        "archlinux",
        "opensuse",
        "gentoo",
        "devuan",
        "nixos",
        "openeuler",
    ] {
        if file.starts_with(os) {
            return os;
        }
    }
    if file.starts_with("rockylinux") || file.starts_with("almalinux") {
        return "centos";
    }
    "unmanaged"
}

/// The config options of a create or restore request, a bare mount point size turned into
/// `STORAGE:SIZE` on the default storage; `unusedN` dropped (PVE warns: no unused volume on
/// create or restore).
pub(super) fn create_options(req: &Request, storage: &str) -> Vec<(String, String)> {
    let p = &req.p;
    p.keys()
        .filter(|k| !CREATE_CONTROL.contains(&k.as_str()) && !is_unused_key(k))
        .filter_map(|k| {
            let v = p.str(k)?;
            let v = if is_mp_key(k) && v.parse::<f64>().is_ok() {
                format!("{storage}:{v}")
            } else {
                v
            };
            Some((k.clone(), v))
        })
        .collect()
}

impl Site {
    /// What create and restore check alike, in PVE's order: the VMID unused
    /// (`check_vmid_unused`, before anything is locked), the SSH keys, the pool, and
    /// `VM.Allocate` on the guest or its pool. The pool asked for.
    pub(super) fn ct_create_access(
        &self,
        req: &Request,
        vmid: u32,
    ) -> Result<Option<String>, PveError> {
        let p = &req.p;
        // `check_vmid_unused`, before anything is locked.
        if let Some(existing) = self.guest(vmid) {
            let core = existing.core();
            return Err(PveError::die(format!(
                "{} {vmid} already exists on node '{}'",
                core.kind.label(),
                core.node
            )));
        }
        if let Some(keys) = p.str("ssh-public-keys") {
            check_ssh_keys(&keys)?;
        }
        let pool = p.str("pool");
        if let Some(pool) = &pool {
            self.check_pool_exists(pool)?;
        }
        let on_vm = self
            .access
            .has(&req.who, &format!("/vms/{vmid}"), "VM.Allocate");
        let on_pool = pool.as_ref().is_some_and(|pool| {
            self.access
                .has(&req.who, &format!("/pool/{pool}"), "VM.Allocate")
        });
        if !on_vm && !on_pool {
            return Err(PveError::perm(None));
        }
        Ok(pool)
    }

    /// `POST /nodes/{node}/lxc`
    pub fn create_ct(&mut self, req: &Request) -> Result<String, PveError> {
        let p = &req.p;
        let node = req.node()?;
        let vmid = req.vmid()?;
        if p.flag("restore") {
            return self.restore_ct(req);
        }
        let unprivileged = p.bool("unprivileged").unwrap_or(true);
        if !unprivileged {
            self.require(&req.who, "/", "Sys.Modify")?;
        }
        if p.flag("ha-managed") {
            self.require(&req.who, "/", "Sys.Console")?;
        }
        let pool = self.ct_create_access(req, vmid)?;
        let ostemplate = p.req_str("ostemplate")?;
        let storage = p.str("storage").unwrap_or_else(|| "local".into());

        let mut options = create_options(req, &storage);
        self.check_ct_modify_config_perm(
            req,
            &ConfigChange {
                vmid,
                pool: pool.as_deref(),
                old: None,
                new: &options,
                delete: &[],
                unprivileged,
            },
        )?;
        let template = self.check_template(req, &node, &ostemplate)?;

        let has_mps = options.iter().any(|(k, _)| is_mp_key(k));
        if has_mps && !options.iter().any(|(k, _)| k == "rootfs") {
            return Err(PveError::die(
                "mount points configured, but 'rootfs' not set - aborting",
            ));
        }
        // Every volume's storage: enabled on the node and holding container directories.
        let is_root = req.who.userid == "root@pam" && req.who.tokenid.is_none();
        for (_, v) in options.iter().filter(|(k, _)| is_mp_key(k)) {
            let m = MountPoint::parse(v);
            if m.kind() != MountType::Volume {
                if !is_root {
                    return Err(PveError::die(
                        "Only root can pass arbitrary filesystem paths.",
                    ));
                }
                continue;
            }
            let sid = m
                .new_disk()
                .map(|(s, _)| s.to_string())
                .or_else(|| parse_volid(&m.volume).map(|(s, _)| s.to_string()))
                .unwrap_or_default();
            self.check_rootdir_storage(req, &node, &sid)?;
        }
        if !has_mps {
            self.check_rootdir_storage(req, &node, &storage)?;
            options.push(("rootfs".into(), format!("{storage}:4")));
        }

        // The config the task writes, and the volumes it allocates.
        let mut config: BTreeMap<String, String> = BTreeMap::new();
        let mut volumes = Vec::new();
        for (k, v) in options {
            if is_net_key(&k) {
                let mut net = NetConf::parse(&v);
                if net.get("hwaddr").is_none() {
                    let mac = self.random_mac();
                    net.0.insert("hwaddr".into(), mac);
                }
                net.0.insert("type".into(), "veth".into());
                if let Some(b) = net.bridge()
                    && self.node(&node).is_some_and(|n| n.bridge(b).is_none())
                {
                    // `PVE::LXC::update_net` at start; create itself does not look.
                    tracing::debug!("CT {vmid}: bridge '{b}' does not exist on {node}");
                }
                config.insert(k, net.print());
            } else if is_mp_key(&k) {
                let m = MountPoint::parse(&v);
                match m.new_disk() {
                    Some((sid, gib)) => {
                        // `int($size_gb * 1024) * 1024` KiB.
                        let size = ((gib * 1024.0) as u64) * 1024 * 1024;
                        volumes.push(NewVolume {
                            key: k.clone(),
                            storage: sid.to_string(),
                            size,
                            mount: m.clone(),
                        });
                    }
                    None => {
                        config.insert(k.clone(), m.print(k == "rootfs"));
                    }
                }
            } else {
                config.insert(k, v);
            }
        }
        // `foreach_volume`: the rootfs first, then the mount points by number.
        volumes.sort_by_key(|v| {
            v.key
                .strip_prefix("mp")
                .and_then(|n| n.parse::<u32>().ok())
                .map_or(0, |n| n + 1)
        });
        if unprivileged {
            config.insert("unprivileged".into(), "1".into());
        }
        config.insert("arch".into(), "amd64".into());
        config.insert("ostype".into(), ostype_of(&ostemplate).into());
        config
            .entry("hostname".into())
            .or_insert(format!("CT{vmid}"));
        config.entry("memory".into()).or_insert("512".into());
        config.entry("swap".into()).or_insert("512".into());

        // `create_and_lock_config`.
        self.cts.insert(
            vmid,
            Ct::stopped(vmid, &node, BTreeMap::new(), Some("create")),
        );

        let start_after = p.flag("start");
        let mut plan = TaskPlan::new(
            "vzcreate",
            vmid.to_string(),
            &node,
            &req.task_user(),
            Work::Noop,
        );
        let mut t = 0.2;
        let mut error = None;
        for v in &volumes {
            match self.lay_out_ct_volume(&node, vmid, v, &mut plan, &mut t) {
                Ok(()) => {}
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        if error.is_none() {
            match &template {
                Some((path, bytes)) => {
                    plan.line(t, format!("extracting archive '{path}'"));
                    let secs = (*bytes as f64 / (200.0 * 1024.0 * 1024.0)).max(0.5);
                    t += secs;
                    let mib = bytes / (1024 * 1024);
                    plan.line(
                        t,
                        format!(
                            "Total bytes read: {bytes} ({mib}MiB, {}MiB/s)",
                            (mib as f64 / secs) as u64
                        ),
                    );
                    plan.line(t, "Detected container architecture: amd64");
                    for key in ["rsa", "ecdsa", "ed25519"] {
                        t += 0.2;
                        plan.line(
                            t,
                            format!(
                                "Creating SSH host key 'ssh_host_{key}_key' - this may take some time ..."
                            ),
                        );
                    }
                }
                None => error = Some(format!("can't find file '{ostemplate}'")),
            }
        }
        if start_after && error.is_none() {
            t += 0.2;
        }
        plan.duration = t + 0.3;
        plan.planned_error = error.map(|e| format!("unable to create CT {vmid} - {e}"));
        plan.work = Work::Ct(CtWork::Create {
            vmid,
            config: config.into_iter().collect(),
            volumes,
            start_after,
            pool,
            ostemplate: Some(ostemplate),
            ssh_keys: p.str("ssh-public-keys"),
        });
        Ok(self.start_task(plan, req.now))
    }

    /// `check_volume_access` for the template (content `vztmpl`); the file's path and size
    /// when it exists (a missing one fails the task, as `abs_filesystem_path` does).
    fn check_template(
        &self,
        req: &Request,
        node: &str,
        ostemplate: &str,
    ) -> Result<Option<(String, u64)>, PveError> {
        let Some((sid, volname)) = parse_volid(ostemplate) else {
            // An absolute path: root may name one; the simulated node has no files.
            if req.who.userid == "root@pam" && ostemplate.starts_with('/') {
                return Ok(None);
            }
            return Err(PveError::die(format!(
                "unable to parse volume ID '{ostemplate}'"
            )));
        };
        let n = self
            .node(node)
            .ok_or_else(|| PveError::die(format!("no such node '{node}'")))?;
        let s = n
            .storages
            .get(sid)
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))?;
        self.check_volume_access(&req.who, s, volname, Some(Content::Vztmpl))?;
        Ok(s.volumes
            .get(volname)
            .map(|v| (s.file_path(volname), v.used.max(v.size))))
    }

    /// `$check_and_activate_storage`: enabled, holds `rootdir`, and the caller may allocate.
    pub(super) fn check_rootdir_storage(
        &self,
        req: &Request,
        node: &str,
        sid: &str,
    ) -> Result<(), PveError> {
        let s = self
            .node(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))?;
        if !s.enabled {
            return Err(PveError::die(format!("storage '{sid}' is disabled")));
        }
        if !s.supports(Content::Rootdir) {
            return Err(PveError::param(
                "storage",
                format!("storage '{sid}' does not support container directories"),
            ));
        }
        self.require(
            &req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateSpace",
        )
    }

    /// The log lines and checks of one new volume (`alloc_disk`: a raw image formatted
    /// ext4, or a subvolume where the size is 0 on a directory storage or always on ZFS).
    pub(super) fn lay_out_ct_volume(
        &self,
        node: &str,
        vmid: u32,
        v: &NewVolume,
        plan: &mut TaskPlan,
        t: &mut f64,
    ) -> Result<(), String> {
        let s = self
            .node(node)
            .and_then(|n| n.storages.get(&v.storage))
            .ok_or_else(|| format!("storage '{}' does not exist", v.storage))?;
        if s.kind.is_thick() && v.size > s.avail() {
            let short = s.next_disk_name(vmid, "raw");
            return Err(s.no_space_text(&short));
        }
        *t += 0.2;
        match s.kind {
            StorageType::LvmThin | StorageType::Lvm => {
                plan.line(
                    *t,
                    format!(
                        "  Logical volume \"{}\" created.",
                        s.next_disk_name(vmid, "raw")
                    ),
                );
            }
            _ => {}
        }
        if v.size > 0 {
            let blocks = v.size / 4096;
            plan.line(
                *t,
                format!(
                    "Creating filesystem with {blocks} 4k blocks and {} inodes",
                    (v.size / GIB).max(1) * 65536
                ),
            );
            *t += 0.3;
        }
        Ok(())
    }
}

/// `PVE::Tools::validate_ssh_public_keys`: every non-empty, non-comment line is a key.
pub(super) fn check_ssh_keys(keys: &str) -> Result<(), PveError> {
    for line in keys.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let ty = parts.next().unwrap_or_default();
        let blob = parts.next().unwrap_or_default();
        let known = ty.starts_with("ssh-") || ty.starts_with("ecdsa-") || ty.starts_with("sk-");
        let decodes = !blob.is_empty()
            && blob
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=');
        if !known || !decodes {
            return Err(PveError::die("SSH public key validation error"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_name_their_os() {
        assert_eq!(
            ostype_of("local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"),
            "debian"
        );
        assert_eq!(
            ostype_of("local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"),
            "ubuntu"
        );
        assert_eq!(ostype_of("local:vztmpl/custom.tar.gz"), "unmanaged");
    }

    #[test]
    fn ssh_keys_are_checked_line_by_line() {
        assert!(check_ssh_keys("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA== me@host\n").is_ok());
        assert!(check_ssh_keys("not a key").is_err());
    }
}
