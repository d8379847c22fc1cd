//! PVE version profiles: which behaviours a simulated site shows, per release.
//!
//! Each gate names the release it appeared in and its source; the fake's releases are 7.1 (a
//! profile), 7.4, 8.4 and 9.1, so a gate of a release in between (8.1, 8.2, 8.3) holds from
//! 8.4 on. docs/src/fake-proxmox/releases.md has the table.

pub use crate::PveVersion;

impl PveVersion {
    /// The release named `s` (`"7.1"`, `"7.4"`, `"8.4"`, `"9.1"`, surrounding whitespace
    /// ignored); `None` for any other text, including fuller versions like `"8.4.5"`.
    pub fn parse(s: &str) -> Option<Self> {
        s.trim().parse().ok()
    }

    /// The release's short name, `"7.1"` … `"9.1"` (as [`PveVersion::as_str`]): the form a
    /// scenario's `version:` takes and `GET /version` reports as `release`.
    pub fn release(self) -> &'static str {
        self.as_str()
    }

    /// `pve-manager` version as `GET /version` reports it: 7.4-16 and 8.4.5 are the releases
    /// the API dumps were taken from (pve-manager `debian/changelog`).
    pub fn manager_version(self) -> &'static str {
        match self {
            Self::V7_1 => "7.1-12",
            Self::V7_4 => "7.4-16",
            Self::V8_4 => "8.4.5",
            Self::V9_1 => "9.1.1",
        }
    }

    /// `repoid`: the pve-manager commit the package was built from, `git rev-parse --short=8`
    /// up to 7.x and `--short=16` in 8.x (pve-manager `Makefile` `GITVERSION`): 7.4-16 is
    /// commit 0f39f621 ("bump version to 7.4-16", 2023-07-03), 8.4.5 is 57892e8e686cb35b
    /// (2025-07-18).
    pub fn repoid(self) -> &'static str {
        match self {
            Self::V7_1 => "b3d09e1d",
            Self::V7_4 => "0f39f621",
            Self::V8_4 => "57892e8e686cb35b",
            Self::V9_1 => "42c5e26a5b2cdcc4",
        }
    }

    /// The running kernel: the newest `pve-kernel` of the release's series when its
    /// pve-manager was bumped (pve-kernel `debian/changelog`: 5.15.108-1 of 2023-06-17 for
    /// 7.4-16, 6.8.12-12 of 2025-07-14 for 8.4.5).
    pub fn kernel(self) -> &'static str {
        match self {
            Self::V7_1 => "5.13.19-2-pve",
            Self::V7_4 => "5.15.108-1-pve",
            Self::V8_4 => "6.8.12-12-pve",
            Self::V9_1 => "6.17.2-1-pve",
        }
    }

    /// Error bodies carry `message` since libpve-http-server-perl 5.2.0 (PVE 8.3-late).
    pub fn has_error_message_key(self) -> bool {
        self >= Self::V8_4
    }

    /// The `import` storage content type exists since libpve-storage-perl 8.1.1 (PVE 8.2);
    /// its volumes are `import-from` sources since qemu-server 8.2.7 (PVE 8.3).
    pub fn has_import_content(self) -> bool {
        self >= Self::V8_4
    }

    /// `memory` is a property string (rendered as a string) since PVE 8.1.
    pub fn memory_is_string(self) -> bool {
        self >= Self::V8_4
    }

    /// `PUT .../resize` returns a UPID since qemu-server 8.0.1.
    pub fn resize_returns_upid(self) -> bool {
        self >= Self::V8_4
    }

    /// An ISO attached without `media=cdrom` is refused since qemu-server 8.3.10 (PVE 8.4).
    pub fn iso_requires_cdrom(self) -> bool {
        self >= Self::V8_4
    }

    /// A NIC's bridge needs `SDN.Use` on `/sdn/zones/localnetwork/<bridge>` since qemu-server
    /// 8.0.2 (commit 9cfd06d9, 2023-06-07, "api: check bridge access for create, update,
    /// clone & restore"; not on the 7.4 branch).
    pub fn bridge_needs_sdn_use(self) -> bool {
        self >= Self::V8_4
    }

    /// Block statistics carry the zoned-storage counters since QEMU 8.1 (PVE 7.4 runs
    /// pve-qemu-kvm 7.2).
    pub fn has_zoned_block_stats(self) -> bool {
        self >= Self::V8_4
    }

    /// A failed agent command names the peer (`qga command`) since qemu-server 9.1; before,
    /// every QMP client error said `qmp command`.
    pub fn names_qga_peer(self) -> bool {
        self >= Self::V9_1
    }
}
