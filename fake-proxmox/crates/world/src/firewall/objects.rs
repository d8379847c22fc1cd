//! The named objects a firewall rule may refer to: aliases and ipset entries, as the
//! config files hold them.

use std::collections::BTreeMap;

/// One `[ALIASES]` line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Alias {
    /// As written (the key is its lower case).
    pub name: String,
    /// Address or network (`10.0.0.1`, `10.0.0.0/24`, IPv6 alike).
    pub cidr: String,
    /// 4 or 6, as found when the file was read; `None` for an alias just made through the API.
    pub ipversion: Option<u8>,
    /// Trailing `# comment`, if any.
    pub comment: Option<String>,
}

/// One ipset entry: `[!]cidr # comment`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IpsetEntry {
    /// Address, network or alias name.
    pub cidr: String,
    /// `!` prefix: addresses matching it are excluded from the set.
    pub nomatch: bool,
    /// Trailing `# comment`, if any.
    pub comment: Option<String>,
    /// Why the entry does not verify, by parameter (empty when it does).
    pub errors: BTreeMap<String, String>,
}
