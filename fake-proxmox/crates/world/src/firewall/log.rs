//! `GET …/firewall/log`: the VM's lines of `/var/log/pve-firewall.log` as PVE's
//! `dump_fw_logfile` pages them: `{n, t}` numbered from 1 over the matching lines,
//! `start` skipped, at most `limit` (50 by default, 0 for all), `since`/`until` on the
//! line's timestamp, `total` the count, and `no content` for an empty log.

use serde_json::{Value, json};

use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

/// One page of log lines and the count of matching lines.
pub struct LogPage {
    /// How many lines matched in all.
    pub total: u64,
    /// The page's lines as `{"n": line number, "t": text}`.
    pub lines: Vec<Value>,
}

/// `DD/Mon/YYYY:HH:MM:SS` and `+ZZZZ` (the 4th and 5th words of a line) as UNIX time.
fn timestamp(date: &str, zone: &str) -> Option<i64> {
    let (day, rest) = date.split_once('/')?;
    let (mon, rest) = rest.split_once('/')?;
    let mut parts = rest.split(':');
    let (year, h, m, s) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|x| *x == mon)? as u8 + 1;
    let date = time::Date::from_calendar_date(
        year.parse().ok()?,
        time::Month::try_from(month).ok()?,
        day.parse().ok()?,
    )
    .ok()?;
    let t = time::Time::from_hms(h.parse().ok()?, m.parse().ok()?, s.parse().ok()?).ok()?;
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits = zone.trim_start_matches(['+', '-']);
    let offset = match (digits.get(..2), digits.get(2..4)) {
        (Some(hh), Some(mm)) => {
            sign * (hh.parse::<i64>().ok()? * 3600 + mm.parse::<i64>().ok()? * 60)
        }
        _ => 0,
    };
    Some(date.with_time(t).assume_utc().unix_timestamp() - offset)
}

/// Page `lines` (already the VM's) as `dump_logfile` does.
pub fn page(
    lines: &[&str],
    start: u64,
    limit: u64,
    since: Option<i64>,
    until: Option<i64>,
) -> LogPage {
    let (mut count, mut left) = (0u64, limit);
    let mut out = Vec::new();
    for line in lines {
        if since.is_some() || until.is_some() {
            let words: Vec<&str> = line.split(' ').collect();
            let ts = match (words.get(3), words.get(4)) {
                (Some(d), Some(z)) => timestamp(d, z),
                _ => None,
            }
            .unwrap_or(0);
            if since.is_some_and(|s| ts < s) || until.is_some_and(|u| ts > u) {
                continue;
            }
        }
        count += 1;
        if count <= start {
            continue;
        }
        if limit != 0 {
            if left == 0 {
                continue;
            }
            left -= 1;
        }
        out.push(json!({"n": count, "t": line}));
    }
    if count == 0 {
        count = 1;
        out.push(json!({"n": 1, "t": "no content"}));
    }
    LogPage {
        total: count,
        lines: out,
    }
}

impl Site {
    /// `GET …/firewall/log`
    pub fn firewall_log(&self, req: &Request) -> Result<LogPage, PveError> {
        let (node, vmid) = (req.node()?, req.vmid()?);
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Console")?;
        self.firewall_guest(req, &node, vmid)?;
        let prefix = format!("{vmid} ");
        let lines: Vec<&str> = self
            .firewall
            .log
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with(&prefix))
            .collect();
        let int = |k: &str| req.p.int(k).map(|v| v.max(0));
        // `since`/`until` of 0 filter nothing (Perl's truth).
        Ok(page(
            &lines,
            int("start").unwrap_or(0) as u64,
            int("limit").unwrap_or(50) as u64,
            int("since").filter(|s| *s != 0),
            int("until").filter(|u| *u != 0),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const LINES: [&str; 3] = [
        "100 6 tap100i0-IN 02/Dec/2026:10:00:00 +0000 ACCEPT: IN=fwbr100i0 PROTO=TCP DPT=22",
        "100 6 tap100i0-IN 02/Dec/2026:11:00:00 +0000 ACCEPT: IN=fwbr100i0 PROTO=TCP DPT=443",
        "100 4 tap100i0-IN 02/Dec/2026:12:00:00 +0100 policy DROP: IN=fwbr100i0 PROTO=UDP",
    ];

    #[test]
    fn an_empty_log_says_no_content() {
        let p = page(&[], 0, 50, None, None);
        assert_eq!(p.total, 1);
        assert_eq!(p.lines, vec![json!({"n": 1, "t": "no content"})]);
    }

    #[test]
    fn start_and_limit_page_the_numbered_lines() {
        let p = page(&LINES, 1, 1, None, None);
        assert_eq!(p.total, 3);
        assert_eq!(p.lines, vec![json!({"n": 2, "t": LINES[1]})]);
        assert_eq!(page(&LINES, 0, 0, None, None).lines.len(), 3);
    }

    #[test]
    fn since_and_until_use_the_line_time_and_zone() {
        let ten = timestamp("02/Dec/2026:10:00:00", "+0000").unwrap();
        let p = page(&LINES, 0, 50, Some(ten + 1), None);
        // 12:00 +0100 is 11:00 UTC: both later lines.
        assert_eq!(p.total, 2);
        let p = page(&LINES, 0, 50, None, Some(ten + 3600));
        assert_eq!(p.lines.len(), 3);
    }
}
