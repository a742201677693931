//! `bgp::rib`: Adj-RIB-In (every path each peer sent, per prefix) and the Loc-RIB view
//! (best path and ECMP set per prefix), with path attributes interned: every path with
//! the same attributes shares one `Arc` (BIRD's habit; memory per route stays small).
//!
//! Hand-written because it is the heart of a BGP speaker and no crate provides one.
//! Pure and synchronous: the speaker feeds it UPDATEs and peer events and forwards the
//! best-path changes it returns to the FIB task and the Adj-RIB-Out.
//!
//! [`import`] holds the checks a peer's route must pass, [`decision`] the best-path and
//! ECMP steps, [`export`] what a best path becomes for one peer (route reflection
//! included) and the Adj-RIB-Out that packs UPDATEs. Routes the node originates are
//! paths from a local source ([`PeerSource::local`]). Calico's route policy (BGPFilters,
//! pool export rules) is not decided here but in [`crate::policy`].

pub mod decision;
pub mod export;
pub mod import;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

pub use decision::{compare, multipath_equal, Reason};

use crate::wire::{Family, MpNextHop, Nlri, PathAttributes, Update};

/// Who sent a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PeerSource {
    /// The peer's address (one session per address, as Calico configures peers).
    pub address: IpAddr,
    /// The peer's BGP identifier.
    pub router_id: Ipv4Addr,
    /// The peer's AS.
    pub asn: u32,
    /// The session is eBGP.
    pub ebgp: bool,
    /// The peer is one of our route reflector clients (RFC 4456).
    pub rr_client: bool,
    /// Not a peer at all: the route is originated by this node (blocks, borrowed
    /// addresses); `address` and `router_id` are then our own.
    pub local: bool,
}

/// One path to a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Path {
    /// Who sent it.
    pub source: Arc<PeerSource>,
    /// Its attributes (interned).
    pub attrs: Arc<PathAttributes>,
    /// Where to forward.
    pub next_hop: IpAddr,
    /// ADD-PATH identifier (0 without ADD-PATH).
    pub path_id: u32,
    /// Cost to reach the next hop, once the FIB has resolved it.
    pub igp_cost: Option<u32>,
    /// Kept from before the peer restarted (graceful restart), not yet refreshed.
    pub stale: bool,
}

/// The Loc-RIB entry of a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Best {
    /// The best path.
    pub best: Arc<Path>,
    /// Paths sharing traffic with it, best first (at least the best itself).
    pub multipath: Vec<Arc<Path>>,
    /// Why the best beat the runner-up (`Equal` when it is the only path).
    pub reason: Reason,
}

/// A change of a prefix's Loc-RIB entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BestChange {
    /// The prefix.
    pub prefix: IpNet,
    /// The new entry; `None` when no path is left.
    pub now: Option<Best>,
}

/// Distinct attribute sets, each stored once.
#[derive(Debug, Default)]
pub struct AttrStore {
    set: HashSet<Arc<PathAttributes>>,
}

impl AttrStore {
    /// The shared copy of `a`.
    pub fn intern(&mut self, a: PathAttributes) -> Arc<PathAttributes> {
        if let Some(x) = self.set.get(&a) {
            return Arc::clone(x);
        }
        let x = Arc::new(a);
        self.set.insert(Arc::clone(&x));
        x
    }

    /// Number of distinct attribute sets held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Drops sets no path uses any more; returns how many.
    pub fn collect_garbage(&mut self) -> usize {
        let before = self.set.len();
        self.set.retain(|a| Arc::strong_count(a) > 1);
        before - self.set.len()
    }
}

/// Adj-RIB-In of all peers and the best paths.
#[derive(Debug)]
pub struct Rib {
    paths: BTreeMap<IpNet, Vec<Arc<Path>>>,
    best: BTreeMap<IpNet, Best>,
    attrs: AttrStore,
    max_paths: usize,
    /// Paths held per peer, kept as paths come and go so that `tern status` and the
    /// metrics never walk the table.
    per_peer: HashMap<IpAddr, u64>,
    /// The sum of `per_peer`: every path held (the memory limit counts this).
    total: u64,
    /// IPv6 prefixes in `best`, so the metrics count each family without a walk.
    ipv6_prefixes: u64,
}

impl Rib {
    /// An empty RIB; `max_paths` caps the ECMP set (1 disables multipath).
    pub fn new(max_paths: usize) -> Rib {
        Rib {
            paths: BTreeMap::new(),
            best: BTreeMap::new(),
            attrs: AttrStore::default(),
            max_paths: max_paths.max(1),
            per_peer: HashMap::new(),
            total: 0,
            ipv6_prefixes: 0,
        }
    }

    /// Paths held from `peer` (its Adj-RIB-In after import checks).
    pub fn paths_from(&self, peer: IpAddr) -> u64 {
        self.per_peer.get(&peer).copied().unwrap_or(0)
    }

    /// Loc-RIB prefixes of each family: (IPv4, IPv6).
    pub fn prefixes_by_family(&self) -> (u64, u64) {
        let all = self.best.len() as u64;
        (all.saturating_sub(self.ipv6_prefixes), self.ipv6_prefixes)
    }

    /// Paths held from every source, our own included.
    pub fn paths_total(&self) -> u64 {
        self.total
    }

    fn count(&mut self, peer: IpAddr, added: u64, removed: u64) {
        if added == removed {
            return;
        }
        let n = self.per_peer.entry(peer).or_default();
        let before = *n;
        *n = (*n + added).saturating_sub(removed);
        self.total = (self.total + *n).saturating_sub(before);
        if *n == 0 {
            self.per_peer.remove(&peer);
        }
    }

    /// The Loc-RIB entry of `prefix`.
    pub fn best(&self, prefix: &IpNet) -> Option<&Best> {
        self.best.get(prefix)
    }

    /// Every Loc-RIB entry, by prefix.
    pub fn iter(&self) -> impl Iterator<Item = (&IpNet, &Best)> {
        self.best.iter()
    }

    /// Up to `n` Loc-RIB entries after `after` (from the first without), in prefix
    /// order: the table in pieces, so that handing it all over never copies it whole.
    pub fn best_after(&self, after: Option<IpNet>, n: usize) -> Vec<BestChange> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        self.best
            .range((from, Unbounded))
            .take(n)
            .map(|(p, b)| BestChange {
                prefix: *p,
                now: Some(b.clone()),
            })
            .collect()
    }

    /// Every path held for `prefix`.
    pub fn paths(&self, prefix: &IpNet) -> &[Arc<Path>] {
        self.paths.get(prefix).map_or(&[], |v| v.as_slice())
    }

    /// Prefixes with at least one path.
    pub fn len(&self) -> usize {
        self.best.len()
    }

    /// Whether the RIB is empty.
    pub fn is_empty(&self) -> bool {
        self.best.is_empty()
    }

    /// The attribute store (for memory figures).
    pub fn attr_store(&mut self) -> &mut AttrStore {
        &mut self.attrs
    }

    /// Applies an UPDATE from `source` after the import checks of `policy`: a route that
    /// fails them is treated as withdrawn, and the reason is returned with the changes.
    pub fn import_update(
        &mut self,
        source: &Arc<PeerSource>,
        u: &Update,
        policy: &import::ImportPolicy,
    ) -> (Vec<BestChange>, Option<import::Rejection>) {
        let announces =
            !u.nlri.is_empty() || u.mp_reach.as_ref().is_some_and(|m| !m.nlri.is_empty());
        let checked =
            import::check(&u.attributes, policy).and_then(|()| import::check_next_hops(u, policy));
        match checked {
            Err(r) if announces => {
                let withdraw = Update {
                    withdrawn: u.withdrawn.iter().chain(&u.nlri).copied().collect(),
                    mp_unreach: u.mp_reach.as_ref().map(|m| crate::wire::MpUnreach {
                        family: m.family,
                        withdrawn: m.nlri.clone(),
                        unparsed: None,
                    }),
                    ..Update::default()
                };
                let mut changes = self.apply_update(source, &withdraw);
                // Withdrawals the UPDATE carried in MP_UNREACH still apply.
                if let Some(m) = &u.mp_unreach {
                    let w = Update {
                        mp_unreach: Some(m.clone()),
                        ..Update::default()
                    };
                    changes.extend(self.apply_update(source, &w));
                }
                (changes, Some(r))
            }
            _ => (self.apply_update(source, u), None),
        }
    }

    /// Applies an UPDATE from `source` with no import checks. A treat-as-withdraw UPDATE
    /// (RFC 7606) withdraws what it announces. Returns the Loc-RIB changes.
    pub fn apply_update(&mut self, source: &Arc<PeerSource>, u: &Update) -> Vec<BestChange> {
        let mp_len = |m: Option<usize>| m.unwrap_or(0);
        let mut touched: Vec<IpNet> = Vec::with_capacity(
            u.withdrawn.len()
                + u.nlri.len()
                + mp_len(u.mp_unreach.as_ref().map(|m| m.withdrawn.len()))
                + mp_len(u.mp_reach.as_ref().map(|m| m.nlri.len())),
        );
        let withdrawn = u
            .withdrawn
            .iter()
            .chain(u.mp_unreach.iter().flat_map(|m| &m.withdrawn));
        for n in withdrawn {
            if self.remove(source.address, n) {
                touched.push(n.prefix);
            }
        }
        let mp = u
            .mp_reach
            .iter()
            .flat_map(|m| m.nlri.iter().map(move |n| (n, mp_next_hop(&m.next_hop))));
        let classic = u
            .nlri
            .iter()
            .map(|n| (n, u.attributes.next_hop.map(IpAddr::V4)));
        let announced: Vec<(&Nlri, Option<IpAddr>)> = classic.chain(mp).collect();
        if u.treat_as_withdraw() {
            for (n, _) in announced {
                if self.remove(source.address, n) {
                    touched.push(n.prefix);
                }
            }
        } else if !announced.is_empty() {
            // NEXT_HOP lives in the path, not in the shared attributes: routes from
            // many peers with otherwise equal attributes then share one set.
            let attrs = self.attrs.intern(PathAttributes {
                next_hop: None,
                ..u.attributes.clone()
            });
            // Counted once per UPDATE, not per prefix (a hash look-up each).
            let (mut added, mut replaced) = (0u64, 0u64);
            for (n, nh) in announced {
                let Some(next_hop) = nh else { continue };
                let path = Arc::new(Path {
                    source: Arc::clone(source),
                    attrs: Arc::clone(&attrs),
                    next_hop,
                    path_id: n.path_id.unwrap_or(0),
                    igp_cost: None,
                    stale: false,
                });
                let list = self.paths.entry(n.prefix).or_default();
                let before = list.len();
                list.retain(|p| !(p.source.address == source.address && p.path_id == path.path_id));
                replaced += (before - list.len()) as u64;
                added += 1;
                list.push(path);
                touched.push(n.prefix);
            }
            self.count(source.address, added, replaced);
        }
        self.recompute(touched)
    }

    /// Removes every path of a peer whose session is gone (no graceful restart).
    pub fn peer_down(&mut self, peer: IpAddr) -> Vec<BestChange> {
        self.remove_where(|_, p| p.source.address == peer)
    }

    /// Graceful restart helper: the peer restarted; its paths stay but are marked stale
    /// until it sends them again.
    pub fn mark_stale(&mut self, peer: IpAddr) {
        let mut touched = Vec::new();
        for (prefix, list) in self.paths.iter_mut() {
            for p in list.iter_mut().filter(|p| p.source.address == peer) {
                *p = Arc::new(Path {
                    stale: true,
                    ..(**p).clone()
                });
                touched.push(*prefix);
            }
        }
        // Forwarding does not change, so no change events: the entries just show it.
        touched.dedup();
        for prefix in touched {
            if let Some(b) = self.select(&prefix) {
                self.best.insert(prefix, b);
            }
        }
    }

    /// End-of-RIB or restart timer: drops the paths of one family (or of all, with
    /// `None`) that the peer did not send again.
    pub fn sweep_stale(&mut self, peer: IpAddr, family: Option<Family>) -> Vec<BestChange> {
        self.remove_where(|prefix, p| {
            p.source.address == peer && p.stale && family.is_none_or(|f| f == family_of(prefix))
        })
    }

    fn remove(&mut self, peer: IpAddr, n: &Nlri) -> bool {
        let id = n.path_id.unwrap_or(0);
        let Some(list) = self.paths.get_mut(&n.prefix) else {
            return false;
        };
        let before = list.len();
        list.retain(|p| !(p.source.address == peer && p.path_id == id));
        let removed = (before - list.len()) as u64;
        self.count(peer, 0, removed);
        removed > 0
    }

    fn remove_where(&mut self, gone: impl Fn(&IpNet, &Path) -> bool) -> Vec<BestChange> {
        let mut touched = Vec::new();
        let mut removed: HashMap<IpAddr, u64> = HashMap::new();
        for (prefix, list) in self.paths.iter_mut() {
            let before = list.len();
            list.retain(|p| {
                let drop = gone(prefix, p);
                if drop {
                    *removed.entry(p.source.address).or_default() += 1;
                }
                !drop
            });
            if list.len() != before {
                touched.push(*prefix);
            }
        }
        for (peer, n) in removed {
            self.count(peer, 0, n);
        }
        self.recompute(touched)
    }

    fn recompute(&mut self, mut touched: Vec<IpNet>) -> Vec<BestChange> {
        touched.sort();
        touched.dedup();
        let mut changes = Vec::with_capacity(touched.len());
        for prefix in touched {
            let now = self.select(&prefix);
            // Only the paths matter downstream; a new runner-up that only changes
            // the recorded reason is stored without a change event.
            let same = |a: &Best, b: &Best| a.best == b.best && a.multipath == b.multipath;
            // (unchanged, had an entry before): one look-up of the Loc-RIB per prefix.
            let (unchanged, had) = match &now {
                Some(b) => match self.best.entry(prefix) {
                    Entry::Occupied(mut e) => {
                        let unchanged = same(e.get(), b);
                        e.insert(b.clone());
                        (unchanged, true)
                    }
                    Entry::Vacant(e) => {
                        e.insert(b.clone());
                        (false, false)
                    }
                },
                None => {
                    self.paths.remove(&prefix);
                    let old = self.best.remove(&prefix);
                    (old.is_none(), old.is_some())
                }
            };
            if let (IpNet::V6(_), true) = (prefix, had != now.is_some()) {
                match now {
                    Some(_) => self.ipv6_prefixes += 1,
                    None => self.ipv6_prefixes = self.ipv6_prefixes.saturating_sub(1),
                }
            }
            if !unchanged {
                changes.push(BestChange { prefix, now });
            }
        }
        changes
    }

    fn select(&self, prefix: &IpNet) -> Option<Best> {
        let list = self.paths.get(prefix)?;
        if let [only] = list.as_slice() {
            // One path (most prefixes): nothing to sort or compare.
            return Some(Best {
                best: Arc::clone(only),
                multipath: vec![Arc::clone(only)],
                reason: Reason::Equal,
            });
        }
        let mut sorted: Vec<&Arc<Path>> = list.iter().collect();
        sorted.sort_by(|a, b| compare(a, b).0);
        let best = Arc::clone(sorted.first()?);
        let reason = sorted
            .get(1)
            .map_or(Reason::Equal, |second| compare(&best, second).1);
        let multipath = sorted
            .iter()
            .filter(|p| multipath_equal(&best, p))
            .take(self.max_paths)
            .map(|p| Arc::clone(p))
            .collect();
        Some(Best {
            best,
            multipath,
            reason,
        })
    }
}

/// The address to forward to for an MP_REACH_NLRI next hop: the global IPv6 address
/// (the link-local one needs the interface, which the FIB resolves).
fn mp_next_hop(nh: &MpNextHop) -> Option<IpAddr> {
    match nh {
        MpNextHop::V4(a) => Some(IpAddr::V4(*a)),
        MpNextHop::V6 { global, .. } => Some(IpAddr::V6(*global)),
        MpNextHop::Other(_) => None,
    }
}

#[cfg(test)]
mod tests;

/// The unicast family a prefix belongs to.
pub fn family_of(prefix: &IpNet) -> Family {
    match prefix {
        IpNet::V4(_) => Family::IPV4_UNICAST,
        IpNet::V6(_) => Family::IPV6_UNICAST,
    }
}
