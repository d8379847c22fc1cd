//! A map that remembers which of its keys changed, so the state file can journal the
//! entries a request touched instead of rewriting the world (`persist` in the server).
//!
//! There is no `&mut BTreeMap` to be had: every way to change the map goes through a
//! method here that records the key (or, for whole-map access, marks everything), so a
//! change cannot slip past the journal. A map that is new, read back or cloned counts as
//! changed everywhere: nothing on disk is known to match it.
//!
//! The same methods also log the keys touched for readers that keep an index of the
//! map's entries (`world::index`): unlike the journal's changes, which one taker empties,
//! the log is read from a [`Cursor`], so reading it needs no `&mut`.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::collections::btree_map::{self, BTreeMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// What changed in a [`Tracked`] map since the changes were last taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes<K> {
    /// Everything may have changed: the whole map is to be written.
    pub all: bool,
    /// The keys set or removed (meaningful when `all` is false).
    pub keys: BTreeSet<K>,
}

impl<K> Changes<K> {
    fn everything() -> Self {
        Changes {
            all: true,
            keys: BTreeSet::new(),
        }
    }

    fn none() -> Self {
        Changes {
            all: false,
            keys: BTreeSet::new(),
        }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }
}

/// A `BTreeMap` that records the keys changed since the last `take_changes` and logs the
/// keys touched for index readers; reads go through `Deref`.
#[derive(Debug)]
pub struct Tracked<K, V> {
    map: BTreeMap<K, V>,
    changes: Changes<K>,
    touches: Touches<K>,
}

/// Numbers every map made (new, cloned, read back), so a reader of touches notices that
/// the map it holds now is not the one it read (replaced, swapped, read back).
static MAPS: AtomicU64 = AtomicU64::new(1);

/// The keys touched (set, removed or handed out to change), in order, since position
/// `base` of the map's history of touches.
#[derive(Debug)]
struct Touches<K> {
    map: u64,
    base: u64,
    keys: Vec<K>,
}

impl<K> Touches<K> {
    fn new() -> Self {
        Touches {
            map: MAPS.fetch_add(1, Ordering::Relaxed),
            base: 0,
            keys: Vec::new(),
        }
    }

    fn end(&self) -> u64 {
        self.base + self.keys.len() as u64
    }
}

/// How far a reader has read a map's touched keys (see [`Tracked::touched_since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    map: u64,
    at: u64,
}

/// What was touched since a [`Cursor`].
#[derive(Debug, PartialEq, Eq)]
pub enum Touched<'a, K> {
    /// These keys (a key may repeat; look at each one's entry now).
    Keys(&'a [K]),
    /// Anything: the reader has not seen this map, or the log it needs was dropped (a
    /// whole-map access, or more touches than the map has entries since it last read).
    Everything,
}

impl<K: Ord + Clone, V> Tracked<K, V> {
    /// An empty map, counted as changed everywhere (nothing on disk matches it yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The keys touched since `cursor` (`None`: a reader that never read), and the cursor
    /// to read from next time.
    pub fn touched_since(&self, cursor: Option<Cursor>) -> (Touched<'_, K>, Cursor) {
        let t = &self.touches;
        let next = Cursor {
            map: t.map,
            at: t.end(),
        };
        let touched = match cursor {
            Some(c) if c.map == t.map && (t.base..=t.end()).contains(&c.at) => {
                // In range, so the offset is at most `keys.len()`.
                Touched::Keys(t.keys.get((c.at - t.base) as usize..).unwrap_or_default())
            }
            _ => Touched::Everything,
        };
        (touched, next)
    }

    /// The entry of `key`, to change: the key counts as changed.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (k, _) = self.map.get_key_value(key)?;
        let k = k.clone();
        self.mark(k);
        self.map.get_mut(key)
    }

    /// Set `key` (counted as changed); returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.mark(key.clone());
        self.map.insert(key, value)
    }

    /// Take `key`'s entry out (counted as changed); `None` if absent, nothing recorded.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (k, v) = self.map.remove_entry(key)?;
        self.mark(k);
        Some(v)
    }

    /// The entry of `key`: counted as changed even if it stays vacant.
    pub fn entry(&mut self, key: K) -> btree_map::Entry<'_, K, V> {
        self.mark(key.clone());
        self.map.entry(key)
    }

    /// Every value, to change: the whole map counts as changed.
    pub fn values_mut(&mut self) -> btree_map::ValuesMut<'_, K, V> {
        self.mark_all();
        self.touch_all();
        self.map.values_mut()
    }

    /// Every entry, to change: the whole map counts as changed.
    pub fn iter_mut(&mut self) -> btree_map::IterMut<'_, K, V> {
        self.mark_all();
        self.touch_all();
        self.map.iter_mut()
    }

    /// Keep the entries `f` accepts: the whole map counts as changed.
    pub fn retain(&mut self, f: impl FnMut(&K, &mut V) -> bool) {
        self.mark_all();
        self.touch_all();
        self.map.retain(f);
    }

    /// Count `key` as changed, and log it as touched. Past as many keys as the map holds,
    /// the whole map counts as changed instead: writing it whole costs no more, and nobody
    /// taking the changes (no state dir) leaves the set no bigger than the map. The log is
    /// bounded the same way: past that many keys its older half is dropped, and a reader that
    /// had not read those rebuilds (no dearer, amortised over that many touches).
    fn mark(&mut self, key: K) {
        if !self.changes.all {
            self.changes.keys.insert(key.clone());
            if self.changes.keys.len() > self.map.len() + 1 {
                self.mark_all();
            }
        }
        let t = &mut self.touches;
        t.keys.push(key);
        if t.keys.len() > self.map.len() + 64 {
            // The older half goes: a reader that keeps up never has to rebuild.
            let old = t.keys.len() / 2;
            t.keys.drain(..old);
            t.base += old as u64;
        }
    }

    /// Every key counts as touched: no reader can catch up key by key.
    fn touch_all(&mut self) {
        let t = &mut self.touches;
        t.base = t.end() + 1;
        t.keys.clear();
    }

    /// Count the whole map as changed.
    pub fn mark_all(&mut self) {
        self.changes = Changes::everything();
    }

    /// What changed since the last call (the map counts as unchanged afterwards).
    pub fn take_changes(&mut self) -> Changes<K> {
        std::mem::replace(&mut self.changes, Changes::none())
    }

    /// The map itself, giving up the tracking.
    pub fn into_inner(self) -> BTreeMap<K, V> {
        self.map
    }
}

impl<K, V> std::ops::Deref for Tracked<K, V> {
    type Target = BTreeMap<K, V>;
    fn deref(&self) -> &BTreeMap<K, V> {
        &self.map
    }
}

impl<K, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Tracked {
            map: BTreeMap::new(),
            changes: Changes::everything(),
            touches: Touches::new(),
        }
    }
}

/// A copy is a new map as far as the disk (and any reader of touches) knows.
impl<K: Clone, V: Clone> Clone for Tracked<K, V> {
    fn clone(&self) -> Self {
        Tracked {
            map: self.map.clone(),
            changes: Changes::everything(),
            touches: Touches::new(),
        }
    }
}

impl<K, V> From<BTreeMap<K, V>> for Tracked<K, V> {
    fn from(map: BTreeMap<K, V>) -> Self {
        Tracked {
            map,
            changes: Changes::everything(),
            touches: Touches::new(),
        }
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for Tracked<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        BTreeMap::from_iter(iter).into()
    }
}

impl<'a, K, V> IntoIterator for &'a Tracked<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = btree_map::Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

/// Equal when the maps are (what changed is bookkeeping, not content).
impl<K: PartialEq, V: PartialEq> PartialEq for Tracked<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: serde::Serialize, V: serde::Serialize> serde::Serialize for Tracked<K, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de, K, V> serde::Deserialize<'de> for Tracked<K, V>
where
    K: serde::Deserialize<'de> + Ord,
    V: serde::Deserialize<'de>,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(Tracked::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_keys_changed_and_everything_after_whole_map_access() {
        let mut m: Tracked<u32, &str> = [(1, "a"), (2, "b")].into_iter().collect();
        assert!(m.take_changes().all, "a new map is unknown to the disk");
        assert!(m.take_changes().is_empty());
        let _ = m.get(&1);
        assert!(m.take_changes().is_empty(), "a read changes nothing");
        if let Some(v) = m.get_mut(&1) {
            *v = "c";
        }
        m.insert(3, "d");
        m.remove(&2);
        m.remove(&9);
        let c = m.take_changes();
        assert!(!c.all);
        assert_eq!(c.keys.into_iter().collect::<Vec<_>>(), vec![1, 2, 3]);
        m.values_mut().for_each(|_| {});
        assert!(m.take_changes().all);
        // Changes nobody takes stay no bigger than the map.
        for k in 10..1000 {
            m.insert(k, "x");
            m.remove(&k);
        }
        assert!(m.take_changes().all);
        assert!(
            m.clone().take_changes().all,
            "a copy is unknown to the disk"
        );
    }

    #[test]
    fn logs_the_keys_touched_for_readers_that_catch_up_from_a_cursor() {
        let mut m: Tracked<u32, &str> = [(1, "a"), (2, "b"), (3, "c")].into_iter().collect();
        let (t, at) = m.touched_since(None);
        assert_eq!(
            t,
            Touched::Everything,
            "a reader that never read starts from the map"
        );
        let (t, at) = m.touched_since(Some(at));
        assert_eq!(t, Touched::Keys(&[][..]));
        let _ = m.get(&1);
        m.insert(4, "d");
        if let Some(v) = m.get_mut(&2) {
            *v = "e";
        }
        m.remove(&3);
        m.remove(&9);
        let _ = m.take_changes();
        let (t, at2) = m.touched_since(Some(at));
        assert_eq!(
            t,
            Touched::Keys(&[4, 2, 3][..]),
            "reads and misses are not touches; taking the journal's changes keeps the log"
        );
        assert_eq!(m.touched_since(Some(at)).0, t, "reading does not consume");
        m.values_mut().for_each(|_| {});
        assert_eq!(m.touched_since(Some(at2)).0, Touched::Everything);
        let (_, at3) = m.touched_since(None);
        assert_eq!(
            m.clone().touched_since(Some(at3)).0,
            Touched::Everything,
            "a copy is another map to its readers"
        );
        let mut other: Tracked<u32, &str> = Tracked::new();
        std::mem::swap(&mut m, &mut other);
        assert_eq!(
            m.touched_since(Some(at3)).0,
            Touched::Everything,
            "a swapped-in map"
        );
    }

    #[test]
    fn the_log_stays_bounded_and_a_reader_that_keeps_up_never_rebuilds() {
        let mut m: Tracked<u32, u32> = (0..10).map(|k| (k, k)).collect();
        let (_, start) = m.touched_since(None);
        let (_, mut at) = m.touched_since(None);
        for k in 100..2000 {
            m.insert(k, k);
            m.remove(&k);
            let (t, next) = m.touched_since(Some(at));
            assert_eq!(t, Touched::Keys(&[k, k][..]));
            at = next;
            assert!(m.touches.keys.len() <= m.len() + 64);
        }
        assert_eq!(
            m.touched_since(Some(start)).0,
            Touched::Everything,
            "a reader that fell behind the dropped keys rebuilds"
        );
    }
}
