//! `/nodes/{node}/network` and `/nodes/{node}/network/{iface}`: list, create, read, update,
//! delete, apply (`PUT`) and revert (`DELETE`), as `PVE::API2::Network` answers them.

use serde_json::Value;

use crate::nodes::interfaces::{changes, iface_json};
use crate::nodes::network_ops::IfaceParams;
use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The `/api2/json` routes of a node's network configuration: `/nodes/{node}/network`
/// (list, create, apply pending changes with `PUT`, revert them with `DELETE`) and
/// `/nodes/{node}/network/{iface}` (read, update, delete); collected into the router's
/// table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/nodes/{node}/network", list),
        route("POST", "/nodes/{node}/network", create),
        route("PUT", "/nodes/{node}/network", apply),
        route("DELETE", "/nodes/{node}/network", revert),
        route("GET", "/nodes/{node}/network/{iface}", read),
        route("PUT", "/nodes/{node}/network/{iface}", update),
        route("DELETE", "/nodes/{node}/network/{iface}", delete),
    ]
}

/// Changes need `Sys.Modify` on the node.
fn modify(c: &Ctx) -> Result<String, PveError> {
    let node = c.node()?;
    c.require(&format!("/nodes/{node}"), "Sys.Modify")?;
    c.site.node_of_request(&c.req)?;
    Ok(node)
}

/// The interface's settings of the request, as the text the file would hold.
fn iface_params(c: &Ctx) -> IfaceParams {
    c.req
        .p
        .0
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "node" | "iface" | "delete"))
        .filter_map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => u8::from(*b).to_string(),
                Value::Null => return None,
                other => other.to_string(),
            };
            Some((k.clone(), text))
        })
        .collect()
}

fn list(c: &mut Ctx) -> Result<Reply, PveError> {
    let n = c.site.node_of_request(&c.req)?;
    let filter = c.req.p.str("type");
    let ifaces = n.network.working();
    let active = n.network.running();
    let mut out = Vec::new();
    for (name, d) in ifaces.iter().filter(|(name, _)| name.as_str() != "lo") {
        let is_bridge = d.kind == "bridge" || d.kind == "OVSBridge";
        let keep = match filter.as_deref() {
            None | Some("include_sdn") => true,
            Some("any_bridge") | Some("any_local_bridge") => is_bridge,
            Some(t) => t == d.kind,
        };
        // Bridges are listed only to users who may see or use them as SDN zone members.
        let visible = !is_bridge
            || c.site.access.has(
                &c.req.who,
                &format!("/sdn/zones/localnetwork/{name}"),
                "SDN.Audit",
            )
            || c.site.access.has(
                &c.req.who,
                &format!("/sdn/zones/localnetwork/{name}"),
                "SDN.Use",
            );
        if keep && visible {
            out.push(iface_json(name, d, &n.network, &active));
        }
    }
    let reply = Reply::data(Value::Array(out));
    Ok(match changes(&n.network) {
        Some(diff) => reply.with("changes", Value::String(diff)),
        None => reply,
    })
}

fn read(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    c.require(&format!("/nodes/{node}"), "Sys.Audit")?;
    let iface = c.req.p.req_str("iface")?;
    let n = c.site.node_of_request(&c.req)?;
    let ifaces = n.network.working();
    let Some(d) = ifaces.get(&iface) else {
        return Err(PveError::param("iface", "interface does not exist"));
    };
    let mut v = iface_json(&iface, d, &n.network, &n.network.running());
    // The single-interface answer is the parser's hash: it has no `iface` key.
    if let Value::Object(m) = &mut v {
        m.remove("iface");
    }
    Ok(Reply::data(v))
}

fn create(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = modify(c)?;
    let iface = c.req.p.req_str("iface")?;
    let p = iface_params(c);
    c.site.create_iface(&node, &iface, p, c.req.now)?;
    Ok(Reply::null())
}

fn update(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = modify(c)?;
    let iface = c.req.p.req_str("iface")?;
    let delete = c.req.p.str("delete");
    let p = iface_params(c);
    c.site
        .update_iface(&node, &iface, p, delete.as_deref(), c.req.now)?;
    Ok(Reply::null())
}

fn delete(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = modify(c)?;
    let iface = c.req.p.req_str("iface")?;
    c.site.delete_iface(&node, &iface, c.req.now)?;
    Ok(Reply::null())
}

fn apply(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = modify(c)?;
    let user = c.req.task_user();
    let upid = c.site.apply_network(&node, &user, c.req.now)?;
    Ok(Reply::data(Value::String(upid)))
}

fn revert(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = modify(c)?;
    c.site.revert_network(&node)?;
    Ok(Reply::null())
}
