//! The route-reflector scenario seen from its clients: which of the load's prefixes
//! each simulated client holds, from the UPDATEs the daemon sends it. A prefix is an
//! index into the load ([`Universe`]) and a client's holdings a bitset, so a thousand
//! clients of 11,000 prefixes cost 1.4 MB and a repeated announcement is not counted
//! twice (a running sum of announcements would call a client complete too early). A
//! client's own prefixes coming back are not counted: reflectors differ on sending
//! them, and a client has them anyway.

use std::collections::HashMap;

use ipnet::IpNet;
use tern_bgp::wire::{Nlri, Update};

/// Every prefix of the load, numbered, with the peer that announces it.
#[derive(Debug, Default)]
pub struct Universe {
    index: HashMap<IpNet, (u32, usize)>,
    /// Per peer, how many prefixes it announces itself.
    own: Vec<usize>,
}

impl Universe {
    /// Numbers the prefixes of each peer's table (a repeat keeps its first owner).
    pub fn new<'a>(tables: impl IntoIterator<Item = &'a [IpNet]>) -> Universe {
        let mut u = Universe::default();
        for (owner, table) in tables.into_iter().enumerate() {
            let mut own = 0;
            for p in table {
                let next = u32::try_from(u.index.len()).unwrap_or(u32::MAX);
                if let std::collections::hash_map::Entry::Vacant(e) = u.index.entry(*p) {
                    e.insert((next, owner));
                    own += 1;
                }
            }
            u.own.push(own);
        }
        u
    }

    /// The prefixes peer `me` holds once the daemon has sent it every other's.
    pub fn expected(&self, me: usize) -> usize {
        self.len() - self.own.get(me).copied().unwrap_or(0)
    }

    /// How many prefixes it holds.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// What one client holds of the universe.
#[derive(Debug)]
pub(super) struct Held {
    me: usize,
    bits: Vec<u64>,
    count: usize,
    /// Prefixes received that are not in the load (a daemon sending something else).
    pub unknown: usize,
}

impl Held {
    pub fn new(u: &Universe, me: usize) -> Held {
        Held {
            me,
            bits: vec![0; u.len().div_ceil(64)],
            count: 0,
            unknown: 0,
        }
    }

    /// Distinct prefixes of the load held now (other peers' only).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Applies one UPDATE the client received.
    pub fn apply(&mut self, u: &Universe, update: &Update) {
        let mp_withdrawn = update.mp_unreach.as_ref().map(|m| m.withdrawn.as_slice());
        for n in both(&update.withdrawn, mp_withdrawn) {
            self.set(u, &n.prefix, false);
        }
        let keep = !update.treat_as_withdraw();
        let mp_announced = update.mp_reach.as_ref().map(|m| m.nlri.as_slice());
        for n in both(&update.nlri, mp_announced) {
            self.set(u, &n.prefix, keep);
        }
    }

    fn set(&mut self, u: &Universe, p: &IpNet, on: bool) {
        let Some(&(i, owner)) = u.index.get(p) else {
            self.unknown += usize::from(on);
            return;
        };
        if owner == self.me {
            return;
        }
        let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        let Some(w) = self.bits.get_mut(word) else {
            return;
        };
        let was = *w & bit != 0;
        if on && !was {
            *w |= bit;
            self.count += 1;
        } else if !on && was {
            *w &= !bit;
            self.count -= 1;
        }
    }
}

/// The classic field's prefixes, then the MP attribute's.
fn both<'a>(classic: &'a [Nlri], mp: Option<&'a [Nlri]>) -> impl Iterator<Item = &'a Nlri> {
    classic.iter().chain(mp.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn update(ann: &[&str], wd: &[&str]) -> Update {
        let nlri = |v: &[&str]| v.iter().map(|p| Nlri::new(net(p))).collect();
        Update {
            nlri: nlri(ann),
            withdrawn: nlri(wd),
            ..Update::default()
        }
    }

    #[test]
    fn a_client_counts_distinct_prefixes_of_the_load() {
        let tables = [
            ["198.18.0.0/26", "198.19.0.1/32", "198.19.0.2/32"].map(net),
            ["198.18.0.64/26", "198.19.0.11/32", "198.19.0.12/32"].map(net),
        ];
        let u = Universe::new(tables.iter().map(|t| t.as_slice()));
        assert_eq!((u.len(), u.expected(1)), (6, 3));
        let mut h = Held::new(&u, 1);
        h.apply(&u, &update(&["198.18.0.0/26", "198.19.0.1/32"], &[]));
        // Announced again (an implicit replacement): still two.
        h.apply(&u, &update(&["198.19.0.1/32", "198.18.99.0/24"], &[]));
        assert_eq!((h.count(), h.unknown), (2, 1));
        // A withdrawal of something not held changes nothing.
        h.apply(
            &u,
            &update(&["198.19.0.2/32"], &["198.18.0.0/26", "198.19.0.2/32"]),
        );
        assert_eq!(
            h.count(),
            2,
            "withdrawn first, then announced in the same UPDATE"
        );
        h.apply(
            &u,
            &update(&[], &["198.18.0.0/26", "198.19.0.1/32", "198.19.0.2/32"]),
        );
        assert_eq!(h.count(), 0);
        h.apply(&u, &update(&[], &["198.19.0.2/32"]));
        assert_eq!(h.count(), 0);
        // Its own prefixes coming back are not counted.
        h.apply(&u, &update(&["198.18.0.64/26", "198.19.0.1/32"], &[]));
        assert_eq!((h.count(), h.unknown), (1, 1));
    }
}
