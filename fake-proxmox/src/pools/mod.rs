//! Resource pools (`/pools`, and the deprecated `/pools/{poolid}`): groups of VMs and
//! storages that ACLs on `/pool/{pool}` grant privileges on (see `access::perms`). The
//! pools themselves live in the site's access state, as PVE keeps them in `user.cfg`.
//!
//! # Deviations from real PVE
//! - A VM created or cloned with `pool=` joins the pool when the request is accepted (PVE:
//!   when its create task succeeds); destroying a VM leaves it listed in its pool's
//!   configuration (PVE removes it) until a VM of that id is created again — listings skip
//!   VMs that no longer exist, as PVE's do.
//! - Member figures are the VM's and storage's current ones (PVE: the last RRD sample); a
//!   storage member is shown on the first node (by name) that has it.

pub mod model;
pub mod routes;
