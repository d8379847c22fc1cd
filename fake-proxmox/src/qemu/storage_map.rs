//! `targetstorage` of a migration: which storage of the target node each source storage's
//! volumes go to (kept apart from `migrate`, so the task model can name it without an
//! import cycle).

use std::collections::BTreeMap;

/// `targetstorage`: one storage for all, `SRC:DST` pairs (`,`-separated), or `1` (keep).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StorageMap {
    pub default: Option<String>,
    pub entries: BTreeMap<String, String>,
}

impl StorageMap {
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

    pub fn target(&self, source: &str) -> String {
        self.entries
            .get(source)
            .or(self.default.as_ref())
            .cloned()
            .unwrap_or_else(|| source.to_string())
    }
}
