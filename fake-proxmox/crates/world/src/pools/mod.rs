//! Resource pools (`/pools`, and the deprecated `/pools/{poolid}`): groups of VMs and
//! storages that ACLs on `/pool/{pool}` grant privileges on (see `access::perms`). The
//! pools themselves live in the site's access state, as PVE keeps them in `user.cfg`.
//!
//! A VM created or cloned with `pool=` joins the pool when its task has made it (qemu-server
//! calls `add_vm_to_pool` at the end of the worker; a pool deleted meanwhile is skipped);
//! a destroyed VM leaves its pool, and its ACL entries go (`remove_vm_access`).
//!
//! # Deviations from real PVE
//! - Member figures are the VM's and storage's current ones (PVE: the last RRD sample); a
//!   storage member is shown on the first node (by name) that has it.

pub mod model;
