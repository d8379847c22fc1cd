//! UPIDs: `UPID:node:PID:PSTART:STARTTIME:type:id:user:` with uppercase hex fields.

/// A task's UPID, parsed: `UPID:node:PID:PSTART:STARTTIME:type:id:user:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upid {
    /// Node name.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Process start time (clock ticks since boot).
    pub pstart: u64,
    /// Start time, seconds since the epoch.
    pub starttime: u64,
    /// Task type.
    pub ttype: String,
    /// Object id (may be empty).
    pub id: String,
    /// Owner (`user@realm` or a token id).
    pub user: String,
}

impl Upid {
    /// The UPID string, numbers in 8-digit upper-case hex.
    pub fn encode(&self) -> String {
        format!(
            "UPID:{}:{:08X}:{:08X}:{:08X}:{}:{}:{}:",
            self.node, self.pid, self.pstart, self.starttime, self.ttype, self.id, self.user
        )
    }

    /// Parses what pve-common's `decode_upid` accepts: `UPID:` then the node name, PID and
    /// start time in 8 hex digits, the process start in 8 or 9, the type, an id (may be
    /// empty) and the user, each without `:`, `/` or whitespace, ending in `:`.
    ///
    /// Hand-written rather than a regex: every task poll decodes one, and the regex search
    /// was a visible part of a poll's CPU.
    pub fn decode(s: &str) -> Option<Upid> {
        let rest = s.strip_prefix("UPID:")?.strip_suffix(':')?;
        let mut f = rest.split(':');
        let (node, pid, pstart, starttime) = (f.next()?, f.next()?, f.next()?, f.next()?);
        let (ttype, id, user) = (f.next()?, f.next()?, f.next()?);
        if f.next().is_some() {
            return None;
        }
        fn hex<'a>(v: &'a str, lens: &[usize]) -> Option<&'a str> {
            (lens.contains(&v.len()) && v.bytes().all(|b| b.is_ascii_hexdigit())).then_some(v)
        }
        let word = |v: &str| !v.chars().any(|c| c == '/' || c.is_whitespace());
        let node_ok = node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && node
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && node
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric());
        if !node_ok
            || ttype.is_empty()
            || user.is_empty()
            || !word(ttype)
            || !word(id)
            || !word(user)
        {
            return None;
        }
        Some(Upid {
            node: node.to_string(),
            pid: u32::from_str_radix(hex(pid, &[8])?, 16).ok()?,
            pstart: u64::from_str_radix(hex(pstart, &[8, 9])?, 16).ok()?,
            starttime: u64::from_str_radix(hex(starttime, &[8])?, 16).ok()?,
            ttype: ttype.to_string(),
            id: id.to_string(),
            user: user.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_upid() {
        let s = "UPID:pve:000F1A2B:0ABC1234:66B0C1D2:qmcreate:100:root@pam:";
        let u = Upid::decode(s).unwrap();
        assert_eq!(u.pid, 0x000F1A2B);
        assert_eq!(u.ttype, "qmcreate");
        assert_eq!(u.encode(), s);
        assert!(Upid::decode("UPID:pve:1:2:3:x:y:z:").is_none());
        assert!(
            Upid::decode("UPID:pve:000F1A2B:0ABC1234:66B0C1D2:imgcopy::root@pam!tok:").is_some()
        );
    }

    proptest! {
        #[test]
        fn round_trip(node in "[a-z][a-z0-9-]{0,10}[a-z0-9]", pid in any::<u32>(), pstart in 0u64..0xF_FFFF_FFFF,
                      st in any::<u32>(), ttype in "[a-z]{2,10}", id in "[0-9a-z]{0,6}", user in "[a-z]{1,6}@p(am|ve)(![a-z]{1,5})?") {
            let u = Upid { node, pid, pstart, starttime: st as u64, ttype, id, user };
            prop_assert_eq!(Upid::decode(&u.encode()), Some(u));
        }
        #[test]
        fn decode_never_panics(s in "\\PC{0,80}") {
            let _ = Upid::decode(&s);
        }

        /// The scanner accepts exactly what the pattern it replaced accepts.
        #[test]
        fn scanner_agrees_with_the_pattern(
            s in "UPID:[a-zA-Z0-9 -]{0,6}:[0-9A-Fa-fg]{7,9}:[0-9A-Fa-f]{7,10}:[0-9A-F]{8,9}:[a-z/ ]{0,4}:[0-9a-z :]{0,3}:[a-z@!]{0,4}:?"
        ) {
            let re = regex::Regex::new(
                r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$",
            ).unwrap();
            prop_assert_eq!(Upid::decode(&s).is_some(), re.is_match(&s), "{}", s);
        }
    }
}
