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
    pub managed: u8,
}

/// QEMU's `query-balloon` as PVE's patched QEMU answers it; qemu-server passes it through
/// as `ballooninfo` (PVE/QemuServer.pm `vmstatus`, `$ballooncb`).
#[derive(Clone, Debug, Serialize)]
pub struct BalloonInfo {
    pub actual: u64,
    pub free_mem: u64,
    pub last_update: u64,
    pub major_page_faults: u64,
    pub max_mem: u64,
    pub mem_swapped_in: u64,
    pub mem_swapped_out: u64,
    pub minor_page_faults: u64,
    pub total_mem: u64,
}

/// QEMU's `BlockDeviceStats` (`query-blockstats` → `stats`), one per drive in `blockstat`;
/// the `zone_append` counters exist since QEMU 8.1.
#[derive(Clone, Debug, Serialize)]
pub struct BlockStats {
    pub account_failed: bool,
    pub account_invalid: bool,
    pub failed_flush_operations: u64,
    pub failed_rd_operations: u64,
    pub failed_unmap_operations: u64,
    pub failed_wr_operations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_zone_append_operations: Option<u64>,
    pub flush_operations: u64,
    pub flush_total_time_ns: u64,
    /// QEMU leaves it out until the drive saw its first I/O.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_time_ns: Option<u64>,
    pub invalid_flush_operations: u64,
    pub invalid_rd_operations: u64,
    pub invalid_unmap_operations: u64,
    pub invalid_wr_operations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_zone_append_operations: Option<u64>,
    pub rd_bytes: u64,
    pub rd_merged: u64,
    pub rd_operations: u64,
    pub rd_total_time_ns: u64,
    pub timed_stats: Vec<Value>,
    pub unmap_bytes: u64,
    pub unmap_merged: u64,
    pub unmap_operations: u64,
    pub unmap_total_time_ns: u64,
    pub wr_bytes: u64,
    pub wr_highest_offset: u64,
    pub wr_merged: u64,
    pub wr_operations: u64,
    pub wr_total_time_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_merged: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_operations: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_append_total_time_ns: Option<u64>,
}

/// One tap device's counters in `nics` (seen from the host: `netin` is what the tap sent).
#[derive(Clone, Debug, Serialize)]
pub struct NicTraffic {
    pub netin: u64,
    pub netout: u64,
}

/// `query-proxmox-support` of a current pve-qemu-kvm: the feature flags qemu-server checks
/// before a backup or migration, JSON booleans as QMP sends them.
/// Flags a QEMU too old to know them leaves out.
#[derive(Clone, Debug, Serialize)]
pub struct ProxmoxSupport {
    #[serde(rename = "backup-access-api", skip_serializing_if = "Option::is_none")]
    pub backup_access_api: Option<bool>,
    #[serde(rename = "backup-fleecing", skip_serializing_if = "Option::is_none")]
    pub backup_fleecing: Option<bool>,
    #[serde(rename = "backup-max-workers", skip_serializing_if = "Option::is_none")]
    pub backup_max_workers: Option<bool>,
    #[serde(rename = "pbs-dirty-bitmap")]
    pub pbs_dirty_bitmap: bool,
    #[serde(rename = "pbs-dirty-bitmap-migration")]
    pub pbs_dirty_bitmap_migration: bool,
    #[serde(rename = "pbs-dirty-bitmap-savevm")]
    pub pbs_dirty_bitmap_savevm: bool,
    #[serde(rename = "pbs-library-version")]
    pub pbs_library_version: &'static str,
    #[serde(rename = "pbs-masterkey")]
    pub pbs_masterkey: bool,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balloon: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balloon_min: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ballooninfo: Option<BalloonInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockstat: Option<BTreeMap<String, BlockStats>>,
    /// `Some(None)` is a JSON `null`: qemu-server copies the `vga` option's `clipboard`
    /// even when unset (PVE/API2/Qemu.pm `vm_status`: `$status->{clipboard} = $vga->{clipboard}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clipboard: Option<Option<String>>,
    /// `0` (integer) when stopped, a fraction when running — as PVE prints it.
    pub cpu: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    pub disk: u64,
    /// Only from `query-blockstats`: absent for a stopped VM's `status/current`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diskread: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diskwrite: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freemem: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha: Option<HaStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxcpu: Option<u32>,
    pub maxdisk: u64,
    pub maxmem: u64,
    pub mem: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memhost: Option<u64>,
    pub name: String,
    pub netin: u64,
    pub netout: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nics: Option<BTreeMap<String, NicTraffic>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurecpufull: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurecpusome: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressureiofull: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressureiosome: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurememoryfull: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressurememorysome: Option<f64>,
    #[serde(rename = "proxmox-support", skip_serializing_if = "Option::is_none")]
    pub proxmox_support: Option<ProxmoxSupport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qmpstatus: Option<&'static str>,
    #[serde(rename = "running-machine", skip_serializing_if = "Option::is_none")]
    pub running_machine: Option<String>,
    #[serde(rename = "running-qemu", skip_serializing_if = "Option::is_none")]
    pub running_qemu: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shares: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spice: Option<u8>,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<u8>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub uptime: u64,
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
