//! What every guest kind has, apart from what only QEMU (or, later, a container) has: the
//! config file's sections (`sections`). The kinds (`qemu`) build on this module; it never
//! imports them.

pub mod record;
pub mod sections;

pub use record::{Guest, GuestCore, GuestKind, Power};
