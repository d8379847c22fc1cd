//! The host's record of its containers, kept in the guest host's state (apart from the
//! starting code, so the guest host does not depend on it).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cgroup::CgroupBase;
use super::container::Container;
use crate::guests::net;

/// The containers of one host, kept in the host's state.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(super) containers: BTreeMap<String, Arc<Container>>,
    /// Names being started, with the memory they count: a second start of one is refused and
    /// the budget holds while they start.
    pub(super) starting: BTreeMap<String, u64>,
    /// The host's cgroup once probed (`Some(None)`: probed, not usable).
    pub(super) cgroups: Option<Option<CgroupBase>>,
}

impl Registry {
    /// Memory (MiB) of running and starting containers, as counted against the budget.
    pub(crate) fn memory_in_use_mib(&self) -> u64 {
        let running: u64 = self
            .containers
            .values()
            .filter(|c| c.is_running())
            .map(|c| c.budget_mib)
            .sum();
        running + self.starting.values().sum::<u64>()
    }

    /// Kill every container and remove their cgroups (the host is going away).
    pub(crate) fn kill_all(&mut self, lab_init_pid: u32) {
        let all: Vec<Arc<Container>> = std::mem::take(&mut self.containers).into_values().collect();
        for c in &all {
            c.kill();
        }
        for c in &all {
            c.wait_exit(Duration::from_secs(2));
            remove_cgroup(c.cgroup.as_deref());
        }
        delete_veths(
            lab_init_pid,
            &all.iter()
                .flat_map(|c| c.host_veths.iter().cloned())
                .collect::<Vec<_>>(),
        );
        if let Some(Some(base)) = self.cgroups.take() {
            base.remove();
        }
    }
}

/// Delete host-side veths that are still there (a container's end takes its pair along when
/// its network namespace goes, so most are gone already).
pub(super) fn delete_veths(lab_init_pid: u32, veths: &[String]) {
    for v in veths {
        if let Err(e) = net::run_ip(lab_init_pid, &[format!("link del {v}")]) {
            tracing::debug!("deleting {v}: {e}");
        }
    }
}

/// Remove a container's cgroup once its processes are gone (the kernel empties it as the PID
/// namespace dies).
pub(super) fn remove_cgroup(dir: Option<&Path>) {
    let Some(dir) = dir else { return };
    let deadline = Instant::now() + Duration::from_secs(2);
    while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}
