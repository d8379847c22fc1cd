//! Data-driven fault injection: rules matched against every emulated API request.
//!
//! A rule matches on method, path pattern (glob: `*` within a segment, `**` across
//! segments), node and site; fires with a probability drawn from a seeded RNG, at most
//! `count` times; and adds latency and/or answers with a status and message.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::wire::PveError;

/// One fault injection rule: which requests it matches, how often it fires and what it does.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    /// Assigned when the rule is added.
    #[serde(default)]
    pub id: Option<u64>,
    /// Only requests to this site; any site when absent.
    #[serde(default)]
    pub site: Option<String>,
    /// Only this HTTP method (`GET`, `POST`, ..., any case); any when absent.
    #[serde(default)]
    pub method: Option<String>,
    /// Glob over the path below `/api2/json`, e.g. `/nodes/*/qemu/*/status/start`.
    #[serde(default)]
    pub path_pattern: Option<String>,
    /// Only requests for this node; any when absent.
    #[serde(default)]
    pub node: Option<String>,
    /// 0.0..=1.0; default 1.0.
    #[serde(default)]
    pub probability: Option<f64>,
    /// How many times it may fire; default unlimited.
    #[serde(default)]
    pub count: Option<u32>,
    /// Answer with this status (and `message`) instead of handling the request.
    #[serde(default)]
    pub status: Option<u16>,
    /// Error message of the injected answer (default `injected fault`).
    #[serde(default)]
    pub message: Option<String>,
    /// Holds the request this long before it is handled.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Holds the answer this long after the request was handled (and journaled): the client
    /// has not heard back although the work is done, as when it dies before reading the reply.
    #[serde(default)]
    pub answer_latency_ms: Option<u64>,
    /// Lets this many matching requests through before the rule fires, so a test can aim at
    /// the n-th request (crash-point exploration).
    #[serde(default)]
    pub skip: Option<u32>,
    /// When the rule fires, the site's clock stops (becomes stepped) before the request is
    /// handled: tasks running then stay running until the clock is set again.
    #[serde(default)]
    pub stop_clock: Option<bool>,
}

#[derive(Clone, Debug)]
struct Compiled {
    rule: FaultRule,
    path: Option<Regex>,
}

/// The site's fault rules and the seeded random source their probabilities are drawn from.
#[derive(Clone, Debug)]
pub struct Faults {
    rules: Vec<Compiled>,
    rng: ChaCha8Rng,
    next_id: u64,
}

/// What the fault layer decided for one request.
#[derive(Debug, Default)]
pub struct FaultHit {
    /// Milliseconds to hold the request before handling it.
    pub latency_ms: u64,
    /// Milliseconds to hold the answer after handling the request.
    pub answer_latency_ms: u64,
    /// Stop the site's clock before handling the request.
    pub stop_clock: bool,
    /// The error to answer with instead of handling the request.
    pub error: Option<PveError>,
}

/// The anchored regex for a path glob: `*` matches within one segment, `**` across segments.
pub fn glob_to_regex(glob: &str) -> Result<Regex, regex::Error> {
    let mut re = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                re.push_str(".*");
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    Regex::new(&re)
}

/// What a state file holds of the faults: the rules as added (with what is left of their
/// counts), the random source's position and the next id; the path patterns are compiled
/// again when it is read back.
#[derive(Serialize, Deserialize)]
struct FaultsFile {
    rules: Vec<FaultRule>,
    #[serde(with = "crate::rng_state")]
    rng: ChaCha8Rng,
    next_id: u64,
}

impl Serialize for Faults {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FaultsFile {
            rules: self.list(),
            rng: self.rng.clone(),
            next_id: self.next_id,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Faults {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = FaultsFile::deserialize(d)?;
        let rules = f
            .rules
            .into_iter()
            .map(|rule| {
                let path = match &rule.path_pattern {
                    Some(p) => Some(glob_to_regex(p).map_err(serde::de::Error::custom)?),
                    None => None,
                };
                Ok(Compiled { rule, path })
            })
            .collect::<Result<_, D::Error>>()?;
        Ok(Faults {
            rules,
            rng: f.rng,
            next_id: f.next_id,
        })
    }
}

impl Faults {
    /// No rules; probabilities drawn from a random source seeded with `seed`.
    pub fn new(seed: u64) -> Faults {
        Faults {
            rules: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17),
            next_id: 1,
        }
    }

    /// Add a rule and return its new id.
    ///
    /// # Errors
    /// A probability outside 0..1, a status that is not an HTTP status, a rule that does nothing
    /// (no status, latency or clock stop), or a path pattern that does not compile.
    pub fn add(&mut self, mut rule: FaultRule) -> Result<u64, String> {
        if let Some(p) = rule.probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(format!("probability {p} is outside 0..1"));
        }
        if let Some(s) = rule.status
            && !(100..=999).contains(&s)
        {
            return Err(format!("status {s} is not an HTTP status"));
        }
        if rule.status.is_none()
            && rule.latency_ms.is_none()
            && rule.answer_latency_ms.is_none()
            && rule.stop_clock != Some(true)
        {
            return Err(
                "a fault rule needs a status, a latency_ms, an answer_latency_ms or stop_clock"
                    .into(),
            );
        }
        let path = match &rule.path_pattern {
            Some(p) => Some(glob_to_regex(p).map_err(|e| format!("bad path_pattern: {e}"))?),
            None => None,
        };
        let id = self.next_id;
        self.next_id += 1;
        rule.id = Some(id);
        self.rules.push(Compiled { rule, path });
        Ok(id)
    }

    /// Remove every rule.
    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// The rules, in the order they were added (with their ids).
    pub fn list(&self) -> Vec<FaultRule> {
        self.rules.iter().map(|c| c.rule.clone()).collect()
    }

    /// Decide the faults for one request.
    pub fn check(&mut self, site: &str, method: &str, path: &str, node: Option<&str>) -> FaultHit {
        let mut hit = FaultHit::default();
        for c in &mut self.rules {
            let r = &c.rule;
            if r.site.as_deref().is_some_and(|s| s != site)
                || r.method
                    .as_deref()
                    .is_some_and(|m| !m.eq_ignore_ascii_case(method))
                || c.path.as_ref().is_some_and(|re| !re.is_match(path))
                || r.node.as_deref().is_some_and(|n| Some(n) != node)
                || r.count == Some(0)
            {
                continue;
            }
            if let Some(n) = &mut c.rule.skip
                && *n > 0
            {
                *n -= 1;
                continue;
            }
            let r = &c.rule;
            let p = r.probability.unwrap_or(1.0);
            if p < 1.0 && self.rng.random::<f64>() >= p {
                continue;
            }
            if let Some(n) = &mut c.rule.count {
                *n -= 1;
            }
            let r = &c.rule;
            hit.latency_ms += r.latency_ms.unwrap_or(0);
            hit.answer_latency_ms += r.answer_latency_ms.unwrap_or(0);
            hit.stop_clock |= r.stop_clock == Some(true);
            if hit.error.is_none()
                && let Some(status) = r.status
            {
                let msg = r.message.clone().unwrap_or_else(|| "injected fault".into());
                hit.error = Some(if status >= 595 || status == 401 {
                    PveError::bare(status, msg)
                } else {
                    PveError::new(
                        status,
                        if msg.ends_with('\n') {
                            msg
                        } else {
                            format!("{msg}\n")
                        },
                    )
                });
            }
        }
        hit
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn globs() {
        let r = glob_to_regex("/nodes/*/qemu/*/status/start").unwrap();
        assert!(r.is_match("/nodes/r630-01/qemu/100/status/start"));
        assert!(!r.is_match("/nodes/r630-01/qemu/100/status/stop"));
        let r = glob_to_regex("/nodes/**").unwrap();
        assert!(r.is_match("/nodes/a/b/c"));
    }

    #[test]
    fn count_limits_firing() {
        let mut f = Faults::new(1);
        f.add(FaultRule {
            method: Some("POST".into()),
            path_pattern: Some("/nodes/*/qemu".into()),
            status: Some(500),
            message: Some("boom".into()),
            count: Some(2),
            ..Default::default()
        })
        .unwrap();
        let fire = |f: &mut Faults| {
            f.check("s", "POST", "/nodes/n/qemu", Some("n"))
                .error
                .is_some()
        };
        assert!(fire(&mut f));
        assert!(fire(&mut f));
        assert!(!fire(&mut f));
        assert!(
            f.check("s", "GET", "/nodes/n/qemu", Some("n"))
                .error
                .is_none()
        );
    }

    #[test]
    fn skip_aims_at_the_nth_matching_request() {
        let mut f = Faults::new(1);
        f.add(FaultRule {
            method: Some("GET".into()),
            answer_latency_ms: Some(60_000),
            skip: Some(2),
            count: Some(1),
            ..Default::default()
        })
        .unwrap();
        let held = |f: &mut Faults, method: &str| {
            f.check("s", method, "/version", None).answer_latency_ms > 0
        };
        // A request the rule does not match does not use up a skip.
        assert!(!held(&mut f, "POST"));
        assert!(!held(&mut f, "GET"));
        assert!(!held(&mut f, "GET"));
        assert!(held(&mut f, "GET"));
        assert!(!held(&mut f, "GET"));
        assert_eq!(f.list()[0].count, Some(0));
        assert_eq!(f.list()[0].skip, Some(0));
    }

    #[test]
    fn a_rule_may_only_stop_the_clock() {
        let mut f = Faults::new(1);
        f.add(FaultRule {
            path_pattern: Some("/nodes/*/qemu".into()),
            stop_clock: Some(true),
            count: Some(1),
            ..Default::default()
        })
        .unwrap();
        let hit = f.check("s", "POST", "/nodes/n/qemu", Some("n"));
        assert!(hit.stop_clock && hit.error.is_none() && hit.latency_ms == 0);
        assert!(!f.check("s", "POST", "/nodes/n/qemu", Some("n")).stop_clock);
    }

    #[test]
    fn probability_is_seeded() {
        let run = || {
            let mut f = Faults::new(42);
            f.add(FaultRule {
                probability: Some(0.5),
                status: Some(500),
                ..Default::default()
            })
            .unwrap();
            (0..64)
                .map(|_| f.check("s", "GET", "/version", None).error.is_some())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let fired = a.iter().filter(|x| **x).count();
        assert!((16..=48).contains(&fired), "{fired}");
    }

    #[test]
    fn rules_need_an_effect() {
        let mut f = Faults::new(1);
        assert!(f.add(FaultRule::default()).is_err());
        assert!(
            f.add(FaultRule {
                probability: Some(2.0),
                status: Some(500),
                ..Default::default()
            })
            .is_err()
        );
    }
}
