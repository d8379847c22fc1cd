//! The emulated API's route table: (method, schema path template) → handler, from every
//! family's `routes()`. The handlers' vocabulary is `route`.
//!
//! Paths are matched as PVE's `find_handler` does: segment by segment, literal segments
//! before `{param}` segments. Templates are the schema's path strings, so the table can be
//! checked against the schema and unknown routes answer PVE's 501.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use crate::route::Route;

/// Each template pre-split into segments, for matching without allocating.
static SEGMENTS: LazyLock<Vec<(&'static Route, Vec<&'static str>, usize)>> = LazyLock::new(|| {
    TABLE
        .iter()
        .map(|r| {
            let segs: Vec<&'static str> = r.template.split('/').filter(|s| !s.is_empty()).collect();
            let literal = segs.iter().filter(|s| !s.starts_with('{')).count();
            (r, segs, literal)
        })
        .collect()
});

static TABLE: LazyLock<Vec<Route>> = LazyLock::new(|| {
    let mut v = Vec::new();
    v.extend(crate::access::routes::routes());
    v.extend(crate::cluster::routes::routes());
    v.extend(crate::nodes::routes::routes());
    v.extend(crate::nodes::power_routes::routes());
    v.extend(crate::storage::routes::routes());
    v.extend(crate::tasks::routes::routes());
    v.extend(crate::qemu::routes::routes());
    v.extend(crate::lxc::routes::routes());
    v.extend(crate::agent::routes::routes());
    v.extend(crate::firewall::routes::routes());
    v.extend(crate::console::routes::routes());
    v.extend(crate::rrd::routes::routes());
    v.extend(crate::pools::routes::routes());
    v
});

/// Every route the fake answers, all families together.
pub fn table() -> &'static [Route] {
    &TABLE
}

/// The path parameters PVE mounts with `fragmentDelimiter => ''`: they take the rest.
fn takes_rest(segment: &str) -> bool {
    segment == "{volume}" || segment == "{cidr}"
}

/// Match `path` against a template; on success the `{param}` captures.
pub fn match_template(template: &str, path: &str) -> Option<BTreeMap<String, String>> {
    let t: Vec<&str> = template.split('/').filter(|s| !s.is_empty()).collect();
    let mut p: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    // A trailing `{volume}` or `{cidr}` takes the rest of the path: volids and CIDRs
    // contain `/` once unescaped.
    if t.last().is_some_and(|s| takes_rest(s)) && p.len() > t.len() && !t.is_empty() {
        let rest = p.split_off(t.len() - 1).join("/");
        p.push(rest);
    }
    if t.len() != p.len() {
        return None;
    }
    let mut caps = BTreeMap::new();
    for (ts, ps) in t.iter().zip(&p) {
        if let Some(name) = ts.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            caps.insert(name.to_string(), ps.clone());
        } else if ts != ps {
            return None;
        }
    }
    Some(caps)
}

/// The template of our route table that `path` matches (any method), literal-first.
pub fn find_template(path: &str) -> Option<(&'static str, BTreeMap<String, String>)> {
    let p: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut best: Option<(usize, &'static str)> = None;
    for (r, segs, literal) in SEGMENTS.iter() {
        let volume_tail = segs.last().is_some_and(|s| takes_rest(s)) && p.len() > segs.len();
        if segs.len() != p.len() && !volume_tail {
            continue;
        }
        let fits = segs
            .iter()
            .zip(&p)
            .all(|(t, s)| t.starts_with('{') || t == s);
        if fits && best.is_none_or(|b| *literal > b.0) {
            best = Some((*literal, r.template));
        }
    }
    let (_, t) = best?;
    match_template(t, path).map(|caps| (t, caps))
}

/// Handlers keyed by (method, template): the dispatcher looks one up on every request.
static BY_TEMPLATE: LazyLock<HashMap<(&'static str, &'static str), &'static Route>> =
    LazyLock::new(|| TABLE.iter().map(|r| ((r.method, r.template), r)).collect());

/// The route of `method` on the schema's `template` (as [`table`] declares it), if the fake
/// implements it.
pub fn handler_for(method: &str, template: &str) -> Option<&'static Route> {
    BY_TEMPLATE.get(&(method, template)).copied()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn literal_segments_win() {
        let (t, caps) = find_template("/nodes/pve/qemu/100/status/current").unwrap();
        assert_eq!(t, "/nodes/{node}/qemu/{vmid}/status/current");
        assert_eq!(caps["vmid"], "100");
        assert!(find_template("/nodes/pve/qemu/100/importdisk").is_none());
    }

    #[test]
    fn every_route_is_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for r in table() {
            assert!(
                seen.insert((r.method, r.template)),
                "{} {}",
                r.method,
                r.template
            );
        }
    }
}
