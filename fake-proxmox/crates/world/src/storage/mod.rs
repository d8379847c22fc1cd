//! Storage: plugins (dir, lvmthin, cephfs, ...), content types, volumes, capacity.
//!
//! # Deviations from real PVE
//! - Storages are configured per node (no cluster-wide `storage.cfg` with node lists); a
//!   `shared` storage is on every node of its site with one set of volumes (`shared`).
//! - Thin storages (lvmthin, dir raw/qcow2, rbd, zfspool) account only data actually
//!   written (imports, downloads); a freshly allocated empty disk takes no space.
//! - By default nothing is stored on disk: volumes are records with a size. With
//!   `FileDisks` (`exec::Disks`) each volume is also a real, sparse file; capacity still
//!   follows the scenario's numbers.
//! - Backups are only placed (scenario, `POST /_fake/.../volumes`), never made; their names'
//!   times are read as UTC.
//! - `oci-registry-pull` reaches no registry: its task fails as without name resolution.
//! - `import-metadata` reads no OVF: each OVA/OVF describes the same typical VM (`import_meta`).
//! - File restore needs PBS, which the fake has none of: always PVE's refusal.

pub mod aplinfo;
pub mod appliance;
pub mod attributes;
pub mod backup;
pub mod content;
pub mod copy;
pub mod data;
pub mod download;
pub mod features;
pub mod image_facts;
pub mod import_meta;
pub mod kinds;
pub mod model;
pub mod oci;
pub mod prune;
pub mod restore;
pub mod shared;
pub mod snippets;
pub mod upload;
pub mod volid;
pub mod volumes;
