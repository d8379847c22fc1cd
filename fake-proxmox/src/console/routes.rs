//! Console, monitor and dbus-vmstate routes (consoles of VMs and containers): parse, ask the
//! model, render.

use serde_json::{Value, json};

use super::monitor::{self, Effect, Needs};
use super::proxy::Kind;
use crate::qemu::model::Power;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The `/api2/json` console routes of VMs and containers (`vncproxy`, `termproxy`,
/// `vncwebsocket`, `spiceproxy`), and a VM's `sendkey`, `monitor` and `dbus-vmstate`;
/// collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        route("POST", "/nodes/{node}/qemu/{vmid}/vncproxy", vncproxy),
        route("POST", "/nodes/{node}/qemu/{vmid}/termproxy", termproxy),
        route(
            "GET",
            "/nodes/{node}/qemu/{vmid}/vncwebsocket",
            vncwebsocket,
        ),
        route("POST", "/nodes/{node}/qemu/{vmid}/spiceproxy", spiceproxy),
        // pve-container's consoles: the same verbs, which tell the kinds apart by the path.
        route("POST", "/nodes/{node}/lxc/{vmid}/vncproxy", vncproxy),
        route("POST", "/nodes/{node}/lxc/{vmid}/termproxy", termproxy),
        route("GET", "/nodes/{node}/lxc/{vmid}/vncwebsocket", vncwebsocket),
        route("POST", "/nodes/{node}/lxc/{vmid}/spiceproxy", spiceproxy),
        route("PUT", "/nodes/{node}/qemu/{vmid}/sendkey", sendkey),
        route("POST", "/nodes/{node}/qemu/{vmid}/monitor", monitor_cmd),
        route(
            "POST",
            "/nodes/{node}/qemu/{vmid}/dbus-vmstate",
            dbus_vmstate,
        ),
    ]
}

fn console_perm(c: &Ctx) -> Result<(), PveError> {
    c.require(&format!("/vms/{}", c.req.p.vmid()?), "VM.Console")
}

/// `vncproxy` also hands out the cluster's CA (`cert`, `/etc/pve/pve-root-ca.pem`), for a
/// VNC client's TLS to the proxy port.
fn vncproxy(c: &mut Ctx) -> Result<Reply, PveError> {
    console_perm(c)?;
    let mut res = c.site.console_proxy(&c.req, Kind::Vnc)?;
    if let Some(pem) = c.ca_pem {
        res["cert"] = json!(pem);
    }
    Ok(Reply::data(res))
}

fn termproxy(c: &mut Ctx) -> Result<Reply, PveError> {
    console_perm(c)?;
    Ok(Reply::data(c.site.console_proxy(&c.req, Kind::Term)?))
}

fn vncwebsocket(c: &mut Ctx) -> Result<Reply, PveError> {
    console_perm(c)?;
    Ok(Reply::data(c.site.console_websocket(&c.req)?))
}

/// The remote-viewer settings carry the CA as one line, its newlines written `\n`
/// (`remote_viewer_config`: `$cacert =~ s/\n/\\n/g`), as a `.vv` file needs them.
fn spiceproxy(c: &mut Ctx) -> Result<Reply, PveError> {
    console_perm(c)?;
    let mut res = c.site.spice_proxy(&c.req)?;
    if let Some(pem) = c.ca_pem {
        res["ca"] = json!(pem.replace('\n', "\\n"));
    }
    Ok(Reply::data(res))
}

fn is_root(c: &Ctx) -> bool {
    c.req.who.task_user() == "root@pam"
}

/// What the guest does on a monitor command that changes it, through the executor.
fn apply(c: &mut Ctx, vmid: u32, effect: Effect) -> Result<(), String> {
    let now = c.req.now;
    match effect {
        Effect::None => Ok(()),
        Effect::Pause => c.site.run_vm(vmid, now, |e, vm, h| e.suspend(vm, h)),
        Effect::Resume => c.site.run_vm(vmid, now, |e, vm, h| e.resume(vm, h)),
        Effect::Reset => c.site.run_vm(vmid, now, |e, vm, h| e.reset(vm, h)),
        Effect::Powerdown => c.site.run_vm(vmid, now, |e, vm, h| e.shutdown(vm, h)),
        Effect::Quit => c.site.run_vm(vmid, now, |e, vm, h| e.stop(vm, h)),
    }
}

fn sendkey(c: &mut Ctx) -> Result<Reply, PveError> {
    console_perm(c)?;
    if c.req.p.flag("skiplock") && !is_root(c) {
        return Err(PveError::param(
            "skiplock",
            "Only root may use this option.",
        ));
    }
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    let key = c.req.p.req_str("key")?;
    if c.site.vm_on(&node, vmid)?.power == Power::Stopped {
        return Err(PveError::die(format!("VM {vmid} not running\n")));
    }
    let complaint = monitor::sendkey_error(&key);
    if !complaint.is_empty() {
        return Err(PveError::die(complaint));
    }
    Ok(Reply::null())
}

/// `POST …/monitor`: PVE answers 200 with the monitor's output, or with `ERROR: …` when the
/// monitor could not be reached; only permissions and a missing VM are errors.
fn monitor_cmd(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    c.require_any(&format!("/vms/{vmid}"), &["Sys.Audit", "Sys.Modify"])?;
    let line = c.req.p.req_str("command")?;
    let Some(name) = line.split_whitespace().next().map(str::to_string) else {
        return Err(PveError::die("no command specified\n"));
    };
    match monitor::needs(&name) {
        Some(Needs::Nothing) => {}
        Some(Needs::SysModify) => c.require("/", "Sys.Modify")?,
        Some(Needs::Root) if !is_root(c) => {
            return Err(PveError::die(format!("root-only command '{name}'\n")));
        }
        Some(Needs::Root) => {}
        None if !is_root(c) => {
            return Err(PveError::die(format!(
                "command '{name}' non-existent or not assigned a required permission yet, limiting to root user\n"
            )));
        }
        None => {}
    }
    let vm = c.site.vm_on(&node, vmid)?;
    if vm.power == Power::Stopped {
        return Ok(Reply::data(Value::from(format!(
            "ERROR: VM {vmid} not running\n"
        ))));
    }
    let (out, effect) = monitor::run(vm, &line, monitor::qemu_version(c.site.version));
    let out = match apply(c, vmid, effect) {
        Ok(()) => out,
        Err(e) => format!("ERROR: {e}\n"),
    };
    Ok(Reply::data(Value::from(out)))
}

fn dbus_vmstate(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    c.require(&format!("/vms/{vmid}"), "VM.Migrate")?;
    let running = c
        .site
        .vms
        .get(&vmid)
        .is_some_and(|v| v.node == node && v.power != Power::Stopped);
    if !running {
        return Err(PveError::param(
            "node",
            format!("VM {vmid} not running locally on node '{node}'"),
        ));
    }
    Ok(Reply::null())
}
