//! The request journal: what clients sent (secrets redacted), how they authenticated, and
//! what they got back — so tests can assert on what a deployer actually did.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// How a request tried to authenticate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum AuthKind {
    /// No credentials at all.
    None,
    /// A valid ticket (cookie or `Authorization: PVEAuthCookie=`).
    Ticket {
        /// The ticket's user, `user@realm`.
        userid: String,
    },
    /// A valid `Authorization: PVEAPIToken=` header.
    ApiToken {
        /// The token's id, `user@realm!name`.
        tokenid: String,
    },
    /// An API token (`user@realm!name=secret`) sent where a ticket belongs — the
    /// `PVEAuthCookie` cookie. PVE treats it as a (bad) ticket.
    TokenInCookie {
        /// The token id the cookie carried, `user@realm!name`.
        tokenid: String,
    },
    /// A ticket that did not verify (forged, expired, unknown user).
    InvalidTicket,
    /// A token header that did not verify.
    InvalidToken {
        /// The token id the header named (unknown, or its secret wrong).
        tokenid: String,
    },
}

/// One request as the fake saw it and answered it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Its number in the journal, from 1, in the order the answers were recorded; numbers go on
    /// rising when old entries drop out of the ring.
    pub seq: u64,
    /// Simulated UNIX time of the request.
    pub time: f64,
    /// The site (simulated cluster) whose listener took the request.
    pub site: String,
    /// The HTTP method, upper case (`GET`, `POST`, `PUT`, `DELETE`).
    pub method: String,
    /// Path below `/api2/json` (or the full path when it is not under it).
    pub path: String,
    /// The request's parameters (query string and form or JSON body), secrets replaced by
    /// `<redacted>` (see [`redact`]).
    pub params: BTreeMap<String, String>,
    /// How the request authenticated.
    pub auth: AuthKind,
    /// The HTTP status of the answer.
    pub status: u16,
    /// The status line's reason as PVE words it (e.g. `authentication failure`), which clients
    /// show as the error.
    pub status_text: String,
    /// The node the path names (`/nodes/{node}/…`), if any.
    pub node: Option<String>,
    /// Wall-clock UNIX time (seconds) the request arrived, whatever the simulated clock does:
    /// what lines a request up with the client's own timeline. 0 in journals written before
    /// it was recorded.
    #[serde(default)]
    pub received_at: f64,
    /// Wall-clock milliseconds from arrival to the answer, a fault rule's added latency
    /// included.
    #[serde(default)]
    pub duration_ms: f64,
}

const SECRET_KEYS: &[&str] = &[
    "password",
    "new-password",
    "cipassword",
    "secret",
    "token",
    "value",
    "otp",
    "tfa-challenge",
    "CSRFPreventionToken",
];

/// Replaces the values of secret parameters (passwords, token secrets, CSRF tokens, OTPs) with
/// `<redacted>`, so a journal can be shown or saved as it is.
pub fn redact(params: &mut BTreeMap<String, String>) {
    for (k, v) in params.iter_mut() {
        if SECRET_KEYS.contains(&k.as_str()) {
            *v = "<redacted>".to_string();
        }
    }
}

/// Bounded so a long benchmark or rehearsal cannot grow the process without limit: the
/// default of `--max-journal`.
pub const MAX_ENTRIES: usize = 20_000;

/// The journal of one fake: a ring of the latest entries, [`MAX_ENTRIES`] unless set otherwise.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    entries: VecDeque<JournalEntry>,
    next_seq: u64,
    /// Entries kept, a ring (`None`: [`MAX_ENTRIES`]).
    max: Option<usize>,
}

impl Journal {
    /// Records an answered request: numbers it, redacts its secrets, and drops the oldest entry
    /// when the ring is full. The entry dropped is handed back, so a caller holding a lock
    /// can free it after releasing the lock.
    pub fn record(&mut self, mut e: JournalEntry) -> Option<JournalEntry> {
        self.next_seq += 1;
        e.seq = self.next_seq;
        redact(&mut e.params);
        let max = self.max.unwrap_or(MAX_ENTRIES).max(1);
        let mut evicted = None;
        while self.entries.len() >= max {
            evicted = self.entries.pop_front();
        }
        self.entries.push_back(e);
        evicted
    }

    /// Keep at most `n` entries (at least one), dropping the oldest: a ring.
    pub fn set_max(&mut self, n: usize) {
        self.max = Some(n.max(1));
        while self.entries.len() > n.max(1) {
            self.entries.pop_front();
        }
    }

    /// The entries kept, oldest first.
    pub fn entries(&self) -> Vec<JournalEntry> {
        self.entries_since(0)
    }

    /// The entries numbered after `seq` (all of them for 0): what a poller has not read yet,
    /// without copying what it has.
    pub fn entries_since(&self, seq: u64) -> Vec<JournalEntry> {
        let first = self.entries.partition_point(|e| e.seq <= seq);
        self.entries.range(first..).cloned().collect()
    }

    /// Forgets every entry; numbering goes on from where it was.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> JournalEntry {
        JournalEntry {
            seq: 0,
            time: 0.0,
            site: "site-1".into(),
            method: "GET".into(),
            path: path.into(),
            params: BTreeMap::new(),
            auth: AuthKind::None,
            status: 200,
            status_text: "OK".into(),
            node: None,
            received_at: 0.0,
            duration_ms: 0.0,
        }
    }

    #[test]
    fn a_full_journal_drops_its_oldest_entries() {
        let mut j = Journal::default();
        for p in ["/a", "/b", "/c"] {
            j.record(entry(p));
        }
        j.set_max(2);
        let paths: Vec<String> = j.entries().into_iter().map(|e| e.path).collect();
        assert_eq!(paths, ["/b", "/c"]);
        j.record(entry("/d"));
        let seqs: Vec<u64> = j.entries().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [3, 4]);
        j.clear();
        j.record(entry("/e"));
        assert_eq!(
            j.entries()[0].seq,
            5,
            "a clear keeps the numbering and the limit"
        );
    }

    #[test]
    fn since_gives_only_the_entries_after_a_seq_even_when_older_ones_were_dropped() {
        let mut j = Journal::default();
        j.set_max(3);
        for p in ["/a", "/b", "/c", "/d", "/e"] {
            j.record(entry(p));
        }
        let paths =
            |since| -> Vec<String> { j.entries_since(since).into_iter().map(|e| e.path).collect() };
        assert_eq!(paths(0), ["/c", "/d", "/e"]);
        assert_eq!(
            paths(1),
            ["/c", "/d", "/e"],
            "a seq already dropped: all that is kept"
        );
        assert_eq!(paths(3), ["/d", "/e"]);
        assert!(paths(5).is_empty());
        assert!(paths(99).is_empty());
    }

    #[test]
    fn secrets_are_redacted() {
        let mut j = Journal::default();
        let mut params = BTreeMap::new();
        params.insert("password".to_string(), "harness".to_string());
        params.insert("cipassword".to_string(), "pw".to_string());
        params.insert("username".to_string(), "root@pam".to_string());
        j.record(JournalEntry {
            seq: 0,
            time: 0.0,
            site: "site-1".into(),
            method: "POST".into(),
            path: "/access/ticket".into(),
            params,
            auth: AuthKind::None,
            status: 200,
            status_text: "OK".into(),
            node: None,
            received_at: 0.0,
            duration_ms: 0.0,
        });
        let e = &j.entries()[0];
        assert_eq!(e.seq, 1);
        assert_eq!(e.params["password"], "<redacted>");
        assert_eq!(e.params["cipassword"], "<redacted>");
        assert_eq!(e.params["username"], "root@pam");
    }

    #[test]
    fn an_entry_without_timing_reads_back_with_zeros() {
        let old = r#"{"seq":3,"time":1.5,"site":"site-1","method":"GET","path":"/version",
            "params":{},"auth":{"kind":"None"},"status":200,"status_text":"OK","node":null}"#;
        let e: JournalEntry = serde_json::from_str(old).expect("an old journal entry reads");
        assert_eq!((e.seq, e.received_at, e.duration_ms), (3, 0.0, 0.0));
    }
}
