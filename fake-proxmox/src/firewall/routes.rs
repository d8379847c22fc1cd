//! `/nodes/{node}/qemu/{vmid}/firewall/...`: the request to the model's verb, its answer
//! as PVE renders it.

use serde_json::Value;

use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

const FW: &str = "/nodes/{node}/qemu/{vmid}/firewall";

pub fn routes() -> Vec<Route> {
    let r = |method: &'static str, path: &'static str, h| route(method, path, h);
    vec![
        r("GET", FW, index),
        r("GET", "/nodes/{node}/qemu/{vmid}/firewall/options", |c| {
            Ok(Reply::data(Value::Object(c.site.firewall_options(&c.req)?)))
        }),
        r("PUT", "/nodes/{node}/qemu/{vmid}/firewall/options", |c| {
            done(c.site.set_firewall_options(&c.req))
        }),
        r("GET", "/nodes/{node}/qemu/{vmid}/firewall/rules", |c| {
            Ok(Reply::data(Value::Array(c.site.firewall_rules(&c.req)?)))
        }),
        r("POST", "/nodes/{node}/qemu/{vmid}/firewall/rules", |c| {
            done(c.site.create_firewall_rule(&c.req))
        }),
        r(
            "GET",
            "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
            |c| Ok(Reply::data(c.site.firewall_rule(&c.req)?)),
        ),
        r(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
            |c| done(c.site.update_firewall_rule(&c.req)),
        ),
        r(
            "DELETE",
            "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
            |c| done(c.site.delete_firewall_rule(&c.req)),
        ),
        r("GET", "/nodes/{node}/qemu/{vmid}/firewall/aliases", |c| {
            Ok(Reply::data(Value::Array(c.site.firewall_aliases(&c.req)?)))
        }),
        r("POST", "/nodes/{node}/qemu/{vmid}/firewall/aliases", |c| {
            done(c.site.create_firewall_alias(&c.req))
        }),
        r(
            "GET",
            "/nodes/{node}/qemu/{vmid}/firewall/aliases/{name}",
            |c| Ok(Reply::data(Value::Object(c.site.firewall_alias(&c.req)?))),
        ),
        r(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/firewall/aliases/{name}",
            |c| done(c.site.update_firewall_alias(&c.req)),
        ),
        r(
            "DELETE",
            "/nodes/{node}/qemu/{vmid}/firewall/aliases/{name}",
            |c| done(c.site.delete_firewall_alias(&c.req)),
        ),
        r("GET", "/nodes/{node}/qemu/{vmid}/firewall/ipset", |c| {
            Ok(Reply::data(Value::Array(c.site.firewall_ipsets(&c.req)?)))
        }),
        r("POST", "/nodes/{node}/qemu/{vmid}/firewall/ipset", |c| {
            done(c.site.create_firewall_ipset(&c.req))
        }),
        r(
            "GET",
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}",
            |c| Ok(Reply::data(Value::Array(c.site.firewall_ipset(&c.req)?))),
        ),
        r(
            "POST",
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}",
            |c| done(c.site.add_firewall_ipset_entry(&c.req)),
        ),
        r(
            "DELETE",
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}",
            |c| done(c.site.delete_firewall_ipset(&c.req)),
        ),
        r(
            "GET",
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}",
            |c| Ok(Reply::data(c.site.firewall_ipset_entry(&c.req)?)),
        ),
        r(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}",
            |c| done(c.site.update_firewall_ipset_entry(&c.req)),
        ),
        r(
            "DELETE",
            "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}",
            |c| done(c.site.delete_firewall_ipset_entry(&c.req)),
        ),
        r("GET", "/nodes/{node}/qemu/{vmid}/firewall/refs", |c| {
            Ok(Reply::data(Value::Array(c.site.firewall_refs(&c.req)?)))
        }),
        r("GET", "/nodes/{node}/qemu/{vmid}/firewall/log", log),
    ]
}

/// The directory index (any user; PVE lists no `log` here).
fn index(_: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::index(
        "name",
        &["rules", "aliases", "ipset", "refs", "options"],
    ))
}

fn done(r: Result<(), PveError>) -> Result<Reply, PveError> {
    r.map(|()| Reply::null())
}

fn log(c: &mut Ctx) -> Result<Reply, PveError> {
    let page = c.site.firewall_log(&c.req)?;
    Ok(Reply::data(Value::Array(page.lines)).with("total", Value::from(page.total)))
}
