//! Assertions on the fake's request journal: what the deployer actually sent, how it
//! authenticated, and what it got back.

use std::collections::BTreeMap;

use fake_proxmox::{AuthKind, JournalEntry};

#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: u64,
    pub time: f64,
    pub site: String,
    pub method: String,
    pub path: String,
    pub params: BTreeMap<String, String>,
    pub auth: AuthKind,
    pub status: u16,
    pub status_text: String,
}

impl From<JournalEntry> for Entry {
    fn from(e: JournalEntry) -> Self {
        Entry {
            seq: e.seq,
            time: e.time,
            site: e.site,
            method: e.method,
            path: e.path,
            params: e.params,
            auth: e.auth,
            status: e.status,
            status_text: e.status_text,
        }
    }
}

impl Entry {
    pub fn is_mutating(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "DELETE")
            // Logging in creates nothing.
            && self.path != "/access/ticket"
    }

    pub fn matches(&self, method: &str, pattern: &str) -> bool {
        self.method.eq_ignore_ascii_case(method) && path_matches(pattern, &self.path)
    }

    pub fn failed(&self) -> bool {
        self.status >= 400
    }

    pub fn render(&self) -> String {
        format!(
            "#{} [{}] {} {} -> {} {} ({})",
            self.seq,
            self.site,
            self.method,
            self.path,
            self.status,
            self.status_text,
            auth_label(&self.auth)
        )
    }
}

pub fn auth_label(a: &AuthKind) -> String {
    match a {
        AuthKind::None => "no credentials".into(),
        AuthKind::Ticket { userid } => format!("ticket of {userid}"),
        AuthKind::ApiToken { tokenid } => format!("API token header {tokenid}"),
        AuthKind::TokenInCookie { tokenid } => {
            format!("API token {tokenid} sent as a PVEAuthCookie cookie")
        }
        AuthKind::InvalidTicket => "invalid ticket".into(),
        AuthKind::InvalidToken { tokenid } => format!("invalid API token {tokenid}"),
    }
}

/// `*` matches within one path segment; everything else literally.
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
    let s: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| segment_matches(p, s))
}

fn segment_matches(pattern: &str, seg: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == seg,
        Some((prefix, rest)) => {
            let Some(after) = seg.strip_prefix(prefix) else {
                return false;
            };
            if rest.is_empty() {
                return true;
            }
            (0..=after.len())
                .any(|i| after.is_char_boundary(i) && segment_matches(rest, &after[i..]))
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub entries: Vec<Entry>,
}

impl Journal {
    /// Entries of several sites, deduplicated and in sequence order.
    pub fn new(mut entries: Vec<Entry>) -> Journal {
        entries.sort_by(|a, b| a.seq.cmp(&b.seq).then(a.site.cmp(&b.site)));
        entries.dedup_by(|a, b| a.seq == b.seq && a.site == b.site && a.path == b.path);
        Journal { entries }
    }

    pub fn last_seq(&self) -> u64 {
        self.entries.iter().map(|e| e.seq).max().unwrap_or(0)
    }

    pub fn within(&self, windows: &[(u64, u64)]) -> Journal {
        Journal {
            entries: self
                .entries
                .iter()
                .filter(|e| windows.iter().any(|(a, b)| e.seq >= *a && e.seq <= *b))
                .cloned()
                .collect(),
        }
    }

    /// Requests under `/api2/json` only (the control plane is not PVE).
    pub fn api(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| !e.path.starts_with("/_fake"))
    }

    pub fn matching<'a>(
        &'a self,
        method: &'a str,
        pattern: &'a str,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        self.api().filter(move |e| e.matches(method, pattern))
    }

    pub fn count(&self, method: &str, pattern: &str) -> usize {
        self.matching(method, pattern).count()
    }

    pub fn count_failed(&self, method: &str, pattern: &str) -> usize {
        self.matching(method, pattern)
            .filter(|e| e.failed())
            .count()
    }

    pub fn mutating(&self) -> Vec<&Entry> {
        self.api().filter(|e| e.is_mutating()).collect()
    }

    pub fn render_tail(&self, n: usize) -> String {
        let all: Vec<&Entry> = self.api().collect();
        let skip = all.len().saturating_sub(n);
        let mut out: Vec<String> = all[skip..]
            .iter()
            .map(|e| format!("  {}", e.render()))
            .collect();
        if skip > 0 {
            out.insert(0, format!("  … {skip} earlier requests"));
        }
        if out.is_empty() {
            out.push("  (none)".into());
        }
        out.join("\n")
    }

    /// Checks that requests matching `expected` (method, path pattern) appear in this order,
    /// other requests in between allowed. Returns the index in `expected` that was not found.
    pub fn find_in_order(&self, expected: &[(String, String)]) -> Result<Vec<u64>, usize> {
        let mut seqs = Vec::new();
        let mut it = self.api();
        for (i, (m, p)) in expected.iter().enumerate() {
            match it.by_ref().find(|e| e.matches(m, p)) {
                Some(e) => seqs.push(e.seq),
                None => return Err(i),
            }
        }
        Ok(seqs)
    }
}

/// The glob rules, checked by the harness self-test.
pub fn check_globs() -> Result<(), String> {
    let cases = [
        ("/nodes/*/qemu", "/nodes/ml110-01/qemu", true),
        ("/nodes/*/qemu", "/nodes/ml110-01/qemu/100", false),
        (
            "/nodes/n/tasks/*/status",
            "/nodes/n/tasks/UPID:n:00:01:qmcreate:100:root@pam:/status",
            true,
        ),
        ("/nodes/n/qemu/1*", "/nodes/n/qemu/100", true),
        ("/nodes/n/qemu/2*", "/nodes/n/qemu/100", false),
    ];
    for (p, s, want) in cases {
        if path_matches(p, s) != want {
            return Err(format!("path_matches({p:?}, {s:?}) should be {want}"));
        }
    }
    Ok(())
}
