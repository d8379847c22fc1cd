//! The site's guests by node, and where the lowest free VMID can be, kept so that the
//! requests a deployer sends for every VM it places (its node's guest listing, the node's
//! status, `nextid`, the DHCP leases of a start) cost no walk over every guest of the site.
//!
//! Runtime only: nothing of it is written to a state file. It is reconciled lazily, when
//! asked, from the keys the guest maps (`tracked`) saw touched since the last question: a
//! guest handed out by `get_mut` may change its node after the call (migration does), so
//! the index cannot update as the map does; it looks at each touched key's current entry
//! instead. A map it has not seen (new, cloned, read back, swapped in) or a whole-map
//! access makes it rebuild from both maps.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::guest::Guest;
use crate::tracked::{Cursor, Touched, Tracked};

/// PVE's guest ids start here (`nextid` never answers below it).
pub const FIRST_VMID: u32 = 100;

/// The index of one site's guests (VMs and containers share one VMID space).
#[derive(Default)]
pub struct GuestIndex {
    /// Behind a lock because questions come with a shared borrow of the site (the site
    /// itself is behind the world's lock; this one is never contended).
    state: Mutex<State>,
}

struct State {
    /// How far this index has read each map's touched keys (`None`: never).
    vms: Option<Cursor>,
    cts: Option<Cursor>,
    /// The guests whose config is on each node (no empty sets).
    by_node: HashMap<String, BTreeSet<u32>>,
    /// The node each indexed guest is filed under.
    node_of: HashMap<u32, String>,
    /// Every id in `FIRST_VMID..dense_end` is taken: `nextid` looks from here. Lowered when
    /// a guest below it goes, raised when `nextid` walks past taken ids.
    dense_end: u32,
}

impl Default for State {
    fn default() -> Self {
        State {
            vms: None,
            cts: None,
            by_node: HashMap::new(),
            node_of: HashMap::new(),
            dense_end: FIRST_VMID,
        }
    }
}

/// A copy starts empty and builds itself from the copied maps on its first question.
impl Clone for GuestIndex {
    fn clone(&self) -> Self {
        GuestIndex::default()
    }
}

/// Not the content: it is derived from the maps a `Debug` of the site shows anyway.
impl std::fmt::Debug for GuestIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuestIndex")
    }
}

impl GuestIndex {
    /// The state, brought up to date with the maps. A lock poisoned by a panic in an
    /// earlier question leaves a state of unknown shape: it is dropped and rebuilt.
    fn synced<A: Guest, B: Guest>(
        &self,
        vms: &Tracked<u32, A>,
        cts: &Tracked<u32, B>,
    ) -> MutexGuard<'_, State> {
        let mut st = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                *g = State::default();
                g
            }
        };
        st.sync(vms, cts);
        st
    }

    /// The ids of the guests of either map whose config is on `node`, in order.
    pub fn ids_on<A: Guest, B: Guest>(
        &self,
        vms: &Tracked<u32, A>,
        cts: &Tracked<u32, B>,
        node: &str,
    ) -> Vec<u32> {
        let st = self.synced(vms, cts);
        st.by_node
            .get(node)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The lowest id from [`FIRST_VMID`] up that neither map holds. Walks only the taken
    /// ids from the last answer on (or from the lowest id freed since).
    pub fn lowest_free<A: Guest, B: Guest>(
        &self,
        vms: &Tracked<u32, A>,
        cts: &Tracked<u32, B>,
    ) -> u32 {
        let mut st = self.synced(vms, cts);
        let mut next = st.dense_end;
        let mut a = vms.range(next..).map(|(id, _)| *id).peekable();
        let mut b = cts.range(next..).map(|(id, _)| *id).peekable();
        // Both key sequences ascend from `next` on: step past it while either holds it.
        loop {
            let in_a = a.next_if_eq(&next).is_some();
            let in_b = b.next_if_eq(&next).is_some();
            if !(in_a || in_b) || next == u32::MAX {
                break;
            }
            next += 1;
        }
        st.dense_end = next;
        next
    }
}

#[cfg(test)]
impl GuestIndex {
    /// Where `nextid` looks from next.
    pub(crate) fn dense_end(&self) -> u32 {
        self.state.lock().map_or(FIRST_VMID, |st| st.dense_end)
    }
}

impl State {
    fn sync<A: Guest, B: Guest>(&mut self, vms: &Tracked<u32, A>, cts: &Tracked<u32, B>) {
        let (tv, at_v) = vms.touched_since(self.vms);
        let (tc, at_c) = cts.touched_since(self.cts);
        match (tv, tc) {
            (Touched::Keys(a), Touched::Keys(b)) => {
                for id in a.iter().chain(b) {
                    self.refile(*id, vms, cts);
                }
            }
            _ => self.rebuild(vms, cts),
        }
        self.vms = Some(at_v);
        self.cts = Some(at_c);
    }

    fn rebuild<A: Guest, B: Guest>(&mut self, vms: &Tracked<u32, A>, cts: &Tracked<u32, B>) {
        self.by_node.clear();
        self.node_of.clear();
        self.dense_end = FIRST_VMID;
        for (id, g) in vms
            .iter()
            .map(|(id, g)| (*id, g.core()))
            .chain(cts.iter().map(|(id, g)| (*id, g.core())))
        {
            // One id space: should both maps hold an id, the VM counts (as `Site::guest`).
            if self.node_of.contains_key(&id) {
                continue;
            }
            self.node_of.insert(id, g.node.clone());
            self.by_node.entry(g.node.clone()).or_default().insert(id);
        }
    }

    /// File guest `id` under the node its entry names now, or drop it if it is gone.
    fn refile<A: Guest, B: Guest>(
        &mut self,
        id: u32,
        vms: &Tracked<u32, A>,
        cts: &Tracked<u32, B>,
    ) {
        let now = vms
            .get(&id)
            .map(|g| g.core().node.as_str())
            .or_else(|| cts.get(&id).map(|g| g.core().node.as_str()));
        // Gone, or never here: `nextid` looks from it again if it was in the dense run.
        if now.is_none() && (FIRST_VMID..self.dense_end).contains(&id) {
            self.dense_end = id;
        }
        let was = self.node_of.get(&id).map(String::as_str);
        if was == now {
            return;
        }
        if let Some(was) = self.node_of.remove(&id)
            && let Some(ids) = self.by_node.get_mut(&was)
        {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_node.remove(&was);
            }
        }
        if let Some(node) = now {
            self.node_of.insert(id, node.to_string());
            self.by_node.entry(node.to_string()).or_default().insert(id);
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
