//! The container template: a `vztmpl`-style `.tar.gz` root file system made only from Debian
//! packages (busybox-static with its applet links, dropbear, any requested packages with their
//! shared libraries), with a busybox-sh `/sbin/init` that configures the container the way PVE
//! leaves its files (`/etc/hostname`, `/etc/hosts`, `/etc/network/interfaces`,
//! `/root/.ssh/authorized_keys`), starts dropbear and prints `CT-READY …` on the console.
//! Cached by a hash of its inputs, like the cloud image.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The line init prints once the network is configured and dropbear runs.
pub const READY_MARKER: &str = "CT-READY";
/// The prefix of the lines init prints when a file it needs is malformed.
pub const ERROR_MARKER: &str = "CT-ERROR";

/// What goes into a template besides the base (busybox, dropbear, init).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRequest {
    /// Extra Debian packages whose programs land on PATH, e.g. `etcd-server`.
    pub packages: Vec<String>,
}

/// A built template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    /// The `.tar.gz` in the cache, named by the hash of its inputs.
    pub path: PathBuf,
    /// Package name → version of everything it was made from.
    pub packages: BTreeMap<String, String>,
    /// Size of the archive in bytes.
    pub bytes: u64,
}

/// Build the template (or reuse the cached one). Blocking.
pub fn build(cache: &Path, req: &TemplateRequest) -> Result<Template> {
    let _ = (cache, req);
    Err(Error::Image("not implemented yet".into()))
}
