//! `targetstorage` of a migration: which storage of the target node each source storage's
//! volumes go to (kept apart from `migrate`, so the task model can name it without an
//! import cycle).

use std::collections::BTreeMap;

/// `targetstorage`: one storage for all, `SRC:DST` pairs (`,`-separated), or `1` (keep).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StorageMap {
    /// Target for every source storage without an entry; `None`: such volumes keep their
    /// storage ID.
    pub default: Option<String>,
    /// Source storage ID → target storage ID.
    pub entries: BTreeMap<String, String>,
}

impl StorageMap {
    /// Parse a `targetstorage` value; `Err` for a source mapped twice or two defaults.
    pub fn parse(text: &str) -> Result<StorageMap, String> {
        let mut map = StorageMap::default();
        if text == "1" {
            return Ok(map);
        }
        for part in text.split(',').filter(|p| !p.is_empty()) {
            match part.split_once(':') {
                Some((src, dst)) => {
                    if map.entries.insert(src.into(), dst.into()).is_some() {
                        return Err(format!("duplicate mapping for source '{src}'"));
                    }
                }
                None if map.default.is_none() => map.default = Some(part.into()),
                None => return Err("default target specified multiple times".into()),
            }
        }
        Ok(map)
    }

    /// The target storage for volumes on `source`: its entry, else the default, else itself.
    pub fn target(&self, source: &str) -> String {
        self.entries
            .get(source)
            .or(self.default.as_ref())
            .cloned()
            .unwrap_or_else(|| source.to_string())
    }
}

/// `PVE::JSONSchema::parse_idmap` as a handler calls it on a whole `*-pair-list` value (the
/// schema has checked each entry's ID): `1` is the identity mapping, which combines with
/// nothing else.
#[derive(Clone, Debug, Default)]
pub struct IdMap {
    /// The value was `1`: every ID maps to itself.
    pub identity: bool,
    /// The explicit pairs and the default target.
    pub map: StorageMap,
}

/// Parse an ID map value; `Err` with PVE's text for a duplicate source, a second default,
/// or `1` combined with other entries.
pub fn parse_idmap(text: &str) -> Result<IdMap, String> {
    let mut out = IdMap::default();
    for entry in crate::schema::formats::split_list(text) {
        if entry == "1" {
            out.identity = true;
        } else if let Some((src, dst)) = entry
            .split_once(':')
            .filter(|(s, d)| !s.is_empty() && !d.is_empty() && !d.contains(':'))
        {
            if out.map.entries.contains_key(src) {
                return Err(format!("duplicate mapping for source '{src}'\n"));
            }
            out.map.entries.insert(src.into(), dst.into());
        } else {
            if out.map.default.is_some() {
                return Err("default target ID can only be provided once\n".into());
            }
            out.map.default = Some(entry.into());
        }
    }
    if out.identity && (out.map.default.is_some() || !out.map.entries.is_empty()) {
        return Err("identity mapping cannot be combined with other mappings\n".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idmap_follows_pve_texts() {
        let m = parse_idmap("local-lvm:fast,big").unwrap_or_default();
        assert_eq!(m.map.target("local-lvm"), "fast");
        assert_eq!(m.map.target("other"), "big");
        assert!(parse_idmap("1").is_ok_and(|m| m.identity));
        assert_eq!(
            parse_idmap("a:b,a:c").err().as_deref(),
            Some("duplicate mapping for source 'a'\n")
        );
        assert_eq!(
            parse_idmap("a,b").err().as_deref(),
            Some("default target ID can only be provided once\n")
        );
        assert_eq!(
            parse_idmap("1,a:b").err().as_deref(),
            Some("identity mapping cannot be combined with other mappings\n")
        );
    }
}
