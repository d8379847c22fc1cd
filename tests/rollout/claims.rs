//! The deployer's claims checked against the cluster. A status JSON is only the deployer's word:
//! every outcome step also asks the fake (or the real PVE, through its API) whether the VM the
//! deployer reports is really there, configured as its manifest says, running, with the address
//! its guest agent reports — and, for a failure, whether anything the deployer created is left.
//!
//! The expected values are read from the manifest files the deployer was given and converted
//! here, independently of the deployer's own parsing (a deployer that reads `20Gi` as 20 GB must
//! not be judged by its own arithmetic).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use super::journal::Journal;
use super::pve::{Observer, VmSeen, disk_size_gib};
use super::status::{Status, VmStatus};
use super::world::{RolloutWorld, site_of_node};

/// What a manifest asks for, in PVE's units.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// A container (`kind: ProxmoxContainer`), not a VM.
    pub container: bool,
    pub name: String,
    pub site: String,
    pub node: String,
    pub cores: u64,
    pub memory_mib: u64,
    pub disk_gib: u64,
    pub storage: String,
    pub bridge: String,
}

/// `<n>Ki|Mi|Gi|Ti` (binary units, as Kubernetes quantities) into KiB; a bare number is
/// `bare_kib` KiB per unit.
fn quantity_kib(s: &str, bare_kib: u64) -> Option<u64> {
    let s = s.trim();
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    let n: u64 = s[..digits].parse().ok()?;
    let per = match &s[digits..] {
        "Ki" => 1,
        "Mi" => 1 << 10,
        "Gi" => 1 << 20,
        "Ti" => 1 << 30,
        "" => bare_kib,
        _ => return None,
    };
    n.checked_mul(per)
}

/// Memory in MiB (a bare number is MiB, PVE's unit).
pub fn memory_mib(s: &str) -> Option<u64> {
    quantity_kib(s, 1 << 10).map(|k| k >> 10)
}

/// Disk in GiB (a bare number is GiB, PVE's unit).
pub fn disk_gib(s: &str) -> Option<u64> {
    quantity_kib(s, 1 << 20).map(|k| k >> 20)
}

/// What each readable manifest under `dir` asks for, by VM name (a manifest whose sizes this
/// harness cannot read is left out: no VM of it can be judged ready).
pub fn expectations(dir: &Path) -> anyhow::Result<BTreeMap<String, Expected>> {
    let set = provision_harness::manifest::load_dir(dir)
        .with_context(|| format!("reading the manifests under {}", dir.display()))?;
    Ok(set
        .vms
        .iter()
        .map(|l| (&l.vm.spec.for_provider, l.vm.kind == "ProxmoxContainer"))
        .filter_map(|(fp, container)| {
            Some(Expected {
                container,
                name: fp.name.clone(),
                site: fp.site.clone(),
                node: fp.node.clone(),
                cores: u64::try_from(fp.cpu).ok()?,
                memory_mib: memory_mib(&fp.memory)?,
                disk_gib: disk_gib(&fp.disk)?,
                storage: fp.storage.clone(),
                bridge: fp.network.clone(),
            })
        })
        .map(|e| (e.name.clone(), e))
        .collect())
}

/// The manifest of VM `name` among the files under `dir`.
pub fn expected(dir: &Path, name: &str) -> anyhow::Result<Expected> {
    expectations(dir)?.remove(name).ok_or_else(|| {
        anyhow!(
            "no readable manifest under {} names a VM '{name}'",
            dir.display()
        )
    })
}

/// A config value as PVE sends it (numbers may come as strings).
fn cfg_str(cfg: &Value, key: &str) -> Option<String> {
    match &cfg[key] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn is_disk_key(k: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"]
        .iter()
        .any(|bus| k.strip_prefix(bus).is_some_and(|n| n.parse::<u8>().is_ok()))
}

/// The boot disk: the first device of `boot: order=…` that is a disk, else the first disk of
/// the usual buses; never a CD-ROM or the cloud-init drive.
fn boot_disk(cfg: &Value) -> Option<(String, String)> {
    let is_data_disk = |k: &str| {
        cfg_str(cfg, k).filter(|v| {
            is_disk_key(k)
                && !v.contains("cloudinit")
                && !v.contains("media=cdrom")
                && !v.starts_with("none")
        })
    };
    let order = cfg_str(cfg, "boot").unwrap_or_default();
    let from_order = order
        .split(',')
        .find_map(|p| p.strip_prefix("order="))
        .into_iter()
        .flat_map(|o| o.split(';'))
        .find_map(|k| is_data_disk(k).map(|v| (k.to_string(), v)));
    from_order.or_else(|| {
        ["scsi0", "virtio0", "sata0", "ide0"]
            .iter()
            .find_map(|k| is_data_disk(k).map(|v| (k.to_string(), v)))
    })
}

/// Everything in a VM's config that differs from its manifest (empty: it matches).
pub fn config_problems(cfg: &Value, e: &Expected) -> Vec<String> {
    let mut out = Vec::new();
    // PVE's default is one core when the key is absent.
    let cores = cfg_str(cfg, "cores").unwrap_or_else(|| "1".into());
    if cores != e.cores.to_string() {
        out.push(format!(
            "cores = {cores}, the manifest asks for {}",
            e.cores
        ));
    }
    let memory = cfg_str(cfg, "memory").unwrap_or_default();
    if memory != e.memory_mib.to_string() {
        out.push(format!(
            "memory = {memory:?} MiB, the manifest asks for {} MiB",
            e.memory_mib
        ));
    }
    match boot_disk(cfg) {
        None => out.push("no boot disk".into()),
        Some((key, value)) => {
            if !value.starts_with(&format!("{}:", e.storage)) {
                out.push(format!("{key} = {value:?} is not on storage {}", e.storage));
            }
            let size = disk_size_gib(&value);
            // Exact: the manifest's GiB, as PVE writes it (`size=20G`).
            if size != Some(e.disk_gib as f64) {
                out.push(format!(
                    "{key} = {value:?}: size {size:?} GiB, the manifest asks for {} GiB",
                    e.disk_gib
                ));
            }
        }
    }
    let net0 = cfg_str(cfg, "net0").unwrap_or_default();
    if !net0.split(',').any(|p| p == format!("bridge={}", e.bridge)) {
        out.push(format!("net0 = {net0:?} is not on bridge {}", e.bridge));
    }
    let cloudinit = cfg.as_object().is_some_and(|m| {
        m.iter()
            .any(|(k, v)| is_disk_key(k) && v.as_str().is_some_and(|v| v.contains("cloudinit")))
    });
    if !cloudinit {
        out.push("no cloud-init drive".into());
    }
    let agent = cfg_str(cfg, "agent").unwrap_or_default();
    let first = agent.split(',').next().unwrap_or_default();
    if !(first == "1" || first == "enabled=1") {
        out.push(format!(
            "agent = {agent:?}, expected the guest agent enabled (1)"
        ));
    }
    if let Some(lock) = cfg_str(cfg, "lock") {
        out.push(format!("the VM is still locked ({lock})"));
    }
    out
}

/// Everything in a container's config that differs from its manifest: cores, memory, the
/// rootfs's storage and size, the NIC's bridge, and no lock left.
pub fn ct_config_problems(cfg: &Value, e: &Expected) -> Vec<String> {
    let mut out = Vec::new();
    let cores = cfg_str(cfg, "cores").unwrap_or_else(|| "unlimited".into());
    if cores != e.cores.to_string() {
        out.push(format!(
            "cores = {cores}, the manifest asks for {}",
            e.cores
        ));
    }
    let memory = cfg_str(cfg, "memory").unwrap_or_default();
    if memory != e.memory_mib.to_string() {
        out.push(format!(
            "memory = {memory:?} MiB, the manifest asks for {} MiB",
            e.memory_mib
        ));
    }
    match cfg_str(cfg, "rootfs") {
        None => out.push("no rootfs".into()),
        Some(value) => {
            if !value.starts_with(&format!("{}:", e.storage)) {
                out.push(format!(
                    "rootfs = {value:?} is not on storage {}",
                    e.storage
                ));
            }
            let size = disk_size_gib(&value);
            if size != Some(e.disk_gib as f64) {
                out.push(format!(
                    "rootfs = {value:?}: size {size:?} GiB, the manifest asks for {} GiB",
                    e.disk_gib
                ));
            }
        }
    }
    let net0 = cfg_str(cfg, "net0").unwrap_or_default();
    if !net0.split(',').any(|p| p == format!("bridge={}", e.bridge)) {
        out.push(format!("net0 = {net0:?} is not on bridge {}", e.bridge));
    }
    if let Some(lock) = cfg_str(cfg, "lock") {
        out.push(format!("the container is still locked ({lock})"));
    }
    out
}

/// The IPv4 addresses of a container's own interfaces: the answer of `GET …/interfaces`.
pub fn ct_ipv4s(answer: &Value) -> Vec<String> {
    answer
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["name"] != "lo")
        .filter_map(|i| i["inet"].as_str())
        .map(|cidr| cidr.split('/').next().unwrap_or(cidr).to_string())
        .filter(|ip| !ip.starts_with("127.") && !ip.starts_with("169.254."))
        .collect()
}

/// The IPv4 addresses a guest agent reports for the VM's own interfaces (not loopback, not
/// link-local): the answer of `GET …/agent/network-get-interfaces`.
pub fn agent_ipv4s(answer: &Value) -> Vec<String> {
    answer["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["name"] != "lo")
        .flat_map(|i| i["ip-addresses"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["ip-address-type"] == "ipv4")
        .filter_map(|a| a["ip-address"].as_str().map(str::to_string))
        .filter(|ip| !ip.starts_with("127.") && !ip.starts_with("169.254."))
        .collect()
}

impl RolloutWorld {
    /// The name the scenario gave a VM the target holds as `name` (un-prefixed on a real target).
    pub fn scenario_name(&self, name: &str) -> String {
        match &self.map {
            Some(m) => m.scenario_name(name),
            None => name.to_string(),
        }
    }

    /// [`expectations`] keyed by the scenario's VM names (what a status reports once read back).
    pub fn wants(&self, dir: &Path) -> anyhow::Result<BTreeMap<String, Expected>> {
        Ok(expectations(dir)?
            .into_iter()
            .map(|(k, v)| (self.scenario_name(&k), v))
            .collect())
    }

    fn want(&self, dir: &Path, name: &str) -> anyhow::Result<Expected> {
        self.wants(dir)?.remove(name).ok_or_else(|| {
            anyhow!(
                "no readable manifest under {} names a VM '{name}'",
                dir.display()
            )
        })
    }

    /// An observer of the cluster that hosts `node`, and the node's name there.
    async fn cluster_of(&mut self, node: &str) -> anyhow::Result<(Observer, String)> {
        let real = self.real_node(node);
        let obs = self.observer(&real).await?;
        Ok((obs, real))
    }

    /// The deployer says VM `claim.name` is ready. Checks that the cluster holds exactly one VM of
    /// that name, on the manifest's node, with the VMID reported, running, configured as the
    /// manifest says (cores, memory, boot disk storage and size, bridge, cloud-init drive, guest
    /// agent), and that the reported IP is one the guest agent reports.
    pub async fn verify_ready(&mut self, claim: &VmStatus, manifests: &Path) -> anyhow::Result<()> {
        let want = self.want(manifests, &claim.name)?;
        self.ready_as(claim, &want).await
    }

    /// Every claim of a status: ready VMs as [`Self::verify_ready`], failed ones as
    /// [`Self::verify_nothing_left`] (manifests and journal read once).
    pub async fn verify_status(&mut self, st: &Status, manifests: &Path) -> anyhow::Result<()> {
        let wants = self.wants(manifests)?;
        let want = |name: &str| {
            wants
                .get(name)
                .ok_or_else(|| anyhow!("no readable manifest names a VM '{name}'"))
        };
        let journal = if self.is_real() || !st.vms.iter().any(|v| v.outcome == "failed") {
            None
        } else {
            Some(self.deployer_journal().await?)
        };
        for vm in &st.vms {
            match vm.outcome.as_str() {
                "ready" => self.ready_as(vm, want(&vm.name)?).await?,
                "failed" => {
                    self.nothing_left_as(vm, want(&vm.name)?, journal.as_ref())
                        .await?
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn ready_as(&mut self, claim: &VmStatus, want: &Expected) -> anyhow::Result<()> {
        // The name the target holds the VM under.
        let name = want.name.as_str();
        if claim.outcome != "ready" {
            bail!("expected ready: {}", claim.describe());
        }
        let vmid = claim
            .vmid
            .ok_or_else(|| anyhow!("ready without a VMID: {}", claim.describe()))?;
        let (obs, node) = self.cluster_of(&want.node).await?;
        let vms = obs.vms().await?;
        let seen = one_named(&vms, name, &node)?;
        if seen.vmid != vmid {
            bail!(
                "the deployer reports VM {name} as {vmid}, the cluster holds it as {}",
                seen.vmid
            );
        }
        if seen.status != "running" {
            bail!(
                "the deployer reports VM {name} ({vmid}) ready, the cluster has it {}",
                seen.status
            );
        }
        if let Some(state) = &claim.state
            && state != &seen.status
        {
            bail!(
                "the deployer reports VM {name} ({vmid}) {state}, the cluster has it {}",
                seen.status
            );
        }
        if want.container != (seen.kind == "lxc") {
            bail!(
                "the manifest asks for {} {name}, the cluster holds a {} ({vmid})",
                if want.container {
                    "a container"
                } else {
                    "a VM"
                },
                seen.kind
            );
        }
        let cfg = obs.guest_config(&node, &seen.kind, vmid).await?;
        let problems = if want.container {
            ct_config_problems(&cfg, want)
        } else {
            config_problems(&cfg, want)
        };
        if !problems.is_empty() {
            bail!(
                "VM {name} ({vmid}) does not match its manifest:\n  {}\nits config: {cfg}",
                problems.join("\n  ")
            );
        }
        let ip = claim
            .ip
            .as_deref()
            .ok_or_else(|| anyhow!("ready without an IP address: {}", claim.describe()))?;
        if want.container {
            let answer = obs
                .get(&format!("/nodes/{node}/lxc/{vmid}/interfaces"))
                .await?;
            let seen = ct_ipv4s(&answer);
            if !seen.iter().any(|a| a == ip) {
                bail!(
                    "the deployer reports CT {name} ({vmid}) at {ip}, its interfaces show {seen:?}"
                );
            }
            return Ok(());
        }
        let answer = obs
            .get(&format!(
                "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces"
            ))
            .await?;
        let agent = agent_ipv4s(&answer);
        if !agent.iter().any(|a| a == ip) {
            bail!(
                "the deployer reports VM {name} ({vmid}) at {ip}, its guest agent reports {agent:?}"
            );
        }
        Ok(())
    }

    /// The deployer says VM `claim.name` is in `state`: the cluster agrees.
    pub async fn verify_state(
        &mut self,
        claim: &VmStatus,
        manifests: &Path,
        state: &str,
    ) -> anyhow::Result<()> {
        if claim.state.as_deref() != Some(state) {
            bail!("expected state '{state}': {}", claim.describe());
        }
        let want = self.want(manifests, &claim.name)?;
        let (obs, node) = self.cluster_of(&want.node).await?;
        let vms = obs.vms().await?;
        let seen = one_named(&vms, &want.name, &node)?;
        if Some(seen.vmid) != claim.vmid || seen.status != state {
            bail!(
                "the deployer reports {}, the cluster holds VM {} {}",
                claim.describe(),
                seen.vmid,
                seen.status
            );
        }
        Ok(())
    }

    /// The deployer says VM `claim.name` failed: nothing it created for that VM is left — no VM
    /// of that name on the site, and (on the fake, from the journal) no VM or disk under any VMID
    /// it sent a create for with that name.
    pub async fn verify_nothing_left(
        &mut self,
        claim: &VmStatus,
        manifests: &Path,
    ) -> anyhow::Result<()> {
        let want = self.want(manifests, &claim.name)?;
        let journal = if self.is_real() {
            None
        } else {
            Some(self.deployer_journal().await?)
        };
        self.nothing_left_as(claim, &want, journal.as_ref()).await
    }

    async fn nothing_left_as(
        &mut self,
        claim: &VmStatus,
        want: &Expected,
        journal: Option<&Journal>,
    ) -> anyhow::Result<()> {
        let name = want.name.as_str();
        let (obs, node) = self.cluster_of(&want.node).await?;
        let vms = obs.vms().await?;
        let named: Vec<&VmSeen> = vms.iter().filter(|v| v.name == name).collect();
        if !named.is_empty() {
            bail!(
                "the deployer reports VM {name} failed, but the cluster holds {named:?}{}",
                if claim.vmid.is_some() {
                    format!(" (reported VMID {:?})", claim.vmid)
                } else {
                    String::new()
                }
            );
        }
        let mut ids: BTreeSet<u32> = claim.vmid.into_iter().collect();
        if let Some(j) = journal {
            let site = site_of_node(&want.node).unwrap_or_default();
            ids.extend(
                j.matching("POST", "/nodes/*/qemu")
                    .filter(|e| e.site == site)
                    .filter(|e| e.params.get("name").map(String::as_str) == Some(name))
                    .filter_map(|e| e.params.get("vmid")?.parse::<u32>().ok()),
            );
            ids.extend(
                j.matching("POST", "/nodes/*/lxc")
                    .filter(|e| e.site == site)
                    .filter(|e| e.params.get("hostname").map(String::as_str) == Some(name))
                    .filter_map(|e| e.params.get("vmid")?.parse::<u32>().ok()),
            );
        }
        // A VMID freed by the cleanup may since hold another manifest's VM: only a VM that still
        // has no name (a create left half-way) counts, and disks only where no VM owns the VMID.
        let left: Vec<&VmSeen> = vms
            .iter()
            .filter(|v| ids.contains(&v.vmid))
            .filter(|v| {
                v.name.is_empty()
                    || v.name == format!("VM {}", v.vmid)
                    || v.name == format!("CT{}", v.vmid)
            })
            .collect();
        if !left.is_empty() {
            bail!("the deployer reports VM {name} failed, but it left {left:?} behind");
        }
        let owned: BTreeSet<u32> = vms.iter().map(|v| v.vmid).collect();
        let volumes: Vec<String> = obs
            .image_volumes(&node)
            .await?
            .into_iter()
            .filter(|vol| {
                ids.iter()
                    .any(|id| !owned.contains(id) && vol.contains(&format!(":vm-{id}-")))
            })
            .collect();
        if !volumes.is_empty() {
            bail!("the deployer reports VM {name} failed, but its disks are left: {volumes:?}");
        }
        Ok(())
    }
}

/// The one VM named `name` on the site, which must sit on `node`.
fn one_named<'a>(vms: &'a [VmSeen], name: &str, node: &str) -> anyhow::Result<&'a VmSeen> {
    let named: Vec<&VmSeen> = vms.iter().filter(|v| v.name == name).collect();
    match named.as_slice() {
        [one] if one.node == node => Ok(one),
        [one] => bail!(
            "VM {name} ({}) is on node {}, not {node}",
            one.vmid,
            one.node
        ),
        [] => bail!("the cluster holds no VM named {name}"),
        many => bail!(
            "the cluster holds {} VMs named {name}: {many:?}",
            many.len()
        ),
    }
}

/// The conversions and config rules, checked by the harness self-test.
pub fn check_rules() -> Result<(), String> {
    let cases = [
        (memory_mib("4Gi"), Some(4096)),
        (memory_mib("512Mi"), Some(512)),
        (memory_mib("2048"), Some(2048)),
        (disk_gib("20Gi"), Some(20)),
        (disk_gib("1Ti"), Some(1024)),
        (disk_gib("50"), Some(50)),
        (disk_gib("20G"), None),
    ];
    for (i, (got, want)) in cases.iter().enumerate() {
        if got != want {
            return Err(format!("size case {i}: {got:?}, expected {want:?}"));
        }
    }
    let e = Expected {
        container: false,
        name: "a".into(),
        site: "site-1".into(),
        node: "n".into(),
        cores: 2,
        memory_mib: 4096,
        disk_gib: 20,
        storage: "local-lvm".into(),
        bridge: "vmbr0".into(),
    };
    let good = serde_json::json!({
        "cores": 2, "memory": "4096", "agent": "1", "boot": "order=scsi0",
        "scsi0": "local-lvm:vm-100-disk-0,size=20G",
        "ide2": "local-lvm:vm-100-cloudinit,media=cdrom",
        "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
    });
    let p = config_problems(&good, &e);
    if !p.is_empty() {
        return Err(format!("a matching config was judged wrong: {p:?}"));
    }
    // 20 GB read as GiB: 19073 MiB.
    let mut gb = good.clone();
    gb["scsi0"] = "local-lvm:vm-100-disk-0,size=19073M".into();
    let mut nocloud = good.clone();
    nocloud["ide2"] = Value::Null;
    let mut locked = good;
    locked["lock"] = "create".into();
    for (what, cfg) in [
        ("a GB disk", gb),
        ("no cloud-init", nocloud),
        ("a lock", locked),
    ] {
        if config_problems(&cfg, &e).is_empty() {
            return Err(format!("a config with {what} was judged matching"));
        }
    }
    let agent = serde_json::json!({"result": [
        {"name": "lo", "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4"}]},
        {"name": "eth0", "ip-addresses": [
            {"ip-address": "fe80::1", "ip-address-type": "ipv6"},
            {"ip-address": "10.1.0.23", "ip-address-type": "ipv4"}]},
    ]});
    if agent_ipv4s(&agent) != ["10.1.0.23"] {
        return Err(format!("agent addresses: {:?}", agent_ipv4s(&agent)));
    }
    let ct = Expected {
        container: true,
        cores: 1,
        memory_mib: 512,
        disk_gib: 8,
        ..e
    };
    let good_ct = serde_json::json!({
        "cores": 1, "memory": 512, "rootfs": "local-lvm:vm-300-disk-0,size=8G",
        "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:02,ip=dhcp,type=veth",
    });
    let p = ct_config_problems(&good_ct, &ct);
    if !p.is_empty() {
        return Err(format!(
            "a matching container config was judged wrong: {p:?}"
        ));
    }
    let mut small = good_ct;
    small["rootfs"] = "local-lvm:vm-300-disk-0,size=4G".into();
    if ct_config_problems(&small, &ct).is_empty() {
        return Err("a container with PVE's default 4 GiB rootfs was judged matching".into());
    }
    let ifaces = serde_json::json!([
        {"name": "lo", "inet": "127.0.0.1/8"},
        {"name": "eth0", "inet": "192.168.11.100/24"},
    ]);
    if ct_ipv4s(&ifaces) != ["192.168.11.100"] {
        return Err(format!("container addresses: {:?}", ct_ipv4s(&ifaces)));
    }
    Ok(())
}
