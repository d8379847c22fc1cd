//! Parameter validation against the PVE API schema of the site's version.
//!
//! The schema-driven validator lives in `crate::schema` (generated from the official API
//! schema). This module adapts it to the dispatcher: raw wire values in, typed `Params`
//! or PVE's 400 `Parameter verification failed.` out.

use std::collections::BTreeMap;

use crate::route::Route;
use crate::schema::{ApiSchema, MethodInfo, RawValue};
use crate::version::PveVersion;
use crate::wire::{Params, PveError, RawParam};

/// Validate and type the parameters of `method template` for a site's version.
pub fn validate(
    version: PveVersion,
    method: &str,
    template: &str,
    values: &BTreeMap<String, RawValue>,
) -> Result<Params, PveError> {
    ApiSchema::get(version)
        .validate(method, template, values)
        .map(Params)
        .map_err(PveError::params)
}

/// [`validate`] against a schema method the dispatcher has already looked up.
pub fn validate_method(
    info: &MethodInfo,
    values: &BTreeMap<String, RawValue>,
) -> Result<Params, PveError> {
    ApiSchema::validate_method(info, values)
        .map(Params)
        .map_err(PveError::params)
}

/// The raw parameters as the validator reads them, and the keys given without a value
/// (`?key`: Perl sees undef, i.e. the parameter is absent — but the key still clashes with a
/// URI parameter of its name).
pub fn split_raw(raw: BTreeMap<String, RawParam>) -> (BTreeMap<String, RawValue>, Vec<String>) {
    let mut nulls = Vec::new();
    let values = raw
        .into_iter()
        .filter_map(|(k, v)| match v {
            RawParam::Text(s) => Some((k, RawValue::Text(s))),
            RawParam::Json(j) => Some((k, RawValue::Json(j))),
            RawParam::Null => {
                nulls.push(k);
                None
            }
        })
        .collect();
    (values, nulls)
}

/// A raw value as text, the way Perl would stringify it (for the duplicate check).
pub fn value_text(v: &RawValue) -> std::borrow::Cow<'_, str> {
    match v {
        RawValue::Text(s) => s.as_str().into(),
        RawValue::Json(j) => crate::wire::params::json_text(j),
    }
}

/// Whether the site's PVE version has this route at all (e.g. `oci-registry-pull` is 9.x only).
pub fn route_exists(version: PveVersion, method: &str, template: &str) -> bool {
    ApiSchema::get(version).method(method, template).is_some()
}

/// `allowtoken` of the route (the schema's fact, and ours for routes we pin).
pub fn allows_token(version: PveVersion, method: &str, route: &Route) -> bool {
    route.allowtoken
        && ApiSchema::get(version)
            .method(method, route.template)
            .is_none_or(|m| m.allows_token())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_route_we_serve_exists_in_the_schema() {
        for r in crate::router::table() {
            assert!(
                route_exists(PveVersion::V9_1, r.method, r.template),
                "{} {} is not in the 9.1 schema",
                r.method,
                r.template
            );
        }
    }

    /// A route the dispatcher leaves the node check to (`served_locally`) is one PVE does not
    /// proxy: its schema method has no `proxyto`.
    #[test]
    fn locally_served_routes_have_no_proxyto() {
        let s = crate::schema::ApiSchema::get(PveVersion::V9_1);
        let local: Vec<_> = crate::router::table().iter().filter(|r| r.local).collect();
        assert!(!local.is_empty());
        for r in local {
            let info = s.method(r.method, r.template).unwrap();
            assert!(info.proxyto.is_none(), "{} {}", r.method, r.template);
        }
    }
}
