//! What a disk image holds, as far as a guest's start cares: whether cloud-init runs in it
//! and whether the QEMU guest agent is installed. PVE knows none of this (it is inside the
//! image); the simulated guest needs it to behave as the real image would, e.g. Ubuntu's
//! cloud images ship cloud-init but not `qemu-guest-agent`, so a VM made from one reports
//! no address until its user-data installs and starts the agent.
//!
//! Facts travel with the data: a disk imported, cloned or copied from a volume gets the
//! volume's facts, and cloud-init installing the agent marks the VM's boot disk.
//! A volume without facts is an image nothing is known about: it boots with cloud-init and
//! the agent, as every simulated guest did before images carried facts.

use serde::{Deserialize, Serialize};

/// What a disk image holds, as a guest's start cares (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageFacts {
    /// The operating system, for people reading the scenario (`ubuntu-22.04`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// cloud-init runs at boot and applies the cloud-init drive.
    #[serde(default = "yes")]
    pub cloud_init: bool,
    /// `qemu-guest-agent` is installed (and, as on Debian and Ubuntu, started at boot
    /// when the VM has the agent's virtio port).
    #[serde(default)]
    pub guest_agent: bool,
}

fn yes() -> bool {
    true
}

impl ImageFacts {
    /// An image nothing is known about.
    pub const UNKNOWN: ImageFacts = ImageFacts {
        os: None,
        cloud_init: true,
        guest_agent: true,
    };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn facts_left_out_of_a_scenario_mean_cloud_init_without_the_agent() {
        let f: ImageFacts = serde_norway::from_str("os: ubuntu-22.04").unwrap();
        assert!(f.cloud_init);
        assert!(!f.guest_agent);
        assert!(serde_norway::from_str::<ImageFacts>("agent: true").is_err());
    }
}
