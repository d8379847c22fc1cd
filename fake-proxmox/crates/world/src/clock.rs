//! The simulated clock every task, ticket and boot delay runs on.
//!
//! Real: wall time. Scaled(f): simulated time passes f times faster than wall time.
//! Stepped: time stands still until the test advances it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How simulated time relates to wall time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum ClockMode {
    /// Wall time.
    #[default]
    Real,
    /// Simulated time runs `factor` times faster than wall time.
    Scaled {
        /// Simulated seconds per wall-clock second.
        factor: f64,
    },
    /// Time stands still until advanced.
    Stepped,
}

#[allow(non_snake_case)]
impl ClockMode {
    /// `ClockMode::Scaled(50.0)`-style constructor.
    pub fn Scaled(factor: f64) -> Self {
        ClockMode::Scaled { factor }
    }

    /// Parse the CLI form: `real`, `scaled:N`, `stepped`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "real" => Ok(ClockMode::Real),
            "stepped" => Ok(ClockMode::Stepped),
            _ => {
                let f = s
                    .strip_prefix("scaled:")
                    .and_then(|f| f.parse::<f64>().ok())
                    .filter(|f| f.is_finite() && *f > 0.0)
                    .ok_or_else(|| {
                        format!("invalid clock '{s}': use real, scaled:N (N > 0) or stepped")
                    })?;
                Ok(ClockMode::Scaled { factor: f })
            }
        }
    }
}

/// The site's clock: simulated UNIX time in seconds, per its mode.
#[derive(Clone, Debug)]
pub struct Clock {
    mode: ClockMode,
    anchor_real: Instant,
    /// Simulated UNIX time (seconds) at `anchor_real`.
    anchor_sim: f64,
}

impl Clock {
    /// A clock in `mode`, starting at wall time.
    pub fn new(mode: ClockMode) -> Self {
        let sim = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(1.7e9);
        Clock {
            mode,
            anchor_real: Instant::now(),
            anchor_sim: sim,
        }
    }

    /// A clock in `mode` going on from simulated time `at` (a state read back); a real clock
    /// shows wall time, unless `at` is later (it never goes back).
    pub fn resume(mode: ClockMode, at: f64) -> Self {
        let mut c = Clock::new(mode);
        if mode != ClockMode::Real || at > c.anchor_sim {
            c.anchor_sim = at;
        }
        c
    }

    /// How the clock runs now.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Simulated UNIX time in seconds.
    pub fn now(&self) -> f64 {
        let elapsed = self.anchor_real.elapsed().as_secs_f64();
        match self.mode {
            ClockMode::Real => self.anchor_sim + elapsed,
            ClockMode::Scaled { factor } => self.anchor_sim + elapsed * factor,
            ClockMode::Stepped => self.anchor_sim,
        }
    }

    /// Switch mode, going on from the current simulated time (no jump).
    pub fn set_mode(&mut self, mode: ClockMode) {
        self.anchor_sim = self.now();
        self.anchor_real = Instant::now();
        self.mode = mode;
    }

    /// Jump ahead; works in every mode.
    pub fn advance(&mut self, d: Duration) {
        self.anchor_sim = self.now() + d.as_secs_f64();
        self.anchor_real = Instant::now();
    }

    /// How long real time must pass for `sim_secs` of simulated time (None if stepped).
    pub fn real_duration_for(&self, sim_secs: f64) -> Option<Duration> {
        let s = sim_secs.max(0.0);
        match self.mode {
            ClockMode::Real => Some(Duration::from_secs_f64(s)),
            ClockMode::Scaled { factor } => Some(Duration::from_secs_f64(s / factor)),
            ClockMode::Stepped => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stepped_stands_still_until_advanced() {
        let mut c = Clock::new(ClockMode::Stepped);
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_secs(90));
        assert!((c.now() - t0 - 90.0).abs() < 1e-6);
    }

    #[test]
    fn scaled_runs_faster() {
        let c = Clock::new(ClockMode::Scaled(1000.0));
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.now() - t0 >= 10.0);
    }

    #[test]
    fn cli_forms() {
        assert_eq!(ClockMode::parse("real").unwrap(), ClockMode::Real);
        assert_eq!(
            ClockMode::parse("scaled:50").unwrap(),
            ClockMode::Scaled(50.0)
        );
        assert!(ClockMode::parse("scaled:-1").is_err());
        assert!(ClockMode::parse("fast").is_err());
    }
}
