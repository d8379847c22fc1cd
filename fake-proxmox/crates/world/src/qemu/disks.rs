//! Disks of VMs: checking drive options (`$check_storage_access`), planning allocations and
//! imports, laying them out as task work with progress, allocating them.

use std::collections::BTreeSet;

use super::op::VmOp;
use crate::exec::{CopyJob, CopyLog, Vol};
use crate::nodes::model::Node;
use crate::qemu::model::{DiskPlan, DriveFile, classify_file, print_drive, prop, split_props};
use crate::storage::model::{Content, Storage, StorageType, format_size};
use crate::storage::volid::{parse_volid, parse_volname};
use crate::tasks::model::TransferStyle;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::TaskPlan;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A drive option of a request, parsed.
struct Drive<'a> {
    key: &'a str,
    value: &'a str,
    props: Vec<(String, String)>,
    /// The drive's options without `file`.
    opts: Vec<(String, String)>,
    import_from: Option<String>,
}

/// Where an incoming drive value is going.
pub(crate) enum DiskOutcome {
    /// Goes into the config as given.
    Keep(String),
    Alloc(DiskPlan),
}

impl Site {
    pub(crate) fn storage_on(
        &self,
        node: &str,
        sid: &str,
    ) -> Result<&crate::storage::model::Storage, PveError> {
        self.nodes
            .get(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))
    }

    pub(crate) fn pick_volname(
        &self,
        node: &str,
        sid: &str,
        vmid: u32,
        fmt: &str,
        taken: &mut BTreeSet<String>,
    ) -> String {
        let Some(sto) = self.nodes.get(node).and_then(|n| n.storages.get(sid)) else {
            return format!("vm-{vmid}-disk-0");
        };
        let mut n = 0;
        loop {
            let name = sto.image_volname(vmid, &format!("vm-{vmid}-disk-{n}"), fmt);
            if !sto.volumes.contains_key(&name) && !taken.contains(&format!("{sid}:{name}")) {
                taken.insert(format!("{sid}:{name}"));
                return name;
            }
            n += 1;
        }
    }

    /// Check one drive option and decide what to allocate (`$check_storage_access` + parsing).
    pub(crate) fn plan_disk(
        &self,
        op: &VmOp,
        key: &str,
        value: &str,
        default_storage: Option<&str>,
        taken: &mut BTreeSet<String>,
    ) -> Result<DiskOutcome, PveError> {
        let props = split_props(value, "file");
        let file = prop(&props, "file").unwrap_or("").to_string();
        let import_from = prop(&props, "import-from").map(str::to_string);
        if import_from.is_some() && !self.version.has_import_from() {
            return Err(PveError::param(
                key,
                format!(
                    "invalid format - format error\n{key}.import-from: property is not defined in schema and the schema does not allow additional properties\n"
                ),
            ));
        }
        let opts: Vec<(String, String)> =
            props.iter().filter(|(k, _)| k != "file").cloned().collect();
        let drive = Drive {
            key,
            value,
            props,
            opts,
            import_from,
        };
        match classify_file(&file) {
            DriveFile::New { storage, gib } => {
                let sid = storage
                    .or_else(|| default_storage.map(str::to_string))
                    .ok_or_else(|| PveError::param(key, "missing storage for new disk"))?;
                self.plan_new_disk(op, drive, sid, gib, taken)
                    .map(DiskOutcome::Alloc)
            }
            DriveFile::CloudInit { storage } => self
                .plan_cloudinit_disk(op, drive, storage)
                .map(DiskOutcome::Alloc),
            DriveFile::Existing(f) => self.check_existing_disk(op, &drive, &f),
        }
    }

    /// `STORAGE:SIZE` (a new, empty volume) or `STORAGE:0,import-from=SOURCE` (a copy).
    fn plan_new_disk(
        &self,
        op: &VmOp,
        drive: Drive,
        sid: String,
        gib: f64,
        taken: &mut BTreeSet<String>,
    ) -> Result<DiskPlan, PveError> {
        let (node, vmid, key) = (op.node.as_str(), op.vmid, drive.key);
        let sto = self.storage_on(node, &sid)?;
        sto.check_images()?;
        self.require(
            &op.req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateSpace",
        )?;
        let requested_fmt = prop(&drive.props, "format");
        let (format, size, import_from, data_bytes) = match drive.import_from {
            Some(src) => {
                if gib != 0.0 {
                    return Err(PveError::param(
                        key,
                        "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
                    ));
                }
                let (ssid, svol) = self.check_import_source(op, key, &src)?;
                let source = self
                    .nodes
                    .get(node)
                    .and_then(|n| n.storages.get(&ssid))
                    .and_then(|s| s.volumes.get(&svol));
                let (size, data, src_fmt) = source
                    .map(|v| (v.size, v.used, v.format.clone()))
                    .unwrap_or((0, 0, "raw".into()));
                // The target format falls back to the storage default if unsupported.
                let (supported, default) = sto.kind.formats();
                let fmt = match requested_fmt {
                    Some(f) => f.to_string(),
                    None if supported.contains(&src_fmt.as_str()) => src_fmt,
                    None => default.unwrap_or("raw").to_string(),
                };
                (fmt, size, Some((ssid, svol)), data)
            }
            None => {
                let fmt = sto.resolve_format(requested_fmt);
                (fmt, (gib * GIB).round() as u64, None, 0)
            }
        };
        let volname = self.pick_volname(node, &sid, vmid, &format, taken);
        Ok(DiskPlan {
            key: key.to_string(),
            storage: sid,
            volname,
            format,
            size,
            import_from,
            data_bytes,
            opts: drive.opts,
            cloudinit: false,
        })
    }

    /// `STORAGE:cloudinit`: the cloud-init drive, a small cdrom volume.
    fn plan_cloudinit_disk(
        &self,
        op: &VmOp,
        drive: Drive,
        storage: String,
    ) -> Result<DiskPlan, PveError> {
        let vmid = op.vmid;
        let sto = self.storage_on(&op.node, &storage)?;
        sto.check_images()?;
        self.require(
            &op.req.who,
            &format!("/storage/{storage}"),
            "Datastore.AllocateSpace",
        )?;
        let fmt = if sto.kind.is_file_based() {
            "qcow2"
        } else {
            "raw"
        };
        let volname = sto.image_volname(vmid, &format!("vm-{vmid}-cloudinit"), fmt);
        let mut opts = drive.opts;
        opts.retain(|(k, _)| k != "media");
        opts.push(("media".into(), "cdrom".into()));
        Ok(DiskPlan {
            key: drive.key.to_string(),
            storage,
            volname,
            format: fmt.into(),
            size: 4 * 1024 * 1024,
            import_from: None,
            data_bytes: 0,
            opts,
            cloudinit: true,
        })
    }

    /// A drive on an existing volume, a path (root only) or none/cdrom: kept as written.
    fn check_existing_disk(
        &self,
        op: &VmOp,
        drive: &Drive,
        f: &str,
    ) -> Result<DiskOutcome, PveError> {
        let keep = Ok(DiskOutcome::Keep(drive.value.to_string()));
        if f == "none" || f == "cdrom" {
            return keep;
        }
        if f.starts_with('/') {
            if !(op.req.who.userid == "root@pam" && op.req.who.tokenid.is_none()) {
                return Err(PveError::die(
                    "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 643.",
                ));
            }
            return keep;
        }
        let Some((sid, volname)) = parse_volid(f) else {
            return Err(PveError::param(
                drive.key,
                format!("unable to parse volume ID '{f}'"),
            ));
        };
        let sto = self.storage_on(&op.node, sid)?;
        let vtype = parse_volname(sto.kind, volname).map(|v| v.0);
        if vtype == Some(Content::Iso)
            && self.version.iso_requires_cdrom()
            && prop(&drive.props, "media") != Some("cdrom")
        {
            return Err(PveError::param(
                drive.key,
                "explicit 'media=cdrom' is required for iso images",
            ));
        }
        keep
    }

    /// One planned disk: its volume, and the copy of its `import-from` source into it
    /// (whose log replaces the task's laid-out transfer, see `tasks::model`).
    fn allocate_volume(
        &mut self,
        node: &str,
        vmid: u32,
        d: &DiskPlan,
        now: f64,
        done: &mut Vec<(String, String)>,
    ) -> Result<(), String> {
        let storages = &self
            .nodes
            .get(node)
            .ok_or_else(|| format!("node '{node}' does not exist"))?
            .storages;
        let source = match &d.import_from {
            Some((s, v)) => {
                let src = storages.get(s).and_then(|st| st.volumes.get(v));
                let src = src.ok_or_else(|| format!("volume '{s}:{v}' does not exist"))?;
                Some((
                    s.as_str(),
                    v.as_str(),
                    src.format.clone(),
                    src.size,
                    src.used,
                ))
            }
            None => None,
        };
        if !storages.contains_key(&d.storage) {
            return Err(format!("storage '{}' does not exist", d.storage));
        }
        let volname = self.alloc_volume_data(
            node,
            &d.storage,
            vmid,
            d.volname.clone(),
            &d.format,
            d.size,
            now,
        )?;
        done.push((d.storage.clone(), volname.clone()));
        let Some((ssid, svol, sfmt, ssize, used)) = source else {
            return Ok(());
        };
        let job = CopyJob {
            from: Vol::new(node, ssid, svol),
            from_format: &sfmt,
            to: Vol::new(node, &d.storage, &volname),
            to_format: &d.format,
            size: ssize,
            used,
        };
        let copied = match self.disks_on(node).copy(&job) {
            Ok(c) => c,
            Err(f) => {
                if !f.log.is_empty() {
                    self.copy_logs.push(CopyLog {
                        lines: f.log,
                        failed: true,
                    });
                }
                return Err(f.error);
            }
        };
        if !copied.log.is_empty() {
            self.copy_logs.push(CopyLog {
                lines: copied.log,
                failed: false,
            });
        }
        self.nodes
            .get_mut(node)
            .and_then(|n| n.storages.get_mut(&d.storage))
            .ok_or_else(|| format!("storage '{}' does not exist", d.storage))?
            .write_data(&volname, copied.bytes)?;
        self.carry_volume_facts((node, ssid, svol), (node, &d.storage, &volname));
        Ok(())
    }

    /// Check an `import-from` source: volid syntax, storage, vtype (`images` or `import`).
    pub(crate) fn check_import_source(
        &self,
        op: &VmOp,
        key: &str,
        src: &str,
    ) -> Result<(String, String), PveError> {
        let node = op.node.as_str();
        if src.starts_with('/') {
            if !op.req.is_root_ticket() {
                return Err(PveError::die(
                    "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 643.",
                ));
            }
            return Err(PveError::param(
                key,
                format!(
                    "'import-from': path '{src}' does not exist on this simulated node (use a volume id)"
                ),
            ));
        }
        let (sid, volname) = parse_volid(src)
            .ok_or_else(|| PveError::param(key, format!("unable to parse volume ID '{src}'")))?;
        let sto = self.storage_on(node, sid)?;
        let Some((vtype, owner, _)) = parse_volname(sto.kind, volname) else {
            return Err(PveError::param(
                key,
                format!("unable to parse volume ID '{src}'"),
            ));
        };
        match vtype {
            Content::Images => {
                if let Some(owner) = owner {
                    self.require(&op.req.who, &format!("/vms/{owner}"), "VM.Clone")?;
                }
            }
            Content::Import if self.version.has_import_content() => {
                self.require(&op.req.who, &format!("/storage/{sid}"), "Datastore.Audit")?;
            }
            other => {
                return Err(PveError::param(
                    key,
                    format!(
                        "{src} has wrong type '{}' - needs to be 'images' or 'import'",
                        other.as_str()
                    ),
                ));
            }
        }
        Ok((sid.to_string(), volname.to_string()))
    }

    /// Lay out the disk work of a task: log lines, transfers, and the first error the
    /// current state predicts (e.g. qcow2 on lvm-thin, a missing source, a full storage).
    pub(crate) fn layout_disks(
        &self,
        node: &str,
        disks: &[DiskPlan],
        plan: &mut TaskPlan,
        t0: f64,
    ) -> (f64, Option<String>) {
        let mut t = t0;
        let Some(n) = self.nodes.get(node) else {
            return (t, Some(format!("node '{node}' does not exist")));
        };
        // Capacity already promised inside this task, per storage.
        let mut promised: std::collections::BTreeMap<&str, u64> = Default::default();
        for d in disks {
            let Some(sto) = n.storages.get(&d.storage) else {
                return (t, Some(format!("storage '{}' does not exist", d.storage)));
            };
            t += 0.2;
            let p = promised.entry(sto.name.as_str()).or_default();
            let avail = sto.avail().saturating_sub(*p);
            if let Err(e) = allocatable(sto, d, avail) {
                return (t, Some(e));
            }
            if let Some(source) = &d.import_from {
                match lay_out_import(n, sto, d, source, avail, plan, t - t0) {
                    Ok((secs, needed)) => {
                        t += secs;
                        *p += needed;
                    }
                    Err((secs, e)) => return (t + secs, Some(e)),
                }
            } else if !d.cloudinit {
                lay_out_new_volume(sto, d, plan, t - t0);
                if sto.kind.is_thick() {
                    *p += d.size;
                }
            }
            let shown =
                crate::qemu::model::allocated_drive(&sto.volid(&d.volname), &d.opts, d.size);
            plan.line(
                t - t0,
                format!("{}: successfully created disk '{shown}'", d.key),
            );
        }
        (t, None)
    }

    /// Free a volume given a config value or volid.
    pub fn free_volume(&mut self, node: &str, value: &str) {
        let props = split_props(value, "file");
        let Some(file) = prop(&props, "file") else {
            return;
        };
        if let Some((sid, volname)) = parse_volid(file) {
            self.remove_volume(node, sid, volname);
        }
    }

    /// Allocate (and import into) the planned disks and put them in the config (create,
    /// clone: a new VM, nothing to replace).
    pub fn allocate_disks(
        &mut self,
        node: &str,
        vmid: u32,
        disks: &[DiskPlan],
        now: f64,
    ) -> Result<Vec<String>, String> {
        let values = self.allocate_volumes(node, vmid, disks, now)?;
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.config.extend(values);
        }
        Ok(Vec::new())
    }

    /// Allocate (and import into) the planned disks; their config values, by key. On an
    /// error every volume allocated so far is freed again.
    pub fn allocate_volumes(
        &mut self,
        node: &str,
        vmid: u32,
        disks: &[DiskPlan],
        now: f64,
    ) -> Result<Vec<(String, String)>, String> {
        let mut done: Vec<(String, String)> = Vec::new();
        let mut result = Ok(());
        for d in disks {
            result = self.allocate_volume(node, vmid, d, now, &mut done);
            if result.is_err() {
                break;
            }
        }
        if let Err(e) = result {
            for (sid, vol) in done {
                self.remove_volume(node, &sid, &vol);
            }
            return Err(e);
        }
        Ok(disks
            .iter()
            .map(|d| {
                let volid = format!("{}:{}", d.storage, d.volname);
                let val = if d.cloudinit {
                    let mut o = d.opts.clone();
                    o.push(("size".into(), format_size(d.size)));
                    print_drive(&volid, &o)
                } else {
                    crate::qemu::model::allocated_drive(&volid, &d.opts, d.size)
                };
                (d.key.clone(), val)
            })
            .collect())
    }
}

/// The storage plugin's refusals before anything is written: the format, thick LVM's free
/// extents (`avail` already less what this task promised), a full storage.
fn allocatable(sto: &Storage, d: &DiskPlan, avail: u64) -> Result<(), String> {
    if sto.kind == StorageType::LvmThin && d.format != "raw" {
        return Err(format!(
            "unsupported format '{}' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102.",
            d.format
        ));
    }
    let (supported, _) = sto.kind.formats();
    if !supported.contains(&d.format.as_str()) {
        return Err(format!("unsupported format '{}'", d.format));
    }
    if sto.kind.is_thick() && d.size > avail {
        let short = d.volname.rsplit('/').next().unwrap_or(&d.volname);
        return Err(format!(
            "lvcreate 'pve/{short}' error:   Volume group \"pve\" has insufficient free space ({} extents): {} required.",
            avail / (4 << 20),
            d.size.div_ceil(4 << 20)
        ));
    }
    if sto.full {
        return Err(sto.no_space_text(&d.volname));
    }
    Ok(())
}

/// `import-from`'s log and timing, starting `at` seconds into the task: `Ok((secs, bytes
/// promised))`, or how far qemu-img got before it failed and why.
fn lay_out_import(
    n: &Node,
    sto: &Storage,
    d: &DiskPlan,
    (ssid, svol): &(String, String),
    avail: u64,
    plan: &mut TaskPlan,
    at: f64,
) -> Result<(f64, u64), (f64, String)> {
    let source = n.storages.get(ssid);
    plan.line(
        at,
        format!("create full clone of drive {} ({ssid}:{svol})", d.key),
    );
    if !source.is_some_and(|s| s.volumes.contains_key(svol)) {
        return Err((0.0, format!("volume '{ssid}:{svol}' does not exist")));
    }
    if sto.kind == StorageType::LvmThin || sto.kind == StorageType::Lvm {
        plan.line(at, format!("  Logical volume \"{}\" created.", d.volname));
    }
    let src_speed = source.map_or(sto.speed_mib_s, |s| s.speed_mib_s);
    let speed = src_speed.min(sto.speed_mib_s) * 1024.0 * 1024.0;
    let secs = d.size as f64 / speed;
    let needed = if sto.kind.is_thick() { 0 } else { d.data_bytes };
    plan.transfer(at, secs, d.size, TransferStyle::QemuImg);
    if needed > avail {
        // The transfer runs until the storage fills up, then qemu-img fails.
        let frac = avail as f64 / needed as f64;
        let volid = sto.volid(&d.volname);
        return Err((
            secs * frac,
            format!(
                "qemu-img: error while writing at byte {avail}: No space left on device\ncopy failed: command '/usr/bin/qemu-img convert -p -n -O {} {} {volid}' failed: exit code 1",
                d.format, svol
            ),
        ));
    }
    Ok((secs, needed))
}

/// A new, empty volume: what the storage plugin logs when it makes one.
fn lay_out_new_volume(sto: &Storage, d: &DiskPlan, plan: &mut TaskPlan, at: f64) {
    match sto.kind {
        StorageType::LvmThin | StorageType::Lvm => {
            plan.line(at, format!("  Logical volume \"{}\" created.", d.volname));
        }
        _ if sto.kind.is_file_based() => plan.line(
            at,
            format!(
                "Formatting '{}/images/{}', fmt={} size={} preallocation=off",
                sto.path.as_deref().unwrap_or(""),
                d.volname,
                d.format,
                d.size
            ),
        ),
        _ => {}
    }
}
