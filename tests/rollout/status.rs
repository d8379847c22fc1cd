//! The status a deployer reports after a run: the deployer's `--json` status format
//! (`provision_harness::deploy::RolloutResult`), read back the same way from the built-in deployer
//! and from an external command. Fields an external deployer leaves out default to empty.

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Status {
    #[serde(default)]
    pub vms: Vec<VmStatus>,
    #[serde(default)]
    pub unreadable: Vec<UnreadableManifest>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct VmStatus {
    pub name: String,
    #[serde(default)]
    pub site: String,
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub manifest: String,
    /// `ready`, `failed`, `skipped`, `destroyed`, `absent`.
    pub outcome: String,
    #[serde(default)]
    pub vmid: Option<u32>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub conditions: Vec<ConditionStatus>,
    #[serde(default)]
    pub error: Option<ErrorStatus>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConditionStatus {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorStatus {
    pub reason: String,
    pub message: String,
    #[serde(default)]
    pub retryable: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct UnreadableManifest {
    pub path: String,
    pub error: String,
    #[serde(default)]
    pub line: Option<usize>,
}

impl Status {
    pub fn vm(&self, name: &str) -> Result<&VmStatus, String> {
        self.vms.iter().find(|v| v.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.vms.iter().map(|v| v.name.as_str()).collect();
            format!("the deployer reported no VM named '{name}' (it reported: {names:?})")
        })
    }
}

impl VmStatus {
    /// One line that says what happened, for assertion messages.
    pub fn describe(&self) -> String {
        let err = self
            .error
            .as_ref()
            .map(|e| format!(", error {}: {}", e.reason, e.message))
            .unwrap_or_default();
        format!(
            "VM '{}' outcome={} vmid={:?} state={:?} ip={:?} attempts={}{err}",
            self.name, self.outcome, self.vmid, self.state, self.ip, self.attempts
        )
    }
}
