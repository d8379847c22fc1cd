//! UPIDs: `UPID:node:PID:PSTART:STARTTIME:type:id:user:` with uppercase hex fields.

use std::sync::LazyLock;

use regex::Regex;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upid {
    pub node: String,
    pub pid: u32,
    pub pstart: u64,
    pub starttime: u64,
    pub ttype: String,
    pub id: String,
    pub user: String,
}

static UPID_RE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$",
    )
    .ok()
});

impl Upid {
    pub fn encode(&self) -> String {
        format!(
            "UPID:{}:{:08X}:{:08X}:{:08X}:{}:{}:{}:",
            self.node, self.pid, self.pstart, self.starttime, self.ttype, self.id, self.user
        )
    }

    pub fn decode(s: &str) -> Option<Upid> {
        let c = UPID_RE.as_ref()?.captures(s)?;
        Some(Upid {
            node: c.get(1)?.as_str().to_string(),
            pid: u32::from_str_radix(c.get(3)?.as_str(), 16).ok()?,
            pstart: u64::from_str_radix(c.get(4)?.as_str(), 16).ok()?,
            starttime: u64::from_str_radix(c.get(5)?.as_str(), 16).ok()?,
            ttype: c.get(6)?.as_str().to_string(),
            id: c.get(7)?.as_str().to_string(),
            user: c.get(8)?.as_str().to_string(),
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
    }
}
