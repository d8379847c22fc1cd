//! A taken record serialised (outside the lock) against what the journal already holds: of
//! a site's small parts only the fields that differ from the last record's, and of a node
//! that changed only its volumes when the node itself reads as before — most changes (a
//! VM created, a task polled) touch a VM, a task, a volume and the random source, and the
//! record is that, not every site's access, firewall and guest setup again.
//!
//! The record's JSON (read back by `record::RecordOwned`), per site:
//! `{"site":{…},"patch":true,"nodes":{"full":…,"set":{NAME:{"node":…|null,"volumes":…}},
//! "del":[…]},"vms":…,"cts":…,"next_task":…,"tasks":…}`. Without `patch`, `site` holds the
//! small parts whole (what records held before, and what the first record after a
//! snapshot holds); with it, `name` and the fields that changed. `"node":null`: the node
//! as the last record or the snapshot left it, with these volume changes.

use std::collections::BTreeMap;

use serde::Serialize;

use super::fields;
use super::take::{NodesTaken, SiteTaken, Taken};

/// What the records since the last snapshot wrote, to compare the next one with: per site
/// its small parts' fields and its nodes (without volumes), as JSON.
#[derive(Debug, Default)]
pub(super) struct Written {
    sites: BTreeMap<String, SiteWritten>,
}

#[derive(Debug, Default)]
struct SiteWritten {
    fields: Vec<(&'static str, Vec<u8>)>,
    nodes: BTreeMap<String, Vec<u8>>,
}

/// A JSON object written piece by piece (pieces already JSON are copied as they are).
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Obj<'a> {
    fn open(out: &'a mut Vec<u8>) -> Obj<'a> {
        out.push(b'{');
        Obj { out, first: true }
    }

    fn key(&mut self, k: &str) -> Result<(), serde_json::Error> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, k)?;
        self.out.push(b':');
        Ok(())
    }

    fn value<T: ?Sized + Serialize>(&mut self, k: &str, v: &T) -> Result<(), serde_json::Error> {
        self.key(k)?;
        serde_json::to_writer(&mut *self.out, v)
    }

    fn raw(&mut self, k: &str, json: &[u8]) -> Result<(), serde_json::Error> {
        self.key(k)?;
        self.out.extend_from_slice(json);
        Ok(())
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

impl Written {
    /// Forget what was written: the next record writes every site's small parts and every
    /// changed node whole (after a snapshot, which replaces what the records said).
    pub(super) fn clear(&mut self) {
        self.sites.clear();
    }

    /// The record's JSON (one line, no newline), remembering what it says.
    pub(super) fn encode(&mut self, t: Taken) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::with_capacity(1024);
        let mut rec = Obj::open(&mut out);
        rec.value("seq", &t.seq)?;
        rec.value("saved_at", &t.saved_at)?;
        rec.value("clock", &t.clock)?;
        rec.value("faults", &t.faults)?;
        if let Some(sc) = &t.scenario {
            rec.value("scenario", sc)?;
        }
        rec.key("sites")?;
        rec.out.push(b'[');
        // Only the sites this record lists stay remembered: one that goes and comes back
        // is written whole.
        let mut before = std::mem::take(&mut self.sites);
        for (i, site) in t.sites.into_iter().enumerate() {
            if i > 0 {
                rec.out.push(b',');
            }
            let prev = before.remove(&site.small.name).unwrap_or_default();
            let (name, now) = encode_site(rec.out, site, prev)?;
            self.sites.insert(name, now);
        }
        rec.out.push(b']');
        rec.value("next_snapshot", &t.next_snapshot)?;
        rec.value("snapshot_ids", &t.snapshot_ids)?;
        rec.key("new_snapshots")?;
        let mut snaps = Obj::open(rec.out);
        for (id, w) in &t.new_snapshots {
            snaps.value(
                id,
                &crate::persist::WorldRef {
                    scenario: &w.scenario,
                    sites: &w.sites,
                },
            )?;
        }
        snaps.close();
        rec.close();
        Ok(out)
    }
}

fn encode_site(
    out: &mut Vec<u8>,
    s: SiteTaken,
    prev: SiteWritten,
) -> Result<(String, SiteWritten), serde_json::Error> {
    let name = s.small.name.clone();
    let mut now = SiteWritten::default();
    let mut site = Obj::open(out);
    site.key("site")?;
    // A site that does not split into fields (it never should) is written whole.
    match fields::split(&s.small) {
        Ok(fields) => {
            let same_shape = !prev.fields.is_empty()
                && prev.fields.len() == fields.len()
                && prev.fields.iter().zip(&fields).all(|(a, b)| a.0 == b.0);
            let mut small = Obj::open(site.out);
            for (i, (k, v)) in fields.iter().enumerate() {
                if !same_shape || *k == "name" || prev.fields[i].1 != *v {
                    small.raw(k, v)?;
                }
            }
            small.close();
            if same_shape {
                site.value("patch", &true)?;
            }
            now.fields = fields;
        }
        Err(_) => serde_json::to_writer(&mut *site.out, &s.small)?,
    }
    now.nodes = prev.nodes;
    site.key("nodes")?;
    encode_nodes(site.out, s.nodes, &mut now.nodes)?;
    site.value("vms", &s.vms)?;
    site.value("cts", &s.cts)?;
    site.value("next_task", &s.next_task)?;
    site.value("tasks", &s.tasks)?;
    site.close();
    Ok((name, now))
}

/// The nodes that changed; `written`: each node's JSON as the journal has it, kept up.
fn encode_nodes(
    out: &mut Vec<u8>,
    n: NodesTaken,
    written: &mut BTreeMap<String, Vec<u8>>,
) -> Result<(), serde_json::Error> {
    let mut nodes = Obj::open(out);
    nodes.value("full", &n.full)?;
    nodes.key("set")?;
    let mut set = Obj::open(nodes.out);
    for t in &n.set {
        set.key(&t.name)?;
        let mut entry = Obj::open(set.out);
        let json = serde_json::to_vec(&t.node)?;
        if written.get(&t.name) == Some(&json) {
            entry.raw("node", b"null")?;
        } else {
            entry.raw("node", &json)?;
            written.insert(t.name.clone(), json);
        }
        entry.key("volumes")?;
        let mut vols = Obj::open(entry.out);
        for (sname, d) in &t.volumes {
            vols.value(sname, d)?;
        }
        vols.close();
        entry.close();
    }
    set.close();
    nodes.value("del", &n.del)?;
    nodes.close();
    for gone in &n.del {
        written.remove(gone);
    }
    if n.full {
        written.retain(|k, _| n.set.iter().any(|t| t.name == *k));
    }
    Ok(())
}
