//! The named objects a firewall rule may refer to: aliases and ipset entries, as the
//! config files hold them.

use std::collections::BTreeMap;

/// One `[ALIASES]` line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Alias {
    /// As written (the key is its lower case).
    pub name: String,
    pub cidr: String,
    pub ipversion: Option<u8>,
    pub comment: Option<String>,
}

/// One ipset entry: `[!]cidr # comment`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IpsetEntry {
    pub cidr: String,
    pub nomatch: bool,
    pub comment: Option<String>,
    pub errors: BTreeMap<String, String>,
}
