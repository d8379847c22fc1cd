//! What starting a container runs, as pure functions: the launcher's command line and the
//! `ip` commands that make its veth pairs.

use std::path::Path;

use super::spec::{ContainerNic, ContainerSpec};

/// The launcher script (see `launcher.sh`): run by a static busybox as the container's PID 1
/// until it execs the rootfs's `/sbin/init`.
pub(super) const LAUNCHER: &str = include_str!("launcher.sh");

/// `unshare` arguments (run inside the lab's namespaces) that make the container's own mount,
/// UTS, IPC, PID and network namespaces and run the launcher in them. `--kill-child`: the
/// container's init dies with `unshare`.
pub(super) fn launcher_argv(
    busybox: &Path,
    spec: &ContainerSpec,
    rootfs: &Path,
    go_fifo: &Path,
    status: &Path,
) -> Vec<String> {
    let mut v: Vec<String> = [
        "--mount",
        "--uts",
        "--ipc",
        "--pid",
        "--net",
        "--fork",
        "--kill-child",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(busybox.display().to_string());
    v.extend(["sh".into(), "-c".into(), LAUNCHER.into()]);
    v.push(format!("vm-lab-ct-{}", spec.name));
    v.push(rootfs.display().to_string());
    v.push(go_fifo.display().to_string());
    v.push(status.display().to_string());
    v.push(spec.hostname.clone());
    v.push(
        spec.nics
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    );
    for m in &spec.mounts {
        v.push(m.source.display().to_string());
        v.push(m.target.clone());
        v.push(if m.read_only { "1" } else { "0" }.into());
    }
    v
}

/// The host end of NIC `index` of the container numbered `seq` (`veth{seq}i{index}`, PVE's
/// shape).
pub(super) fn veth_name(seq: u32, index: usize) -> String {
    format!("veth{seq}i{index}")
}

/// `ip` commands (run in the lab's network namespace) making one veth pair per NIC: the peer
/// made directly in the container's network namespace (`netns PID`, a host PID: `ip` runs in
/// the host's PID namespace) under its own name and MAC, the host end enslaved to its bridge,
/// up unless the NIC's link is down.
pub(super) fn veth_commands(seq: u32, nics: &[ContainerNic], init_pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for (i, nic) in nics.iter().enumerate() {
        let host = veth_name(seq, i);
        let mtu = nic.mtu.map(|m| format!(" mtu {m}")).unwrap_or_default();
        let mac = nic
            .mac
            .as_ref()
            .map(|m| format!(" address {}", m.to_ascii_lowercase()))
            .unwrap_or_default();
        v.push(format!(
            "link add {host}{mtu} type veth peer name {}{mac}{mtu} netns {init_pid}",
            nic.name
        ));
        v.push(format!("link set {host} master {}", nic.bridge));
        v.push(format!(
            "link set {host} {}",
            if nic.link_up { "up" } else { "down" }
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::containers::BindMount;

    #[test]
    fn the_launcher_gets_the_rootfs_nics_and_mount_triples() {
        let mut s = ContainerSpec::new("ct1", "/r");
        s.hostname = "web1".into();
        s.nics = vec![
            ContainerNic::new("eth0", "vmbr0"),
            ContainerNic::new("eth1", "vmbr1"),
        ];
        s.mounts.push(BindMount {
            source: "/srv/data".into(),
            target: "/mnt/data".into(),
            read_only: true,
        });
        let v = launcher_argv(
            Path::new("/bb"),
            &s,
            Path::new("/r"),
            Path::new("/run/go"),
            Path::new("/run/st"),
        );
        let at = v.iter().position(|a| a == "--").unwrap();
        assert!(v[..at].contains(&"--pid".to_string()) && v[..at].contains(&"--kill-child".into()));
        assert_eq!(&v[at + 1..at + 4], ["/bb", "sh", "-c"]);
        assert_eq!(
            &v[at + 5..],
            [
                "vm-lab-ct-ct1",
                "/r",
                "/run/go",
                "/run/st",
                "web1",
                "eth0 eth1",
                "/srv/data",
                "/mnt/data",
                "1"
            ]
        );
    }

    #[test]
    fn each_nic_is_a_veth_pair_onto_its_bridge() {
        let mut a = ContainerNic::new("eth0", "vmbr0");
        a.mac = Some("BC:24:11:00:00:01".into());
        a.mtu = Some(1400);
        let mut b = ContainerNic::new("net1", "vmbr1");
        b.link_up = false;
        let v = veth_commands(7, &[a, b], 4242);
        assert_eq!(
            v,
            [
                "link add veth7i0 mtu 1400 type veth peer name eth0 address bc:24:11:00:00:01 mtu 1400 netns 4242",
                "link set veth7i0 master vmbr0",
                "link set veth7i0 up",
                "link add veth7i1 type veth peer name net1 netns 4242",
                "link set veth7i1 master vmbr1",
                "link set veth7i1 down",
            ]
        );
    }
}
