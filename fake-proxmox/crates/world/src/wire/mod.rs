//! The parts of PVE's wire format the model speaks: its errors (status, message, the `errors`
//! map) and the typed parameters a validated request carries. Rendering them onto HTTP is the
//! server's (`fake_proxmox::wire`).

pub mod error;
pub mod params;

pub use error::{ErrorBody, PveError};
pub use params::{Params, RawParam};

/// Perl-style boolean: PVE emits 1/0, never true/false.
pub fn b(v: bool) -> serde_json::Value {
    serde_json::Value::from(u8::from(v))
}
