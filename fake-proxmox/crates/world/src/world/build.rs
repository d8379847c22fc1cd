//! The world as a scenario describes it: sites, their nodes, bridges, storages with their
//! volumes, users, tokens and ACLs. The models know nothing of the scenario's types.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Runners, Site, World, runners_on};
use crate::access::model::{Access, Acl, Token, User};
use crate::exec::{Disks, Executor, Simulated, SimulatedDisks, StorageInfo};
use crate::nodes::model::{Bridge, Node};
use crate::scenario::{Backend, BridgeSpec, NodeSpec, Scenario, SiteSpec, StorageSpec};
use crate::storage::model::{Content, Storage, Volume};
use crate::storage::volid::parse_volname;
use crate::storage::volumes::Volumes;
use crate::world::work::TaskStore;

impl World {
    /// Every site of the scenario, its VMs run by `exec`; each site's random source is
    /// seeded from the scenario's seed and the site's place in it, so a scenario replays
    /// the same way.
    ///
    /// `disks` forgets the previous world's volumes and gets this one's storages and the
    /// volumes the scenario places (a volume whose data cannot be placed keeps its record,
    /// with a warning).
    pub fn from_scenario(
        scenario: &Scenario,
        now: f64,
        exec: Arc<dyn Executor>,
        disks: Arc<dyn Disks>,
    ) -> World {
        World::from_scenario_with(scenario, now, Runners { exec, disks }, None)
    }

    /// As [`World::from_scenario`]; the sites and nodes whose scenario names `other`'s
    /// backend get its runners, every other site and node `default`.
    pub fn from_scenario_with(
        scenario: &Scenario,
        now: f64,
        default: Runners,
        other: Option<(Backend, Runners)>,
    ) -> World {
        default.disks.reset();
        if let Some((_, o)) = &other {
            o.disks.reset();
        }
        let sites = scenario
            .sites
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (runners, node_runners) = site_runners(s, &default, &other);
                let mut site = Site {
                    exec: runners.exec.clone(),
                    disks: runners.disks.clone(),
                    node_runners,
                    ..Site::from_spec(s, scenario.seed.wrapping_add(i as u64 * 7919), now)
                };
                site.place_scenario_volumes(s);
                site
            })
            .collect();
        World {
            scenario: scenario.clone(),
            sites,
            exec: default.exec,
            disks: default.disks,
            other,
        }
    }

    /// A world read back from a state file (`persist`), run by these runners as
    /// `from_scenario_with` would assign them. The volumes' data stays where it is: the
    /// disks learn the storages again, nothing is reset or placed.
    pub fn reattached(
        scenario: Scenario,
        sites: Vec<Site>,
        default: Runners,
        other: Option<(Backend, Runners)>,
    ) -> World {
        let mut sites = sites;
        for (site, spec) in sites.iter_mut().zip(&scenario.sites) {
            let (runners, node_runners) = site_runners(spec, &default, &other);
            site.exec = runners.exec.clone();
            site.disks = runners.disks.clone();
            site.node_runners = node_runners;
            site.copy_logs.clear();
            let storages = crate::storage::shared::node_storages(spec);
            for n in &spec.nodes {
                for s in storages.get(&n.name).into_iter().flatten() {
                    site.add_storage_to_disks(spec, n, s);
                }
            }
            // Guests a backend really ran (lab QEMU, lab containers) did not outlive the
            // process.
            for vm in site.vms.values_mut() {
                if runners_on(&site.exec, &site.node_runners, &vm.node).observes_guests() {
                    vm.power_lost();
                }
            }
            for ct in site.cts.values_mut() {
                if runners_on(&site.exec, &site.node_runners, &ct.node).observes_guests() {
                    ct.core.power_lost();
                }
            }
        }
        World {
            scenario,
            sites,
            exec: default.exec,
            disks: default.disks,
            other,
        }
    }

    /// The same world's scenario again, from scratch, with the same executors and disks.
    pub fn rebuilt(&self, scenario: &Scenario, now: f64) -> World {
        let default = Runners {
            exec: self.exec.clone(),
            disks: self.disks.clone(),
        };
        World::from_scenario_with(scenario, now, default, self.other.clone())
    }
}

/// The runners of a site's spec and, for nodes that name the other backend, theirs.
fn site_runners(
    s: &SiteSpec,
    default: &Runners,
    other: &Option<(Backend, Runners)>,
) -> (Runners, BTreeMap<String, Runners>) {
    let pick = |asked: Option<Backend>| match (other, asked) {
        (Some((b, o)), Some(asked)) if *b == asked => (true, o),
        _ => (false, default),
    };
    let (site_other, runners) = pick(s.backend);
    let node_runners = s
        .nodes
        .iter()
        .filter_map(|n| {
            let (node_other, r) = pick(n.backend.or(s.backend));
            (node_other != site_other).then(|| (n.name.clone(), r.clone()))
        })
        .collect();
    (runners.clone(), node_runners)
}

impl Site {
    /// A site as its spec describes it, with no VMs or tasks yet, run by the simulated
    /// executor.
    pub fn from_spec(spec: &SiteSpec, seed: u64, now: f64) -> Site {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let key: [u8; 32] = rng.random();
        let storages = crate::storage::shared::node_storages(spec);
        let nodes = spec
            .nodes
            .iter()
            .map(|n| {
                let own = storages.get(&n.name).map_or(&[][..], Vec::as_slice);
                (n.name.clone(), node_from_spec(n, own, &mut rng, now))
            })
            .collect();
        Site {
            name: spec.name.clone(),
            version: spec.version,
            cluster_name: spec.cluster_name.clone(),
            boot_delay_secs: spec.boot_delay_secs,
            download_mib_s: spec.download_mib_s,
            remote_files: spec.remote_files.clone(),
            access: access_from_spec(spec, key),
            nodes,
            vms: Default::default(),
            cts: Default::default(),
            tasks: TaskStore::default(),
            rng,
            exec: Arc::new(Simulated),
            disks: Arc::new(SimulatedDisks),
            node_runners: BTreeMap::new(),
            boots_not_before: super::no_boot_known(),
            copy_logs: Vec::new(),
            shared_at_writes: None,
            index: Default::default(),
            firewall: crate::firewall::cluster::ClusterFirewall {
                cluster_fw: spec.cluster_firewall.clone().unwrap_or_default(),
                log: spec.firewall_log.clone(),
            },
            guest: spec.guest.clone(),
            appliances: spec
                .appliances
                .clone()
                .unwrap_or_else(crate::storage::appliance::builtin_index),
        }
    }

    /// Tell the disks seam about one storage of the spec; `false` (logged) when it refused it.
    fn add_storage_to_disks(&self, spec: &SiteSpec, n: &NodeSpec, s: &StorageSpec) -> bool {
        let info = StorageInfo {
            site: spec.name.clone(),
            node: n.name.clone(),
            name: s.name.clone(),
            kind: s.kind,
            backing_dir: s.backing_dir.clone(),
        };
        match self.disks_on(&n.name).add_storage(&info) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("storage {} on {}: {e}", s.name, n.name);
                false
            }
        }
    }

    /// Tell the disks seam about the spec's storages and place the volumes it lists.
    fn place_scenario_volumes(&mut self, spec: &SiteSpec) {
        let storages = crate::storage::shared::node_storages(spec);
        for n in &spec.nodes {
            for s in storages.get(&n.name).into_iter().flatten() {
                if !self.add_storage_to_disks(spec, n, s) {
                    continue;
                }
                for v in &s.volumes {
                    let placed = self.place_data(
                        &n.name,
                        &s.name,
                        &v.volname,
                        v.file.as_deref(),
                        v.size_bytes,
                    );
                    if let Err(e) = placed {
                        tracing::warn!("volume {}:{} on {}: {e}", s.name, v.volname, n.name);
                    }
                }
            }
        }
    }
}

/// Users, tokens and ACLs as the site spec lists them; `key` signs tickets.
pub fn access_from_spec(spec: &SiteSpec, key: [u8; 32]) -> Access {
    let mut access = Access::new(key);
    access.users = spec
        .users
        .iter()
        .map(|u| {
            let user = User::new(&u.userid, &u.password, u.enable);
            (u.userid.clone(), user)
        })
        .collect();
    access.tokens = spec
        .tokens
        .iter()
        .map(|t| {
            let token = Token {
                tokenid: t.tokenid.clone(),
                secret: t.secret.clone(),
                privsep: t.privsep,
                comment: None,
                expire: 0,
            };
            (t.tokenid.clone(), token)
        })
        .collect();
    access.acls = spec
        .acls
        .iter()
        .map(|a| Acl {
            path: a.path.clone(),
            ugid: a.ugid.clone(),
            role: a.role.clone(),
            propagate: a.propagate,
        })
        .collect();
    access
}

/// A storage with the volumes the scenario places on it (unparsable names are left out).
fn storage_from_spec(s: &StorageSpec, now: u64) -> Storage {
    let mut volumes = Volumes::default();
    for v in &s.volumes {
        if let Some((vtype, vmid, format)) = parse_volname(s.kind, &v.volname) {
            volumes.insert(
                v.volname.clone(),
                Volume {
                    volname: v.volname.clone(),
                    vtype,
                    format,
                    size: v.size_bytes,
                    used: v.used_bytes.unwrap_or(v.size_bytes),
                    vmid,
                    ctime: now,
                    // Only a backup on a file-based storage has attributes.
                    notes: v.notes.clone().filter(|_| vtype == Content::Backup),
                    protected: v.protected && vtype == Content::Backup,
                    image: v.image.clone(),
                    text: v.text.clone().filter(|_| vtype == Content::Snippets),
                },
            );
        }
    }
    Storage {
        name: s.name.clone(),
        kind: s.kind,
        path: s.path.clone().or_else(|| {
            s.kind
                .is_file_based()
                .then(|| format!("/mnt/pve/{}", s.name))
        }),
        content: s.content.iter().copied().collect(),
        total: s.total_bytes,
        speed_mib_s: s.speed_mib_s,
        shared: s.shared,
        enabled: true,
        full: false,
        prune_backups: s.prune_backups.clone(),
        volumes,
        archive_configs: s
            .volumes
            .iter()
            .filter(|v| {
                parse_volname(s.kind, &v.volname).is_some_and(|(t, _, _)| t == Content::Backup)
            })
            .filter_map(|v| Some((v.volname.clone(), v.config.clone()?)))
            .collect(),
        backing_dir: s.backing_dir.clone(),
    }
}

/// A node as the scenario describes it, up for a few days (deterministic per `rng`).
/// A node with `storages`: its own and the site's shared ones.
fn node_from_spec(n: &NodeSpec, storages: &[StorageSpec], rng: &mut impl Rng, now: f64) -> Node {
    let bridges: Vec<Bridge> = n.bridges.iter().map(bridge_from_spec).collect();
    let booted_at = now - 86_400.0 * 3.0 - f64::from(rng.random_range(0..86_400u32));
    Node {
        name: n.name.clone(),
        ip: n.ip.clone(),
        online: n.online,
        cpu_model: n.cpu_model.clone(),
        sockets: n.sockets,
        cores: n.cores,
        threads: n.threads,
        memory: n.memory_bytes,
        booted_at,
        powered_off: false,
        boot_at: None,
        network: crate::nodes::network::NodeNetwork::from_bridges(&bridges, booted_at),
        bridges,
        storages: storages
            .iter()
            .map(|s| (s.name.clone(), storage_from_spec(s, now as u64)))
            .collect(),
        armed_failures: Vec::new(),
    }
}

/// A node's Linux bridge as the scenario declares it, its link up; a DHCP range counts
/// only when both ends parse as IPv4 addresses.
pub fn bridge_from_spec(b: &BridgeSpec) -> Bridge {
    Bridge {
        name: b.name.clone(),
        cidr: b.cidr.clone(),
        gateway: b.gateway.clone(),
        ports: b.ports.clone(),
        dhcp: match (&b.dhcp_start, &b.dhcp_end) {
            (Some(a), Some(z)) => a.parse().ok().zip(z.parse().ok()),
            _ => None,
        },
        link_cut: false,
    }
}
