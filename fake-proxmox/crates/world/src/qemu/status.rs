//! The vmstatus record shared by the VM list, `status/current` and `cluster/resources`.
//!
//! Typed rather than a `serde_json::Map`: these are the routes a monitoring loop polls, and
//! building a JSON tree of string keys per VM was most of their CPU in the load benchmark.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::facts::ConfigFacts;
use super::model::{Power, Vm, find_prop, is_disk_key, is_net_key};
use crate::version::PveVersion;

/// The QEMU a node of `version` runs (pve-qemu-kvm 10.1 in 9.1, 9.2 in 8.4, 7.2 in 7.4 —
/// 7.2.0-8 was the bullseye package when pve-manager 7.4-16 came out —, 6.1 in 7.1):
/// `running-qemu`, and the machine version a VM without a pinned machine gets.
pub(crate) fn qemu_of(version: PveVersion) -> (&'static str, &'static str) {
    match version {
        PveVersion::V9_1 => ("10.1.2", "10.1"),
        PveVersion::V8_4 => ("9.2.0", "9.2"),
        PveVersion::V7_4 => ("7.2.0", "7.2"),
        PveVersion::V7_1 => ("6.1.0", "6.1"),
    }
}
/// PVE's own machine revision, appended as `+pveN` to the current machine
/// (qemu-server PVE/QemuServer/Machine.pm `current_from_query_machines`).
const PVE_MACHINE_REVISION: &str = "pve0";

/// `ha` of `status/current`: the fake has no HA manager.
#[derive(Clone, Debug, Serialize)]
pub struct HaStatus {
    /// 1 if HA manages the VM; always 0 here.
    pub managed: u8,
}

/// QEMU's `query-balloon` as PVE's patched QEMU answers it; qemu-server passes it through
/// as `ballooninfo` (PVE/QemuServer.pm `vmstatus`, `$ballooncb`).
#[derive(Clone, Debug, Serialize)]
pub struct BalloonInfo {
    /// Bytes the balloon currently leaves the guest.
    pub actual: u64,
    /// Guest memory free, bytes (from the guest's balloon driver).
    pub free_mem: u64,
    /// When the guest last reported its memory figures, Unix seconds.
    pub last_update: u64,
    /// Major page faults in the guest so far.
    pub major_page_faults: u64,
    /// The VM's configured RAM (`memory`), bytes: the most the balloon can grant.
    pub max_mem: u64,
    /// Bytes swapped in by the guest so far.
    pub mem_swapped_in: u64,
    /// Bytes swapped out by the guest so far.
    pub mem_swapped_out: u64,
    /// Minor page faults in the guest so far.
    pub minor_page_faults: u64,
    /// Guest memory as the guest kernel sees it, bytes.
    pub total_mem: u64,
}

/// QEMU's `BlockDeviceStats` (`query-blockstats` → `stats`), one per drive in `blockstat`;
/// the `zone_append` counters exist since QEMU 8.1.
#[derive(Clone, Debug, Serialize)]
pub struct BlockStats {
    /// Failed operations are counted.
    pub account_failed: bool,
    /// Invalid operations are counted.
    pub account_invalid: bool,
    /// Failed flushes.
    pub failed_flush_operations: u64,
    /// Failed reads.
    pub failed_rd_operations: u64,
    /// Failed unmap (discard) requests.
    pub failed_unmap_operations: u64,
    /// Failed writes.
    pub failed_wr_operations: u64,
    /// Failed zone appends; QEMU 8.1 and later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_zone_append_operations: Option<u64>,
    /// Flushes done.
    pub flush_operations: u64,
    /// Total time spent in flushes, nanoseconds.
    pub flush_total_time_ns: u64,
    /// QEMU leaves it out until the drive saw its first I/O.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_time_ns: Option<u64>,
    /// Invalid flush requests.
    pub invalid_flush_operations: u64,
    /// Invalid read requests.
    pub invalid_rd_operations: u64,
    /// Invalid unmap requests.
    pub invalid_unmap_operations: u64,
    /// Invalid write requests.
    pub invalid_wr_operations: u64,
    /// Invalid zone appends; QEMU 8.1 and later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_zone_append_operations: Option<u64>,
    /// Bytes read.
    pub rd_bytes: u64,
    /// Reads merged into others.
    pub rd_merged: u64,
    /// Reads done.
    pub rd_operations: u64,
    /// Total time spent reading, nanoseconds.
    pub rd_total_time_ns: u64,
    /// Per-interval latency statistics; always empty (no intervals configured).
    pub timed_stats: Vec<Value>,
    /// Bytes unmapped (discarded).
    pub unmap_bytes: u64,
    /// Unmap requests merged into others.
    pub unmap_merged: u64,
    /// Unmap requests done.
    pub unmap_operations: u64,
    /// Total time spent unmapping, nanoseconds.
    pub unmap_total_time_ns: u64,
    /// Bytes written.
    pub wr_bytes: u64,
    /// Highest offset written so far, bytes.
    pub wr_highest_offset: u64,
    /// Writes merged into others.
    pub wr_merged: u64,
    /// Writes done.
    pub wr_operations: u64,
    /// Total time spent writing, nanoseconds.
    pub wr_total_time_ns: u64,
    /// Bytes appended to zones; QEMU 8.1 and later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_bytes: Option<u64>,
    /// Zone appends merged into others; QEMU 8.1 and later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_merged: Option<u64>,
    /// Zone appends done; QEMU 8.1 and later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_operations: Option<u64>,
    /// Total time spent in zone appends, nanoseconds; QEMU 8.1 and later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_total_time_ns: Option<u64>,
}

/// One tap device's counters in `nics` (seen from the host: `netin` is what the tap sent).
#[derive(Clone, Debug, Serialize)]
pub struct NicTraffic {
    /// Bytes the host received from the guest on this tap.
    pub netin: u64,
    /// Bytes the host sent to the guest on this tap.
    pub netout: u64,
}

/// `query-proxmox-support` of a current pve-qemu-kvm: the feature flags qemu-server checks
/// before a backup or migration, JSON booleans as QMP sends them.
/// Flags a QEMU too old to know them leaves out.
#[derive(Clone, Debug, Serialize)]
pub struct ProxmoxSupport {
    /// `backup-access-api`: external access to backups in progress (PVE 9).
    #[serde(rename = "backup-access-api", skip_serializing_if = "Option::is_none")]
    pub backup_access_api: Option<bool>,
    /// `backup-fleecing`: backups can write through a fleecing image.
    #[serde(rename = "backup-fleecing", skip_serializing_if = "Option::is_none")]
    pub backup_fleecing: Option<bool>,
    /// `backup-max-workers`: the backup job's worker count can be set.
    #[serde(rename = "backup-max-workers", skip_serializing_if = "Option::is_none")]
    pub backup_max_workers: Option<bool>,
    /// `pbs-dirty-bitmap`: incremental backups to PBS via dirty bitmaps.
    #[serde(rename = "pbs-dirty-bitmap")]
    pub pbs_dirty_bitmap: bool,
    /// `pbs-dirty-bitmap-migration`: dirty bitmaps survive live migration.
    #[serde(rename = "pbs-dirty-bitmap-migration")]
    pub pbs_dirty_bitmap_migration: bool,
    /// `pbs-dirty-bitmap-savevm`: dirty bitmaps survive a snapshot with RAM.
    #[serde(rename = "pbs-dirty-bitmap-savevm")]
    pub pbs_dirty_bitmap_savevm: bool,
    /// `pbs-library-version`: version of the linked Proxmox Backup client library.
    #[serde(rename = "pbs-library-version")]
    pub pbs_library_version: &'static str,
    /// `pbs-masterkey`: backups can carry a master-key-encrypted copy of the key.
    #[serde(rename = "pbs-masterkey")]
    pub pbs_masterkey: bool,
    /// `query-bitmap-info`: QEMU can report its dirty bitmaps.
    #[serde(rename = "query-bitmap-info")]
    pub query_bitmap_info: bool,
}

impl ProxmoxSupport {
    /// Fleecing came with PVE 8.2's QEMU, the worker limit with 8.3's, the backup access
    /// API with 9.0's.
    fn of(version: PveVersion) -> ProxmoxSupport {
        let since = |first: PveVersion| {
            let order = |v: PveVersion| PveVersion::ALL.iter().position(|x| *x == v);
            (order(version) >= order(first)).then_some(true)
        };
        ProxmoxSupport {
            backup_access_api: since(PveVersion::V9_1),
            backup_fleecing: since(PveVersion::V8_4),
            backup_max_workers: since(PveVersion::V8_4),
            pbs_dirty_bitmap: true,
            pbs_dirty_bitmap_migration: true,
            pbs_dirty_bitmap_savevm: true,
            pbs_library_version: "2.0.1 (UNKNOWN)",
            pbs_masterkey: true,
            query_bitmap_info: true,
        }
    }
}

/// One VM's status; optional fields are those only some routes (or states) carry.
/// Fields are in alphabetical order, the order the fake's JSON maps use everywhere else.
#[derive(Clone, Debug, Serialize)]
pub struct VmStatus {
    /// 1 when the guest agent is enabled in the config; `status/current` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<u8>,
    /// Current balloon size, bytes; full status of a running VM with a balloon device only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balloon: Option<u64>,
    /// Minimum the balloon may shrink to (`balloon`), bytes; `None` when unset or 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balloon_min: Option<u64>,
    /// The balloon's own figures; as `balloon`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ballooninfo: Option<BalloonInfo>,
    /// Per-drive I/O counters by drive key (`scsi0`, ...); full status of a running VM only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockstat: Option<BTreeMap<String, BlockStats>>,
    /// `Some(None)` is a JSON `null`: qemu-server copies the `vga` option's `clipboard`
    /// even when unset (PVE/API2/Qemu.pm `vm_status`: `$status->{clipboard} = $vga->{clipboard}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clipboard: Option<Option<String>>,
    /// `0` (integer) when stopped, a fraction when running — as PVE prints it.
    pub cpu: Value,
    /// Virtual CPU count (`cpus`); moved to `maxcpu` in `cluster/resources`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Used disk space, bytes: always 0, as PVE does not know it for VMs.
    pub disk: u64,
    /// Only from `query-blockstats`: absent for a stopped VM's `status/current`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diskread: Option<u64>,
    /// Bytes written by all drives; see `diskread`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diskwrite: Option<u64>,
    /// Guest memory free, bytes; as `balloon`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freemem: Option<u64>,
    /// HA state; `status/current` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha: Option<HaStatus>,
    /// Resource ID, `qemu/{vmid}`; `cluster/resources` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The config's `lock` (e.g. `backup`, `migrate`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// Virtual CPU count, as `cluster/resources` names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxcpu: Option<u32>,
    /// Summed size of the disks (CD-ROMs and empty drives aside), bytes.
    pub maxdisk: u64,
    /// Configured RAM, bytes.
    pub maxmem: u64,
    /// RAM in use, bytes: the guest's view when ballooning, else the process's.
    pub mem: u64,
    /// RAM the QEMU process uses on the host, bytes; PVE 9 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memhost: Option<u64>,
    /// `name`, or `VM {vmid}` without one.
    pub name: String,
    /// Bytes received by all the VM's NICs (from the guest's point of view).
    pub netin: u64,
    /// Bytes sent by all the VM's NICs.
    pub netout: u64,
    /// Per-tap traffic by tap name (`tap{vmid}i{n}`); full status of a running VM only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nics: Option<BTreeMap<String, NicTraffic>>,
    /// The node the VM is on; `cluster/resources` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// PID of the QEMU process; running VMs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// CPU pressure stall (`full`) of the VM's cgroup; PVE 9, running only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurecpufull: Option<f64>,
    /// CPU pressure stall (`some`), as `pressurecpufull`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurecpusome: Option<f64>,
    /// I/O pressure stall (`full`), as `pressurecpufull`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressureiofull: Option<f64>,
    /// I/O pressure stall (`some`), as `pressurecpufull`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressureiosome: Option<f64>,
    /// Memory pressure stall (`full`), as `pressurecpufull`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurememoryfull: Option<f64>,
    /// Memory pressure stall (`some`), as `pressurecpufull`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurememorysome: Option<f64>,
    /// QEMU's feature flags; full status of a running VM only.
    #[serde(rename = "proxmox-support", skip_serializing_if = "Option::is_none")]
    pub proxmox_support: Option<ProxmoxSupport>,
    /// QEMU's run state (`running`, `paused`, `io-error`, `stopped`); full status only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qmpstatus: Option<&'static str>,
    /// Machine type the QEMU process runs, e.g. `pc-i440fx-10.1+pve0`; running only.
    #[serde(rename = "running-machine", skip_serializing_if = "Option::is_none")]
    pub running_machine: Option<String>,
    /// QEMU version the process runs; running only.
    #[serde(rename = "running-qemu", skip_serializing_if = "Option::is_none")]
    pub running_qemu: Option<&'static str>,
    /// 1 when the VM has a serial port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<u8>,
    /// Balloon fairness weight (`shares`, default 1000); only when ballooning is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shares: Option<u64>,
    /// 1 when the display is SPICE-capable (`vga` of type `qxl*` or `virtio*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spice: Option<u8>,
    /// `running` or `stopped`.
    pub status: &'static str,
    /// The config's `tags`, `;`-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    /// 1 for a template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<u8>,
    /// `qemu`; `cluster/resources` only.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Seconds since the VM started; 0 when stopped.
    pub uptime: u64,
    /// The VM's ID.
    pub vmid: u32,
}

/// Simulated traffic rates (bytes per second of uptime).
pub(crate) const NET_IN_PER_S: u64 = 1800;
pub(crate) const NET_OUT_PER_S: u64 = 900;
pub(crate) const DISK_READ_PER_S: u64 = 40_000;
pub(crate) const DISK_WRITE_PER_S: u64 = 12_000;
/// QEMU's own memory on top of what the guest touched (`memhost` is the cgroup's).
pub(crate) const QEMU_OVERHEAD: u64 = 96 << 20;
/// A running guest's simulated CPU share, and the part of its memory it touches.
pub(crate) const RUNNING_CPU: f64 = 0.013;
pub(crate) fn running_mem(maxmem: u64) -> u64 {
    maxmem / 3
}

impl Vm {
    /// The fields every vmstatus carries (qemu-server `vmstatus` without `full`); `memhost`
    /// and the pressure stall averages only from PVE 9.0 on.
    pub fn vmstatus(&self, now: f64, version: PveVersion) -> VmStatus {
        self.vmstatus_with(&ConfigFacts::of(&self.config), now, version)
    }

    /// `vmstatus` from facts already read off the config (one pass for a listing's row).
    pub fn vmstatus_with(&self, f: &ConfigFacts, now: f64, version: PveVersion) -> VmStatus {
        let pve9 = version == PveVersion::V9_1;
        let running = self.power != Power::Stopped;
        let maxmem = f.memory_mib.saturating_mul(1024 * 1024);
        let up = self.uptime(now);
        let while_running = |per_second: u64| {
            if running {
                up.saturating_mul(per_second)
            } else {
                0
            }
        };
        let mem = if running { running_mem(maxmem) } else { 0 };
        // The pressure stall averages of the VM's cgroup, read only for a running VM.
        let pressure = (running && pve9).then_some(0.0);
        let balloon_min = f
            .balloon_mib
            .filter(|b| *b > 0)
            .map(|b| b.saturating_mul(1 << 20));
        VmStatus {
            agent: None,
            balloon: None,
            balloon_min,
            ballooninfo: None,
            blockstat: None,
            clipboard: None,
            cpu: if running {
                Value::from(RUNNING_CPU)
            } else {
                Value::from(0)
            },
            cpus: Some(f.cpus),
            disk: 0,
            // Only `query-blockstats` (the `full` status) sets these.
            diskread: None,
            diskwrite: None,
            freemem: None,
            ha: None,
            id: None,
            lock: self.lock.clone(),
            maxcpu: None,
            maxdisk: f.maxdisk,
            maxmem,
            mem,
            memhost: pve9.then_some(if running {
                mem.saturating_add(QEMU_OVERHEAD)
            } else {
                0
            }),
            name: f
                .name
                .map_or_else(|| format!("VM {}", self.vmid), str::to_string),
            netin: f.nets.saturating_mul(while_running(NET_IN_PER_S)),
            netout: f.nets.saturating_mul(while_running(NET_OUT_PER_S)),
            nics: None,
            node: None,
            pid: self.pid.filter(|_| running),
            pressurecpufull: pressure,
            pressurecpusome: pressure,
            pressureiofull: pressure,
            pressureiosome: pressure,
            pressurememoryfull: pressure,
            pressurememorysome: pressure,
            proxmox_support: None,
            qmpstatus: None,
            running_machine: None,
            running_qemu: None,
            serial: f.serial.then_some(1),
            // qemu-server's default `shares` (PVE/QemuServer.pm `$confdesc`): 1000.
            shares: balloon_min.map(|_| f.shares.unwrap_or(1000)),
            spice: None,
            status: self.status_str(),
            tags: f.tags.map(str::to_string),
            template: f.template.then_some(1),
            kind: None,
            uptime: up,
            vmid: self.vmid,
        }
    }

    /// `status/current` (PVE/API2/Qemu.pm `vm_status`): the full vmstatus plus `ha`, and
    /// `spice`, `clipboard` and `agent` from the config.
    pub fn vm_status(&self, now: f64, version: PveVersion) -> VmStatus {
        let mut st = self.vmstatus_full(now, version);
        st.ha = Some(HaStatus { managed: 0 });
        st.agent = self.is_agent_enabled().then_some(1);
        if let Some(vga) = self.config.get("vga") {
            let kind = find_prop(vga, "type", "type").unwrap_or("");
            if kind.starts_with("virtio") || kind.starts_with("qxl") {
                st.spice = Some(1);
            }
            st.clipboard = Some(find_prop(vga, "type", "clipboard").map(str::to_string));
        }
        st
    }

    /// qemu-server `vmstatus($vmid, 1)`: `qmpstatus` for every VM and, for a running one,
    /// what QMP answers (blockstats, balloon, machine, version, proxmox-support) and the
    /// per-tap counters.
    pub fn vmstatus_full(&self, now: f64, version: PveVersion) -> VmStatus {
        let mut st = self.vmstatus(now, version);
        st.qmpstatus = Some(self.qmpstatus());
        if self.power == Power::Stopped {
            return st;
        }
        let up = st.uptime;
        st.nics = Some(
            self.config
                .keys()
                .filter(|k| is_net_key(k))
                .map(|k| {
                    let tap = format!("tap{}i{}", self.vmid, &k[3..]);
                    let traffic = NicTraffic {
                        netin: up.saturating_mul(NET_IN_PER_S),
                        netout: up.saturating_mul(NET_OUT_PER_S),
                    };
                    (tap, traffic)
                })
                .collect(),
        );
        let blockstat: BTreeMap<String, BlockStats> = self
            .config
            .iter()
            .filter(|(k, _)| is_qemu_block_device(k))
            .map(|(k, v)| (k.clone(), drive_stats(v, up, version)))
            .collect();
        st.diskread = Some(blockstat.values().map(|b| b.rd_bytes).sum());
        st.diskwrite = Some(blockstat.values().map(|b| b.wr_bytes).sum());
        st.blockstat = Some(blockstat);
        st.running_machine = Some(self.running_machine(version));
        st.running_qemu = Some(qemu_of(version).0);
        st.proxmox_support = Some(ProxmoxSupport::of(version));
        // `balloon: 0` removes the balloon device; `query-balloon` then fails and
        // qemu-server keeps the cgroup's figure as `mem`.
        if self.balloon_mib() != Some(0) {
            let total_mem = st.maxmem.saturating_sub(st.maxmem / 32);
            let free_mem = total_mem.saturating_sub(st.mem);
            let info = BalloonInfo {
                actual: st.maxmem,
                free_mem,
                last_update: now.max(0.0) as u64,
                major_page_faults: up.saturating_mul(2),
                max_mem: st.maxmem,
                mem_swapped_in: 0,
                mem_swapped_out: 0,
                minor_page_faults: up.saturating_mul(900),
                total_mem,
            };
            st.balloon = Some(info.actual);
            st.mem = total_mem - free_mem;
            st.freemem = Some(free_mem);
            st.ballooninfo = Some(info);
        }
        st
    }

    /// QEMU's run state as `qmpstatus` reports it.
    pub fn qmpstatus(&self) -> &'static str {
        match self.power {
            Power::Stopped => "stopped",
            Power::Paused => "paused",
            Power::IoError => "io-error",
            Power::Running => "running",
        }
    }

    /// Bytes read and written by the VM's disks so far: the sums `blockstat` reports.
    pub fn disk_io(&self, now: f64) -> (u64, u64) {
        self.disk_io_with(&ConfigFacts::of(&self.config), now)
    }

    /// `disk_io` from config facts already read: the read and written byte totals.
    pub fn disk_io_with(&self, f: &ConfigFacts, now: f64) -> (u64, u64) {
        let up = self.uptime(now).saturating_mul(f.io_drives);
        (
            up.saturating_mul(DISK_READ_PER_S),
            up.saturating_mul(DISK_WRITE_PER_S),
        )
    }

    /// The `balloon` option in MiB, if set (`0` disables the balloon device).
    fn balloon_mib(&self) -> Option<u64> {
        self.config.get("balloon").and_then(|b| b.parse().ok())
    }

    /// The reference reads of what `ConfigFacts` takes in its one pass (for its test).
    #[cfg(test)]
    pub(crate) fn vmstatus_reference_parts(&self) -> (Option<u64>, Option<u64>, bool, u64) {
        (
            self.balloon_mib(),
            self.config.get("shares").and_then(|s| s.parse().ok()),
            self.config.keys().any(|k| super::facts::is_serial_key(k)),
            self.config
                .iter()
                .filter(|(k, v)| is_qemu_block_device(k) && !is_cdrom(v))
                .count() as u64,
        )
    }

    pub(crate) fn net_count(&self) -> u64 {
        self.config.keys().filter(|k| is_net_key(k)).count() as u64
    }

    /// The machine `query-machines` reports as current, with PVE's `+pveN` revision.
    fn running_machine(&self, version: PveVersion) -> String {
        let machine_version = qemu_of(version).1;
        let configured = self
            .config
            .get("machine")
            .and_then(|m| find_prop(m, "type", "type"))
            .unwrap_or("pc");
        let base = match configured {
            "pc" | "i440fx" => format!("pc-i440fx-{machine_version}"),
            "q35" => format!("pc-q35-{machine_version}"),
            pinned => pinned.to_string(),
        };
        if base.contains("+pve") {
            base
        } else {
            format!("{base}+{PVE_MACHINE_REVISION}")
        }
    }
}

/// The drives `query-blockstats` lists: disks and CD-ROM drives. EFI vars live in a pflash
/// and the TPM state in swtpm, neither a guest block device with a drive id.
fn is_qemu_block_device(k: &str) -> bool {
    is_disk_key(k) && k != "efidisk0" && k != "tpmstate0"
}

/// A CD-ROM drive (or an empty one): no guest I/O is simulated on it.
fn is_cdrom(drive: &str) -> bool {
    let file = find_prop(drive, "file", "file").unwrap_or("none");
    find_prop(drive, "file", "media") == Some("cdrom") || file == "cdrom" || file == "none"
}

/// A drive's counters after `up` seconds: disks see steady I/O, CD-ROMs none.
fn drive_stats(value: &str, up: u64, version: PveVersion) -> BlockStats {
    let zoned = version.has_zoned_block_stats().then_some(0);
    let size = find_prop(value, "file", "size")
        .and_then(crate::storage::model::parse_size)
        .unwrap_or(0);
    let (rd_bytes, wr_bytes) = if is_cdrom(value) {
        (0, 0)
    } else {
        (
            up.saturating_mul(DISK_READ_PER_S),
            up.saturating_mul(DISK_WRITE_PER_S),
        )
    };
    // 4 KiB requests at 100 µs each, a flush per 64 writes.
    let rd_operations = rd_bytes / 4096;
    let wr_operations = wr_bytes / 4096;
    let flush_operations = wr_operations / 64;
    BlockStats {
        account_failed: true,
        account_invalid: true,
        failed_flush_operations: 0,
        failed_rd_operations: 0,
        failed_unmap_operations: 0,
        failed_wr_operations: 0,
        failed_zone_append_operations: zoned,
        flush_operations,
        flush_total_time_ns: flush_operations.saturating_mul(500_000),
        idle_time_ns: (rd_operations + wr_operations > 0).then_some(1_500_000_000),
        invalid_flush_operations: 0,
        invalid_rd_operations: 0,
        invalid_unmap_operations: 0,
        invalid_wr_operations: 0,
        invalid_zone_append_operations: zoned,
        rd_bytes,
        rd_merged: 0,
        rd_operations,
        rd_total_time_ns: rd_operations.saturating_mul(100_000),
        timed_stats: Vec::new(),
        unmap_bytes: 0,
        unmap_merged: 0,
        unmap_operations: 0,
        unmap_total_time_ns: 0,
        wr_bytes,
        // Writes land spread over the disk: the highest offset grows until the disk's end.
        wr_highest_offset: wr_bytes.saturating_mul(8).min(size),
        wr_merged: 0,
        wr_operations,
        wr_total_time_ns: wr_operations.saturating_mul(100_000),
        zone_append_bytes: zoned,
        zone_append_merged: zoned,
        zone_append_operations: zoned,
        zone_append_total_time_ns: zoned,
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
