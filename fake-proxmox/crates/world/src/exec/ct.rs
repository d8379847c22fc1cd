//! What the container half of the execution seam carries: the work a create hands over once
//! its volumes exist, how a shutdown may end, and the interfaces a running container reports.
//! The simulated behaviour every executor has by default is here too.

use std::net::IpAddr;
use std::time::Duration;

use rand::Rng;

use super::{Host, Vol};
use crate::guest::Power;
use crate::lxc::model::Ct;

/// The end of a container's create task, handed over once its volumes are allocated and its
/// config written (`restore_archive`, then `post_create_hook`).
#[derive(Clone, Copy, Debug)]
pub struct CtCreate<'a> {
    /// The new container, its config naming the allocated volumes.
    pub ct: &'a Ct,
    /// `ostemplate` as the request gave it.
    pub ostemplate: &'a str,
    /// The template's volume (`None`: an absolute path, which only root may name).
    pub template: Option<Vol<'a>>,
    /// `ssh-public-keys`: root's `authorized_keys`.
    pub ssh_keys: Option<&'a str>,
}

/// What a create found out: the OS it detected in the unpacked template (`None`: nothing was
/// unpacked; the model's guess from the file name stands) and the task log lines it printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtCreated {
    /// The OS type detected in the unpacked template (`debian`, `alpine`, ...); `None`: nothing was
    /// unpacked.
    pub ostype: Option<String>,
    /// Task log lines the create printed.
    pub log: Vec<String>,
}

/// How `vzshutdown` (and the first half of `vzreboot`) ends a container: its init is asked
/// (`lxc-stop --timeout`), and after `timeout` it is killed when `force` (`forceStop`, always
/// for a reboot) or the task fails with `container did not stop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtShutdown {
    /// How long the container's init gets to stop before it is killed or the task fails.
    pub timeout: Duration,
    /// Kill the container once `timeout` has passed instead of failing (`forceStop`).
    pub force: bool,
}

/// `vzshutdown`'s default `timeout`, and what `lxc-stop` waits when a reboot gives none.
pub const CT_SHUTDOWN_DEFAULT: Duration = Duration::from_secs(60);

/// One interface of a running container (`ip --json address` in its network namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtIface {
    /// Interface name inside the container (`eth0`).
    pub name: String,
    /// MAC address, when it has one.
    pub mac: Option<String>,
    /// Its addresses with prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
}

/// The simulated start: a pid drawn from the site's seeded random source.
pub(super) fn start_simulated(ct: &mut Ct, host: &mut Host<'_>) {
    let pid = host.rng.random_range(2_000..4_000_000);
    ct.power = Power::Running;
    ct.started_at = host.now;
    ct.pid = Some(pid);
}
