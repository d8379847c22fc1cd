//! Reading the journal back: its records applied, in order, on the snapshot's world.

use std::collections::{BTreeMap, BTreeSet};

use fake_proxmox_world::lxc::model::Ct;
use fake_proxmox_world::nodes::model::Node;
use fake_proxmox_world::qemu::model::Vm;
use fake_proxmox_world::tasks::model::Task;

use super::JOURNAL;
use super::record::{Maps, RecordOwned};
use crate::persist::PersistError;
use crate::persist::StateOwned;
use crate::world::Site;
use crate::world::work::{TaskStore, Work};

/// A site's small parts as JSON, field by field: what a record patches.
type Small = serde_json::Map<String, serde_json::Value>;

/// A site as replay keeps it: its small parts as JSON, and its big maps as plain maps.
struct SiteParts {
    site: Small,
    nodes: BTreeMap<String, Node>,
    vms: BTreeMap<u32, Vm>,
    cts: BTreeMap<u32, Ct>,
    next_task: u64,
    tasks: BTreeMap<u64, Task<Work>>,
}

impl SiteParts {
    fn split(mut site: Site) -> Result<SiteParts, String> {
        let Maps {
            nodes,
            vms,
            cts,
            tasks,
        } = Maps::take(&mut site);
        let (next_task, tasks) = tasks.into_parts();
        let small = match serde_json::to_value(&site) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => return Err(format!("site {} is not a JSON object", site.name)),
            Err(e) => return Err(format!("site {}: {e}", site.name)),
        };
        Ok(SiteParts {
            site: small,
            nodes: nodes.into_inner(),
            vms: vms.into_inner(),
            cts: cts.into_inner(),
            next_task,
            tasks,
        })
    }

    fn join(self) -> Result<Site, String> {
        let mut site: Site = serde_json::from_value(serde_json::Value::Object(self.site))
            .map_err(|e| format!("a site's small parts: {e}"))?;
        site.nodes = self.nodes.into();
        site.vms = self.vms.into();
        site.cts = self.cts.into();
        site.tasks = TaskStore::from_parts(self.next_task, self.tasks)
            .map_err(|e| format!("site {}: {e}", site.name))?;
        Ok(site)
    }
}

/// The records of a journal file after `after`, in order: each line one record; a last
/// line that does not read (cut short by a crash) is dropped. The number of the last record.
pub(in crate::persist) fn replay(
    state: &mut StateOwned,
    bytes: &[u8],
    after: u64,
) -> Result<u64, PersistError> {
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // The piece after the last newline: empty, or a record whose write did not finish.
    let tail = lines.pop().unwrap_or_default();
    let mut last = after;
    let mut sites: Option<Vec<SiteParts>> = None;
    let n = lines.len();
    for (i, line) in lines.iter().enumerate() {
        let rec: RecordOwned = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(_) if i + 1 == n && tail.is_empty() => break,
            Err(e) => {
                return Err(PersistError::Invalid(format!(
                    "{JOURNAL} line {}: {e}",
                    i + 1
                )));
            }
        };
        if rec.seq <= after {
            continue;
        }
        if rec.seq != last + 1 {
            return Err(PersistError::Invalid(format!(
                "{JOURNAL} line {}: record {} follows record {last}",
                i + 1,
                rec.seq
            )));
        }
        last = rec.seq;
        let parts = match &mut sites {
            Some(p) => p,
            None => sites.insert(
                std::mem::take(&mut state.world.sites)
                    .into_iter()
                    .map(SiteParts::split)
                    .collect::<Result<_, _>>()
                    .map_err(PersistError::Invalid)?,
            ),
        };
        apply(state, parts, rec)
            .map_err(|e| PersistError::Invalid(format!("{JOURNAL} line {}: {e}", i + 1)))?;
    }
    if let Some(parts) = sites {
        state.world.sites = parts
            .into_iter()
            .map(SiteParts::join)
            .collect::<Result<_, _>>()
            .map_err(PersistError::Invalid)?;
    }
    Ok(last)
}

fn apply(
    state: &mut StateOwned,
    parts: &mut Vec<SiteParts>,
    rec: RecordOwned,
) -> Result<(), String> {
    let mut old: BTreeMap<String, SiteParts> = std::mem::take(parts)
        .into_iter()
        .map(|p| (name_of(&p.site).to_string(), p))
        .collect();
    for s in rec.sites {
        let name = name_of(&s.site).to_string();
        let mut p = match old.remove(&name) {
            Some(p) => p,
            None if s.patch => return Err(format!("site {name:?} is patched but not there")),
            None => SiteParts {
                site: Small::new(),
                nodes: BTreeMap::new(),
                vms: BTreeMap::new(),
                cts: BTreeMap::new(),
                next_task: 0,
                tasks: BTreeMap::new(),
            },
        };
        if s.patch {
            p.site.extend(s.site);
        } else {
            p.site = s.site;
        }
        s.nodes
            .apply(&mut p.nodes)
            .map_err(|e| format!("site {name}: {e}"))?;
        s.vms.apply(&mut p.vms);
        s.cts.apply(&mut p.cts);
        s.tasks.apply(&mut p.tasks);
        p.next_task = s.next_task;
        parts.push(p);
    }
    state.saved_at = rec.saved_at;
    state.clock = rec.clock;
    state.faults = rec.faults;
    if let Some(sc) = rec.scenario {
        state.world.scenario = sc;
    }
    state.next_snapshot = rec.next_snapshot;
    let keep: BTreeSet<String> = rec.snapshot_ids.into_iter().collect();
    state.snapshots.retain(|k, _| keep.contains(k));
    state.snapshots.extend(rec.new_snapshots);
    Ok(())
}

/// A site's name from its small parts ("" when missing: the site then fails to read).
fn name_of(small: &Small) -> &str {
    small.get("name").and_then(|v| v.as_str()).unwrap_or("")
}
