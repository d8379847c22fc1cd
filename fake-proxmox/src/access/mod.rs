//! Access control: tickets, CSRF tokens, API tokens, roles, ACLs, privilege checks.
//!
//! # Deviations from real PVE
//! - Tickets are signed with HMAC-SHA256 (real PVE: RSA); the format is the same.
//! - Only PAM/PVE users from the scenario; no groups, pools, TFA, realms sync.
//! - Built-in roles: Administrator, PVEVMAdmin, PVEAuditor, PVEVMUser, PVEDatastoreUser,
//!   NoAccess. `root@pam` holds every privilege, as in PVE.

pub mod model;
pub mod routes;
pub mod verbs;
