//! The simulated world: one cluster per site, each with nodes, storages, VMs and tasks.
//! Every mutation happens under one lock, so concurrent requests see a consistent state.
//! The world builds itself from a scenario (`build`).

pub mod build;
pub mod guests;
pub mod index;
pub mod task_requests;
mod tasks;
pub mod work;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::access::model::{Access, Identity};
use crate::exec::{Disks, Executor, Host};
use crate::nodes::model::Node;
use crate::qemu::model::Vm;
use crate::scenario::{Backend, RemoteFileSpec, Scenario};
use crate::version::PveVersion;
use crate::wire::PveError;
use crate::world::work::TaskStore;

/// Every site of the running scenario, with the backends that carry out their effects.
#[derive(Clone, Debug)]
pub struct World {
    /// The scenario the sites were built from (the state file keeps it with them).
    pub scenario: Scenario,
    /// One entry per scenario site, in scenario order.
    pub sites: Vec<Site>,
    /// What runs every site's VMs; kept when the world is rebuilt (reset, new scenario).
    pub exec: Arc<dyn Executor>,
    /// What holds every site's volume data; kept when the world is rebuilt.
    pub disks: Arc<dyn Disks>,
    /// The runners of sites whose scenario names this other backend than `exec`/`disks`
    /// run; kept when the world is rebuilt.
    pub other: Option<(Backend, Runners)>,
}

/// What runs a site's VMs and holds its volume data.
#[derive(Clone, Debug)]
pub struct Runners {
    /// Starts, stops and observes the guests.
    pub exec: Arc<dyn Executor>,
    /// Creates, copies and frees the volume data.
    pub disks: Arc<dyn Disks>,
}

impl World {
    /// The site named `name` in the scenario, if any.
    pub fn site(&self, name: &str) -> Option<&Site> {
        self.sites.iter().find(|s| s.name == name)
    }

    /// The site named `name`, to change.
    pub fn site_mut(&mut self, name: &str) -> Option<&mut Site> {
        self.sites.iter_mut().find(|s| s.name == name)
    }

    /// The site that has a node of this name (node names are unique over all sites).
    pub fn site_of_node_mut(&mut self, node: &str) -> Option<&mut Site> {
        self.sites.iter_mut().find(|s| s.nodes.contains_key(node))
    }

    /// Bring every site up to `now` (Unix seconds): see `Site::tick`.
    pub fn tick(&mut self, now: f64) {
        for s in &mut self.sites {
            s.tick(now);
        }
    }
}

/// The executor of `node`: its own, else the site's `default` (a free function, so callers
/// can hold a VM of the same site mutably).
fn runners_on<'a>(
    default: &'a Arc<dyn Executor>,
    nodes: &'a BTreeMap<String, Runners>,
    node: &str,
) -> &'a Arc<dyn Executor> {
    nodes.get(node).map(|r| &r.exec).unwrap_or(default)
}

/// A site's durable state is what `persist` writes; the fields marked `skip` are the
/// runtime things that carry it out (executors, disks), which the server that loads the
/// state attaches again (`World::reattached`), or the scratch list of one task completion.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Site {
    /// The scenario's site name, unique in the world.
    pub name: String,
    /// The PVE release this site answers as (`/version`, API differences).
    pub version: PveVersion,
    /// Set: `/cluster/status` lists a cluster of this name; unset: a standalone node.
    pub cluster_name: Option<String>,
    /// Seconds from a guest start until its agent answers.
    pub boot_delay_secs: f64,
    /// Internet download speed for `download-url`, in MiB/s (a storage's own speed caps it).
    pub download_mib_s: f64,
    /// The URLs `download-url` finds, with their size (nothing is ever fetched).
    pub remote_files: Vec<RemoteFileSpec>,
    /// Users, groups, roles, tokens, ACLs, realms and pools (PVE's `/access`).
    pub access: Access,
    /// The nodes by name. Like `vms` and `cts` a tracked map (`tracked`): the state file
    /// journals the entries that changed.
    pub nodes: crate::tracked::Tracked<String, Node>,
    /// QEMU VMs by VMID, over all nodes.
    pub vms: crate::tracked::Tracked<u32, Vm>,
    /// LXC containers; absent in state files written before containers.
    #[serde(default)]
    pub cts: crate::tracked::Tracked<u32, crate::lxc::model::Ct>,
    /// Every task of the site's nodes, running or done (PVE's task list and UPIDs).
    pub tasks: TaskStore,
    /// Kept with its position, so a restarted server draws the same MACs and figures next.
    #[serde(with = "crate::rng_state")]
    pub rng: ChaCha8Rng,
    /// What runs the VMs (see `exec`): the qemu model decides, this carries it out.
    /// Runtime only (a process handle, not state): attached again on load.
    #[serde(skip, default = "crate::exec::simulated_exec")]
    pub exec: Arc<dyn Executor>,
    /// What holds the volumes' data (see `exec::Disks`): the storage and qemu models
    /// decide, this carries it out. Runtime only: attached again on load.
    #[serde(skip, default = "crate::exec::simulated_disks")]
    pub disks: Arc<dyn Disks>,
    /// Nodes whose scenario names another backend than the site's: their own runners.
    /// Runtime only: attached again on load.
    #[serde(skip)]
    pub node_runners: BTreeMap<String, Runners>,
    /// No node's `boot_at` comes before this, so a tick before it skips looking at the
    /// nodes (a tick comes with every request). Lowered wherever a `boot_at` is set
    /// (`finish_node_down`); runtime only: a built or loaded site looks on its first tick.
    #[serde(skip, default = "no_boot_known")]
    pub boots_not_before: f64,
    /// The log lines of the disk copies the task being completed ran, in order (see
    /// `tasks::model`): they replace its laid-out transfers. Empty between requests.
    #[serde(skip)]
    pub copy_logs: Vec<crate::exec::CopyLog>,
    /// The count of volume writes (`storage::volumes::writes`) when the site last shared its
    /// storages; runtime only: a built or loaded site shares on its first request.
    #[serde(skip)]
    pub shared_at_writes: Option<u64>,
    /// The guests by node and where the lowest free VMID can be (see `index`): derived
    /// from `vms` and `cts`, so runtime only; a loaded or copied site builds it again.
    #[serde(skip)]
    pub(crate) index: index::GuestIndex,
    /// The cluster-level firewall objects VM rules may name, and the firewall log.
    pub firewall: crate::firewall::cluster::ClusterFirewall,
    /// What every simulated guest starts with (the scenario's `guest:`).
    pub guest: crate::agent::guest_os::GuestSetup,
    /// The appliance index `aplinfo` lists (absent in state files written before it).
    #[serde(default)]
    pub appliances: Vec<crate::storage::appliance::Appliance>,
}

/// What `boots_not_before` starts as: nothing known, look at the nodes.
pub(crate) fn no_boot_known() -> f64 {
    f64::NEG_INFINITY
}

impl Site {
    /// Finish every task whose time has come, in order of completion; then let the
    /// executor see guests that changed on their own (a lab guest that powered itself off).
    pub fn tick(&mut self, now: f64) {
        let observed = self.exec.observes_guests()
            || self.node_runners.values().any(|r| r.exec.observes_guests());
        if observed {
            for vm in self.vms.values_mut() {
                let exec = runners_on(&self.exec, &self.node_runners, &vm.node);
                if vm.power != crate::qemu::model::Power::Stopped && exec.observes_guests() {
                    exec.refresh(vm, now);
                }
            }
            for ct in self.cts.values_mut() {
                let exec = runners_on(&self.exec, &self.node_runners, &ct.node);
                if ct.is_running() && exec.observes_guests() {
                    exec.refresh_ct(ct, now);
                }
            }
        }
        // Every task due before a node's boot completes first (its `stopall` among them).
        while let Some(seq) = self.tasks.first_due(now) {
            self.complete_task(seq);
        }
        self.boot_due_nodes(now);
        while let Some(seq) = self.tasks.first_due(now) {
            self.complete_task(seq);
        }
    }

    /// Carry out an effect on VM `vmid` through the executor (see `exec`); `Err` is the
    /// task's exit status.
    pub fn run_vm(
        &mut self,
        vmid: u32,
        now: f64,
        effect: impl FnOnce(&dyn Executor, &mut Vm, &mut Host<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let Some(vm) = self.vms.get_mut(&vmid) else {
            return Err(format!("VM {vmid} does not exist"));
        };
        let bridges = self
            .nodes
            .get(&vm.node)
            .map(|n| n.bridges.as_slice())
            .unwrap_or_default();
        let mut host = Host {
            rng: &mut self.rng,
            boot_delay_secs: self.boot_delay_secs,
            now,
            bridges,
        };
        let exec = runners_on(&self.exec, &self.node_runners, &vm.node);
        effect(exec.as_ref(), vm, &mut host)
    }

    /// What runs the VMs of `node`: its own backend's executor, else the site's.
    pub fn exec_on(&self, node: &str) -> &Arc<dyn Executor> {
        runners_on(&self.exec, &self.node_runners, node)
    }

    /// What holds the volume data of `node`'s storages: its own backend's, else the site's.
    pub fn disks_on(&self, node: &str) -> &Arc<dyn Disks> {
        self.node_runners
            .get(node)
            .map(|r| &r.disks)
            .unwrap_or(&self.disks)
    }

    /// A random MAC with Proxmox's OUI `BC:24:11`.
    pub fn random_mac(&mut self) -> String {
        let b: [u8; 3] = self.rng.random();
        format!("BC:24:11:{:02X}:{:02X}:{:02X}", b[0], b[1], b[2])
    }

    /// The node named `name` on this site, if any.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    /// PVE's `check_perm`: the privilege on the path, or 403 naming both.
    pub fn require(&self, who: &Identity, path: &str, privilege: &str) -> Result<(), PveError> {
        if self.access.has(who, path, privilege) {
            Ok(())
        } else {
            Err(PveError::perm(Some(format!("{path}, {privilege}"))))
        }
    }

    /// At least one of the privileges (PVE's `any` rule; the error joins them with `|`).
    pub fn require_any(&self, who: &Identity, path: &str, privs: &[&str]) -> Result<(), PveError> {
        if privs.iter().any(|p| self.access.has(who, path, p)) {
            Ok(())
        } else {
            Err(PveError::perm(Some(format!("{path}, {}", privs.join("|")))))
        }
    }

    /// The VM `vmid` if its config is on `node` (PVE's 500 otherwise).
    pub fn vm_on(&self, node: &str, vmid: u32) -> Result<&Vm, PveError> {
        self.vms
            .get(&vmid)
            .filter(|v| v.node == node)
            .ok_or_else(|| PveError::no_vm_config(node, vmid))
    }
}
