//! `{node}`: a lab node by name (`node01`), the capture most lab steps share. Unquoted in
//! the feature files, as in `node01's clock is set 400 days ahead`.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use cucumber::Parameter;

#[derive(Clone, Debug, PartialEq, Eq, Parameter)]
#[param(name = "node", regex = r"[A-Za-z0-9][A-Za-z0-9_-]*")]
pub struct LabNode(pub String);

impl FromStr for LabNode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let ok = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if ok {
            Ok(LabNode(s.to_string()))
        } else {
            Err(format!("'{s}' is not a node name"))
        }
    }
}

impl Deref for LabNode {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LabNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<LabNode> for String {
    fn eq(&self, other: &LabNode) -> bool {
        *self == other.0
    }
}
