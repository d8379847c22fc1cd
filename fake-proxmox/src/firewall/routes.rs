//! `/nodes/{node}/{qemu,lxc}/{vmid}/firewall/...`: the request to the model's verb, its
//! answer as PVE renders it. pve-firewall serves both families with one module
//! (`PVE::API2::Firewall::VM` and `::CT` differ only in their rule environment), so the
//! same handlers are registered under each family's path.

use serde_json::Value;

use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};

/// The firewall routes of one guest family, under `$fw` (its `…/{vmid}/firewall` path).
macro_rules! guest_firewall {
    ($fw:literal) => {
        vec![
            route("GET", $fw, index),
            route("GET", concat!($fw, "/options"), options_get),
            route("PUT", concat!($fw, "/options"), |c| {
                done(c.site.set_firewall_options(&c.req))
            }),
            route("GET", concat!($fw, "/rules"), rules_get),
            route("POST", concat!($fw, "/rules"), |c| {
                done(c.site.create_firewall_rule(&c.req))
            }),
            route("GET", concat!($fw, "/rules/{pos}"), |c| {
                Ok(Reply::data(c.site.firewall_rule(&c.req)?))
            }),
            route("PUT", concat!($fw, "/rules/{pos}"), |c| {
                done(c.site.update_firewall_rule(&c.req))
            }),
            route("DELETE", concat!($fw, "/rules/{pos}"), |c| {
                done(c.site.delete_firewall_rule(&c.req))
            }),
            route("GET", concat!($fw, "/aliases"), aliases_get),
            route("POST", concat!($fw, "/aliases"), |c| {
                done(c.site.create_firewall_alias(&c.req))
            }),
            route("GET", concat!($fw, "/aliases/{name}"), alias_get),
            route("PUT", concat!($fw, "/aliases/{name}"), |c| {
                done(c.site.update_firewall_alias(&c.req))
            }),
            route("DELETE", concat!($fw, "/aliases/{name}"), |c| {
                done(c.site.delete_firewall_alias(&c.req))
            }),
            route("GET", concat!($fw, "/ipset"), ipsets_get),
            route("POST", concat!($fw, "/ipset"), |c| {
                done(c.site.create_firewall_ipset(&c.req))
            }),
            route("GET", concat!($fw, "/ipset/{name}"), ipset_get),
            route("POST", concat!($fw, "/ipset/{name}"), |c| {
                done(c.site.add_firewall_ipset_entry(&c.req))
            }),
            route("DELETE", concat!($fw, "/ipset/{name}"), |c| {
                done(c.site.delete_firewall_ipset(&c.req))
            }),
            route("GET", concat!($fw, "/ipset/{name}/{cidr}"), |c| {
                Ok(Reply::data(c.site.firewall_ipset_entry(&c.req)?))
            }),
            route("PUT", concat!($fw, "/ipset/{name}/{cidr}"), |c| {
                done(c.site.update_firewall_ipset_entry(&c.req))
            }),
            route("DELETE", concat!($fw, "/ipset/{name}/{cidr}"), |c| {
                done(c.site.delete_firewall_ipset_entry(&c.req))
            }),
            route("GET", concat!($fw, "/refs"), refs_get),
            route("GET", concat!($fw, "/log"), log),
        ]
    };
}

/// The `/api2/json` routes of the guest firewall, the same set under
/// `/nodes/{node}/qemu/{vmid}/firewall` and `/nodes/{node}/lxc/{vmid}/firewall`: options,
/// rules (`rules/{pos}`), aliases, IP sets and their entries, `refs` and `log`; collected
/// into the router's table.
pub fn routes() -> Vec<Route> {
    let mut v = guest_firewall!("/nodes/{node}/qemu/{vmid}/firewall");
    v.extend(guest_firewall!("/nodes/{node}/lxc/{vmid}/firewall"));
    v
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

fn options_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Object(c.site.firewall_options(&c.req)?)))
}

fn rules_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Array(c.site.firewall_rules(&c.req)?)))
}

fn aliases_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Array(c.site.firewall_aliases(&c.req)?)))
}

fn alias_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Object(c.site.firewall_alias(&c.req)?)))
}

fn ipsets_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Array(c.site.firewall_ipsets(&c.req)?)))
}

fn ipset_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Array(c.site.firewall_ipset(&c.req)?)))
}

fn refs_get(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(Value::Array(c.site.firewall_refs(&c.req)?)))
}

fn log(c: &mut Ctx) -> Result<Reply, PveError> {
    let page = c.site.firewall_log(&c.req)?;
    Ok(Reply::data(Value::Array(page.lines)).with("total", Value::from(page.total)))
}
