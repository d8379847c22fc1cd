//! `/nodes/{node}/qemu/{vmid}/agent...`: the command from the path, the answer as
//! `{"result": …}`; `exec`, `exec-status`, `file-read`, `file-write` and `set-user-password`
//! with their own parameters and answers.

use serde_json::{Value, json};

use super::model::Caller;
use crate::exec::AgentCommand;
use crate::request::Request;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

const BASE: &str = "/nodes/{node}/qemu/{vmid}/agent";

/// The `/api2/json` routes of the QEMU guest agent under
/// `/nodes/{node}/qemu/{vmid}/agent…`: one per agent command PVE exposes (`ping`,
/// `get-osinfo`, `network-get-interfaces`, `fsfreeze-*`, `exec`, `file-read`, …) and the
/// generic `POST …/agent` with the command in its body; collected into the router's table.
pub fn routes() -> Vec<Route> {
    use AgentCommand::*;
    let g = |p: &'static str, h| route("GET", p, h);
    let p = |path: &'static str, h| route("POST", path, h);
    vec![
        g(BASE, index),
        p(BASE, by_name),
        g(
            "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
            |c| command(c, NetworkGetInterfaces),
        ),
        g("/nodes/{node}/qemu/{vmid}/agent/info", |c| command(c, Info)),
        g("/nodes/{node}/qemu/{vmid}/agent/get-host-name", |c| {
            command(c, GetHostName)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-osinfo", |c| {
            command(c, GetOsinfo)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-time", |c| {
            command(c, GetTime)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-timezone", |c| {
            command(c, GetTimezone)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-users", |c| {
            command(c, GetUsers)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-vcpus", |c| {
            command(c, GetVcpus)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-fsinfo", |c| {
            command(c, GetFsinfo)
        }),
        g("/nodes/{node}/qemu/{vmid}/agent/get-memory-blocks", |c| {
            command(c, GetMemoryBlocks)
        }),
        g(
            "/nodes/{node}/qemu/{vmid}/agent/get-memory-block-info",
            |c| command(c, GetMemoryBlockInfo),
        ),
        p("/nodes/{node}/qemu/{vmid}/agent/ping", |c| command(c, Ping)),
        p("/nodes/{node}/qemu/{vmid}/agent/fsfreeze-freeze", |c| {
            command(c, FsfreezeFreeze)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/fsfreeze-status", |c| {
            command(c, FsfreezeStatus)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/fsfreeze-thaw", |c| {
            command(c, FsfreezeThaw)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/fstrim", |c| {
            command(c, Fstrim)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/shutdown", |c| {
            command(c, Shutdown)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/suspend-disk", |c| {
            command(c, SuspendDisk)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/suspend-ram", |c| {
            command(c, SuspendRam)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/suspend-hybrid", |c| {
            command(c, SuspendHybrid)
        }),
        p("/nodes/{node}/qemu/{vmid}/agent/exec", exec),
        g("/nodes/{node}/qemu/{vmid}/agent/exec-status", exec_status),
        g("/nodes/{node}/qemu/{vmid}/agent/file-read", file_read),
        p("/nodes/{node}/qemu/{vmid}/agent/file-write", file_write),
        p(
            "/nodes/{node}/qemu/{vmid}/agent/set-user-password",
            set_user_password,
        ),
    ]
}

/// PVE lists every command without looking at the VM (`user => 'all'`, no config loaded).
fn index(_c: &mut Ctx) -> Result<Reply, PveError> {
    let cmds = [
        "exec",
        "exec-status",
        "file-read",
        "file-write",
        "fsfreeze-freeze",
        "fsfreeze-status",
        "fsfreeze-thaw",
        "fstrim",
        "get-fsinfo",
        "get-host-name",
        "get-memory-block-info",
        "get-memory-blocks",
        "get-osinfo",
        "get-time",
        "get-timezone",
        "get-users",
        "get-vcpus",
        "info",
        "network-get-interfaces",
        "ping",
        "set-user-password",
        "shutdown",
        "suspend-disk",
        "suspend-hybrid",
        "suspend-ram",
    ];
    Ok(Reply::index("name", &cmds))
}

fn command(c: &mut Ctx, cmd: AgentCommand) -> Result<Reply, PveError> {
    let result = c
        .site
        .agent_call(&c.node()?, c.req.p.vmid()?, &c.req.who, cmd, c.req.now)?;
    Ok(Reply::data(json!({ "result": result })))
}

/// The old `POST …/agent` with `command=<name>`: `VM.GuestAgent.Unrestricted` only.
fn by_name(c: &mut Ctx) -> Result<Reply, PveError> {
    use AgentCommand::*;
    let name = c.req.p.req_str("command")?;
    let cmd = match name.as_str() {
        "fsfreeze-freeze" => FsfreezeFreeze,
        "fsfreeze-status" => FsfreezeStatus,
        "fsfreeze-thaw" => FsfreezeThaw,
        "fstrim" => Fstrim,
        "get-fsinfo" => GetFsinfo,
        "get-host-name" => GetHostName,
        "get-memory-block-info" => GetMemoryBlockInfo,
        "get-memory-blocks" => GetMemoryBlocks,
        "get-osinfo" => GetOsinfo,
        "get-time" => GetTime,
        "get-timezone" => GetTimezone,
        "get-users" => GetUsers,
        "get-vcpus" => GetVcpus,
        "info" => Info,
        "network-get-interfaces" => NetworkGetInterfaces,
        "ping" => Ping,
        "shutdown" => Shutdown,
        "suspend-disk" => SuspendDisk,
        "suspend-hybrid" => SuspendHybrid,
        "suspend-ram" => SuspendRam,
        other => {
            return Err(PveError::param(
                "command",
                format!("value '{other}' does not have a value in the enumeration"),
            ));
        }
    };
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    c.site.vm_on(&node, vmid)?;
    c.site.require(
        &c.req.who,
        &format!("/vms/{vmid}"),
        "VM.GuestAgent.Unrestricted",
    )?;
    command(c, cmd)
}

fn exec(c: &mut Ctx) -> Result<Reply, PveError> {
    let command: Vec<String> = match c.req.p.0.get("command") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let input = c.req.p.str("input-data");
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    let res = c
        .site
        .agent_exec(caller(&c.req, &node, vmid), command, input)?;
    Ok(Reply::data(res))
}

fn exec_status(c: &mut Ctx) -> Result<Reply, PveError> {
    let pid = c.req.p.req_int("pid")?;
    let (node, vmid) = (c.node()?, c.req.p.vmid()?);
    let res = c.site.agent_exec_status(caller(&c.req, &node, vmid), pid)?;
    Ok(Reply::data(res))
}

fn file_read(c: &mut Ctx) -> Result<Reply, PveError> {
    let p = &c.req.p;
    let file = p.req_str("file")?;
    let count = p.int("count");
    let decode = p.bool("decode").unwrap_or(true);
    let offset = p.int("offset").unwrap_or(0);
    let (node, vmid) = (c.node()?, p.vmid()?);
    let res = c
        .site
        .agent_file_read(caller(&c.req, &node, vmid), &file, count, decode, offset)?;
    Ok(Reply::data(res))
}

fn file_write(c: &mut Ctx) -> Result<Reply, PveError> {
    let p = &c.req.p;
    let file = p.req_str("file")?;
    let content = p.req_str("content")?;
    let encode = p.bool("encode").unwrap_or(true);
    let (node, vmid) = (c.node()?, p.vmid()?);
    c.site
        .agent_file_write(caller(&c.req, &node, vmid), &file, &content, encode)?;
    Ok(Reply::null())
}

fn set_user_password(c: &mut Ctx) -> Result<Reply, PveError> {
    let p = &c.req.p;
    let username = p.req_str("username")?;
    let password = p.req_str("password")?;
    let crypted = p.flag("crypted");
    let (node, vmid) = (c.node()?, p.vmid()?);
    let result = c.site.agent_set_user_password(
        caller(&c.req, &node, vmid),
        &username,
        &password,
        crypted,
    )?;
    Ok(Reply::data(json!({ "result": result })))
}

/// The caller of an agent route (from the request alone: the site is borrowed apart).
fn caller<'a>(req: &'a Request, node: &'a str, vmid: u32) -> Caller<'a> {
    Caller {
        node,
        vmid,
        who: &req.who,
        now: req.now,
    }
}
