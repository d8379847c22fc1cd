//! The lab backend as one piece: real volume files ([`FileDisks`]) and real guests
//! ([`LabExecutor`]) that boot from them, on segments addressed like the nodes' bridges.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vm_lab::guests::{GuestHost, HostOptions};

use super::{DEFAULT_SHUTDOWN_TIMEOUT, LabExecutor, VolumePath};
use crate::exec::{Disks, FileDisks};
use crate::world::Runners;

/// How the lab backend runs.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Volume files go under `<state_dir>/disks`, the guests' run directories under
    /// `<state_dir>/lab`; `None`: temporary directories removed when the server ends.
    pub state_dir: Option<PathBuf>,
    /// The most memory one guest's QEMU gets (PVE-side figures keep the config's).
    pub memory_cap_mib: u64,
    /// How long `shutdown` waits for the guest to power off before the task fails.
    pub shutdown_timeout: Duration,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            state_dir: None,
            memory_cap_mib: 1024,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}

/// Files and guests for the lab backend. A segment takes the addresses and DHCP pool of its
/// bridge as the node has it when a guest on it starts (see [`crate::exec::Host::bridges`]).
pub fn runners(opts: &LabOptions) -> Result<Runners, String> {
    let files = match &opts.state_dir {
        Some(d) => FileDisks::new(d.join("disks")),
        None => FileDisks::temp().map_err(|e| format!("making a temp dir for the disks: {e}"))?,
    };
    let files = Arc::new(files);
    let host = GuestHost::new(HostOptions {
        run_root: opts.state_dir.as_ref().map(|d| d.join("lab")),
        memory_cap_mib: opts.memory_cap_mib,
        ..HostOptions::default()
    })
    .map_err(|e| format!("starting the lab backend's guest host: {e}"))?;
    let disks_for_paths = files.clone();
    let volumes: VolumePath = Arc::new(move |node: &str, storage: &str, volname: &str| {
        disks_for_paths.path(node, storage, volname)
    });
    let exec = LabExecutor::new(host, volumes).with_shutdown_timeout(opts.shutdown_timeout);
    Ok(Runners {
        exec: Arc::new(exec),
        disks: files,
    })
}
