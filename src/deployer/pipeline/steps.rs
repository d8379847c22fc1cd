//! The pipeline's steps as one typed list. The pipeline announces each step as it starts
//! (through [`StepSink`](super::StepSink), by [`Step::name`]); observers such as the HTML
//! report's recorder and the CLI's progress read the names from here.

/// A step of the per-VM pipeline, in the order a fresh VM meets them, plus [`Step::Backoff`],
/// which the deployer announces while it waits out a retry delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    NodeHealth,
    Bridge,
    Storage,
    Adopt,
    Image,
    Create,
    Resize,
    CloudInit,
    Start,
    Monitor,
    Backoff,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 11] = [
        Step::NodeHealth,
        Step::Bridge,
        Step::Storage,
        Step::Adopt,
        Step::Image,
        Step::Create,
        Step::Resize,
        Step::CloudInit,
        Step::Start,
        Step::Monitor,
        Step::Backoff,
    ];

    /// The name observers see (`node-health`, `cloud-init`, …).
    pub fn name(self) -> &'static str {
        match self {
            Step::NodeHealth => "node-health",
            Step::Bridge => "bridge",
            Step::Storage => "storage",
            Step::Adopt => "adopt",
            Step::Image => "image",
            Step::Create => "create",
            Step::Resize => "resize",
            Step::CloudInit => "cloud-init",
            Step::Start => "start",
            Step::Monitor => "monitor",
            Step::Backoff => "backoff",
        }
    }

    /// The step with this name, if the pipeline has one.
    pub fn from_name(name: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_round_trip() {
        for s in Step::ALL {
            assert_eq!(Step::from_name(s.name()), Some(s));
        }
        let mut names: Vec<&str> = Step::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Step::ALL.len());
        assert_eq!(Step::from_name("importdisk"), None);
    }
}
