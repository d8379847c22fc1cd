//! PVE version profiles: which behaviours a simulated site shows, per release.
//!
//! Each fact carries the release it appeared in (see `pve-api-facts.md`).

pub use crate::PveVersion;

impl PveVersion {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "7.1" => Some(Self::V7_1),
            "8.4" => Some(Self::V8_4),
            "9.1" => Some(Self::V9_1),
            _ => None,
        }
    }

    pub fn release(self) -> &'static str {
        match self {
            Self::V7_1 => "7.1",
            Self::V8_4 => "8.4",
            Self::V9_1 => "9.1",
        }
    }

    /// `pve-manager` version as `GET /version` reports it.
    pub fn manager_version(self) -> &'static str {
        match self {
            Self::V7_1 => "7.1-12",
            Self::V8_4 => "8.4.1",
            Self::V9_1 => "9.1.1",
        }
    }

    pub fn repoid(self) -> &'static str {
        match self {
            Self::V7_1 => "b3d09e1d",
            Self::V8_4 => "2a5fa54a8503f96d",
            Self::V9_1 => "42c5e26a5b2cdcc4",
        }
    }

    pub fn kernel(self) -> &'static str {
        match self {
            Self::V7_1 => "5.13.19-2-pve",
            Self::V8_4 => "6.8.12-9-pve",
            Self::V9_1 => "6.17.2-1-pve",
        }
    }

    /// Error bodies carry `message` since libpve-http-server-perl 5.2.0 (PVE 8.3-late).
    pub fn has_error_message_key(self) -> bool {
        self != Self::V7_1
    }

    /// The `import` storage content type exists since libpve-storage-perl 8.1.1 (PVE 8.2).
    pub fn has_import_content(self) -> bool {
        self != Self::V7_1
    }

    /// `memory` is a property string (rendered as a string) since PVE 8.1.
    pub fn memory_is_string(self) -> bool {
        self != Self::V7_1
    }

    /// `PUT .../resize` returns a UPID since qemu-server 8.0.1.
    pub fn resize_returns_upid(self) -> bool {
        self != Self::V7_1
    }

    /// An ISO attached without `media=cdrom` is refused since qemu-server 8.3.10 (PVE 8.4).
    pub fn iso_requires_cdrom(self) -> bool {
        self != Self::V7_1
    }
}
