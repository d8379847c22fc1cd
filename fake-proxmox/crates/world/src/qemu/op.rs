//! The entry of every VM verb: which VM the request is about, who asks, PVE's privilege
//! and lock checks, and the task the verb lays out.

use crate::qemu::model::Vm;
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// One request on one VM (`/nodes/{node}/qemu/{vmid}/…`).
pub struct VmOp<'r> {
    /// The path's `{node}`.
    pub node: String,
    /// The path's `{vmid}`.
    pub vmid: u32,
    /// The request itself: caller, parameters.
    pub req: &'r Request,
}

impl<'r> VmOp<'r> {
    /// The VM the request's path names; nothing checked yet.
    pub fn of(req: &'r Request) -> Result<VmOp<'r>, PveError> {
        Ok(VmOp {
            node: req.node()?,
            vmid: req.vmid()?,
            req,
        })
    }

    /// The ACL path of the VM.
    pub fn path(&self) -> String {
        format!("/vms/{}", self.vmid)
    }

    /// At least one of `privs` on the VM (403 otherwise).
    pub fn require(&self, site: &Site, privs: &[&str]) -> Result<(), PveError> {
        site.require_any(&self.req.who, &self.path(), privs)
    }

    /// A task of `ttype` on this VM, run as the caller.
    pub fn plan(&self, ttype: &'static str, work: Work) -> TaskPlan {
        TaskPlan::new(
            ttype,
            self.vmid.to_string(),
            &self.node,
            &self.req.task_user(),
            work,
        )
    }

    /// The request's `skiplock` flag.
    pub fn skiplock(&self) -> bool {
        self.req.p.flag("skiplock")
    }
}

/// PVE's `check_lock`: why a locked VM refuses the operation (unless the caller skips it).
pub fn lock_refusal(vm: &Vm, skiplock: bool) -> Option<String> {
    match &vm.lock {
        Some(l) if !skiplock => Some(format!("VM is locked ({l})")),
        _ => None,
    }
}

/// `check_lock` before the task: the refusal as PVE's 500.
pub fn unlocked(vm: &Vm, skiplock: bool) -> Result<(), PveError> {
    lock_refusal(vm, skiplock).map_or(Ok(()), |e| Err(PveError::die(e)))
}

impl Site {
    /// The entry of a VM verb in PVE's usual order: the VM's config on its node (500),
    /// then at least one of `privs` on `/vms/{vmid}` (403).
    pub fn vm_op<'r>(&self, req: &'r Request, privs: &[&str]) -> Result<(VmOp<'r>, &Vm), PveError> {
        let op = VmOp::of(req)?;
        let vm = self.vm_on(&op.node, op.vmid)?;
        op.require(self, privs)?;
        Ok((op, vm))
    }
}
