//! The host's pace: how many times slower this machine runs than the one the harness's
//! wall-clock waits were tuned on. Every bound a lab, a cluster step or a scenario puts on
//! something a guest, an emulator or a child process does in real time (a boot, an SSH
//! command, a quorum, a deployer's first request) is multiplied by it, so a slow or
//! oversubscribed machine (a CI runner whose cores are shared) waits longer instead of failing.
//!
//! The factor comes from `HARNESS_TIME_SCALE` (a number ≥ 1; `scripts/test` measures it
//! before the tests start). Unset means 1. It only lengthens waits: a condition that never
//! comes still fails, later.

use std::sync::OnceLock;
use std::time::Duration;

/// The variable that sets the factor.
pub const ENV: &str = "HARNESS_TIME_SCALE";

/// The largest factor taken: beyond it a wait would outlast any CI job's limit anyway.
pub const MAX: f64 = 20.0;

/// `HARNESS_TIME_SCALE` as a factor: unset or empty is 1; a number below 1 is 1 (waits are
/// never shortened); above [`MAX`] is [`MAX`]; anything else is an error naming the value.
pub fn parse(value: Option<&str>) -> Result<f64, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(1.0);
    };
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f.clamp(1.0, MAX)),
        _ => Err(format!(
            "{ENV}={v:?} is not a number (a factor such as 1.5, at least 1)"
        )),
    }
}

/// The factor in force, read from the environment once. A value that is not a number is
/// reported (as a `tracing` warning) and counts as 1.
pub fn host_scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| {
        let raw = std::env::var(ENV).ok();
        parse(raw.as_deref()).unwrap_or_else(|e| {
            tracing::warn!("{e}; waits are not scaled");
            1.0
        })
    })
}

/// `d` at the host's pace: `d` × [`host_scale`].
pub fn scaled(d: Duration) -> Duration {
    scale_by(d, host_scale())
}

/// `d` × `factor`, saturating at `Duration::MAX`.
pub fn scale_by(d: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_is_one() {
        assert_eq!(parse(None), Ok(1.0));
        assert_eq!(parse(Some("  ")), Ok(1.0));
    }

    #[test]
    fn a_factor_lengthens_waits_and_never_shortens_them() {
        assert_eq!(parse(Some("2.5")), Ok(2.5));
        assert_eq!(parse(Some("0.3")), Ok(1.0));
        assert_eq!(parse(Some("1000")), Ok(MAX));
        assert_eq!(
            scale_by(Duration::from_secs(40), 2.5),
            Duration::from_secs(100)
        );
    }

    #[test]
    fn a_value_that_is_not_a_number_is_named() {
        let e = parse(Some("fast")).expect_err("not a number");
        assert!(e.contains("HARNESS_TIME_SCALE=\"fast\""), "{e}");
        assert!(parse(Some("NaN")).is_err());
        assert!(parse(Some("inf")).is_err());
    }
}
