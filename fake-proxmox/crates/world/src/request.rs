//! The request as the models see it: who asks, how they authenticated, the validated
//! parameters, and the site's clock. Routes hand it to a model verb whole.

use crate::access::model::Identity;
use crate::guest::GuestKind;
use crate::wire::{Params, PveError};

/// One API request as the models see it.
pub struct Request {
    /// Who asks (the user, and the token when authenticated by one).
    pub who: Identity,
    /// Authenticated with a ticket (not an API token): some PVE rules allow more then.
    pub via_ticket: bool,
    /// The schema path the request matched (`/nodes/{node}/lxc/{vmid}/rrd`): one handler may
    /// serve the same method of several families.
    pub template: &'static str,
    /// Path captures and form/query parameters, checked against the schema.
    pub p: Params,
    /// Site time (seconds) when the request is handled.
    pub now: f64,
}

impl Request {
    /// The `node` parameter.
    ///
    /// # Errors
    /// PVE's parameter error when it is missing.
    pub fn node(&self) -> Result<String, PveError> {
        self.p.req_str("node")
    }

    /// The `vmid` parameter.
    ///
    /// # Errors
    /// PVE's parameter error when it is missing, not an integer or out of range.
    pub fn vmid(&self) -> Result<u32, PveError> {
        self.p.vmid()
    }

    /// The guest kind the path names: its family's (`/nodes/{node}/lxc/…` is a container's,
    /// any other a VM's).
    pub fn guest_kind(&self) -> GuestKind {
        if self.template.starts_with("/nodes/{node}/lxc/") {
            GuestKind::Lxc
        } else {
            GuestKind::Qemu
        }
    }

    /// The user a task started by this request runs as (`user@realm!token`).
    pub fn task_user(&self) -> String {
        self.who.task_user()
    }

    /// `root@pam` itself, logged in with a ticket (PVE's test for root-only options).
    pub fn is_root_ticket(&self) -> bool {
        self.who.userid == "root@pam" && self.who.tokenid.is_none() && self.via_ticket
    }
}
