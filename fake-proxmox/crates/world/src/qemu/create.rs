//! Creating VMs and changing their config. Synchronous checks answer with PVE's HTTP
//! errors; disk allocation and imports are task work (see `disks`).

use std::collections::{BTreeMap, BTreeSet};

use super::disks::DiskOutcome;
use super::pending::Change;
use crate::qemu::model::{DiskPlan, Nic, Vm, is_disk_key, is_net_key, prop, split_props};
use crate::qemu::op::{VmOp, unlocked};
use crate::request::Request;
use crate::wire::{Params, PveError};
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

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

impl Site {
    /// `POST /nodes/{node}/qemu`
    pub fn create_vm(&mut self, req: &Request) -> Result<String, PveError> {
        let op = VmOp::of(req)?;
        let (node, vmid, p) = (op.node.as_str(), op.vmid, &req.p);
        if p.has("archive") {
            return Err(PveError::die(
                "fake-proxmox: restore from a backup archive is not simulated",
            ));
        }
        // `['or', /vms/{vmid}, /pool/{pool}]`, then the pool must exist.
        let pool = p.str("pool");
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
        if let Some(pool) = &pool {
            self.check_pool_exists(pool)?;
        }
        let (config, disks) = self.new_config(&op)?;
        check_create_balloon(p)?;
        // create_and_lock_config: the vmid check and the `lock: create` write are atomic.
        if let Some(existing) = self.guest(vmid) {
            return Err(PveError::die(format!(
                "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
                existing.core().node
            )));
        }
        self.vms.insert(
            vmid,
            Vm::stopped(vmid, node, Default::default(), Some("create")),
        );
        let start_after = p.flag("start");
        let mut plan = op.plan("qmcreate", Work::Noop);
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
            pool,
        };
        Ok(self.start_task(plan, req.now))
    }

    /// A new VM's config from the create request: drives checked and planned (at most one
    /// cloud-init drive), NICs with `SDN.Use` on their bridge and a MAC.
    fn new_config(&mut self, op: &VmOp) -> Result<Staged, PveError> {
        let p = &op.req.p;
        let default_storage = p.str("storage");
        let mut config: Vec<(String, String)> = Vec::new();
        let mut disks: Vec<DiskPlan> = Vec::new();
        let mut taken = BTreeSet::new();
        for (k, _) in p.0.iter() {
            if CREATE_CONTROL.contains(&k.as_str()) {
                continue;
            }
            let Some(v) = p.str(k) else { continue };
            if is_disk_key(k) {
                match self.plan_disk(op, k, &v, default_storage.as_deref(), &mut taken)? {
                    DiskOutcome::Keep(v) => config.push((k.clone(), v)),
                    DiskOutcome::Alloc(d) => {
                        if d.cloudinit && disks.iter().any(|o| o.cloudinit) {
                            return Err(PveError::param(k, "only one cloud-init drive is allowed"));
                        }
                        disks.push(d)
                    }
                }
            } else if is_net_key(k) {
                let mut nic = Nic::parse(&v);
                if let Some(bridge) = nic.bridge()
                    && self.version.bridge_needs_sdn_use()
                {
                    self.require(
                        &op.req.who,
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
        Ok((config, disks))
    }

    /// `POST` (async, `async_task`) and `PUT` (sync) `.../config`. Changes go through the
    /// pending section (see `pending`); new disks are allocated and staged at the task's end.
    pub fn update_vm_config(
        &mut self,
        req: &Request,
        async_task: bool,
    ) -> Result<Option<String>, PveError> {
        let op = VmOp::of(req)?;
        let vm = self.vm_on(&op.node, op.vmid)?;
        unlocked(vm, op.skiplock())?;
        if let Some(d) = req.p.str("digest")
            && d != vm.digest()
        {
            return Err(PveError::die(
                "checksum mismatch (file change by other user?)",
            ));
        }
        op.require(self, &["VM.Config.Options"])?;
        let Requested {
            mut sets,
            mut deletes,
            reverts,
        } = requested_change(&req.p)?;
        // Revert: back to the current value, or drop a value that is only pending.
        for k in &reverts {
            if let Some(v) = vm.config.get(k) {
                sets.push((k.clone(), v.clone()));
            } else if vm.pending.set.contains_key(k) {
                deletes.push(k.clone());
            }
        }
        let effective = vm.effective_config();
        check_balloon(&req.p, &effective)?;
        let (staged, disks) = self.stage_sets(&op, &sets, &effective)?;
        let change = Change {
            deletes,
            force: req.p.flag("force"),
            sets: staged,
        };
        self.change_config(op.vmid, &change);
        self.end_config_update(&op, disks, async_task)
    }

    /// The values a config update stages: drives checked (new ones to allocate), NICs
    /// keeping their MAC (or getting one).
    fn stage_sets(
        &mut self,
        op: &VmOp,
        sets: &[(String, String)],
        effective: &BTreeMap<String, String>,
    ) -> Result<Staged, PveError> {
        let mut taken = BTreeSet::new();
        let mut disks = Vec::new();
        let mut staged = Vec::new();
        for (k, v) in sets {
            if is_disk_key(k) {
                match self.plan_disk(op, k, v, None, &mut taken)? {
                    DiskOutcome::Keep(v) => staged.push((k.clone(), v)),
                    DiskOutcome::Alloc(d) => disks.push(d),
                }
            } else if is_net_key(k) {
                let mut nic = Nic::parse(v);
                if nic.mac.is_none() {
                    nic.mac = effective
                        .get(k)
                        .and_then(|old| Nic::parse(old).mac)
                        .or_else(|| Some(self.random_mac()));
                }
                staged.push((k.clone(), nic.print()));
            } else {
                staged.push((k.clone(), v.clone()));
            }
        }
        Ok((staged, disks))
    }

    /// A `POST` ends in a `qmconfig` task that allocates the new disks; a `PUT` allocates
    /// them before it answers.
    fn end_config_update(
        &mut self,
        op: &VmOp,
        disks: Vec<DiskPlan>,
        async_task: bool,
    ) -> Result<Option<String>, PveError> {
        let (node, vmid, now) = (op.node.as_str(), op.vmid, op.req.now);
        if async_task {
            let mut plan = op.plan("qmconfig", Work::Noop);
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
            self.finish_update_config(node, vmid, &disks, now)
                .map_err(PveError::die)?;
            Ok(None)
        }
    }

    /// The end of a config update: allocate the new disks and stage them like any change.
    pub fn finish_update_config(
        &mut self,
        node: &str,
        vmid: u32,
        disks: &[DiskPlan],
        now: f64,
    ) -> Result<Vec<String>, String> {
        if disks.is_empty() {
            return Ok(Vec::new());
        }
        let values = self.allocate_volumes(node, vmid, disks, now)?;
        self.change_config(
            vmid,
            &Change {
                sets: values,
                ..Change::default()
            },
        );
        Ok(Vec::new())
    }
}

/// Config values to write now (in order) and disks to allocate in the task.
type Staged = (Vec<(String, String)>, Vec<DiskPlan>);

/// What a config update asks for.
struct Requested {
    sets: Vec<(String, String)>,
    deletes: Vec<String>,
    reverts: Vec<String>,
}

/// `delete`, `revert` and the options to set, with PVE's refusals of nothing asked and of
/// a key named twice.
fn requested_change(p: &Params) -> Result<Requested, PveError> {
    let list = |k: &str| -> Vec<String> {
        p.str(k)
            .map(|d| {
                d.split([',', ';', ' ', '\0'])
                    .filter(|s| !s.is_empty())
                    .map(|s| if s == "cdrom" { "ide2" } else { s }.to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (deletes, reverts) = (list("delete"), list("revert"));
    let sets: Vec<(String, String)> =
        p.0.keys()
            .filter(|k| !UPDATE_CONTROL.contains(&k.as_str()))
            .filter_map(|k| p.str(k).map(|v| (k.clone(), v)))
            .collect();
    if sets.is_empty() && deletes.is_empty() && reverts.is_empty() {
        return Err(PveError::die("no options specified"));
    }
    let is_set = |k: &str| sets.iter().any(|(s, _)| s == k);
    if let Some(k) = reverts.iter().find(|k| is_set(k)) {
        return Err(PveError::param(
            "delete",
            format!("you can't use '-{k}' and -revert {k}' at the same time"),
        ));
    }
    if let Some(k) = deletes.iter().find(|k| is_set(k)) {
        return Err(PveError::param(
            "delete",
            format!("you can't use '-{k}' and -delete {k}' at the same time"),
        ));
    }
    if let Some(k) = deletes.iter().find(|k| reverts.contains(k)) {
        return Err(PveError::param(
            "revert",
            format!("you can't use '-delete {k}' and -revert {k}' at the same time"),
        ));
    }
    Ok(Requested {
        sets,
        deletes,
        reverts,
    })
}

const BALLOON_TOO_LARGE: &str = "balloon value too large (must be smaller than assigned memory)";

/// The MiB of a `memory` value (`current=` may be spelled out), 512 when unreadable.
fn memory_mib(m: &str) -> u64 {
    let pp = split_props(m, "current");
    prop(&pp, "current")
        .and_then(|x| x.parse::<u64>().ok())
        .unwrap_or(512)
}

/// Create: `balloon` may not exceed `memory` (512 MiB when not given).
fn check_create_balloon(p: &Params) -> Result<(), PveError> {
    if let Some(balloon) = p.int("balloon") {
        let mem = p.str("memory").map_or(512, |m| {
            let pp = split_props(&m, "current");
            prop(&pp, "current")
                .and_then(|x| x.parse::<i64>().ok())
                .unwrap_or(512)
        });
        if balloon > mem {
            return Err(PveError::die(BALLOON_TOO_LARGE));
        }
    }
    Ok(())
}

/// Update: `balloon` may not exceed `memory`, each from the request or else the VM's
/// effective config.
fn check_balloon(p: &Params, effective: &BTreeMap<String, String>) -> Result<(), PveError> {
    if !(p.has("memory") || p.has("balloon")) {
        return Ok(());
    }
    let mem = p
        .str("memory")
        .or_else(|| effective.get("memory").cloned())
        .map_or(512, |m| memory_mib(&m));
    let balloon = p
        .str("balloon")
        .or_else(|| effective.get("balloon").cloned())
        .and_then(|b| b.parse::<u64>().ok())
        .unwrap_or(0);
    if balloon > mem {
        return Err(PveError::die(BALLOON_TOO_LARGE));
    }
    Ok(())
}
