//! The vmstatus record shared by the VM list, `status/current` and `cluster/resources`.
//!
//! Typed rather than a `serde_json::Map`: these are the routes a monitoring loop polls, and
//! building a JSON tree of string keys per VM was most of their CPU in the load benchmark.

use serde::Serialize;
use serde_json::Value;

use super::model::{Power, Vm};

/// `ha` of `status/current`: the fake has no HA manager.
#[derive(Clone, Debug, Serialize)]
pub struct HaStatus {
    pub managed: u8,
}

/// One VM's status; optional fields are those only some routes (or states) carry.
/// Fields are in alphabetical order, the order the fake's JSON maps use everywhere else.
#[derive(Clone, Debug, Serialize)]
pub struct VmStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<u8>,
    /// `0` (integer) when stopped, a fraction when running — as PVE prints it.
    pub cpu: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    pub disk: u64,
    pub diskread: u64,
    pub diskwrite: u64,
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
    pub name: String,
    pub netin: u64,
    pub netout: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qmpstatus: Option<&'static str>,
    #[serde(rename = "running-machine", skip_serializing_if = "Option::is_none")]
    pub running_machine: Option<&'static str>,
    #[serde(rename = "running-qemu", skip_serializing_if = "Option::is_none")]
    pub running_qemu: Option<&'static str>,
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

impl Vm {
    /// The fields every vmstatus carries.
    pub fn vmstatus(&self, now: f64) -> VmStatus {
        let running = self.power != Power::Stopped;
        let maxmem = self.memory_bytes();
        let up = self.uptime(now);
        let while_running = |per_second: u64| {
            if running {
                up.saturating_mul(per_second)
            } else {
                0
            }
        };
        VmStatus {
            agent: None,
            cpu: if running {
                Value::from(0.013)
            } else {
                Value::from(0)
            },
            cpus: Some(self.cpus()),
            disk: 0,
            diskread: while_running(40_000),
            diskwrite: while_running(12_000),
            ha: None,
            id: None,
            lock: self.lock.clone(),
            maxcpu: None,
            maxdisk: self.maxdisk(),
            maxmem,
            mem: if running { maxmem / 3 } else { 0 },
            name: self.name(),
            netin: while_running(1800),
            netout: while_running(900),
            node: None,
            pid: self.pid.filter(|_| running),
            qmpstatus: None,
            running_machine: None,
            running_qemu: None,
            spice: None,
            status: self.status_str(),
            tags: self.config.get("tags").cloned(),
            template: self.is_template().then_some(1),
            kind: None,
            uptime: up,
            vmid: self.vmid,
        }
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
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn vm(power: Power) -> Vm {
        let config: BTreeMap<String, String> = [
            ("name", "web-1"),
            ("memory", "3072"),
            ("cores", "2"),
            ("scsi0", "local-lvm:vm-100-disk-0,size=32G"),
            ("tags", "prod"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Vm {
            power,
            started_at: 1000.0,
            pid: Some(4242),
            ..Vm::stopped(100, "pve", config, None)
        }
    }

    fn json(st: &VmStatus) -> serde_json::Value {
        serde_json::to_value(st).unwrap_or_default()
    }

    #[test]
    fn stopped_vm_has_integer_zeros_and_no_pid() {
        let v = json(&vm(Power::Stopped).vmstatus(1100.0));
        assert_eq!(v["status"], "stopped");
        assert!(
            v["cpu"].is_u64(),
            "cpu of a stopped VM is the integer 0: {v}"
        );
        assert_eq!(v["uptime"], 0);
        assert_eq!(v["mem"], 0);
        assert!(v.get("pid").is_none());
        assert_eq!(v["maxmem"], 3072u64 << 20);
        assert_eq!(v["maxdisk"], 32u64 << 30);
        assert_eq!(v["cpus"], 2);
        assert_eq!(v["name"], "web-1");
        assert_eq!(v["tags"], "prod");
        // Route-specific keys stay out unless a route sets them.
        for k in [
            "qmpstatus",
            "ha",
            "id",
            "type",
            "node",
            "maxcpu",
            "template",
        ] {
            assert!(v.get(k).is_none(), "{k} should be absent: {v}");
        }
    }

    #[test]
    fn running_vm_counts_uptime_and_io() {
        let v = json(&vm(Power::Running).vmstatus(1100.0));
        assert_eq!(v["status"], "running");
        assert_eq!(v["uptime"], 100);
        assert_eq!(v["pid"], 4242);
        assert_eq!(v["netin"], 180_000);
        assert!(v["cpu"].is_f64());
        assert_eq!(vm(Power::Paused).qmpstatus(), "paused");
    }

    #[test]
    fn keys_serialise_in_alphabetical_order() {
        let mut st = vm(Power::Running).vmstatus(1100.0);
        st.running_machine = Some("pc");
        st.kind = Some("qemu");
        let text = serde_json::to_string(&st).unwrap_or_default();
        let v: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap_or_default();
        let keys: Vec<&String> = v.keys().collect();
        let positions: Vec<usize> = keys
            .iter()
            .filter_map(|k| text.find(&format!("\"{k}\":")))
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "not alphabetical: {text}"
        );
    }
}
