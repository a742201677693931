//! What each peer was sent, by prefix number: the memory of the Adj-RIB-Out.
//!
//! A reflector's clients are each sent nearly the whole table. Kept per peer as a map
//! from prefix to export, that was about 45 bytes per prefix and client, and a B-tree
//! search per prefix and client for every change: for 1,000 clients of 11 prefixes
//! each, 11 million entries and 590 MB, most of tern's memory as a reflector. Here
//! every prefix sent to some peer has a number, one for all peers ([`Numbering`]),
//! and a peer keeps its exports in pages of 64 slots by number ([`Sent`]): 8 bytes
//! per prefix it holds, a slot found by arithmetic. Numbers nobody holds are freed by
//! a sweep over the peers once the numbering has doubled ([`Numbering::sweep`]).
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

/// 64 slots and how many are taken.
#[derive(Debug)]
struct Page {
    slots: [Option<Arc<Exported>>; PAGE as usize],
    used: u32,
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
            .and_then(|p| p.slots.get((id % PAGE) as usize))
            .and_then(Option::as_ref)
    }

    /// Holds `e` under `id`.
    pub fn set(&mut self, id: u32, e: Arc<Exported>) {
        let page = self.pages.entry(id / PAGE).or_insert_with(|| {
            Box::new(Page {
                slots: std::array::from_fn(|_| None),
                used: 0,
            })
        });
        if let Some(slot) = page.slots.get_mut((id % PAGE) as usize) {
            if slot.replace(e).is_none() {
                page.used += 1;
                self.len += 1;
            }
        }
    }

    /// Forgets what is held under `id`; whether something was.
    pub fn remove(&mut self, id: u32) -> bool {
        let n = id / PAGE;
        let Some(page) = self.pages.get_mut(&n) else {
            return false;
        };
        let gone = page
            .slots
            .get_mut((id % PAGE) as usize)
            .and_then(Option::take)
            .is_some();
        if gone {
            page.used -= 1;
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
            p.slots
                .iter()
                .zip(0..)
                .filter_map(move |(s, i)| s.as_ref().map(|e| (n * PAGE + i, e)))
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
}
