//! Access control: tickets, CSRF tokens, API tokens, roles, ACLs, privilege checks.
//!
//! # Deviations from real PVE
//! - Tickets are signed with HMAC-SHA256 (real PVE: RSA); the format is the same.
//! - Users, groups, roles, ACLs and realms are kept as PVE keeps them (`user.cfg`,
//!   `domains.cfg`), with PVE's checks and texts; built-in roles are PVE 9.1's. `root@pam`
//!   holds every privilege, as in PVE.
//! - No directory server is ever contacted: an LDAP/AD realm's `sync` task fails as it does
//!   when the server cannot be reached, `check-connection` is refused the same way. OpenID
//!   realms are kept but cannot be logged in with.
//! - PAM users are not system users: setting a password on the `pam` realm fails as
//!   `usermod` does for a user the node does not have (scenario users keep theirs).
//! - No TFA: every user's TFA listing is empty.

pub mod acl;
pub mod directory;
pub mod model;
pub mod perms;
pub mod realms;
pub mod roles;
pub mod users;
pub mod verbs;
