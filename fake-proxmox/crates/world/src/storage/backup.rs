//! Backup archives as pve-storage reads their names, and its retention rules: `archive_info`
//! (guest type, VMID, time of a `vzdump-<type>-<vmid>-YYYY_MM_DD-hh_mm_ss.<ext>` archive),
//! the `prune-backups` options and `prune_mark_backup_group` (src/PVE/Storage.pm).
//!
//! Times in archive names are read as UTC: the fake's nodes run in UTC (PVE reads them in
//! the node's local time zone).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

// The `prune-backups` option is a schema format, so its validator lives with the schema.
pub use fake_proxmox_schema::prune::{INTERVALS, Keep, validate_prune_backups};

static ARCHIVE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^vzdump-(lxc|openvz|qemu)-.+\.(tgz|(?:tar|vma)(?:\.(?:gz|lzo|zst|bz2))?)$").ok()
});
static STD_NAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^vzdump-(?:lxc|openvz|qemu)-([1-9][0-9]{2,8})-(\d{4})_(\d{2})_(\d{2})-(\d{2})_(\d{2})_(\d{2})\.(.+)$")
        .ok()
});
static LISTED_VMID: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"-([1-9][0-9]{2,8})-[^/]+$").ok());

/// What `archive_info` tells of a backup's file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// `qemu`, `lxc` or `openvz`.
    pub guest: String,
    /// VMID and time, for names in the standard scheme only.
    pub std: Option<(u32, u64)>,
}

/// `archive_info` of a backup file name (no directory); `None` where PVE's dies.
pub fn archive_info(name: &str) -> Option<ArchiveInfo> {
    let c = ARCHIVE.as_ref()?.captures(name)?;
    let guest = c.get(1)?.as_str().to_string();
    let ext = c.get(2)?.as_str();
    let std = STD_NAME
        .as_ref()
        .and_then(|r| r.captures(name))
        .filter(|s| s.get(8).is_some_and(|e| e.as_str() == ext))
        .and_then(|s| {
            let n = |i: usize| s.get(i)?.as_str().parse::<u32>().ok();
            let vmid = n(1)?;
            let month = Month::try_from(u8::try_from(n(3)?).ok()?).ok()?;
            let date = Date::from_calendar_date(
                i32::try_from(n(2)?).ok()?,
                month,
                u8::try_from(n(4)?).ok()?,
            )
            .ok()?;
            let hms = |i| u8::try_from(n(i)?).ok();
            let t = Time::from_hms(hms(5)?, hms(6)?, hms(7)?).ok()?;
            let ts = PrimitiveDateTime::new(date, t)
                .assume_utc()
                .unix_timestamp();
            Some((vmid, u64::try_from(ts).ok()?))
        });
    Some(ArchiveInfo { guest, std })
}

/// The VMID a backup listing names for a file (`-<vmid>-` before the extension).
pub fn listed_vmid(name: &str) -> Option<u32> {
    LISTED_VMID
        .as_ref()?
        .captures(name)?
        .get(1)?
        .as_str()
        .parse()
        .ok()
}

/// What a prune does with a backup (the `mark` of PVE's prune list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Kept by the retention options.
    Keep,
    /// Removed by the prune.
    Remove,
    /// Protected: kept whatever the options say.
    Protected,
    /// Not named as vzdump names backups: left out of the prune.
    Renamed,
}

impl Mark {
    /// The mark as PVE's prune list writes it (`keep`, `remove`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Keep => "keep",
            Mark::Remove => "remove",
            Mark::Protected => "protected",
            Mark::Renamed => "renamed",
        }
    }
}

/// One backup of a prune list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneEntry {
    /// The backup's volume id.
    pub volid: String,
    /// Creation time, seconds since the epoch (from the file name when standard-named).
    pub ctime: u64,
    /// `qemu`, `lxc`, `openvz` or `unknown`.
    pub guest: String,
    /// The guest it backs up, when known.
    pub vmid: Option<u32>,
    /// What the prune does with it; `None` before marking.
    pub mark: Option<Mark>,
}

/// The interval a backup time falls in, for one `keep-*` option.
fn interval_id(option: &str, ctime: u64) -> String {
    let Ok(t) = OffsetDateTime::from_unix_timestamp(i64::try_from(ctime).unwrap_or(i64::MAX))
    else {
        return ctime.to_string();
    };
    let (y, m, d, h) = (t.year(), u8::from(t.month()), t.day(), t.hour());
    match option {
        "keep-hourly" => format!("{h}/{d}/{m}/{y}"),
        "keep-daily" => format!("{d}/{m}/{y}"),
        "keep-weekly" => {
            let (iso_year, week, _) = t.to_iso_week_date();
            format!("{week}/{iso_year}")
        }
        "keep-monthly" => format!("{m}/{y}"),
        "keep-yearly" => y.to_string(),
        _ => ctime.to_string(),
    }
}

/// `$prune_mark`: keep the newest backup of each of the first `count` intervals not yet
/// covered, mark the others of those intervals for removal, leave older ones to the next
/// option.
fn prune_mark(list: &mut [&mut PruneEntry], count: u64, option: &str) {
    if count == 0 {
        return;
    }
    let already: BTreeSet<String> = list
        .iter()
        .filter(|e| e.mark == Some(Mark::Keep))
        .map(|e| interval_id(option, e.ctime))
        .collect();
    let mut newly: BTreeSet<String> = BTreeSet::new();
    for e in list.iter_mut() {
        let id = interval_id(option, e.ctime);
        if e.mark.is_some() || already.contains(&id) {
            continue;
        }
        if newly.contains(&id) {
            e.mark = Some(Mark::Remove);
        } else {
            if newly.len() as u64 >= count {
                break;
            }
            newly.insert(id);
            e.mark = Some(Mark::Keep);
        }
    }
}

/// `prune_mark_backup_group`: marks one guest's backups (newest first) by the retention.
pub fn prune_mark_backup_group(group: &mut [&mut PruneEntry], keep: &Keep) {
    if keep.all || keep.counts.values().all(|n| *n == 0) {
        for e in group.iter_mut() {
            // Protected and renamed backups keep their mark.
            if e.mark.is_none_or(|m| m == Mark::Remove) {
                e.mark = Some(Mark::Keep);
            }
        }
        return;
    }
    group.sort_by_key(|e| std::cmp::Reverse(e.ctime));
    for option in INTERVALS {
        let count = keep.counts.get(option).copied().unwrap_or(0);
        prune_mark(group, count, option);
    }
    for e in group.iter_mut() {
        e.mark.get_or_insert(Mark::Remove);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn standard_names_give_vmid_and_time() {
        let i = archive_info("vzdump-qemu-100-2025_01_02-03_04_05.vma.zst").unwrap();
        assert_eq!(i.guest, "qemu");
        assert_eq!(i.std, Some((100, 1_735_787_045)));
        let renamed = archive_info("vzdump-qemu-100-before-upgrade.vma.zst").unwrap();
        assert_eq!(renamed.std, None);
        assert!(archive_info("my-copy.tgz").is_none());
        assert!(
            archive_info("vzdump-qemu-100-2025_13_02-03_04_05.vma")
                .unwrap()
                .std
                .is_none()
        );
        assert_eq!(
            listed_vmid("vzdump-qemu-100-2025_01_02-03_04_05.vma"),
            Some(100)
        );
    }

    #[test]
    fn last_then_daily_cover_older_backups() {
        // Two backups a day for three days, oldest first.
        let mut e: Vec<PruneEntry> = (0..3).flat_map(|d| [entry(d, 1), entry(d, 13)]).collect();
        let m = marks(&[("keep-last", 1), ("keep-daily", 2)], &mut e);
        // keep-last keeps day 2 13:00; keep-daily skips day 2 (covered) and keeps the newest
        // of days 1 and 0; the rest goes.
        assert_eq!(m, ["remove", "keep", "remove", "keep", "remove", "keep"]);
    }

    #[test]
    fn protected_backups_keep_their_mark_and_do_not_count() {
        let mut e = vec![entry(0, 1), entry(1, 1)];
        e[1].mark = Some(Mark::Protected);
        let m = marks(&[("keep-last", 1)], &mut e);
        assert_eq!(m, ["keep", "protected"]);
    }

    fn entry(day: u64, hour: u64) -> PruneEntry {
        PruneEntry {
            volid: format!("local:backup/{day}-{hour}"),
            ctime: 1_735_689_600 + day * 86_400 + hour * 3600,
            guest: "qemu".into(),
            vmid: Some(100),
            mark: None,
        }
    }

    fn marks(keep: &[(&str, u64)], entries: &mut [PruneEntry]) -> Vec<&'static str> {
        let keep = Keep {
            all: false,
            counts: keep.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        };
        let mut refs: Vec<&mut PruneEntry> = entries.iter_mut().collect();
        prune_mark_backup_group(&mut refs, &keep);
        entries
            .iter()
            .map(|e| e.mark.map_or("-", Mark::as_str))
            .collect()
    }
}
