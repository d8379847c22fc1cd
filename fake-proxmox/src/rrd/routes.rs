//! `GET …/qemu/{vmid}/rrd|rrddata`, `GET …/lxc/{vmid}/rrd|rrddata` (pve-container's `rrd`
//! and `rrddata` read the same `pve-vm-9.0/{vmid}` file as qemu-server's) and
//! `GET …/storage/{storage}/rrd|rrddata`.

use serde_json::json;

use super::series::{Figures, guest_rows, storage_rows, timeframe};
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};
use fake_proxmox_world::guest::GuestKind;

/// The `/api2/json` routes of usage statistics: `rrd` and `rrddata` of VMs, containers and
/// storages (`/nodes/{node}/{qemu,lxc}/{vmid}/rrd[data]`,
/// `/nodes/{node}/storage/{storage}/rrd[data]`); collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/nodes/{node}/qemu/{vmid}/rrddata", guest_rrddata),
        route("GET", "/nodes/{node}/qemu/{vmid}/rrd", guest_rrd),
        route("GET", "/nodes/{node}/lxc/{vmid}/rrddata", guest_rrddata),
        route("GET", "/nodes/{node}/lxc/{vmid}/rrd", guest_rrd),
        route(
            "GET",
            "/nodes/{node}/storage/{storage}/rrddata",
            storage_rrddata,
        ),
        route("GET", "/nodes/{node}/storage/{storage}/rrd", storage_rrd),
    ]
}

/// `timeframe` as resolution and rows. The schema admits `decade` only where the version
/// has it; rrdtool itself refuses what is left.
fn frame(c: &Ctx) -> Result<(u64, u64), PveError> {
    let name = c.req.p.req_str("timeframe")?;
    timeframe(&name, c.site.version)
        .ok_or_else(|| PveError::param("timeframe", format!("value '{name}' does not have a value in the enumeration 'hour, day, week, month, year'")))
}

fn is_max(c: &Ctx) -> bool {
    c.req.p.str("cf").as_deref() == Some("MAX")
}

/// When the guest was made: the start of its `qmcreate`/`qmrestore` (`vzcreate`/
/// `vzrestore`) task (a clone's task carries the source VMID, so only create and restore
/// name it); `None` when no task made it here (a scenario's guest, or one whose tasks
/// rotated out).
fn created_at(c: &Ctx, vmid: u32) -> Option<f64> {
    let id = vmid.to_string();
    let made = match c.req.guest_kind() {
        GuestKind::Qemu => ["qmcreate", "qmrestore"],
        GuestKind::Lxc => ["vzcreate", "vzrestore"],
    };
    c.site
        .tasks
        .iter()
        .find(|t| made.contains(&t.ttype.as_str()) && t.id == id)
        .map(|t| t.start)
}

/// The figures of the path's guest: a VM on a `qemu` path, a container on an `lxc` one.
fn figures(c: &Ctx, node: &str, vmid: u32) -> Result<Figures, PveError> {
    Ok(match c.req.guest_kind() {
        GuestKind::Qemu => Figures::of_vm(c.site.vm_on(node, vmid)?, c.req.now, c.site.version),
        GuestKind::Lxc => Figures::of_ct(c.site.ct_on(node, vmid)?, c.site.node_cpus(node)),
    })
}

fn guest_rrddata(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    c.require(&format!("/vms/{vmid}"), "VM.Audit")?;
    let (reso, count) = frame(c)?;
    let born = created_at(c, vmid);
    let f = figures(c, &node, vmid)?;
    let rows = guest_rows(&f, born, c.req.now, reso, count, is_max(c), c.site.version);
    Ok(Reply::data(json!(rows)))
}

/// The data sources a `ds` list may name, per file (rrdtool's `No DS called …` otherwise).
const VM_SOURCES: &[&str] = &[
    "maxcpu",
    "cpu",
    "maxmem",
    "mem",
    "maxdisk",
    "disk",
    "netin",
    "netout",
    "diskread",
    "diskwrite",
    "memhost",
    "pressurecpusome",
    "pressurecpufull",
    "pressureiosome",
    "pressureiofull",
    "pressurememorysome",
    "pressurememoryfull",
];
const STORAGE_SOURCES: &[&str] = &["total", "used"];

/// `rrd`: PVE renders a PNG graph of up to two sources and answers its file name with it.
/// The fake checks what PVE checks and names the file PVE would; it draws no image.
fn graph(c: &Ctx, file: &str, sources: &[&str]) -> Result<Reply, PveError> {
    frame(c)?;
    let ds = c.req.p.req_str("ds")?;
    let ids: Vec<&str> = ds
        .split(|ch: char| ch == ',' || ch == ';' || ch.is_whitespace())
        .filter(|s| !s.is_empty())
        .collect();
    if ids.len() > 2 {
        return Err(PveError::die("fixme: no color definition\n"));
    }
    let path = format!("/var/lib/rrdcached/db/{file}");
    if let Some(bad) = ids.iter().find(|id| !sources.contains(id)) {
        return Err(PveError::die(format!(
            "RRD error: No DS called '{bad}' in '{path}'\n"
        )));
    }
    Ok(Reply::data(
        json!({ "filename": format!("{path}_{}.png", ids.join("_")) }),
    ))
}

fn guest_rrd(c: &mut Ctx) -> Result<Reply, PveError> {
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    c.require(&format!("/vms/{vmid}"), "VM.Audit")?;
    figures(c, &node, vmid)?;
    graph(c, &format!("pve-vm-9.0/{vmid}"), VM_SOURCES)
}

/// PVE's storage status permission (either privilege), checked before the storage is looked up.
fn storage_audit(c: &Ctx, storage: &str) -> Result<(), PveError> {
    c.require_any(
        &format!("/storage/{storage}"),
        crate::storage::content::AUDIT,
    )
}

fn storage_rrddata(c: &mut Ctx) -> Result<Reply, PveError> {
    let storage = c.req.p.req_str("storage")?;
    storage_audit(c, &storage)?;
    let (reso, count) = frame(c)?;
    let s = c.site.storage_of_request(&c.req)?;
    Ok(Reply::data(json!(storage_rows(s, c.req.now, reso, count))))
}

fn storage_rrd(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let storage = c.req.p.req_str("storage")?;
    storage_audit(c, &storage)?;
    c.site.storage_of_request(&c.req)?;
    graph(
        c,
        &format!("pve-storage-9.0/{node}/{storage}"),
        STORAGE_SOURCES,
    )
}
