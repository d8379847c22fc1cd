//! `POST /nodes/{node}/status` (`reboot`, `shutdown`): the wire side; what a node's power-off
//! does is `nodes::power` in the model.

use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The `/api2/json` route `POST /nodes/{node}/status` (`command=reboot|shutdown`), which
/// powers a node off or reboots it; collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![route("POST", "/nodes/{node}/status", node_cmd)]
}

fn node_cmd(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    c.require(&format!("/nodes/{node}"), "Sys.PowerMgmt")?;
    let reboot = c.req.p.req_str("command")? == "reboot";
    c.site.power_off_node(&c.req, reboot)?;
    Ok(Reply::null())
}
