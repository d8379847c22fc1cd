//! The handlers' vocabulary: what a handler sees (`Ctx`) and how a family declares its
//! routes (`Route`). The table of all routes is `router`.

use crate::request::Request;
use crate::wire::{PveError, Reply};
use crate::world::Site;

/// Everything a handler sees: the site under lock and the request.
pub struct Ctx<'a> {
    pub site: &'a mut Site,
    pub req: Request,
    /// The cluster's root CA as the nodes keep it (`/etc/pve/pve-root-ca.pem`): the
    /// listener's own self-signed certificate, if it has one.
    pub ca_pem: Option<&'a str>,
}

impl Ctx<'_> {
    pub fn node(&self) -> Result<String, PveError> {
        self.req.node()
    }
    pub fn require(&self, path: &str, privilege: &str) -> Result<(), PveError> {
        self.site.require(&self.req.who, path, privilege)
    }
    /// At least one of the privileges (PVE's `any` rule; the error joins them with `|`).
    pub fn require_any(&self, path: &str, privs: &[&str]) -> Result<(), PveError> {
        self.site.require_any(&self.req.who, path, privs)
    }
}

pub type Handler = fn(&mut Ctx) -> Result<Reply, PveError>;

#[derive(Clone, Copy)]
pub struct Route {
    pub method: &'static str,
    pub template: &'static str,
    pub handler: Handler,
    /// `allowtoken => 0` in PVE: refused when called with an API token.
    pub allowtoken: bool,
    /// No `proxyto` in PVE: the node the request reached answers, and the handler checks
    /// the path's node itself (it may be `localhost`), so the dispatcher does not.
    pub local: bool,
}

impl Route {
    /// Mark the route as answered where the request arrives (see [`Route::local`]).
    pub const fn served_locally(self) -> Route {
        Route {
            local: true,
            ..self
        }
    }
}

pub const fn route(method: &'static str, template: &'static str, handler: Handler) -> Route {
    Route {
        method,
        template,
        handler,
        allowtoken: true,
        local: false,
    }
}
