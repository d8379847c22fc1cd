//! VM lifecycle verbs that change config and disks: create, config update, clone, resize,
//! destroy. Synchronous checks answer with PVE's HTTP errors; the work itself is a task.

use std::collections::BTreeSet;

use crate::access::model::Identity;
use crate::qemu::model::{
    DiskPlan, DriveFile, Nic, Power, Vm, classify_file, is_disk_key, is_net_key, is_unused_key,
    print_drive, prop, split_props,
};
use crate::storage::model::{Content, StorageType, format_size};
use crate::storage::volid::{parse_volid, parse_volname};
use crate::tasks::model::{Chunk, TaskPlan, TransferStyle, Work};
use crate::wire::{Params, PveError};
use crate::world::Site;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Parameters of create that are not config options.
const CREATE_CONTROL: &[&str] = &[
    "node",
    "vmid",
    "start",
    "storage",
    "pool",
    "archive",
    "force",
    "unique",
    "live-restore",
    "import-working-storage",
    "bwlimit",
    "ha-managed",
];
const UPDATE_CONTROL: &[&str] = &[
    "node",
    "vmid",
    "delete",
    "revert",
    "force",
    "digest",
    "skiplock",
    "background_delay",
];

/// Where an incoming drive value is going.
enum DiskOutcome {
    /// Goes into the config as given.
    Keep(String),
    Alloc(DiskPlan),
}

/// Who is asking, as far as the rules care.
pub struct Caller<'a> {
    pub who: &'a Identity,
    pub via_ticket: bool,
}

impl Site {
    pub fn require(&self, who: &Identity, path: &str, privilege: &str) -> Result<(), PveError> {
        if self.access.has(who, path, privilege) {
            Ok(())
        } else {
            Err(PveError::perm(Some(format!("{path}, {privilege}"))))
        }
    }

    pub fn vm_on(&self, node: &str, vmid: u32) -> Result<&Vm, PveError> {
        self.vms
            .get(&vmid)
            .filter(|v| v.node == node)
            .ok_or_else(|| PveError::no_vm_config(node, vmid))
    }

    fn storage_on(
        &self,
        node: &str,
        sid: &str,
    ) -> Result<&crate::storage::model::Storage, PveError> {
        self.nodes
            .get(node)
            .and_then(|n| n.storages.get(sid))
            .ok_or_else(|| PveError::die(format!("storage '{sid}' does not exist")))
    }

    fn pick_volname(
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
    #[allow(clippy::too_many_arguments)]
    fn plan_disk(
        &self,
        node: &str,
        vmid: u32,
        key: &str,
        value: &str,
        default_storage: Option<&str>,
        caller: &Caller,
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
        match classify_file(&file) {
            DriveFile::New { storage, gib } => {
                let sid = storage
                    .or_else(|| default_storage.map(str::to_string))
                    .ok_or_else(|| PveError::param(key, "missing storage for new disk"))?;
                let sto = self.storage_on(node, &sid)?;
                sto.check_images()?;
                self.require(
                    caller.who,
                    &format!("/storage/{sid}"),
                    "Datastore.AllocateSpace",
                )?;
                let requested_fmt = prop(&props, "format");
                if let Some(src) = import_from {
                    if gib != 0.0 {
                        return Err(PveError::param(
                            key,
                            "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
                        ));
                    }
                    let (ssid, svol) = self.check_import_source(node, key, &src, caller)?;
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
                    let volname = self.pick_volname(node, &sid, vmid, &fmt, taken);
                    Ok(DiskOutcome::Alloc(DiskPlan {
                        key: key.to_string(),
                        storage: sid,
                        volname,
                        format: fmt,
                        size,
                        import_from: Some((ssid, svol)),
                        data_bytes: data,
                        opts,
                        cloudinit: false,
                    }))
                } else {
                    let fmt = sto.resolve_format(requested_fmt);
                    let size = (gib * GIB).round() as u64;
                    let volname = self.pick_volname(node, &sid, vmid, &fmt, taken);
                    Ok(DiskOutcome::Alloc(DiskPlan {
                        key: key.to_string(),
                        storage: sid,
                        volname,
                        format: fmt,
                        size,
                        import_from: None,
                        data_bytes: 0,
                        opts,
                        cloudinit: false,
                    }))
                }
            }
            DriveFile::CloudInit { storage } => {
                let sto = self.storage_on(node, &storage)?;
                sto.check_images()?;
                self.require(
                    caller.who,
                    &format!("/storage/{storage}"),
                    "Datastore.AllocateSpace",
                )?;
                let fmt = if sto.kind.is_file_based() {
                    "qcow2"
                } else {
                    "raw"
                };
                let volname = sto.image_volname(vmid, &format!("vm-{vmid}-cloudinit"), fmt);
                let mut opts = opts;
                opts.retain(|(k, _)| k != "media");
                opts.push(("media".into(), "cdrom".into()));
                Ok(DiskOutcome::Alloc(DiskPlan {
                    key: key.to_string(),
                    storage,
                    volname,
                    format: fmt.into(),
                    size: 4 * 1024 * 1024,
                    import_from: None,
                    data_bytes: 0,
                    opts,
                    cloudinit: true,
                }))
            }
            DriveFile::Existing(f) => {
                if f == "none" || f == "cdrom" {
                    return Ok(DiskOutcome::Keep(value.to_string()));
                }
                if f.starts_with('/') {
                    if !(caller.who.userid == "root@pam" && caller.who.tokenid.is_none()) {
                        return Err(PveError::die(
                            "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 643.",
                        ));
                    }
                    return Ok(DiskOutcome::Keep(value.to_string()));
                }
                let Some((sid, volname)) = parse_volid(&f) else {
                    return Err(PveError::param(
                        key,
                        format!("unable to parse volume ID '{f}'"),
                    ));
                };
                let sto = self.storage_on(node, sid)?;
                let vtype = parse_volname(sto.kind, volname).map(|v| v.0);
                if vtype == Some(Content::Iso)
                    && self.version.iso_requires_cdrom()
                    && prop(&props, "media") != Some("cdrom")
                {
                    return Err(PveError::param(
                        key,
                        "explicit 'media=cdrom' is required for iso images",
                    ));
                }
                Ok(DiskOutcome::Keep(value.to_string()))
            }
        }
    }

    /// Check an `import-from` source: volid syntax, storage, vtype (`images` or `import`).
    fn check_import_source(
        &self,
        node: &str,
        key: &str,
        src: &str,
        caller: &Caller,
    ) -> Result<(String, String), PveError> {
        if src.starts_with('/') {
            if !(caller.who.userid == "root@pam"
                && caller.who.tokenid.is_none()
                && caller.via_ticket)
            {
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
                    self.require(caller.who, &format!("/vms/{owner}"), "VM.Clone")?;
                }
            }
            Content::Import if self.version.has_import_content() => {
                self.require(caller.who, &format!("/storage/{sid}"), "Datastore.Audit")?;
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
    fn layout_disks(
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
            if sto.kind == StorageType::LvmThin && d.format != "raw" {
                return (
                    t,
                    Some(format!(
                        "unsupported format '{}' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102.",
                        d.format
                    )),
                );
            }
            let (supported, _) = sto.kind.formats();
            if !supported.contains(&d.format.as_str()) {
                return (t, Some(format!("unsupported format '{}'", d.format)));
            }
            let p = promised.entry(sto.name.as_str()).or_default();
            let avail = sto.avail().saturating_sub(*p);
            if sto.kind.is_thick() && d.size > avail {
                let short = d.volname.rsplit('/').next().unwrap_or(&d.volname);
                return (
                    t,
                    Some(format!(
                        "lvcreate 'pve/{short}' error:   Volume group \"pve\" has insufficient free space ({} extents): {} required.",
                        avail / (4 << 20),
                        d.size.div_ceil(4 << 20)
                    )),
                );
            }
            if sto.full {
                return (t, Some(sto.no_space_text(&d.volname)));
            }
            let volid = sto.volid(&d.volname);
            if let Some((ssid, svol)) = &d.import_from {
                let src_ok = n
                    .storages
                    .get(ssid)
                    .is_some_and(|s| s.volumes.contains_key(svol));
                plan.line(
                    t - t0,
                    format!("create full clone of drive {} ({ssid}:{svol})", d.key),
                );
                if !src_ok {
                    return (t, Some(format!("volume '{ssid}:{svol}' does not exist")));
                }
                if sto.kind == StorageType::LvmThin || sto.kind == StorageType::Lvm {
                    plan.line(
                        t - t0,
                        format!("  Logical volume \"{}\" created.", d.volname),
                    );
                }
                let src_speed = n
                    .storages
                    .get(ssid)
                    .map_or(sto.speed_mib_s, |s| s.speed_mib_s);
                let speed = src_speed.min(sto.speed_mib_s) * 1024.0 * 1024.0;
                let secs = d.size as f64 / speed;
                let needed = if sto.kind.is_thick() { 0 } else { d.data_bytes };
                let start = t;
                if needed > avail {
                    // The transfer runs until the storage fills up, then qemu-img fails.
                    let frac = if needed == 0 {
                        0.0
                    } else {
                        avail as f64 / needed as f64
                    };
                    let fail_at = secs * frac;
                    plan.timeline.push((
                        start - t0,
                        Chunk::Transfer {
                            total: d.size,
                            until: start - t0 + secs,
                            style: TransferStyle::QemuImg,
                        },
                    ));
                    t += fail_at;
                    return (
                        t,
                        Some(format!(
                            "qemu-img: error while writing at byte {avail}: No space left on device\ncopy failed: command '/usr/bin/qemu-img convert -p -n -O {} {} {volid}' failed: exit code 1",
                            d.format, svol
                        )),
                    );
                }
                plan.timeline.push((
                    start - t0,
                    Chunk::Transfer {
                        total: d.size,
                        until: start - t0 + secs,
                        style: TransferStyle::QemuImg,
                    },
                ));
                t += secs;
                *p += needed;
            } else if !d.cloudinit {
                match sto.kind {
                    StorageType::LvmThin | StorageType::Lvm => {
                        plan.line(
                            t - t0,
                            format!("  Logical volume \"{}\" created.", d.volname),
                        );
                    }
                    _ if sto.kind.is_file_based() => plan.line(
                        t - t0,
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
                if sto.kind.is_thick() {
                    *p += d.size;
                }
            }
            let shown = crate::qemu::model::allocated_drive(&volid, &d.opts, d.size);
            plan.line(
                t - t0,
                format!("{}: successfully created disk '{shown}'", d.key),
            );
        }
        (t, None)
    }

    /// `POST /nodes/{node}/qemu`
    pub fn create_vm(
        &mut self,
        node: &str,
        caller: &Caller,
        p: &Params,
        now: f64,
    ) -> Result<String, PveError> {
        let vmid = p.vmid()?;
        if p.has("archive") {
            return Err(PveError::die(
                "fake-proxmox: restore from a backup archive is not simulated",
            ));
        }
        if let Some(pool) = p.str("pool") {
            self.require(caller.who, &format!("/pool/{pool}"), "VM.Allocate")?;
        } else if !self
            .access
            .has(caller.who, &format!("/vms/{vmid}"), "VM.Allocate")
        {
            return Err(PveError::perm(None));
        }
        let default_storage = p.str("storage");
        let mut config: Vec<(String, String)> = Vec::new();
        let mut disks = Vec::new();
        let mut taken = BTreeSet::new();
        let mut cloudinit_drives = 0;
        for (k, _) in p.0.iter() {
            if CREATE_CONTROL.contains(&k.as_str()) {
                continue;
            }
            let Some(v) = p.str(k) else { continue };
            if is_disk_key(k) {
                match self.plan_disk(
                    node,
                    vmid,
                    k,
                    &v,
                    default_storage.as_deref(),
                    caller,
                    &mut taken,
                )? {
                    DiskOutcome::Keep(v) => config.push((k.clone(), v)),
                    DiskOutcome::Alloc(d) => {
                        if d.cloudinit {
                            cloudinit_drives += 1;
                            if cloudinit_drives > 1 {
                                return Err(PveError::param(
                                    k,
                                    "only one cloud-init drive is allowed",
                                ));
                            }
                        }
                        disks.push(d)
                    }
                }
            } else if is_net_key(k) {
                let mut nic = Nic::parse(&v);
                if let Some(bridge) = nic.bridge()
                    && self.version != crate::version::PveVersion::V7_1
                {
                    self.require(
                        caller.who,
                        &format!("/sdn/zones/localnetwork/{bridge}"),
                        "SDN.Use",
                    )?;
                }
                if nic.mac.is_none() {
                    nic.mac = Some(self.random_mac());
                }
                config.push((k.clone(), nic.print()));
            } else {
                config.push((k.clone(), v));
            }
        }
        if let Some(balloon) = p.int("balloon") {
            let mem = p.str("memory").map(|m| {
                let pp = split_props(&m, "current");
                prop(&pp, "current")
                    .and_then(|x| x.parse::<i64>().ok())
                    .unwrap_or(512)
            });
            if balloon > mem.unwrap_or(512) {
                return Err(PveError::die(
                    "balloon value too large (must be smaller than assigned memory)",
                ));
            }
        }
        // create_and_lock_config: the vmid check and the `lock: create` write are atomic.
        if let Some(existing) = self.vms.get(&vmid) {
            return Err(PveError::die(format!(
                "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
                existing.node
            )));
        }
        self.vms.insert(
            vmid,
            Vm {
                vmid,
                node: node.to_string(),
                config: Default::default(),
                lock: Some("create".into()),
                power: Power::Stopped,
                started_at: 0.0,
                pid: None,
                agent_ready_at: None,
                leases: Default::default(),
            },
        );
        let start_after = p.flag("start");
        let mut plan = TaskPlan::new(
            "qmcreate",
            vmid.to_string(),
            node,
            &caller.who.task_user(),
            Work::Noop,
        );
        let (t, err) = self.layout_disks(node, &disks, &mut plan, 0.3);
        if start_after && err.is_none() {
            plan.line(t, "Execute autostart");
        }
        plan.duration = t + 0.2;
        plan.planned_error = err.map(|e| format!("unable to create VM {vmid} - {e}"));
        plan.work = Work::CreateVm {
            vmid,
            config,
            disks,
            start_after,
        };
        Ok(self.start_task(plan, now))
    }

    /// `POST` (async, `async_task`) and `PUT` (sync) `.../config`.
    pub fn update_vm_config(
        &mut self,
        node: &str,
        vmid: u32,
        caller: &Caller,
        p: &Params,
        now: f64,
        async_task: bool,
    ) -> Result<Option<String>, PveError> {
        let vm = self.vm_on(node, vmid)?;
        if let Some(l) = &vm.lock
            && !p.flag("skiplock")
        {
            return Err(PveError::die(format!("VM is locked ({l})")));
        }
        if let Some(d) = p.str("digest")
            && d != vm.digest()
        {
            return Err(PveError::die(
                "checksum mismatch (file change by other user?)",
            ));
        }
        self.require(caller.who, &format!("/vms/{vmid}"), "VM.Config.Options")?;
        let deletes: Vec<String> = p
            .str("delete")
            .map(|d| {
                d.split([',', ';', ' ', '\0'])
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let sets: Vec<(String, String)> =
            p.0.keys()
                .filter(|k| !UPDATE_CONTROL.contains(&k.as_str()))
                .filter_map(|k| p.str(k).map(|v| (k.clone(), v)))
                .collect();
        if sets.is_empty() && deletes.is_empty() && p.str("revert").is_none() {
            return Err(PveError::die("no options specified"));
        }
        if let Some(k) = deletes.iter().find(|d| sets.iter().any(|(k, _)| k == *d)) {
            return Err(PveError::param(
                k,
                "conflicting set and delete for the same option",
            ));
        }
        let mut taken = BTreeSet::new();
        let mut disks = Vec::new();
        let mut new_config = vm.config.clone();
        for (k, v) in &sets {
            if is_disk_key(k) {
                match self.plan_disk(node, vmid, k, v, None, caller, &mut taken)? {
                    DiskOutcome::Keep(v) => {
                        self.detach_to_unused(&mut new_config, k);
                        new_config.insert(k.clone(), v);
                    }
                    DiskOutcome::Alloc(d) => disks.push(d),
                }
            } else if is_net_key(k) {
                let mut nic = Nic::parse(v);
                if nic.mac.is_none() {
                    nic.mac = new_config
                        .get(k)
                        .and_then(|old| Nic::parse(old).mac)
                        .or_else(|| Some(self.random_mac()));
                }
                new_config.insert(k.clone(), nic.print());
            } else {
                new_config.insert(k.clone(), v.clone());
            }
        }
        for d in &deletes {
            if is_disk_key(d) {
                self.detach_to_unused(&mut new_config, d);
            } else if is_unused_key(d) {
                if let Some(v) = new_config.remove(d) {
                    self.free_volume(node, &v);
                }
            } else {
                new_config.remove(d);
            }
        }
        let mem = {
            let probe = Vm {
                config: new_config.clone(),
                ..self.vm_on(node, vmid)?.clone()
            };
            probe.memory_mib()
        };
        if let Some(b) = new_config
            .get("balloon")
            .and_then(|b| b.parse::<u64>().ok())
            && b > mem
        {
            return Err(PveError::die(
                "balloon value too large (must be smaller than assigned memory)",
            ));
        }
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.config = new_config;
        }
        if async_task {
            let mut plan = TaskPlan::new(
                "qmconfig",
                vmid.to_string(),
                node,
                &caller.who.task_user(),
                Work::Noop,
            );
            let (t, err) = self.layout_disks(node, &disks, &mut plan, 0.1);
            plan.duration = t + 0.1;
            plan.planned_error = err;
            plan.work = Work::UpdateConfig { vmid, disks };
            Ok(Some(self.start_task(plan, now)))
        } else {
            let mut scratch = TaskPlan::new("qmconfig", "", node, "", Work::Noop);
            if let (_, Some(e)) = self.layout_disks(node, &disks, &mut scratch, 0.0) {
                return Err(PveError::die(e));
            }
            self.allocate_disks(node, vmid, &disks, now)
                .map_err(PveError::die)?;
            Ok(None)
        }
    }

    /// Replacing or deleting a disk keeps its volume as `unusedN` (like PVE).
    fn detach_to_unused(&self, config: &mut std::collections::BTreeMap<String, String>, key: &str) {
        let Some(old) = config.remove(key) else {
            return;
        };
        let props = split_props(&old, "file");
        let Some(file) = prop(&props, "file") else {
            return;
        };
        if prop(&props, "media") == Some("cdrom")
            || parse_volid(file).is_none()
            || file.contains("cloudinit")
        {
            return;
        }
        let mut i = 0;
        while config.contains_key(&format!("unused{i}")) {
            i += 1;
        }
        config.insert(format!("unused{i}"), file.to_string());
    }

    /// Free a volume given a config value or volid.
    pub fn free_volume(&mut self, node: &str, value: &str) {
        let props = split_props(value, "file");
        let Some(file) = prop(&props, "file") else {
            return;
        };
        if let Some((sid, volname)) = parse_volid(file)
            && let Some(sto) = self
                .nodes
                .get_mut(node)
                .and_then(|n| n.storages.get_mut(sid))
        {
            sto.volumes.remove(volname);
        }
    }

    /// Allocate (and import into) the planned disks and put them in the config.
    pub fn allocate_disks(
        &mut self,
        node: &str,
        vmid: u32,
        disks: &[DiskPlan],
        now: f64,
    ) -> Result<Vec<String>, String> {
        let mut done: Vec<(String, String)> = Vec::new();
        let result = (|| {
            for d in disks {
                let n = self
                    .nodes
                    .get_mut(node)
                    .ok_or_else(|| format!("node '{node}' does not exist"))?;
                let src = d.import_from.as_ref().map(|(s, v)| {
                    n.storages
                        .get(s)
                        .and_then(|s| s.volumes.get(v))
                        .map(|v| v.used)
                });
                if let Some(None) = src {
                    let (s, v) = d.import_from.clone().unwrap_or_default();
                    return Err(format!("volume '{s}:{v}' does not exist"));
                }
                let sto = n
                    .storages
                    .get_mut(&d.storage)
                    .ok_or_else(|| format!("storage '{}' does not exist", d.storage))?;
                sto.alloc_image(vmid, d.volname.clone(), &d.format, d.size, now as u64)?;
                done.push((d.storage.clone(), d.volname.clone()));
                if let Some(Some(bytes)) = src {
                    sto.write_data(&d.volname, bytes)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (sid, vol) in done {
                if let Some(s) = self
                    .nodes
                    .get_mut(node)
                    .and_then(|n| n.storages.get_mut(&sid))
                {
                    s.volumes.remove(&vol);
                }
            }
            return Err(e);
        }
        let lines = Vec::new();
        if let Some(vm) = self.vms.get_mut(&vmid) {
            for d in disks {
                let volid = format!("{}:{}", d.storage, d.volname);
                let val = if d.cloudinit {
                    let mut o = d.opts.clone();
                    o.push(("size".into(), format_size(d.size)));
                    print_drive(&volid, &o)
                } else {
                    crate::qemu::model::allocated_drive(&volid, &d.opts, d.size)
                };
                if let Some(old) = vm.config.get(&d.key).cloned() {
                    let props = split_props(&old, "file");
                    if let Some(f) = prop(&props, "file")
                        && parse_volid(f).is_some()
                        && prop(&props, "media") != Some("cdrom")
                    {
                        let mut i = 0;
                        while vm.config.contains_key(&format!("unused{i}")) {
                            i += 1;
                        }
                        vm.config.insert(format!("unused{i}"), f.to_string());
                    }
                }
                vm.config.insert(d.key.clone(), val);
            }
        }
        Ok(lines)
    }

    /// `POST .../clone`
    #[allow(clippy::too_many_arguments)]
    pub fn clone_vm(
        &mut self,
        node: &str,
        vmid: u32,
        caller: &Caller,
        p: &Params,
        now: f64,
    ) -> Result<String, PveError> {
        let newid = u32::try_from(p.req_int("newid")?).map_err(|_| {
            PveError::param("newid", "value must have a maximum value of 999999999")
        })?;
        let src = self.vm_on(node, vmid)?.clone();
        self.require(caller.who, &format!("/vms/{vmid}"), "VM.Clone")?;
        self.require(caller.who, &format!("/vms/{newid}"), "VM.Allocate")?;
        let full = p.bool("full").unwrap_or(!src.is_template());
        if !full && p.has("storage") {
            return Err(PveError::param(
                "storage",
                "parameter 'storage' not allowed for linked clones",
            ));
        }
        if !full && !src.is_template() {
            return Err(PveError::die(
                "linked clone feature is not supported for drive 'scsi0'",
            ));
        }
        let target_storage = p.str("storage");
        if let Some(sid) = &target_storage {
            self.storage_on(node, sid)?.check_images()?;
            self.require(
                caller.who,
                &format!("/storage/{sid}"),
                "Datastore.AllocateSpace",
            )?;
        }
        if let Some(t) = p.str("target")
            && t != node
        {
            return Err(PveError::die(format!(
                "can't clone VM to node '{t}' (VM uses local storage)"
            )));
        }
        if let Some(l) = &src.lock {
            return Err(PveError::die(format!("VM is locked ({l})")));
        }
        if self.vms.contains_key(&newid) {
            return Err(PveError::die(format!(
                "unable to create VM {newid}: config file already exists"
            )));
        }
        let mut cfg = std::collections::BTreeMap::new();
        for (k, v) in &src.config {
            if is_disk_key(k) || is_unused_key(k) || k == "template" {
                continue;
            }
            if is_net_key(k) {
                let mut nic = Nic::parse(v);
                nic.mac = Some(self.random_mac());
                cfg.insert(k.clone(), nic.print());
            } else {
                cfg.insert(k.clone(), v.clone());
            }
        }
        cfg.insert(
            "name".into(),
            p.str("name")
                .unwrap_or_else(|| format!("Copy-of-VM-{}", src.name())),
        );
        if let Some(d) = p.str("description") {
            cfg.insert("description".into(), d);
        }
        self.vms.insert(
            newid,
            Vm {
                vmid: newid,
                node: node.to_string(),
                config: cfg,
                lock: Some("clone".into()),
                power: Power::Stopped,
                started_at: 0.0,
                pid: None,
                agent_ready_at: None,
                leases: Default::default(),
            },
        );
        let mut plan = TaskPlan::new(
            "qmclone",
            vmid.to_string(),
            node,
            &caller.who.task_user(),
            Work::Noop,
        );
        let mut t = 0.3;
        let mut err = None;
        if let Some(n) = self.nodes.get(node) {
            for (key, volid, size) in src.disks() {
                let Some((sid, vol)) = parse_volid(&volid) else {
                    continue;
                };
                let tsid = target_storage.clone().unwrap_or_else(|| sid.to_string());
                let (Some(ssto), Some(tsto)) = (n.storages.get(sid), n.storages.get(&tsid)) else {
                    err = Some(format!("clone failed: storage '{tsid}' does not exist"));
                    break;
                };
                plan.line(t, format!("create full clone of drive {key} ({volid})"));
                let speed = ssto.speed_mib_s.min(tsto.speed_mib_s) * 1024.0 * 1024.0;
                let secs = (size as f64 / speed).max(0.1);
                plan.timeline.push((
                    t,
                    Chunk::Transfer {
                        total: size,
                        until: t + secs,
                        style: TransferStyle::QemuImg,
                    },
                ));
                t += secs;
                let _ = vol;
            }
        }
        plan.duration = t + 0.2;
        plan.planned_error = err;
        plan.work = Work::Clone {
            src: vmid,
            newid,
            name: p.str("name"),
            target_storage,
            format: p.str("format"),
        };
        Ok(self.start_task(plan, now))
    }

    /// Complete a clone: copy every disk of the source onto the target storage.
    pub fn finish_clone(
        &mut self,
        node: &str,
        src: u32,
        newid: u32,
        target: Option<&str>,
        format: Option<&str>,
        now: f64,
    ) -> Result<Vec<String>, String> {
        let Some(source) = self.vms.get(&src).cloned() else {
            return Err(format!(
                "clone failed: Configuration file 'nodes/{node}/qemu-server/{src}.conf' does not exist"
            ));
        };
        let mut taken = BTreeSet::new();
        let mut plans = Vec::new();
        for (key, volid, size) in source.disks() {
            let Some((sid, vol)) = parse_volid(&volid) else {
                continue;
            };
            let tsid = target
                .map(str::to_string)
                .unwrap_or_else(|| sid.to_string());
            let Some(tsto) = self.nodes.get(node).and_then(|n| n.storages.get(&tsid)) else {
                return Err(format!("clone failed: storage '{tsid}' does not exist"));
            };
            let fmt = tsto.resolve_format(format);
            let fmt = if tsto.kind.formats().0.contains(&fmt.as_str()) {
                fmt
            } else {
                tsto.resolve_format(None)
            };
            let volname = self.pick_volname(node, &tsid, newid, &fmt, &mut taken);
            let props = split_props(source.config.get(&key).map_or("", |s| s.as_str()), "file");
            let opts: Vec<(String, String)> = props
                .into_iter()
                .filter(|(k, _)| k != "file" && k != "size")
                .collect();
            let used = self
                .nodes
                .get(node)
                .and_then(|n| n.storages.get(sid))
                .and_then(|s| s.volumes.get(vol))
                .map_or(0, |v| v.used);
            plans.push(DiskPlan {
                key,
                storage: tsid,
                volname,
                format: fmt,
                size,
                import_from: Some((sid.to_string(), vol.to_string())),
                data_bytes: used,
                opts,
                cloudinit: false,
            });
        }
        self.allocate_disks(node, newid, &plans, now)
            .map_err(|e| format!("clone failed: {e}"))?;
        if let Some(vm) = self.vms.get_mut(&newid) {
            vm.lock = None;
        }
        Ok(Vec::new())
    }

    /// `PUT .../resize`: returns a UPID (PVE ≥ 8.0) or does it inline (7.x).
    pub fn resize_vm(
        &mut self,
        node: &str,
        vmid: u32,
        caller: &Caller,
        p: &Params,
        now: f64,
    ) -> Result<Option<String>, PveError> {
        let vm = self.vm_on(node, vmid)?;
        self.require(caller.who, &format!("/vms/{vmid}"), "VM.Config.Disk")?;
        if let Some(d) = p.str("digest")
            && d != vm.digest()
        {
            return Err(PveError::die(
                "checksum mismatch (file change by other user?)",
            ));
        }
        let disk = p.req_str("disk")?;
        let size = p.req_str("size")?;
        let check = self.resize_target(node, vmid, &disk, &size);
        if !self.version.resize_returns_upid() {
            let new_size = check.map_err(PveError::die)?;
            self.apply_resize(node, vmid, &disk, new_size)
                .map_err(PveError::die)?;
            return Ok(None);
        }
        let mut plan = TaskPlan::new(
            "resize",
            vmid.to_string(),
            node,
            &caller.who.task_user(),
            Work::Noop,
        );
        match check {
            Ok(new_size) => {
                plan.work = Work::Resize {
                    vmid,
                    disk,
                    new_size,
                };
                plan.duration = 0.5;
            }
            Err(e) => {
                plan.planned_error = Some(e);
                plan.duration = 0.1;
            }
        }
        Ok(Some(self.start_task(plan, now)))
    }

    /// The size a resize request leads to, or the task error PVE gives.
    pub fn resize_target(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<u64, String> {
        let vm = self
            .vms
            .get(&vmid)
            .filter(|v| v.node == node)
            .ok_or_else(|| {
                format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
            })?;
        if let Some(l) = &vm.lock {
            return Err(format!("VM is locked ({l})"));
        }
        let val = vm
            .config
            .get(disk)
            .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
        let props = split_props(val, "file");
        if prop(&props, "media") == Some("cdrom") {
            return Err("you can't resize a cdrom".into());
        }
        let cur = prop(&props, "size")
            .and_then(crate::storage::model::parse_size)
            .unwrap_or(0);
        let (grow, num) = match size.strip_prefix('+') {
            Some(r) => (true, r),
            None => (false, size),
        };
        let bytes = crate::storage::model::parse_size(num)
            .ok_or_else(|| format!("invalid size '{size}'"))?;
        let new = if grow {
            cur.saturating_add(bytes)
        } else {
            bytes
        };
        if new < cur {
            return Err("shrinking disks is not supported".into());
        }
        Ok(new)
    }

    pub fn apply_resize(
        &mut self,
        node: &str,
        vmid: u32,
        disk: &str,
        new_size: u64,
    ) -> Result<(), String> {
        let val = self
            .vms
            .get(&vmid)
            .and_then(|v| v.config.get(disk))
            .cloned()
            .ok_or_else(|| format!("disk '{disk}' does not exist"))?;
        let props = split_props(&val, "file");
        let file = prop(&props, "file").unwrap_or("").to_string();
        if let Some((sid, vol)) = parse_volid(&file)
            && let Some(sto) = self
                .nodes
                .get_mut(node)
                .and_then(|n| n.storages.get_mut(sid))
        {
            let thick = sto.kind.is_thick();
            let avail = sto.avail();
            if let Some(v) = sto.volumes.get_mut(vol) {
                if thick {
                    let extra = new_size.saturating_sub(v.size);
                    if extra > avail {
                        return Err(format!(
                            "lvextend 'pve/{vol}' error:   Insufficient free space: {} extents needed, but only {} available",
                            extra.div_ceil(4 << 20),
                            avail / (4 << 20)
                        ));
                    }
                    v.used = new_size;
                }
                v.size = new_size;
            }
        }
        let opts: Vec<(String, String)> = props.into_iter().filter(|(k, _)| k != "file").collect();
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.config.insert(
                disk.to_string(),
                crate::qemu::model::allocated_drive(&file, &opts, new_size),
            );
        }
        Ok(())
    }

    /// `DELETE /nodes/{node}/qemu/{vmid}`
    pub fn destroy_vm(
        &mut self,
        node: &str,
        vmid: u32,
        caller: &Caller,
        p: &Params,
        now: f64,
    ) -> Result<String, PveError> {
        let vm = self.vm_on(node, vmid)?;
        self.require(caller.who, &format!("/vms/{vmid}"), "VM.Allocate")?;
        if let Some(l) = &vm.lock
            && !p.flag("skiplock")
        {
            return Err(PveError::die(format!("VM is locked ({l})")));
        }
        if vm.power != Power::Stopped {
            return Err(PveError::die(format!(
                "VM {vmid} is running - destroy failed"
            )));
        }
        if vm.config.get("protection").is_some_and(|v| v == "1") {
            return Err(PveError::die(format!(
                "can't remove VM {vmid} - protection mode enabled"
            )));
        }
        let mut plan = TaskPlan::new(
            "qmdestroy",
            vmid.to_string(),
            node,
            &caller.who.task_user(),
            Work::Noop,
        );
        let mut t = 0.2;
        for volid in vm.referenced_volumes() {
            if let Some((sid, vol)) = parse_volid(&volid) {
                let block = self
                    .nodes
                    .get(node)
                    .and_then(|n| n.storages.get(sid))
                    .is_some_and(|s| !s.kind.is_file_based());
                if block {
                    plan.line(
                        t,
                        format!("  Logical volume \"{vol}\" successfully removed."),
                    );
                }
                t += 0.1;
            }
        }
        if p.flag("purge") {
            plan.line(
                t,
                format!("purging VM {vmid} from related configurations.."),
            );
        }
        plan.duration = t + 0.2;
        plan.work = Work::Destroy {
            vmid,
            unreferenced: p.flag("destroy-unreferenced-disks"),
        };
        if let Some(vm) = self.vms.get_mut(&vmid) {
            vm.lock = Some("destroyed".into());
        }
        Ok(self.start_task(plan, now))
    }

    pub fn finish_destroy(&mut self, vmid: u32, unreferenced: bool) {
        let Some(vm) = self.vms.remove(&vmid) else {
            return;
        };
        for volid in vm.referenced_volumes() {
            self.free_volume(&vm.node, &volid);
        }
        if unreferenced && let Some(n) = self.nodes.get_mut(&vm.node) {
            for s in n.storages.values_mut() {
                s.volumes.retain(|_, v| v.vmid != Some(vmid));
            }
        }
    }
}
