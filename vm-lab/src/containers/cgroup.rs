//! cgroup v2 memory limits for containers, where the machine lets us set them: a cgroup2
//! hierarchy whose `memory` controller can be enabled for a child of the driver's own cgroup.
//! Each host gets `vm-lab-<tag>` beside (under) the driver's cgroup and one `ct-<name>` per
//! container in it; `memory.max` and `memory.swap.max` hold the spec's figures. Elsewhere
//! (cgroup v1, a driver in a non-leaf cgroup that cannot delegate, a read-only /sys/fs/cgroup)
//! nothing is written and the limits are only counted against the host's budget.

use std::path::{Path, PathBuf};

/// The host's own cgroup, under which each container gets its own.
#[derive(Debug)]
pub(super) struct CgroupBase {
    dir: PathBuf,
}

impl CgroupBase {
    /// Make `vm-lab-<tag>` with the memory controller enabled for its children, or say why not.
    pub(super) fn probe(tag: &str) -> Result<CgroupBase, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let mount = cgroup2_mount(&mountinfo).ok_or("no cgroup2 hierarchy is mounted")?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let own = own_cgroup(&own).ok_or("this process is in no cgroup2 cgroup")?;
        let parent = mount.join(own.trim_start_matches('/'));
        let controllers = std::fs::read_to_string(parent.join("cgroup.controllers"))
            .map_err(|e| format!("{}: {e}", parent.display()))?;
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "the memory controller is not available in {} (controllers: {})",
                parent.display(),
                controllers.trim()
            ));
        }
        let dir = parent.join(format!("vm-lab-{tag}"));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let enabled = enable_memory(&parent).and_then(|()| enable_memory(&dir));
        if let Err(e) = enabled {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(CgroupBase { dir })
    }

    /// A cgroup for container `name` with its limits written; processes join it by writing
    /// their PID to its `cgroup.procs`.
    pub(super) fn create(
        &self,
        name: &str,
        memory_mib: u64,
        swap_mib: u64,
    ) -> Result<PathBuf, String> {
        let dir = self.dir.join(format!("ct-{name}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        }
        write(
            &dir.join("memory.max"),
            &(memory_mib * 1024 * 1024).to_string(),
        )?;
        // Absent where swap accounting is off: then there is no swap to limit.
        let swap = dir.join("memory.swap.max");
        if swap.exists() {
            write(&swap, &(swap_mib * 1024 * 1024).to_string())?;
        }
        Ok(dir)
    }

    /// Remove the host's cgroup (its containers' must be gone: a cgroup with processes stays).
    pub(super) fn remove(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.path().is_dir() {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Put `pid` into the cgroup `dir`.
pub(super) fn join(dir: &Path, pid: u32) -> Result<(), String> {
    write(&dir.join("cgroup.procs"), &pid.to_string())
}

/// `memory.current` of the cgroup `dir`.
pub(super) fn memory_current(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("memory.current"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn enable_memory(dir: &Path) -> Result<(), String> {
    let control = dir.join("cgroup.subtree_control");
    let now = std::fs::read_to_string(&control).unwrap_or_default();
    if now.split_whitespace().any(|c| c == "memory") {
        return Ok(());
    }
    write(&control, "+memory")
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value} to {}: {e}", path.display()))
}

/// The mount point of the cgroup2 hierarchy, from `/proc/self/mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let mount_point = left.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

/// This process's cgroup2 path (the `0::` line of `/proc/self/cgroup`).
fn own_cgroup(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_and_own_cgroup_are_found() {
        let hybrid = "25 30 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
            33 25 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
            40 25 0:35 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            cgroup2_mount("33 25 0:28 / /x rw - cgroup cgroup rw\n"),
            None
        );
        assert_eq!(
            own_cgroup("4:memory:/a\n0::/system.slice/ci.service\n").as_deref(),
            Some("/system.slice/ci.service")
        );
        assert_eq!(own_cgroup("4:memory:/a\n"), None);
    }
}
