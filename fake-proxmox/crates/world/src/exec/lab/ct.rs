//! Containers on the lab backend: a real Linux container on the host's segments
//! ([`vm_lab::containers`]) per running PVE container, its root file system the `rootfs`
//! volume's directory (`FileDisks` keeps container volumes as directories).
//!
//! - create: the template archive's real bytes unpacked into the root file system, the OS
//!   detected in it, root's `ssh-public-keys` and the setup files written
//!   (`lxc::setup::post_create`);
//! - start: PVE's setup files written again (`lxc::setup::pre_start`: interfaces, hostname,
//!   hosts, resolv.conf), then the container started with one NIC per `netN` (name, bridge,
//!   MAC, MTU, `link_down`), the `mpN` volumes (and root's bind mounts) mounted at their
//!   `mp=` paths, `memory`/`swap` as its limits;
//! - stop kills it; shutdown sends its init SIGPWR and waits (bounded by the executor's
//!   shutdown timeout), killing it after when `forceStop`; refresh notices an init that exited;
//! - `interfaces` is `ip --json address` inside it; `status/current` its real pid and memory.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use vm_lab::containers::{BindMount, Container, ContainerNic, ContainerSpec};
use vm_lab::guests::BridgeSpec;

use super::rootfs::{DirRoot, unpack};
use super::{LabExecutor, bridge_spec};
use crate::exec::{CtCreate, CtCreated, CtIface, CtShutdown, GuestAccess, Host};
use crate::guest::Power;
use crate::lxc::model::{Ct, MountPoint, MountType, NetConf, is_net_key, mount_points};
use crate::lxc::setup::{self, HostDns};
use crate::storage::volid::parse_volid;

/// How long a killed container's init may take to be gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The lab's name of container `vmid` on `node`.
pub fn container_name(node: &str, vmid: u32) -> String {
    format!("{node}-ct{vmid}")
}

/// PVE's start failure (`lxc-start` reports a failed pre-start hook or init this way), with
/// the reason after it.
fn startup_failed(vmid: u32, why: impl std::fmt::Display) -> String {
    format!("startup for container '{vmid}' failed - {why}")
}

/// The host's `/etc/resolv.conf`, as PVE's setup reads it for containers without their own.
fn host_dns() -> HostDns {
    HostDns::parse(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
}

/// Wait (bounded) until `c`'s init has left the process table: the container may count as
/// ended a moment before its init is reaped.
fn wait_reaped(c: &Container) {
    let deadline = std::time::Instant::now() + KILL_WAIT;
    c.wait_exit(KILL_WAIT);
    while vm_lab::namespace::alive(c.pid()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The container's process is gone.
fn gone(ct: &mut Ct) {
    ct.core.power_lost();
    ct.mem_used = None;
}

impl LabExecutor {
    /// The container running (or last run) for `ct`.
    pub fn container(&self, ct: &Ct) -> Option<Arc<Container>> {
        self.host.container(&container_name(&ct.node, ct.vmid))
    }

    fn running_container(&self, ct: &Ct) -> Option<Arc<Container>> {
        self.container(ct).filter(|c| c.is_running())
    }

    /// The host directory of a mount point's volume.
    fn volume_dir(&self, node: &str, key: &str, m: &MountPoint) -> Result<PathBuf, String> {
        match m.kind() {
            MountType::Bind => Ok(PathBuf::from(&m.volume)),
            MountType::Device => Err(format!(
                "{key}: device mount points ('{}') are not supported on the lab backend",
                m.volume
            )),
            MountType::Volume => {
                let (sid, volname) = parse_volid(&m.volume)
                    .ok_or_else(|| format!("{key}: unable to parse volume ID '{}'", m.volume))?;
                let dir = (self.volumes)(node, sid, volname)
                    .ok_or_else(|| format!("{key}: volume '{}' has no data here", m.volume))?;
                if !dir.is_dir() {
                    return Err(format!(
                        "{key}: volume '{}' is not a directory here ('{}')",
                        m.volume,
                        dir.display()
                    ));
                }
                Ok(dir)
            }
        }
    }

    fn rootfs_dir(&self, ct: &Ct) -> Result<PathBuf, String> {
        let value = ct
            .config
            .get("rootfs")
            .ok_or_else(|| format!("CT {} has no rootfs", ct.vmid))?;
        self.volume_dir(&ct.node, "rootfs", &MountPoint::parse(value))
    }

    /// `restore_archive` and `post_create_hook` into the new container's root.
    pub(super) fn create_container(&self, job: &CtCreate<'_>) -> Result<CtCreated, String> {
        let ct = job.ct;
        let root = self.rootfs_dir(ct)?;
        let archive: PathBuf = match job.template {
            Some(v) => (self.volumes)(v.node, v.storage, v.volname)
                .ok_or_else(|| format!("template '{}' has no file here", job.ostemplate))?,
            None => PathBuf::from(job.ostemplate),
        };
        unpack(&archive, job.ostemplate, &root)?;
        let dir = DirRoot::new(&root);
        let ostype = setup::detect_ostype(&dir).map_err(|e| e.to_string())?;
        let mut config = ct.config.clone();
        config.insert("ostype".into(), ostype.clone());
        let changes = setup::post_create(&config, &dir, &host_dns(), job.ssh_keys)
            .map_err(|e| e.to_string())?;
        dir.apply(&changes)?;
        Ok(CtCreated {
            ostype: Some(ostype),
            log: Vec::new(),
        })
    }

    /// The container's spec from its config: NICs, mount points, limits.
    fn container_spec(
        &self,
        ct: &Ct,
        root: &Path,
        host: &Host<'_>,
    ) -> Result<ContainerSpec, String> {
        let config = &ct.config;
        let mut spec = ContainerSpec::new(&container_name(&ct.node, ct.vmid), root);
        spec.hostname = ct
            .hostname()
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string();
        spec.memory_mib = ct.memory_bytes() >> 20;
        spec.swap_mib = ct.swap_bytes() >> 20;
        let mut nets: Vec<(u32, &String)> = config
            .iter()
            .filter(|(k, _)| is_net_key(k))
            .filter_map(|(k, v)| Some((k.strip_prefix("net")?.parse().ok()?, v)))
            .collect();
        nets.sort();
        for (n, value) in nets {
            let net = NetConf::parse(value);
            let (Some(name), Some(bridge)) = (net.get("name"), net.bridge()) else {
                tracing::warn!(
                    "CT {}: net{n} has no name or no bridge; the lab backend leaves it out",
                    ct.vmid
                );
                continue;
            };
            let cut = host.bridges.iter().any(|b| b.name == bridge && b.link_cut);
            let mut nic = ContainerNic::new(name, bridge);
            nic.mac = net.get("hwaddr").map(str::to_string);
            nic.mtu = net.get("mtu").and_then(|m| m.parse().ok());
            nic.link_up = net.get("link_down") != Some("1") && !cut;
            spec.nics.push(nic);
        }
        let mut mounts = Vec::new();
        for (key, m) in mount_points(config)
            .into_iter()
            .filter(|(k, _)| k != "rootfs")
        {
            let target =
                m.mp.clone()
                    .ok_or_else(|| format!("{key}: no mount point path (mp=)"))?;
            let read_only = m.opts.iter().any(|(k, v)| k == "ro" && v == "1");
            mounts.push(BindMount {
                source: self.volume_dir(&ct.node, &key, &m)?,
                target,
                read_only,
            });
        }
        // A mount below another goes after it, as PVE mounts them by path.
        mounts.sort_by(|a, b| a.target.cmp(&b.target));
        spec.mounts = mounts;
        Ok(spec)
    }

    /// `vm_start`: the setup files written, the segments made, the container run.
    pub(super) fn start_container(&self, ct: &mut Ct, host: &Host<'_>) -> Result<(), String> {
        if self.running_container(ct).is_some() {
            return Err(format!("CT {} already running", ct.vmid));
        }
        let vmid = ct.vmid;
        let root = self.rootfs_dir(ct).map_err(|e| startup_failed(vmid, e))?;
        let dir = DirRoot::new(&root);
        let changes =
            setup::pre_start(&ct.config, &dir, &host_dns()).map_err(|e| startup_failed(vmid, e))?;
        dir.apply(&changes).map_err(|e| startup_failed(vmid, e))?;
        let spec = self
            .container_spec(ct, &root, host)
            .map_err(|e| startup_failed(vmid, e))?;
        for nic in &spec.nics {
            let seg = host
                .bridges
                .iter()
                .find(|b| b.name == nic.bridge)
                .map(bridge_spec)
                .unwrap_or_else(|| BridgeSpec::new(&nic.bridge));
            self.host
                .ensure_bridge(&seg)
                .map_err(|e| startup_failed(vmid, format!("bridge '{}': {e}", nic.bridge)))?;
        }
        let c = self
            .host
            .start_container(spec)
            .map_err(|e| startup_failed(vmid, e))?;
        ct.power = Power::Running;
        ct.started_at = host.now;
        ct.pid = Some(c.pid());
        ct.mem_used = c.memory_used_bytes();
        Ok(())
    }

    /// `lxc-stop --kill`.
    pub(super) fn kill_container(&self, ct: &mut Ct) {
        if let Some(c) = self.container(ct) {
            c.kill();
            wait_reaped(&c);
        }
        gone(ct);
    }

    /// `lxc-stop [--nokill] --timeout`: SIGPWR to init, wait; kill after when `force`.
    pub(super) fn shut_down_container(&self, ct: &mut Ct, how: &CtShutdown) -> Result<(), String> {
        let Some(c) = self.running_container(ct) else {
            gone(ct);
            return Ok(());
        };
        let exited = c
            .shutdown(how.timeout.min(self.shutdown_timeout))
            .map_err(|e| format!("container did not stop - {e}"))?;
        if !exited {
            if !how.force {
                return Err("container did not stop".into());
            }
            c.kill();
        }
        wait_reaped(&c);
        gone(ct);
        Ok(())
    }

    pub(super) fn refresh_container(&self, ct: &mut Ct) {
        match self.running_container(ct) {
            None => gone(ct),
            Some(c) => {
                ct.pid = Some(c.pid());
                ct.mem_used = c.memory_used_bytes();
            }
        }
    }

    pub(super) fn container_interfaces(&self, ct: &Ct) -> Result<Vec<CtIface>, String> {
        let c = self
            .running_container(ct)
            .ok_or_else(|| format!("CT {} not running", ct.vmid))?;
        let ifaces = c.interfaces().map_err(|e| e.to_string())?;
        Ok(ifaces
            .into_iter()
            .map(|i| CtIface {
                name: i.name,
                mac: i.mac,
                addrs: i.addrs,
            })
            .collect())
    }

    /// The container's IPv4 address on `net0`'s interface.
    fn container_ipv4(&self, ct: &Ct) -> Result<Ipv4Addr, String> {
        let net0 = ct
            .config
            .get("net0")
            .ok_or_else(|| format!("CT {} has no net0", ct.vmid))?;
        let name = NetConf::parse(net0)
            .get("name")
            .unwrap_or("eth0")
            .to_string();
        let ifaces = self.container_interfaces(ct)?;
        ifaces
            .iter()
            .filter(|i| i.name == name)
            .flat_map(|i| i.addrs.iter())
            .find_map(|(ip, _)| match ip {
                IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_link_local() => Some(*v4),
                _ => None,
            })
            .ok_or_else(|| format!("CT {}: no IPv4 address on {name} (net0) yet", ct.vmid))
    }

    pub(super) fn container_access(
        &self,
        ct: &Ct,
        user: &str,
        key: &Path,
    ) -> Result<GuestAccess, String> {
        let c = self
            .running_container(ct)
            .ok_or_else(|| format!("CT {} is not running", ct.vmid))?;
        let address = self.container_ipv4(ct)?;
        let cmd = self.host.ssh_command(key, user, address, &[]);
        let ssh = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        Ok(GuestAccess {
            address: address.to_string(),
            ssh,
            serial_log: Some(c.console_log().to_string_lossy().into_owned()),
        })
    }

    pub(super) fn remove_container(&self, ct: &Ct) {
        if let Err(e) = self
            .host
            .remove_container(&container_name(&ct.node, ct.vmid))
        {
            tracing::warn!("removing the container of CT {}: {e}", ct.vmid);
        }
    }
}
