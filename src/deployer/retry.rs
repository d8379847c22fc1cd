//! Exponential backoff with jitter and a cap, for the retryable error classes.

use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the second attempt (before jitter).
    pub base: Duration,
    /// No single delay exceeds this.
    pub cap: Duration,
    /// Total attempts, the first included.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(2),
            cap: Duration::from_secs(60),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// The delay after failed attempt `attempt` (1-based): `base·2^(attempt-1)` capped, then
    /// "equal jitter" — half fixed, half random — so retrying VMs do not move in lockstep.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let raw = self.base.saturating_mul(1u32 << exp).min(self.cap);
        let half = raw / 2;
        let jitter = rand::rng().random_range(0.0..=1.0);
        half + half.mul_f64(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps_with_jitter() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
            max_attempts: 5,
        };
        for _ in 0..50 {
            let d1 = b.delay(1);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = b.delay(3);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d10 = b.delay(10);
            assert!(d10 >= Duration::from_millis(500) && d10 <= Duration::from_millis(1000));
        }
    }
}
