//! fake-proxmox-schema: the Proxmox VE API schema facts and PVE's parameter validation, with
//! no HTTP and no model, usable on its own: fake-proxmox's dispatcher validates every request
//! with it, and the deployer's `plan` checks the requests it would send.
//!
//! The facts (parameter names, types, formats, ranges, patterns, enums) live in
//! `data/pve-*.json`, produced by fake-proxmox's `examples/gen-schema.rs` from the extracted
//! `apidata.js` dumps. The checks mirror `pve-common src/PVE/JSONSchema.pm` (`check_prop`,
//! `check_type`, `check_object`, `parse_property_string`), including its error texts.
//!
//! Releases: 7.4 (PVE 7.4-16), 8.4 (8.4.5) and 9.1 each follow the whole API dump of that
//! release. The behaviour gates between them are `release`'s methods; docs/src's "PVE
//! releases" page lists them with their sources.
//!
//! Deviations from real PVE:
//! - `V7_1` is a profile, not a dump: the 7.4 schema with `import-from` removed from the drive
//!   formats (PVE < 7.2 has no `import-from`); other differences between 7.1 and 7.4 (options
//!   added in 7.2–7.4) are not modelled.
//! - The named formats are the 9.1 ones for every release (e.g. `pve-storage-content` knows
//!   `import`, which 7.4's storage refuses; a 7.4 site still refuses `import` where the schema
//!   has an enum, as `download-url` and `upload` do).
//! - Named formats PVE registers in code are re-implemented in [`formats`]; a format name this
//!   crate does not know is accepted without checks (real PVE knows them all).
//! - Errors of several parameters are reported together, like PVE; when one parameter has
//!   several errors PVE joins them with a literal `\n` (backslash, n) — so do we.
//!
//! UPIDs, volume ids and disk sizes for the model live with their owners in fake-proxmox-world
//! (`tasks::upid`, `storage::volid`, `storage::model`); this crate only checks their formats.
//!
//! # Layers (lower modules never import higher ones)
//! ```text
//! lib             ApiSchema, PveVersion, RawValue: the facade
//!  └ check        check_prop, check_object, check_format, parse_property_string
//!     ├ propstr   the property-string parser, handed check_prop as a callback (the checks
//!     │           recurse through property strings; the parser never imports the checker)
//!     ├ formats   the named formats PVE registers in code (pve-common, qemu-server, storage)
//!     │  ├ firewall_formats → firewall_addr   pve-firewall's formats and address syntax
//!     │  └ prune  `prune-backups` (pve-storage's verify function)
//!     ├ errors    PVE's fixed messages and add_error
//!     └ facts     the committed facts as deserialized; route: path templates to methods
//! release         per-release facts (`/version` strings) of PveVersion
//! ```

#![warn(missing_docs)]

mod check;
mod errors;
mod facts;
pub mod formats;
mod propstr;
mod route;

pub mod firewall_addr;
pub mod firewall_formats;
pub mod prune;
pub mod release;

use std::collections::BTreeMap;
use std::sync::LazyLock;

pub use check::parse_property_string;
pub use facts::{MethodInfo, Prop, PropFormat};
pub use propstr::parse_boolean;

/// `param -> message`, exactly as PVE puts it in the `errors` map of a 400 answer.
pub type ParamErrors = BTreeMap<String, String>;

/// A PVE release whose API schema the fake follows. Ordered by release, so a gate reads
/// `version >= PveVersion::V8_4`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum PveVersion {
    /// PVE 7.1: the 7.4 facts without `import-from` (a profile, see the module docs).
    #[serde(rename = "7.1")]
    V7_1,
    /// PVE 7.4-16: the whole 7.4 API.
    #[serde(rename = "7.4")]
    V7_4,
    /// PVE 8.4.5: the whole 8.4 API.
    #[serde(rename = "8.4")]
    V8_4,
    /// PVE 9.1: the whole 9.1 API.
    #[serde(rename = "9.1")]
    V9_1,
}

impl PveVersion {
    /// Every version a site can run, oldest first (the releases and the 7.1 profile).
    pub const ALL: [PveVersion; 4] = [
        PveVersion::V7_1,
        PveVersion::V7_4,
        PveVersion::V8_4,
        PveVersion::V9_1,
    ];

    /// The releases whose whole API dump the facts are generated from, oldest first.
    pub const RELEASES: [PveVersion; 3] = [PveVersion::V7_4, PveVersion::V8_4, PveVersion::V9_1];

    /// The `x.y` release string (`GET /version` → `release`).
    pub fn as_str(self) -> &'static str {
        match self {
            PveVersion::V7_1 => "7.1",
            PveVersion::V7_4 => "7.4",
            PveVersion::V8_4 => "8.4",
            PveVersion::V9_1 => "9.1",
        }
    }

    /// Whether drive options know `import-from` (PVE 7.2 and later).
    pub fn has_import_from(self) -> bool {
        self >= PveVersion::V7_4
    }
}

impl std::fmt::Display for PveVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PveVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PveVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = PveVersion::ALL.iter().map(|v| v.as_str()).collect();
                format!("unknown PVE version '{s}' (known: {})", known.join(", "))
            })
    }
}

/// One request parameter as it arrived.
#[derive(Clone, Debug, PartialEq)]
pub enum RawValue {
    /// From a query string or an `application/x-www-form-urlencoded` body.
    Text(String),
    /// From an `application/json` body (keeps JSON's types: `true` is a valid boolean here).
    Json(serde_json::Value),
}

/// The result of looking a request path up in the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteMatch<'a> {
    /// The path matches a template that has this method.
    Found {
        /// The schema's path template the path matched, e.g. `/nodes/{node}/qemu/{vmid}`.
        template: &'a str,
        /// The values of the template's `{…}` segments by name, e.g. `node` → `pve1`, as
        /// they appear in the path.
        path_params: BTreeMap<String, String>,
    },
    /// No template has this method for this path: PVE answers
    /// `501 Method 'GET /path' not implemented`.
    NotImplemented,
}

/// The API schema of one PVE version: routes and parameter definitions.
pub struct ApiSchema {
    version: PveVersion,
    facts: facts::Facts,
    router: route::Router,
}

static V9_1: LazyLock<ApiSchema> = LazyLock::new(|| {
    ApiSchema::load(
        PveVersion::V9_1,
        include_str!("../data/pve-9.1.json"),
        false,
    )
});
static V8_4: LazyLock<ApiSchema> = LazyLock::new(|| {
    ApiSchema::load(
        PveVersion::V8_4,
        include_str!("../data/pve-8.4.json"),
        false,
    )
});
static V7_4: LazyLock<ApiSchema> = LazyLock::new(|| {
    ApiSchema::load(
        PveVersion::V7_4,
        include_str!("../data/pve-7.4.json"),
        false,
    )
});
static V7_1: LazyLock<ApiSchema> =
    LazyLock::new(|| ApiSchema::load(PveVersion::V7_1, include_str!("../data/pve-7.4.json"), true));

impl ApiSchema {
    /// The schema of `v`, parsed once from the committed facts.
    pub fn get(v: PveVersion) -> &'static ApiSchema {
        match v {
            PveVersion::V7_1 => &V7_1,
            PveVersion::V7_4 => &V7_4,
            PveVersion::V8_4 => &V8_4,
            PveVersion::V9_1 => &V9_1,
        }
    }

    fn load(version: PveVersion, text: &str, older_than_7_2: bool) -> ApiSchema {
        // The facts are committed and covered by tests; a parse failure is a build defect.
        let mut facts: facts::Facts =
            serde_json::from_str(text).expect("committed schema facts are valid JSON");
        if older_than_7_2 {
            facts.remove_subproperty("import-from");
        }
        facts.prepare();
        let router =
            route::Router::new(facts.paths.iter().map(|(path, methods)| {
                (path.as_str(), methods.keys().map(String::as_str).collect())
            }));
        ApiSchema {
            version,
            facts,
            router,
        }
    }

    /// The PVE release whose API dump this schema was loaded from.
    pub fn version(&self) -> PveVersion {
        self.version
    }

    /// All path templates, e.g. `/nodes/{node}/qemu/{vmid}/config`.
    pub fn templates(&self) -> impl Iterator<Item = &str> {
        self.facts.paths.keys().map(String::as_str)
    }

    /// The methods (`GET`, `POST`, …) a template has.
    pub fn methods(&self, template: &str) -> impl Iterator<Item = &str> {
        self.facts
            .paths
            .get(template)
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
    }

    /// The method's facts (parameters, `allowtoken`, `protected`, `proxyto`, permissions).
    pub fn method(&self, method: &str, template: &str) -> Option<&MethodInfo> {
        self.facts.paths.get(template)?.get(method)
    }

    /// Finds the template for `path` (the part after `/api2/json`, already percent-decoded).
    ///
    /// Like PVE's `find_handler`, empty segments are skipped and, at each level, a literal
    /// segment wins over a `{param}` segment, without backtracking.
    pub fn route(&self, method: &str, path: &str) -> RouteMatch<'_> {
        self.router.route(method, path)
    }

    /// The template `path` resolves to regardless of the method (for dispatchers that look up
    /// their handler by template and answer PVE's 501 themselves), with the `{param}` captures.
    pub fn find_template(&self, path: &str) -> Option<(&str, BTreeMap<String, String>)> {
        self.router.find(path).map(|(t, _, params)| (t, params))
    }

    /// Validates `params` against the method's schema and returns them typed: integers and
    /// booleans (as 0/1) as JSON numbers, numbers as JSON numbers, everything else as strings.
    ///
    /// `params` must already hold the path parameters (PVE merges them before validating).
    /// On failure, the map holds PVE's message per parameter; the caller answers
    /// `400 Parameter verification failed.` with it.
    pub fn validate(
        &self,
        method: &str,
        template: &str,
        params: &BTreeMap<String, RawValue>,
    ) -> Result<BTreeMap<String, serde_json::Value>, ParamErrors> {
        let Some(info) = self.method(method, template) else {
            let mut errors = ParamErrors::new();
            errors.insert(
                "_root".to_string(),
                format!("Method '{method} {template}' not implemented"),
            );
            return Err(errors);
        };
        check::validate_params(info, params)
    }

    /// [`ApiSchema::validate`] for a method already looked up with [`ApiSchema::method`]: a
    /// dispatcher that has it saves looking the template up again on every request.
    pub fn validate_method(
        info: &MethodInfo,
        params: &BTreeMap<String, RawValue>,
    ) -> Result<BTreeMap<String, serde_json::Value>, ParamErrors> {
        check::validate_params(info, params)
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod tests;

/// The README's example runs as a doc test, so what it shows stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
