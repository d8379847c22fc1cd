//! The recurring captures of the rollout steps as cucumber parameter types, so a step reads
//! `VM {vm} is ready` and its function gets a typed value, not a string its regex cut out.
//!
//! In the feature files these are quoted: `VM "dns-01"`, `node "pve-01"`, `site "dc-east"`,
//! `"POST" "/nodes/*/qemu"`. The quotes are part of the match and dropped by `FromStr`.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use cucumber::Parameter;

fn unquote(s: &str) -> Result<&str, String> {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .filter(|s| !s.is_empty() && !s.contains('"'))
        .ok_or_else(|| format!("expected a quoted name, got {s}"))
}

macro_rules! quoted_name {
    ($(#[$doc:meta])* $ty:ident, $name:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Parameter)]
        #[param(name = $name, regex = r#""[^"]+""#)]
        pub struct $ty(pub String);

        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                unquote(s).map(|s| $ty(s.to_string()))
            }
        }

        impl Deref for $ty {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<$ty> for String {
            fn eq(&self, other: &$ty) -> bool {
                *self == other.0
            }
        }

        impl From<$ty> for String {
            fn from(v: $ty) -> String {
                v.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

quoted_name!(
    /// `{vm}`: a VM by the name its manifest gives it.
    VmName,
    "vm"
);
quoted_name!(
    /// `{node}`: a PVE node by name.
    NodeName,
    "node"
);
quoted_name!(
    /// `{site}`: a PVE site (one cluster, one API endpoint) by name.
    SiteName,
    "site"
);

/// `{request}`: `"METHOD" "/path"`, the path a journal pattern where `*` stands for one
/// segment.
#[derive(Clone, Debug, PartialEq, Eq, Parameter)]
#[param(name = "request", regex = r#""[A-Z]+" "[^"]+""#)]
pub struct Request {
    pub method: String,
    pub path: String,
}

impl FromStr for Request {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (m, p) = s
            .split_once(' ')
            .ok_or_else(|| format!("expected \"METHOD\" \"/path\", got {s}"))?;
        let method = unquote(m)?.to_string();
        let path = unquote(p)?.to_string();
        if !method.chars().all(|c| c.is_ascii_uppercase()) || !path.starts_with('/') {
            return Err(format!("expected \"METHOD\" \"/path\", got {s}"));
        }
        Ok(Request { method, path })
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// The parsing rules, checked by the harness self-test (the runners have no unit-test harness).
pub fn check_rules() -> Result<(), String> {
    let ok = |c: bool, what: &str| {
        if c {
            Ok(())
        } else {
            Err(format!("params: {what}"))
        }
    };
    ok(
        "\"dns-01\"".parse::<VmName>().map(|v| v.0) == Ok("dns-01".to_string()),
        "a quoted VM name loses its quotes",
    )?;
    ok(
        "dns-01".parse::<NodeName>().is_err(),
        "a bare node name is refused",
    )?;
    ok(
        "\"\"".parse::<SiteName>().is_err(),
        "an empty site name is refused",
    )?;
    let r = "\"POST\" \"/nodes/*/qemu\"".parse::<Request>();
    ok(
        r.as_ref()
            .is_ok_and(|r| r.method == "POST" && r.path == "/nodes/*/qemu"),
        "a request is a quoted method and path",
    )?;
    ok(
        "\"post\" \"/x\"".parse::<Request>().is_err(),
        "a lower-case method is refused",
    )?;
    ok(
        "\"GET\" \"x\"".parse::<Request>().is_err(),
        "a path without / is refused",
    )?;
    Ok(())
}
