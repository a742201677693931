//! What each peer was sent, by prefix number: the memory of the Adj-RIB-Out.
//!
//! A reflector's clients are each sent nearly the whole table. Kept per peer as a map
//! from prefix to export, that was about 45 bytes per prefix and client, and a B-tree
//! search per prefix and client for every change: for 1,000 clients of 11 prefixes
//! each, 11 million entries and 590 MB, most of tern's memory as a reflector. Here
//! every prefix sent to some peer has a number, one for all peers ([`Numbering`]),
//! and a peer keeps its exports in pages of 64 slots by number ([`Sent`]), a slot
//! found by arithmetic. Numbers nobody holds are freed by a sweep over the peers once
//! the numbering has doubled ([`Numbering::sweep`]).
//!
//! A page holds each distinct export once and a byte per slot naming it: the prefixes
//! of one UPDATE get numbers in a row and share an export, so a page has a handful.
//! With a pointer per slot the 1,000-client reflector's pages were 90 MB (8.3 bytes
//! per prefix and client), with a byte per slot about 3 bytes.
//!
//! BIRD goes further, a bit per route and channel and the export made again when it is
//! needed; keeping the export keeps `tern routes --advertised` and the suppression of
//! unchanged exports as they were. No crate offers a paged slot map with shared keys.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Exported;
use crate::rib::Key;

/// Slots per page.
const PAGE: u32 = 64;

/// The numbers of the prefixes some peer was sent.
#[derive(Debug, Default)]
pub struct Numbering {
    ids: HashMap<Key, u32>,
    /// The prefix of each number; a freed number's entry waits for its next prefix.
    keys: Vec<Key>,
    free: Vec<u32>,
    /// Numbers in use after the last sweep.
    kept: usize,
}

impl Numbering {
    /// The number of `key`, if it has one.
    pub(crate) fn get(&self, key: &Key) -> Option<u32> {
        self.ids.get(key).copied()
    }

    /// The number of `key`, given one if it has none.
    pub(crate) fn assign(&mut self, key: Key) -> u32 {
        if let Some(id) = self.get(&key) {
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(k) = self.keys.get_mut(id as usize) {
                    *k = key;
                }
                id
            }
            None => {
                self.keys.push(key);
                // 4 billion prefixes do not fit in memory before this saturates.
                u32::try_from(self.keys.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.ids.insert(key, id);
        id
    }

    /// The prefix of number `id`.
    pub(crate) fn key(&self, id: u32) -> Option<Key> {
        self.keys.get(id as usize).copied()
    }

    /// Numbers in use.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no number is in use.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the numbering has doubled since the last sweep: a sweep then costs
    /// O(1) per number given.
    pub fn wants_sweep(&self) -> bool {
        self.ids.len() >= 2 * self.kept.max(1024)
    }

    /// A mark per number, for [`Sent::mark`].
    pub fn marks(&self) -> Vec<bool> {
        vec![false; self.keys.len()]
    }

    /// Frees every number not marked: no peer holds it.
    pub fn sweep(&mut self, held: &[bool]) {
        let free = &mut self.free;
        self.ids.retain(|_, id| {
            let keep = held.get(*id as usize).copied().unwrap_or(false);
            if !keep {
                free.push(*id);
            }
            keep
        });
        self.kept = self.ids.len();
    }
}

/// 64 slots and the exports they hold.
#[derive(Debug)]
struct Page {
    /// Per slot: 0 if empty, else 1 + the index of its export in `exports`.
    slots: [u8; PAGE as usize],
    /// Each export some slot holds, once (compared by pointer: exports are interned).
    exports: Vec<Arc<Exported>>,
    used: u8,
}

impl Page {
    fn new() -> Page {
        Page {
            slots: [0; PAGE as usize],
            exports: Vec::new(),
            used: 0,
        }
    }

    fn get(&self, slot: usize) -> Option<&Arc<Exported>> {
        let v = *self.slots.get(slot)?;
        self.exports.get(usize::from(v).checked_sub(1)?)
    }

    /// Holds `e` in `slot`; whether the slot was empty.
    fn set(&mut self, slot: usize, e: Arc<Exported>) -> bool {
        let v = match self.exports.iter().position(|x| Arc::ptr_eq(x, &e)) {
            Some(i) => i + 1,
            None => {
                self.exports.push(e);
                self.exports.len()
            }
        };
        // At most 64 distinct exports in 64 slots, so `v` fits.
        let v = u8::try_from(v).unwrap_or(u8::MAX);
        let Some(s) = self.slots.get_mut(slot) else {
            return false;
        };
        let old = std::mem::replace(s, v);
        if old == 0 {
            self.used += 1;
        } else {
            self.release(old);
        }
        old == 0
    }

    /// Empties `slot`; whether it held something.
    fn remove(&mut self, slot: usize) -> bool {
        let Some(s) = self.slots.get_mut(slot) else {
            return false;
        };
        let old = std::mem::take(s);
        if old == 0 {
            return false;
        }
        self.used -= 1;
        self.release(old);
        true
    }

    /// Drops export `v` if no slot holds it any more; the last export takes its place.
    fn release(&mut self, v: u8) {
        if v == 0 || self.slots.contains(&v) {
            return;
        }
        let last = u8::try_from(self.exports.len()).unwrap_or(u8::MAX);
        if usize::from(v) > self.exports.len() {
            return;
        }
        self.exports.swap_remove(usize::from(v) - 1);
        if v != last {
            for s in self.slots.iter_mut().filter(|s| **s == last) {
                *s = v;
            }
        }
    }
}

/// One peer's exports by prefix number.
#[derive(Debug, Default)]
pub struct Sent {
    /// Pages by number / 64; a page with no slot taken is dropped.
    pages: BTreeMap<u32, Box<Page>>,
    len: usize,
}

impl Sent {
    /// The export held under `id`.
    pub fn get(&self, id: u32) -> Option<&Arc<Exported>> {
        self.pages
            .get(&(id / PAGE))
            .and_then(|p| p.get((id % PAGE) as usize))
    }

    /// Holds `e` under `id`.
    pub fn set(&mut self, id: u32, e: Arc<Exported>) {
        let page = self
            .pages
            .entry(id / PAGE)
            .or_insert_with(|| Box::new(Page::new()));
        if page.set((id % PAGE) as usize, e) {
            self.len += 1;
        }
    }

    /// Forgets what is held under `id`; whether something was.
    pub fn remove(&mut self, id: u32) -> bool {
        let n = id / PAGE;
        let Some(page) = self.pages.get_mut(&n) else {
            return false;
        };
        let gone = page.remove((id % PAGE) as usize);
        if gone {
            self.len -= 1;
            if page.used == 0 {
                self.pages.remove(&n);
            }
        }
        gone
    }

    /// Prefixes held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Every number held and its export, by number.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Arc<Exported>)> {
        self.pages.iter().flat_map(|(n, p)| {
            (0..PAGE).filter_map(move |i| p.get(i as usize).map(|e| (n * PAGE + i, e)))
        })
    }

    /// Marks the numbers held (see [`Numbering::sweep`]).
    pub fn mark(&self, held: &mut [bool]) {
        for (id, _) in self.iter() {
            if let Some(h) = held.get_mut(id as usize) {
                *h = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::wire::PathAttributes;

    fn key(s: &str) -> Key {
        Key::from(s.parse::<ipnet::IpNet>().unwrap_or_default())
    }

    fn export(hop: u8) -> Arc<Exported> {
        Arc::new(Exported {
            attrs: PathAttributes::default(),
            next_hop: IpAddr::V4(Ipv4Addr::new(198, 51, 100, hop)),
        })
    }

    #[test]
    fn slots_across_pages_and_numbers_freed_only_when_nobody_holds_them() {
        let mut n = Numbering::default();
        let a = n.assign(key("198.18.0.0/26"));
        assert_eq!(n.assign(key("198.18.0.0/26")), a, "one number per prefix");
        let ids: Vec<u32> = (0..200)
            .map(|i| n.assign(key(&format!("198.19.{i}.0/24"))))
            .collect();
        let mut s = Sent::default();
        s.set(a, export(1));
        for id in &ids {
            s.set(*id, export(2));
        }
        s.set(a, export(3));
        assert_eq!(s.len(), 201, "replacing keeps the count");
        assert_eq!(
            s.get(a).map(|e| e.next_hop.to_string()).as_deref(),
            Some("198.51.100.3")
        );
        assert!(s.remove(a) && !s.remove(a));
        assert_eq!(s.len(), 200);
        assert_eq!(s.iter().count(), 200);
        // A page whose slots all went is dropped: numbers 101 to 200 are left.
        for id in ids.iter().take(100) {
            s.remove(*id);
        }
        let pages: Vec<u32> = s.pages.keys().copied().collect();
        assert_eq!(pages, [1, 2, 3]);

        let mut held = n.marks();
        s.mark(&mut held);
        n.sweep(&held);
        assert_eq!(n.len(), 100);
        assert_eq!(n.get(&key("198.18.0.0/26")), None, "nobody held it");
        assert_eq!(n.get(&key("198.19.150.0/24")), ids.get(150).copied());
        // A freed number comes back for the next prefix, with that prefix.
        let b = n.assign(key("198.18.1.0/26"));
        assert!(ids.iter().take(100).any(|id| *id == b) || b == a);
        assert_eq!(n.key(b), Some(key("198.18.1.0/26")));
        assert!(s.get(b).is_none(), "freed numbers are empty in every peer");
    }

    proptest::proptest! {
        #[test]
        fn pages_agree_with_a_map_and_keep_each_export_once(
            ops in proptest::collection::vec((0u32..200, 0usize..6), 0..400),
        ) {
            // Export 5 stands for a removal.
            let pool: Vec<Arc<Exported>> = (0..5).map(export).collect();
            let mut s = Sent::default();
            let mut want = BTreeMap::new();
            for (id, e) in ops {
                match pool.get(e) {
                    Some(x) => {
                        s.set(id, Arc::clone(x));
                        want.insert(id, e);
                    }
                    None => {
                        proptest::prop_assert_eq!(s.remove(id), want.remove(&id).is_some());
                    }
                }
            }
            for id in 0..200 {
                let got = s.get(id).and_then(|x| pool.iter().position(|p| Arc::ptr_eq(p, x)));
                proptest::prop_assert_eq!(got, want.get(&id).copied(), "number {}", id);
            }
            proptest::prop_assert_eq!(s.len(), want.len());
            proptest::prop_assert_eq!(s.iter().count(), want.len());
            for (n, page) in &s.pages {
                let mut distinct: Vec<usize> = want
                    .range(n * PAGE..(n + 1) * PAGE)
                    .map(|(_, e)| *e)
                    .collect();
                distinct.sort_unstable();
                distinct.dedup();
                proptest::prop_assert_eq!(page.exports.len(), distinct.len(), "page {}", n);
            }
        }
    }
}
