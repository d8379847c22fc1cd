//! `/nodes/{node}/qemu...` routes: parse, call the model verb, render.

use serde_json::json;

use crate::qemu::cloudinit;
use crate::qemu::model::Vm;
use crate::qemu::status::VmStatus;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The `/api2/json` routes of VMs under `/nodes/{node}/qemu[/{vmid}…]`: create, list,
/// delete, config (`POST` async, `PUT` sync) and pending, cloud-init, status and power
/// (`status/start`, `stop`, `shutdown`, `reboot`, `reset`, `suspend`, `resume`), clone,
/// migrate, snapshots, disk moves and resizes and the rest qemu-server serves; collected
/// into the router's table.
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
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/migrate",
            migrate_precondition,
        ),
        route("POST", "/nodes/{node}/qemu/{vmid}/migrate", migrate),
        route(
            "POST",
            "/nodes/{node}/qemu/{vmid}/remote_migrate",
            remote_migrate,
        ),
        route("POST", "/nodes/{node}/qemu/{vmid}/mtunnel", mtunnel).served_locally(),
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/mtunnelwebsocket",
            mtunnel_websocket,
        )
        .served_locally(),
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

/// The VM of the path, without a privilege check (index routes).
fn vm<'a>(c: &'a Ctx) -> Result<&'a Vm, PveError> {
    c.site.vm_on(&c.node()?, c.req.vmid()?)
}

/// The VM of the path, for a read that needs `VM.Audit`.
fn audited<'a>(c: &'a Ctx) -> Result<&'a Vm, PveError> {
    Ok(c.site.vm_op(&c.req, &["VM.Audit"])?.1)
}

fn upid(u: String) -> Reply {
    Reply::data(json!(u))
}

/// A verb answering with a task (PVE ≥ 8.0 for resize) or nothing (done inline).
fn upid_or_null(u: Option<String>) -> Reply {
    u.map_or_else(Reply::null, upid)
}

fn list(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let full = c.req.p.flag("full");
    let data: Vec<VmStatus> = c
        .site
        .vms_on(&node)
        .filter(|v| {
            c.site
                .access
                .has(&c.req.who, &format!("/vms/{}", v.vmid), "VM.Audit")
        })
        // qemu-server `vmlist`: `vmstatus(undef, $param->{full})`, QMP only with `full`.
        .map(|v| {
            if full {
                v.vmstatus_full(c.req.now, c.site.version)
            } else {
                v.vmstatus(c.req.now, c.site.version)
            }
        })
        .collect();
    Ok(Reply::typed(&data))
}

fn create(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.create_vm(&c.req)?))
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
    Ok(Reply::index("subdir", &dirs))
}

fn destroy(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.destroy_vm(&c.req)?))
}

fn config_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let v = audited(c)?;
    let current = c.req.p.flag("current");
    if c.req.p.has("snapshot") {
        let s = c.req.p.str("snapshot").unwrap_or_default();
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

fn config_post(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid_or_null(c.site.update_vm_config(&c.req, true)?))
}

fn config_put(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid_or_null(c.site.update_vm_config(&c.req, false)?))
}

fn pending(c: &mut Ctx) -> Result<Reply, PveError> {
    let v = audited(c)?;
    Ok(Reply::data(v.pending_json(c.site.version)))
}

fn cloudinit_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(cloudinit::pending_list(audited(c)?)))
}

fn cloudinit_put(c: &mut Ctx) -> Result<Reply, PveError> {
    let (op, _) = c.site.vm_op(&c.req, &["VM.Config.Cloudinit"])?;
    c.site.regenerate_cloudinit(&op.node, op.vmid)?;
    Ok(Reply::null())
}

fn cloudinit_dump(c: &mut Ctx) -> Result<Reply, PveError> {
    let v = audited(c)?;
    // The schema's enum has already refused anything else.
    let ty = c.req.p.req_str("type")?;
    let what = cloudinit::DumpType::parse(&ty).ok_or_else(|| {
        PveError::param(
            "type",
            format!("value '{ty}' does not have a value in the enumeration 'user, network, meta'"),
        )
    })?;
    let text = cloudinit::dump(v, what, &c.site.host_dns(&v.node));
    Ok(Reply::data(json!(text)))
}

fn feature(c: &mut Ctx) -> Result<Reply, PveError> {
    let (op, _) = c.site.vm_op(&c.req, &["VM.Audit"])?;
    let name = c.req.p.req_str("feature")?;
    // The schema's enum has already refused anything else.
    let feature = crate::storage::features::Feature::parse(&name).ok_or_else(|| {
        PveError::param(
            "feature",
            format!(
                "value '{name}' does not have a value in the enumeration 'snapshot, clone, copy'"
            ),
        )
    })?;
    let snapname = c.req.p.str("snapname");
    Ok(Reply::data(c.site.vm_feature(
        &op.node,
        op.vmid,
        feature,
        snapname.as_deref(),
    )?))
}

fn migrate_precondition(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(c.site.migrate_precondition(&c.req)?))
}

fn migrate(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.migrate(&c.req)?))
}

fn remote_migrate(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.remote_migrate(&c.req)?))
}

fn mtunnel(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(c.site.mtunnel(&c.req)?))
}

fn mtunnel_websocket(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(c.site.mtunnel_websocket(&c.req)?))
}

fn move_disk(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.move_disk(&c.req)?))
}

/// `PUT …/unlink`: PVE runs it as a synchronous config update deleting `idlist`.
fn unlink(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.vm_op(&c.req, &["VM.Config.Disk"])?;
    if let Some(list) = c.req.p.0.remove("idlist") {
        c.req.p.0.insert("delete".into(), list);
    }
    config_put(c)
}

fn snapshot_list(c: &mut Ctx) -> Result<Reply, PveError> {
    let (op, _) = c.site.vm_op(&c.req, &["VM.Audit"])?;
    Ok(Reply::data(c.site.snapshot_list(&op.node, op.vmid)?))
}

fn snapshot_create(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.start_snapshot(&c.req)?))
}

fn snapshot_index(c: &mut Ctx) -> Result<Reply, PveError> {
    vm(c)?;
    Ok(Reply::data(json!([{"cmd": "rollback"}, {"cmd": "config"}])))
}

fn snapshot_delete(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.start_snapshot_delete(&c.req)?))
}

fn snapshot_rollback(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.start_rollback(&c.req)?))
}

fn snapshot_config_get(c: &mut Ctx) -> Result<Reply, PveError> {
    let (op, _) = c
        .site
        .vm_op(&c.req, &["VM.Snapshot", "VM.Snapshot.Rollback", "VM.Audit"])?;
    let name = c.req.p.req_str("snapname")?;
    let version = c.site.version;
    Ok(Reply::data(
        c.site
            .snapshot(&op.node, op.vmid, &name)?
            .config_json(version),
    ))
}

fn snapshot_config_put(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.set_snapshot_description(&c.req)?;
    Ok(Reply::null())
}

fn status_index(c: &mut Ctx) -> Result<Reply, PveError> {
    vm(c)?;
    let dirs = [
        "current", "start", "stop", "reset", "shutdown", "suspend", "reboot", "resume",
    ];
    Ok(Reply::index("subdir", &dirs))
}

fn status_current(c: &mut Ctx) -> Result<Reply, PveError> {
    let v = audited(c)?;
    Ok(Reply::typed(&v.vm_status(c.req.now, c.site.version)))
}

fn start(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.start_vm(&c.req)?))
}

fn stop(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.stop_vm(&c.req)?))
}

fn shutdown(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.shutdown_vm(&c.req)?))
}

fn reboot(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.reboot_vm(&c.req)?))
}

fn reset(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.simple_power("qmreset", &c.req)?))
}

fn suspend(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.simple_power("qmsuspend", &c.req)?))
}

fn resume(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.simple_power("qmresume", &c.req)?))
}

fn clone(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.clone_vm(&c.req)?))
}

fn resize(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid_or_null(c.site.resize_vm(&c.req)?))
}

fn template(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(upid(c.site.template_vm(&c.req)?))
}
