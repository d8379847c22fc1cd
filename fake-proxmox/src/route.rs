//! The handlers' vocabulary: what a handler sees (`Ctx`) and how a family declares its
//! routes (`Route`). The table of all routes is `router`.

use crate::request::Request;
use crate::wire::{PveError, Reply};
use crate::world::Site;

/// Everything a handler sees: the site under lock and the request.
pub struct Ctx<'a> {
    /// The site (simulated cluster) the request reached, locked for the handler's whole run.
    pub site: &'a mut Site,
    /// The parsed request: who sent it, its path captures and its parameters.
    pub req: Request,
    /// The cluster's root CA as the nodes keep it (`/etc/pve/pve-root-ca.pem`): the
    /// listener's own self-signed certificate, if it has one.
    pub ca_pem: Option<&'a str>,
}

impl Ctx<'_> {
    /// The `{node}` of the path; an error (PVE's parameter error) if the route has none.
    pub fn node(&self) -> Result<String, PveError> {
        self.req.node()
    }
    /// The caller must hold `privilege` on the ACL `path` (e.g. `/vms/100`, `VM.Config.Disk`),
    /// else PVE's 403 naming both (`Permission check failed (/vms/100, VM.Config.Disk)`).
    pub fn require(&self, path: &str, privilege: &str) -> Result<(), PveError> {
        self.site.require(&self.req.who, path, privilege)
    }
    /// At least one of the privileges (PVE's `any` rule; the error joins them with `|`).
    pub fn require_any(&self, path: &str, privs: &[&str]) -> Result<(), PveError> {
        self.site.require_any(&self.req.who, path, privs)
    }
}

/// A route's handler: reads and changes the locked site, answers a reply or PVE's error.
pub type Handler = fn(&mut Ctx) -> Result<Reply, PveError>;

/// One API method: where it is and what answers it.
#[derive(Clone, Copy)]
pub struct Route {
    /// The HTTP method, upper case.
    pub method: &'static str,
    /// The path below `/api2/json`, parameters in braces as PVE's schema writes them
    /// (`/nodes/{node}/qemu/{vmid}/status/current`).
    pub template: &'static str,
    /// What answers it.
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

/// A route that API tokens may call and that is proxied to the path's node, as most PVE
/// methods are.
pub const fn route(method: &'static str, template: &'static str, handler: Handler) -> Route {
    Route {
        method,
        template,
        handler,
        allowtoken: true,
        local: false,
    }
}
