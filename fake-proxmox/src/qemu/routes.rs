//! `/nodes/{node}/qemu...` routes: parse, call the model verb, render.

use serde_json::{Value, json};

use crate::qemu::cloudinit;
use crate::qemu::model::{Power, Vm};
use crate::qemu::status::{HaStatus, VmStatus};
use crate::router::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/nodes/{node}/qemu", list),
        route("POST", "/nodes/{node}/qemu", create),
        route("GET", "/nodes/{node}/qemu/{vmid}", index),
        route("DELETE", "/nodes/{node}/qemu/{vmid}", destroy),
        route("GET", "/nodes/{node}/qemu/{vmid}/config", config_get),
        route("POST", "/nodes/{node}/qemu/{vmid}/config", config_post),
        route("PUT", "/nodes/{node}/qemu/{vmid}/config", config_put),
        route("GET", "/nodes/{node}/qemu/{vmid}/pending", pending),
        route("GET", "/nodes/{node}/qemu/{vmid}/cloudinit", cloudinit_get),
        route("PUT", "/nodes/{node}/qemu/{vmid}/cloudinit", cloudinit_put),
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/cloudinit/dump",
            cloudinit_dump,
        ),
        route("GET", "/nodes/{node}/qemu/{vmid}/status", status_index),
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/status/current",
            status_current,
        ),
        route("POST", "/nodes/{node}/qemu/{vmid}/status/start", start),
        route("POST", "/nodes/{node}/qemu/{vmid}/status/stop", stop),
        route(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/shutdown",
            shutdown,
        ),
        route("POST", "/nodes/{node}/qemu/{vmid}/status/reboot", reboot),
        route("POST", "/nodes/{node}/qemu/{vmid}/status/reset", reset),
        route("POST", "/nodes/{node}/qemu/{vmid}/status/suspend", suspend),
        route("POST", "/nodes/{node}/qemu/{vmid}/status/resume", resume),
        route("POST", "/nodes/{node}/qemu/{vmid}/clone", clone),
        route("PUT", "/nodes/{node}/qemu/{vmid}/resize", resize),
        route("POST", "/nodes/{node}/qemu/{vmid}/template", template),
        route("GET", "/nodes/{node}/qemu/{vmid}/feature", feature),
        route("PUT", "/nodes/{node}/qemu/{vmid}/unlink", unlink),
        route("POST", "/nodes/{node}/qemu/{vmid}/move_disk", move_disk),
        route("GET", "/nodes/{node}/qemu/{vmid}/snapshot", snapshot_list),
        route(
            "POST",
            "/nodes/{node}/qemu/{vmid}/snapshot",
            snapshot_create,
        ),
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
            snapshot_index,
        ),
        route(
            "DELETE",
            "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
            snapshot_delete,
        ),
        route(
            "POST",
            "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
            snapshot_rollback,
        ),
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
            snapshot_config_get,
        ),
        route(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
            snapshot_config_put,
        ),
    ]
}

fn vmid(c: &Ctx) -> Result<u32, PveError> {
    c.p.vmid()
}

fn vm<'a>(c: &'a Ctx) -> Result<&'a Vm, PveError> {
    let node = c.node()?;
    c.site.vm_on(&node, vmid(c)?)
}

fn upid(u: String) -> Reply {
    Reply::data(json!(u))
}

fn list(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let data: Vec<VmStatus> = c
        .site
        .vms
        .values()
        .filter(|v| v.node == node)
        .filter(|v| {
            c.site
                .access
                .has(&c.who, &format!("/vms/{}", v.vmid), "VM.Audit")
        })
        .map(|v| {
            let mut st = v.vmstatus(c.now);
            if v.power != Power::Stopped {
                st.qmpstatus = Some(v.qmpstatus());
            }
            st
        })
        .collect();
    Ok(Reply::typed(&data))
}

fn create(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let (who, via) = (c.who.clone(), c.via_ticket);
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: via,
    };
    let p = c.p.clone();
    Ok(upid(c.site.create_vm(&node, &caller, &p, c.now)?))
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    vm(c)?;
    let dirs = [
        "config",
        "pending",
        "status",
        "unlink",
        "vncproxy",
        "termproxy",
        "migrate",
        "resize",
        "move",
        "rrd",
        "rrddata",
        "monitor",
        "agent",
        "snapshot",
        "spiceproxy",
        "sendkey",
        "firewall",
        "mtunnel",
        "remote_migrate",
    ];
    Ok(Reply::data(Value::Array(
        dirs.iter().map(|d| json!({"subdir": d})).collect(),
    )))
}

fn destroy(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let (who, via, p) = (c.who.clone(), c.via_ticket, c.p.clone());
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: via,
    };
    Ok(upid(c.site.destroy_vm(&node, id, &caller, &p, c.now)?))
}

fn config_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = vmid(c)?;
    let v = vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    let current = c.p.flag("current");
    if c.p.has("snapshot") {
        let s = c.p.str("snapshot").unwrap_or_default();
        if current && !s.is_empty() {
            let msg = "cannot use 'snapshot' parameter with 'current'";
            return Err(PveError::params(
                [("snapshot", msg), ("current", msg)]
                    .into_iter()
                    .map(|(k, m)| (k.to_string(), m.to_string()))
                    .collect(),
            ));
        }
        return Err(PveError::die(format!("snapshot '{s}' does not exist")));
    }
    Ok(Reply::data(v.config_json(c.site.version, current)))
}

fn config_update(c: &mut Ctx, async_task: bool) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let (who, via, p) = (c.who.clone(), c.via_ticket, c.p.clone());
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: via,
    };
    Ok(
        match c
            .site
            .update_vm_config(&node, id, &caller, &p, c.now, async_task)?
        {
            Some(u) => upid(u),
            None => Reply::null(),
        },
    )
}

fn config_post(c: &mut Ctx) -> Result<Reply, PveError> {
    config_update(c, true)
}

fn config_put(c: &mut Ctx) -> Result<Reply, PveError> {
    config_update(c, false)
}

fn pending(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = vmid(c)?;
    let v = vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    Ok(Reply::data(v.pending_json(c.site.version)))
}

fn cloudinit_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = vmid(c)?;
    let v = vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    Ok(Reply::data(cloudinit::pending_list(v)))
}

fn cloudinit_put(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Config.Cloudinit")?;
    c.site.regenerate_cloudinit(&node, id)?;
    Ok(Reply::null())
}

fn cloudinit_dump(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let v = vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    // The schema's enum has already refused anything else.
    let ty = c.p.req_str("type")?;
    let what = cloudinit::DumpType::parse(&ty).ok_or_else(|| {
        PveError::param(
            "type",
            format!("value '{ty}' does not have a value in the enumeration 'user, network, meta'"),
        )
    })?;
    let text = cloudinit::dump(v, what, &c.site.host_dns(&node));
    Ok(Reply::data(json!(text)))
}

fn feature(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    let name = c.p.req_str("feature")?;
    // The schema's enum has already refused anything else.
    let feature = crate::storage::features::Feature::parse(&name).ok_or_else(|| {
        PveError::param(
            "feature",
            format!(
                "value '{name}' does not have a value in the enumeration 'snapshot, clone, copy'"
            ),
        )
    })?;
    let snapname = c.p.str("snapname");
    Ok(Reply::data(c.site.vm_feature(
        &node,
        id,
        feature,
        snapname.as_deref(),
    )?))
}

fn move_disk(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let (who, p) = (c.who.clone(), c.p.clone());
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: c.via_ticket,
    };
    Ok(upid(c.site.move_disk(&node, id, &caller, &p, c.now)?))
}

/// `PUT …/unlink`: PVE runs it as a synchronous config update deleting `idlist`.
fn unlink(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = vmid(c)?;
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Config.Disk")?;
    if let Some(list) = c.p.0.remove("idlist") {
        c.p.0.insert("delete".into(), list);
    }
    config_update(c, false)
}

fn snapshot_list(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    Ok(Reply::data(c.site.snapshot_list(&node, id)?))
}

fn snapshot_create(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Snapshot")?;
    let name = c.p.req_str("snapname")?;
    let user = c.who.task_user();
    let (vmstate, description) = (c.p.flag("vmstate"), c.p.str("description"));
    Ok(upid(c.site.start_snapshot(
        &node,
        id,
        &name,
        vmstate,
        description,
        &user,
        c.now,
    )?))
}

fn snapshot_index(c: &mut Ctx) -> Result<Reply, PveError> {
    vm(c)?;
    Ok(Reply::data(json!([{"cmd": "rollback"}, {"cmd": "config"}])))
}

fn snapshot_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Snapshot")?;
    let name = c.p.req_str("snapname")?;
    let user = c.who.task_user();
    Ok(upid(
        c.site
            .start_snapshot_delete(&node, id, &name, &user, c.now)?,
    ))
}

fn snapshot_rollback(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require_any(
        &format!("/vms/{id}"),
        &["VM.Snapshot", "VM.Snapshot.Rollback"],
    )?;
    let name = c.p.req_str("snapname")?;
    let user = c.who.task_user();
    let start = c.p.flag("start");
    Ok(upid(
        c.site
            .start_rollback(&node, id, &name, start, &user, c.now)?,
    ))
}

fn snapshot_config_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require_any(
        &format!("/vms/{id}"),
        &["VM.Snapshot", "VM.Snapshot.Rollback", "VM.Audit"],
    )?;
    let name = c.p.req_str("snapname")?;
    let version = c.site.version;
    Ok(Reply::data(
        c.site.snapshot(&node, id, &name)?.config_json(version),
    ))
}

fn snapshot_config_put(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Snapshot")?;
    let name = c.p.req_str("snapname")?;
    let description = c.p.str("description");
    c.site
        .set_snapshot_description(&node, id, &name, description)?;
    Ok(Reply::null())
}

fn status_index(c: &mut Ctx) -> Result<Reply, PveError> {
    vm(c)?;
    let dirs = [
        "current", "start", "stop", "reset", "shutdown", "suspend", "reboot", "resume",
    ];
    Ok(Reply::data(Value::Array(
        dirs.iter().map(|d| json!({"subdir": d})).collect(),
    )))
}

fn status_current(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = vmid(c)?;
    let v = vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Audit")?;
    let mut st = v.vmstatus(c.now);
    st.ha = Some(HaStatus { managed: 0 });
    st.agent = v.is_agent_enabled().then_some(1);
    st.qmpstatus = Some(v.qmpstatus());
    if v.power != Power::Stopped {
        st.running_machine = Some("pc-i440fx-9.2+pve1");
        st.running_qemu = Some("9.2.0");
        st.spice = Some(0);
    }
    Ok(Reply::typed(&st))
}

fn start(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let who = c.who.clone();
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: c.via_ticket,
    };
    Ok(upid(c.site.start_vm(&node, id, &caller, c.now)?))
}

macro_rules! power {
    ($name:ident, $verb:ident) => {
        fn $name(c: &mut Ctx) -> Result<Reply, PveError> {
            let (node, id) = (c.node()?, vmid(c)?);
            let (who, p) = (c.who.clone(), c.p.clone());
            let caller = crate::qemu::create::Caller {
                who: &who,
                via_ticket: c.via_ticket,
            };
            Ok(upid(c.site.$verb(&node, id, &caller, &p, c.now)?))
        }
    };
}
power!(stop, stop_vm);
power!(shutdown, shutdown_vm);
power!(reboot, reboot_vm);
power!(clone, clone_vm);

fn simple(c: &mut Ctx, ttype: &'static str) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let (who, p) = (c.who.clone(), c.p.clone());
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: c.via_ticket,
    };
    Ok(upid(
        c.site.simple_power(ttype, &node, id, &caller, &p, c.now)?,
    ))
}

fn reset(c: &mut Ctx) -> Result<Reply, PveError> {
    simple(c, "qmreset")
}
fn suspend(c: &mut Ctx) -> Result<Reply, PveError> {
    simple(c, "qmsuspend")
}
fn resume(c: &mut Ctx) -> Result<Reply, PveError> {
    simple(c, "qmresume")
}

fn resize(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, id) = (c.node()?, vmid(c)?);
    let (who, p) = (c.who.clone(), c.p.clone());
    let caller = crate::qemu::create::Caller {
        who: &who,
        via_ticket: c.via_ticket,
    };
    Ok(match c.site.resize_vm(&node, id, &caller, &p, c.now)? {
        Some(u) => upid(u),
        None => Reply::null(),
    })
}

fn template(c: &mut Ctx) -> Result<Reply, PveError> {
    let id = vmid(c)?;
    let v = vm(c)?;
    c.require(&format!("/vms/{id}"), "VM.Allocate")?;
    if let Some(l) = &v.lock {
        return Err(PveError::die(format!("VM is locked ({l})")));
    }
    if v.power != Power::Stopped {
        return Err(PveError::die(
            "you can't convert a running VM to a template",
        ));
    }
    let node = c.node()?;
    let mut plan = crate::tasks::model::TaskPlan::new(
        "qmtemplate",
        id.to_string(),
        &node,
        &c.who.task_user(),
        crate::tasks::model::Work::Noop,
    );
    plan.duration = 0.3;
    if let Some(vm) = c.site.vms.get_mut(&id) {
        vm.config.insert("template".into(), "1".into());
    }
    Ok(upid(c.site.start_task(plan, c.now)))
}
