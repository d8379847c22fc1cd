//! The state file itself: its name, format and version, its errors, and the atomic write
//! every save goes through (the writer and the loader both build on this).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The `format` field of every state file.
pub const FORMAT: &str = "fake-proxmox-state";
/// The version of the layout this build writes and reads. Fields added since (the access
/// state's groups, roles, realms, pools and user details) have serde defaults, so older
/// files of this version still load.
pub const VERSION: u64 = 1;
/// The state file's name in the state dir.
pub const FILE: &str = "state.json";

/// Why a state dir could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Reading, writing or syncing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not JSON of the state file's shape (what was wrong).
    #[error("not a fake-proxmox state file: {0}")]
    NotState(String),
    /// A state file of a format version this build does not read.
    #[error(
        "state file version {found} cannot be read by this build (it reads version {VERSION}); \
         use the fake-proxmox build that wrote it, or start from a fresh state dir"
    )]
    Version {
        /// The version the file says it is.
        found: u64,
    },
    /// A state file of the right version whose content does not hold together (what).
    #[error("invalid state file: {0}")]
    Invalid(String),
}

/// Write `bytes` to `dir/name` so that a crash leaves either the old file or the new one:
/// a temp file in the same dir, fsynced, renamed over the old one, then the dir fsynced.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), PersistError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| PersistError::Io { path: p, source }
    };
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}
