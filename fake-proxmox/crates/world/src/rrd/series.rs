//! Rows of a series: PVE's timeframes (resolution and row count, pve-cluster `PVE::RRD`), the
//! consolidation function, and the data sources of `pve-vm-9.0` (VMs' and containers') and
//! `pve-storage-9.0` files.

use serde_json::{Map, Value, json};

use crate::lxc::Ct;
use crate::lxc::status as ct_status;
use crate::qemu::model::{Power, Vm};
use crate::qemu::status::{
    DISK_READ_PER_S, DISK_WRITE_PER_S, NET_IN_PER_S, NET_OUT_PER_S, QEMU_OVERHEAD, RUNNING_CPU,
    running_mem,
};
use crate::schema::PveVersion;
use crate::storage::model::Storage;

/// `timeframe`: (resolution in seconds, rows). PVE 9 keeps finer archives than PVE 8 did.
pub fn timeframe(name: &str, version: PveVersion) -> Option<(u64, u64)> {
    let pve9 = version == PveVersion::V9_1;
    Some(match (name, pve9) {
        ("hour", _) => (60, 60),
        ("day", true) => (60, 1440),
        ("day", false) => (1800, 70),
        ("week", true) => (1800, 336),
        ("week", false) => (10800, 70),
        ("month", true) => (1800, 1440),
        ("month", false) => (43200, 70),
        ("year", true) => (21600, 1440),
        ("year", false) => (604_800, 70),
        ("decade", true) => (604_800, 570),
        _ => return None,
    })
}

/// The row start times of a timeframe ending at `now`, oldest first: PVE fetches from
/// `ctime - reso * count` to `ctime - 1`, `ctime` being `now` rounded down to the resolution.
pub fn row_times(now: f64, reso: u64, count: u64) -> Vec<u64> {
    let now = now.max(0.0) as u64;
    let ctime = reso * (now / reso);
    let start = ctime.saturating_sub(reso * count);
    (0..count).map(|i| start + i * reso).collect()
}

/// What a VM was doing over one row `[t, t + reso)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    /// Seconds of the row the VM existed (0: not yet created; the row holds `time` only).
    pub existed: f64,
    /// Seconds of the row it ran.
    pub ran: f64,
}

/// Seconds of `[t0, t1)` inside `[from, to)`.
fn overlap(t0: f64, t1: f64, from: f64, to: f64) -> f64 {
    (t1.min(to) - t0.max(from)).max(0.0)
}

/// What a guest's file records per second of a row it ran, and what it holds whenever it
/// exists: one set per guest kind, read from the figures its `vmstatus` reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// Whether the guest runs.
    pub running: bool,
    /// Site time (seconds) of its last start.
    pub started_at: f64,
    /// CPUs it may use (`maxcpu`).
    pub maxcpu: f64,
    /// `cpu` while running.
    pub cpu: f64,
    /// Configured memory, bytes (`maxmem`).
    pub maxmem: f64,
    /// `mem` while running.
    pub mem: f64,
    /// What the host spends on it while running (PVE 9's `memhost`).
    pub memhost: f64,
    /// Root disk size, bytes (`maxdisk`).
    pub maxdisk: f64,
    /// `disk`: what its root filesystem holds (0 for a VM: QEMU cannot tell).
    pub disk: f64,
    /// DERIVE sources while running: bytes per second.
    pub netin: f64,
    /// Network bytes sent per second (`netout`).
    pub netout: f64,
    /// Disk bytes read per second (`diskread`).
    pub diskread: f64,
    /// Disk bytes written per second (`diskwrite`).
    pub diskwrite: f64,
}

impl Figures {
    /// A VM's: its NICs' traffic, QEMU's overhead on top of the memory the guest touched.
    pub fn of_vm(vm: &Vm, now: f64, version: PveVersion) -> Figures {
        let st = vm.vmstatus(now, version);
        let nics = vm.net_count() as f64;
        let touched = running_mem(st.maxmem) as f64;
        Figures {
            running: vm.power != Power::Stopped,
            started_at: vm.started_at,
            maxcpu: st.cpus.unwrap_or(1) as f64,
            cpu: RUNNING_CPU,
            maxmem: st.maxmem as f64,
            mem: touched,
            memhost: touched + QEMU_OVERHEAD as f64,
            maxdisk: st.maxdisk as f64,
            disk: 0.0,
            netin: nics * NET_IN_PER_S as f64,
            netout: nics * NET_OUT_PER_S as f64,
            diskread: DISK_READ_PER_S as f64,
            diskwrite: DISK_WRITE_PER_S as f64,
        }
    }

    /// A container's (pvestatd writes the same `pve-vm-9.0` file for it): the figures of
    /// its `vmstatus` row; its processes are all the host spends (`memhost` is `mem`).
    pub fn of_ct(ct: &Ct, node_cpus: u32) -> Figures {
        let st = ct.vmstatus(ct.started_at, node_cpus);
        let num = |k: &str| st.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let mem = ct_status::used_memory(ct) as f64;
        Figures {
            running: ct.is_running(),
            started_at: ct.started_at,
            maxcpu: num("cpus"),
            cpu: ct_status::RUNNING_CPU,
            maxmem: num("maxmem"),
            mem,
            memhost: mem,
            maxdisk: num("maxdisk"),
            disk: ct_status::disk_used(ct) as f64,
            netin: ct_status::NET_IN_PER_S as f64,
            netout: ct_status::NET_OUT_PER_S as f64,
            diskread: 0.0,
            diskwrite: ct_status::DISK_WRITE_PER_S as f64,
        }
    }
}

/// A guest's rows. `created_at` is when it was made (`None`: before the series begins); it
/// ran from `started_at` until now if it is running (earlier runs are not kept). `max` picks
/// the MAX consolidation (a row's peak) instead of AVERAGE.
pub fn guest_rows(
    f: &Figures,
    created_at: Option<f64>,
    now: f64,
    reso: u64,
    count: u64,
    max: bool,
    version: PveVersion,
) -> Vec<Value> {
    let born = created_at.unwrap_or(f64::NEG_INFINITY);
    let mut rows: Vec<Value> = row_times(now, reso, count)
        .into_iter()
        .map(|t| {
            let (t0, t1) = (t as f64, (t + reso) as f64);
            let span = Span {
                existed: overlap(t0, t1, born, now),
                ran: if f.running {
                    overlap(t0, t1, f.started_at, now)
                } else {
                    0.0
                },
            };
            guest_row(t, span, reso as f64, max, f, version)
        })
        .collect();
    drop_empty_last(&mut rows);
    rows
}

fn guest_row(t: u64, span: Span, reso: f64, max: bool, f: &Figures, version: PveVersion) -> Value {
    let mut row = Map::new();
    row.insert("time".into(), json!(t));
    if span.existed <= 0.0 {
        return Value::Object(row);
    }
    // AVERAGE over the part of the row with samples: the share of it the guest ran. MAX: any
    // running sample gives the running figure.
    let up = if max {
        if span.ran > 0.0 { 1.0 } else { 0.0 }
    } else {
        (span.ran / span.existed.min(reso)).clamp(0.0, 1.0)
    };
    let put = |row: &mut Map<String, Value>, k: &str, v: f64| {
        row.insert(k.into(), json!(v));
    };
    put(&mut row, "maxcpu", f.maxcpu);
    put(&mut row, "cpu", f.cpu * up);
    put(&mut row, "maxmem", f.maxmem);
    put(&mut row, "mem", f.mem * up);
    put(&mut row, "maxdisk", f.maxdisk);
    put(&mut row, "disk", f.disk * up);
    put(&mut row, "netin", f.netin * up);
    put(&mut row, "netout", f.netout * up);
    put(&mut row, "diskread", f.diskread * up);
    put(&mut row, "diskwrite", f.diskwrite * up);
    if version == PveVersion::V9_1 {
        put(&mut row, "memhost", f.memhost * up);
        for k in [
            "pressurecpusome",
            "pressurecpufull",
            "pressureiosome",
            "pressureiofull",
            "pressurememorysome",
            "pressurememoryfull",
        ] {
            put(&mut row, k, 0.0);
        }
    }
    Value::Object(row)
}

/// A storage's rows: `total` and `used` as they are now (the fake keeps no history of its
/// volumes), over the whole timeframe.
pub fn storage_rows(s: &Storage, now: f64, reso: u64, count: u64) -> Vec<Value> {
    row_times(now, reso, count)
        .into_iter()
        .map(|t| json!({"time": t, "total": s.total as f64, "used": s.used() as f64}))
        .collect()
}

/// PVE drops the newest row when it holds only `time` (right after a boundary).
fn drop_empty_last(rows: &mut Vec<Value>) {
    if rows
        .last()
        .and_then(Value::as_object)
        .is_some_and(|o| o.len() == 1)
    {
        rows.pop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn timeframes_are_pves() {
        assert_eq!(timeframe("hour", PveVersion::V9_1), Some((60, 60)));
        assert_eq!(timeframe("day", PveVersion::V9_1), Some((60, 1440)));
        assert_eq!(timeframe("day", PveVersion::V8_4), Some((1800, 70)));
        assert_eq!(timeframe("decade", PveVersion::V8_4), None);
        assert_eq!(timeframe("fortnight", PveVersion::V9_1), None);
    }

    #[test]
    fn rows_end_before_the_current_bucket() {
        let t = row_times(1_000_030.0, 60, 60);
        assert_eq!(t.len(), 60);
        assert_eq!(*t.last().unwrap(), 1_000_020 - 60);
        assert_eq!(t[1] - t[0], 60);
    }
}
