//! A storage's volumes with their space use kept as a running total: free space is asked
//! for on every disk allocation, and summing thousands of volumes each time made creates
//! slow down as a site filled up.

use std::collections::BTreeMap;
use std::ops::Deref;

use serde::Serialize;

use super::kinds::Content;

/// One volume of a storage.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Volume {
    /// Volume name within the storage (`100/vm-100-disk-0.qcow2`, `vm-100-disk-0`, `iso/x.iso`).
    pub volname: String,
    /// Content type.
    pub vtype: Content,
    /// Format (`qcow2`, `raw`, `vmdk`, `subvol`, ...).
    pub format: String,
    /// Virtual size in bytes.
    pub size: u64,
    /// Bytes taken on the storage.
    pub used: u64,
    /// The guest that owns it, if any.
    pub vmid: Option<u32>,
    /// Creation time, seconds since the epoch.
    pub ctime: u64,
    /// A backup's notes (PVE keeps them in `<archive>.notes`); only backups have them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// A protected backup (PVE's `<archive>.protected` file): not removed, not pruned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// What the image in this volume holds (cloud-init, the guest agent); `None`: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<super::image_facts::ImageFacts>,
    /// A snippet's text where no file keeps it (a simulated storage without a directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Volumes by volname; reads go through `Deref` to the map, writes through these methods.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(transparent)]
pub struct Volumes {
    /// Tracked (`tracked`): the state file journals the volumes that changed.
    map: crate::tracked::Tracked<String, Volume>,
    #[serde(skip)]
    used: u64,
    /// Changed since the site last shared it: a shared storage's other nodes take this copy.
    #[serde(skip)]
    changed: bool,
}

impl Deref for Volumes {
    type Target = BTreeMap<String, Volume>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

/// Read back as the map alone; the running total is counted again.
impl<'de> serde::Deserialize<'de> for Volumes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, Volume>::deserialize(d)?;
        Ok(Volumes::from_map(map))
    }
}

/// Writes to any volumes in this process, ever: a site that saw the same count at its last
/// sharing of storages knows no copy of a shared storage can have changed since, and skips
/// walking every node's storages (it did that after every request, a GET's too).
static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The count of volume writes so far (a site compares it before sharing its storages).
pub fn writes() -> u64 {
    WRITES.load(std::sync::atomic::Ordering::Relaxed)
}

impl Volumes {
    /// Marks a write, for the site's sharing and for [`writes`].
    fn wrote(&mut self) {
        self.changed = true;
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// These volumes (what a state file holds), the running total counted.
    pub fn from_map(map: BTreeMap<String, Volume>) -> Volumes {
        let mut v = Volumes {
            map: map.into(),
            used: 0,
            changed: false,
        };
        v.recount();
        v
    }

    /// The volumes by volname, taken out.
    pub fn into_map(self) -> BTreeMap<String, Volume> {
        self.map.into_inner()
    }

    /// The volnames set or removed since the last call (for the state file's journal).
    pub fn take_changes(&mut self) -> crate::tracked::Changes<String> {
        self.map.take_changes()
    }

    /// Bytes all volumes take (saturating, like the sum it replaces).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Whether a write happened since [`Volumes::shared`].
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Every node's copy of a shared storage is this one now.
    pub fn shared(&mut self) {
        self.changed = false;
    }

    fn recount(&mut self) {
        self.used = self
            .map
            .values()
            .fold(0u64, |a, v| a.saturating_add(v.used));
    }

    /// Add or replace a volume, keeping the used-bytes total; returns the one replaced.
    pub fn insert(&mut self, volname: String, v: Volume) -> Option<Volume> {
        self.wrote();
        let add = v.used;
        let old = self.map.insert(volname, v);
        match &old {
            Some(o) if o.used > 0 => self.recount(),
            _ => self.used = self.used.saturating_add(add),
        }
        old
    }

    /// Remove a volume, keeping the used-bytes total; returns it.
    pub fn remove(&mut self, volname: &str) -> Option<Volume> {
        let old = self.map.remove(volname)?;
        self.wrote();
        self.used = self.used.saturating_sub(old.used);
        // A saturated total cannot be walked back by subtraction.
        if self.used == u64::MAX {
            self.recount();
        }
        Some(old)
    }

    /// Keep only the volumes `keep` accepts (it may change them); the total is counted again.
    pub fn retain(&mut self, keep: impl FnMut(&String, &mut Volume) -> bool) {
        self.wrote();
        self.map.retain(keep);
        self.recount();
    }

    /// Changes one volume in place; `None` when it does not exist.
    pub fn update<R>(&mut self, volname: &str, f: impl FnOnce(&mut Volume) -> R) -> Option<R> {
        if !self.map.contains_key(volname) {
            return None;
        }
        self.wrote();
        let v = self.map.get_mut(volname)?;
        let before = v.used;
        let out = f(v);
        let after = v.used;
        if before != after {
            self.used = self.used.saturating_sub(before).saturating_add(after);
            if self.used == u64::MAX {
                self.recount();
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::storage::model::Content;

    fn vol(name: &str, used: u64) -> Volume {
        Volume {
            volname: name.into(),
            vtype: Content::Images,
            format: "raw".into(),
            size: used,
            used,
            vmid: Some(100),
            ctime: 0,
            notes: None,
            protected: false,
            image: None,
            text: None,
        }
    }

    fn summed(v: &Volumes) -> u64 {
        v.values().map(|v| v.used).sum()
    }

    #[test]
    fn the_total_follows_every_change() {
        let mut v = Volumes::default();
        v.insert("a".into(), vol("a", 10));
        v.insert("b".into(), vol("b", 5));
        assert_eq!(v.used(), 15);
        v.insert("a".into(), vol("a", 3));
        assert_eq!(v.used(), 8);
        v.update("b", |x| x.used = 20);
        assert_eq!(v.used(), 23);
        assert_eq!(v.update("nope", |x| x.used = 1), None);
        v.remove("a");
        assert_eq!(v.used(), 20);
        v.insert("c".into(), vol("c", 7));
        v.retain(|k, _| k != "b");
        assert_eq!(v.used(), 7);
        assert_eq!(v.used(), summed(&v));
    }

    #[test]
    fn serialises_as_the_plain_map() {
        let mut v = Volumes::default();
        v.insert("a".into(), vol("a", 1));
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["a"]["used"], 1);
        assert!(j.get("used").is_none());
    }
}
