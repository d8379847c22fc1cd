//! `/nodes/{node}/qemu/{vmid}/agent...`: the command from the path, the answer as
//! `{"result": …}`.

use serde_json::json;

use crate::exec::AgentCommand;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

pub fn routes() -> Vec<Route> {
    use AgentCommand::*;
    let g = |p: &'static str, h| route("GET", p, h);
    vec![
        g("/nodes/{node}/qemu/{vmid}/agent", index),
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
        route("POST", "/nodes/{node}/qemu/{vmid}/agent/ping", |c| {
            command(c, Ping)
        }),
    ]
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site
        .agent_vm(&c.node()?, c.req.p.vmid()?, &c.req.who, c.req.now)?;
    let cmds = [
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
