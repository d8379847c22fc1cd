//! The `prune-backups` property string's rule (pve-storage `validate_prune_backups`, src/PVE/Storage.pm):
//! a format check of the schema, and the retention the storage model prunes by.

use std::collections::BTreeMap;

/// The retention of one prune: `keep-all`, or how many of each interval to keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keep {
    /// `keep-all=1`, or no positive count at all (PVE then keeps everything): nothing is
    /// pruned.
    pub all: bool,
    /// How many backups to keep per interval, by option name (`keep-last`, `keep-daily`,
    /// … see [`INTERVALS`]); counts of 0 are kept as given. Empty when `all` is set.
    pub counts: BTreeMap<String, u64>,
}

/// The `keep-*` intervals, shortest first: the order `prune_mark_backup_group` applies them.
pub const INTERVALS: [&str; 6] = [
    "keep-last",
    "keep-hourly",
    "keep-daily",
    "keep-weekly",
    "keep-monthly",
    "keep-yearly",
];

/// `validate_prune_backups` over a parsed `prune-backups` string: no positive count means
/// `keep-all`; `keep-all` with a positive count is refused.
pub fn validate_prune_backups(parsed: &BTreeMap<String, String>) -> Result<Keep, String> {
    let mut keep = Keep::default();
    for (k, v) in parsed {
        if k == "keep-all" {
            keep.all = v == "1";
        } else if let Ok(n) = v.trim().parse::<u64>() {
            keep.counts.insert(k.clone(), n);
        }
    }
    if keep.counts.values().all(|n| *n == 0) {
        return Ok(Keep {
            all: true,
            counts: BTreeMap::new(),
        });
    }
    if keep.all {
        return Err("keep-all cannot be set together with other options.\n".into());
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keep_all_alone_or_by_default() {
        let parse = |pairs: &[(&str, &str)]| {
            let m: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            validate_prune_backups(&m)
        };
        assert!(parse(&[("keep-last", "0")]).unwrap().all);
        assert!(!parse(&[("keep-last", "2")]).unwrap().all);
        assert_eq!(
            parse(&[("keep-all", "1"), ("keep-last", "2")]).unwrap_err(),
            "keep-all cannot be set together with other options.\n"
        );
    }
}
